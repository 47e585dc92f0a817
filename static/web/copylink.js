// "Copy link" beside a file is one button: its htmx POST makes the link and swaps in
// templates/web/sandbox/_link.html, whose field (data-copy-on-arrival) is copied to the
// clipboard here as it arrives. Where the browser refuses the clipboard, the field is
// selected and the status says to copy it by hand.
(function () {
  "use strict";

  function say(field, text, copied) {
    var status = field.parentNode.querySelector("[data-copy-status]");
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("link-copied", copied);
  }

  function byHand(field) {
    field.focus();
    field.select();
    say(field, "Copy the link by hand (it is selected): the browser did not allow copying.", false);
  }

  function copy(field) {
    field.removeAttribute("data-copy-on-arrival");
    if (!navigator.clipboard || !window.isSecureContext) { byHand(field); return; }
    navigator.clipboard.writeText(field.value).then(
      function () { say(field, "Link copied to the clipboard.", true); },
      function () { byHand(field); }
    );
  }

  document.body.addEventListener("htmx:afterSwap", function (event) {
    var fields = event.detail.target.querySelectorAll("[data-copy-on-arrival]");
    Array.prototype.forEach.call(fields, copy);
  });
})();
