// The create form's Network select: the allow-list box is shown only with "Allow-list"
// (templates/web/home.html). Without JavaScript it is always shown, and the services
// refuse rules given with another mode.
(function () {
  "use strict";
  function sync(select) {
    var field = document.getElementById("field-allow");
    if (field) { field.hidden = select.value !== "allowlist"; }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var select = document.querySelector("#create-form select[name=network]");
    if (!select) { return; }
    sync(select);
    select.addEventListener("change", function () { sync(select); });
  });
})();
