// The files section's drag-and-drop upload (templates/web/sandbox/_files.html): files dropped
// on the section go to the folder it shows, through the upload form's own endpoint, with a
// progress bar and the server's message; then the section is reloaded in place. Folders are
// not uploaded: the message says so and names them. Listeners sit on the document, so they
// keep working when htmx swaps the section for another folder's.
(function () {
  "use strict";

  function zoneOf(target) {
    return target && target.closest ? target.closest("#files[data-upload-url]") : null;
  }

  function carriesFiles(event) {
    var types = event.dataTransfer ? event.dataTransfer.types : null;
    return !!types && Array.prototype.indexOf.call(types, "Files") !== -1;
  }

  function say(text, isError, percent) {
    var box = document.getElementById("drop-status");
    if (!box) return;
    box.hidden = false;
    box.classList.toggle("error", !!isError);
    var bar = document.getElementById("drop-progress");
    bar.hidden = percent === null;
    if (percent !== null) bar.value = percent;
    document.getElementById("drop-message").textContent = text;
  }

  // Files and folders dropped: a folder shows as an entry (webkitGetAsEntry) and as a File
  // of its name in the file list, which must not be sent as an (empty) file.
  function sortDropped(dataTransfer) {
    var folders = [];
    Array.prototype.forEach.call(dataTransfer.items || [], function (item) {
      var entry = item.webkitGetAsEntry ? item.webkitGetAsEntry() : null;
      if (entry && entry.isDirectory) folders.push(entry.name);
    });
    var files = Array.prototype.filter.call(dataTransfer.files || [], function (file) {
      return folders.indexOf(file.name) === -1;
    });
    return { files: files, folders: folders };
  }

  function refresh(zone, then) {
    var url = zone.getAttribute("data-browse-url") + "?path=" +
      encodeURIComponent(zone.getAttribute("data-directory"));
    if (!window.htmx) { window.location.reload(); return; }
    window.htmx.ajax("GET", url, { target: "#files", swap: "outerHTML" }).then(then);
  }

  function upload(zone, dropped) {
    var token = zone.querySelector("input[name=csrfmiddlewaretoken]");
    var body = new FormData();
    dropped.files.forEach(function (file) { body.append("files", file, file.name); });
    body.append("directory", zone.getAttribute("data-directory"));
    var skipped = dropped.folders.length
      ? " Folders are not uploaded (" + dropped.folders.join(", ") + "): drop their files, or upload a .tar with the command runner."
      : "";
    var noun = dropped.files.length === 1 ? "file" : "files";
    say("Uploading " + dropped.files.length + " " + noun + "…", false, 0);
    var request = new XMLHttpRequest();
    request.open("POST", zone.getAttribute("data-upload-url"));
    request.setRequestHeader("Accept", "application/json");
    if (token) request.setRequestHeader("X-CSRFToken", token.value);
    request.upload.addEventListener("progress", function (event) {
      if (event.lengthComputable) {
        var percent = Math.round(100 * event.loaded / event.total);
        say("Uploading " + dropped.files.length + " " + noun + "… " + percent + " %", false, percent);
      }
    });
    request.addEventListener("load", function () {
      var answer = {};
      try { answer = JSON.parse(request.responseText); } catch (ignored) { answer = {}; }
      if (request.status === 200) {
        refresh(zone, function () { say(answer.message + skipped, false, null); });
      } else {
        say("Upload failed: " + (answer.error || "the server answered " + request.status) + skipped, true, null);
      }
    });
    request.addEventListener("error", function () {
      say("Upload failed: the server could not be reached." + skipped, true, null);
    });
    request.send(body);
  }

  document.addEventListener("dragover", function (event) {
    var zone = zoneOf(event.target);
    if (!zone || !carriesFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    zone.classList.add("drop-target");
  });
  document.addEventListener("dragleave", function (event) {
    var zone = zoneOf(event.target);
    if (zone && !zone.contains(event.relatedTarget)) zone.classList.remove("drop-target");
  });
  document.addEventListener("drop", function (event) {
    var zone = zoneOf(event.target);
    if (!zone || !event.dataTransfer) return;
    event.preventDefault();
    zone.classList.remove("drop-target");
    var dropped = sortDropped(event.dataTransfer);
    if (!dropped.files.length) {
      say(dropped.folders.length
        ? "Folders are not uploaded (" + dropped.folders.join(", ") + "): drop the files in them."
        : "Nothing to upload: drop files from your computer.", true, null);
      return;
    }
    upload(zone, dropped);
  });
})();
