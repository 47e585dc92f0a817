// Sandhub web pages: small progressive enhancements, no build step.
// - <time datetime="..."> shows the moment in the reader's timezone ("data-relative": "5 min ago");
// - input[name=tz] gets the reader's UTC offset, so typed times are taken as local ones;
// - [data-width="42"] (a load bar's fill) gets that width in percent;
// each runs on page load and on content htmx swaps in. And, for any element on the page:
// - <form data-confirm="Delete it?"> asks confirm(message) before it is sent;
// - <button data-disable-on-submit="Starting…"> is disabled, saying that, once its form is sent;
// - [data-copy="#selector"] buttons copy a field's text;
// - <input data-select-on-focus> selects its text on focus;
// - <select data-submit-on-change> sends its form when changed.
// The pages' Content-Security-Policy (platform_site/csp.py) allows no inline script or style:
// templates name the behaviour with these attributes, and the code is here.
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

  // Through the CSSOM, which the policy allows (a style="" attribute it would block).
  function barWidths(root) {
    root.querySelectorAll("[data-width]").forEach(function (el) {
      var percent = Math.max(0, Math.min(100, Number(el.getAttribute("data-width")) || 0));
      el.style.width = percent + "%";
    });
  }

  function enhance(root) {
    localTimes(root);
    timezoneFields(root);
    barWidths(root);
  }

  function isForm(el) {
    return el instanceof HTMLFormElement;
  }

  // In the capture phase, ahead of the form's own listeners (htmx's, the command runner's):
  // "Cancel" stops the submission before any of them sends anything.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!isForm(form) || !form.hasAttribute("data-confirm")) return;
    if (!window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // A button that starts slow work (creating a sandbox, deploying an app) shows it is under
  // way and cannot be pressed twice meanwhile. After the form's own listeners (a form a
  // script sends itself is left alone), and a tick later: a button disabled before the
  // submission is built would be left out of it. data-busy="…" on the form is the same for
  // its submit button.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!isForm(form) || event.defaultPrevented) return;
    var busy = [];
    form.querySelectorAll("[data-disable-on-submit]").forEach(function (button) {
      busy.push([button, button.getAttribute("data-disable-on-submit")]);
    });
    var submit = form.hasAttribute("data-busy") && form.querySelector("button[type=submit]");
    if (submit) busy.push([submit, form.getAttribute("data-busy")]);
    if (!busy.length) return;
    setTimeout(function () {
      busy.forEach(function (pair) {
        pair[0].disabled = true;
        if (pair[1]) pair[0].textContent = pair[1];
      });
    }, 0);
  });

  document.addEventListener("focusin", function (event) {
    var el = event.target;
    if (el instanceof HTMLInputElement && el.hasAttribute("data-select-on-focus")) el.select();
  });

  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el instanceof HTMLSelectElement && el.hasAttribute("data-submit-on-change") && el.form) {
      el.form.requestSubmit();
    }
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
