// A page answered after an invalid form: its error summary (templates/web/_error_summary.html)
// gets the focus, so a screen reader reads it and the keyboard starts there, and is scrolled
// into view (the form's #anchor already does that without a script).
(function () {
  "use strict";
  var summary = document.querySelector("[data-error-summary]");
  if (!summary || summary.dataset.focused) return;  // the script may be included twice
  summary.dataset.focused = "1";
  summary.focus({ preventScroll: true });
  summary.scrollIntoView({ block: "start" });
})();
