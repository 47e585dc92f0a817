// Sandhub web pages: small progressive enhancements, no build step.
// - <time datetime="..."> shows the moment in the reader's timezone ("data-relative": "5 min ago");
// - [data-copy="#selector"] buttons copy a field's text;
// - input[name=tz] gets the reader's UTC offset, so typed times are taken as local ones.
// Each runs on page load and on content htmx swaps in.
(function () {
  "use strict";

  var absolute = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  });
  var relative = typeof Intl.RelativeTimeFormat === "function"
    ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "short" })
    : null;
  var steps = [
    ["year", 365 * 86400], ["month", 30 * 86400], ["week", 7 * 86400],
    ["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1],
  ];

  function ago(date) {
    var seconds = (date.getTime() - Date.now()) / 1000;
    for (var i = 0; i < steps.length; i++) {
      var unit = steps[i][0], size = steps[i][1];
      if (Math.abs(seconds) >= size || unit === "second") {
        var amount = Math.round(seconds / size);
        return relative ? relative.format(amount, unit) : absolute.format(date);
      }
    }
    return absolute.format(date);
  }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      el.title = absolute.format(date) + " (" + Intl.DateTimeFormat().resolvedOptions().timeZone + ")";
      el.textContent = el.hasAttribute("data-relative") ? ago(date) : absolute.format(date);
    });
  }

  function timezoneFields(root) {
    root.querySelectorAll("input[name=tz]").forEach(function (el) {
      el.value = String(new Date().getTimezoneOffset());
    });
  }

  function enhance(root) {
    localTimes(root);
    timezoneFields(root);
  }

  // A form with data-busy="Creating…" shows that text on its submit button while the server
  // works (creating a sandbox takes seconds), and cannot be sent twice meanwhile.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form[data-busy]")) return;
    var button = form.querySelector("button[type=submit]");
    if (!button) return;
    setTimeout(function () { button.disabled = true; button.textContent = form.dataset.busy; }, 0);
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) return;
    var field = document.querySelector(button.getAttribute("data-copy"));
    if (!field) return;
    field.select();
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(done, function () {});
    } else if (document.execCommand("copy")) {
      done();
    }
  });

  // For pages that add content without htmx (e.g. a stream): window.sandhubEnhance(element).
  window.sandhubEnhance = enhance;
  document.addEventListener("DOMContentLoaded", function () { enhance(document); });
  document.addEventListener("htmx:load", function (event) { enhance(event.target); });
  // Relative times drift: refresh them each minute.
  setInterval(function () { localTimes(document); }, 60000);
})();
