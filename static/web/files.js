// The files section's drag-and-drop upload (templates/web/sandbox/_files.html): files dropped
// on the section go to the folder it shows, through the upload form's own endpoint, with a
// progress bar and the server's message; then the section is reloaded in place. A folder
// dropped is uploaded with what it holds (one upload per folder inside it; empty folders are
// not made). Listeners sit on the document, so they keep working when htmx swaps the section
// for another folder's.
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

  // What was dropped, as entries (webkitGetAsEntry), taken while the drop event lasts: after
  // it the DataTransfer is emptied. Without entries (an old browser): the files alone.
  function droppedEntries(dataTransfer) {
    var entries = [];
    Array.prototype.forEach.call(dataTransfer.items || [], function (item) {
      var entry = item.kind === "file" && item.webkitGetAsEntry ? item.webkitGetAsEntry() : null;
      if (entry) entries.push(entry);
    });
    if (entries.length) return entries;
    return Array.prototype.map.call(dataTransfer.files || [], function (file) {
      return { isFile: true, name: file.name, file: function (ok) { ok(file); } };
    });
  }

  // Every file under the entries, with the folder it goes to (relative: "" or "a/b").
  // A folder's reader gives its entries in batches, until an empty one.
  function collect(entries, folder, found) {
    return Promise.all(entries.map(function (entry) {
      if (entry.isFile) {
        return new Promise(function (ok, fail) {
          entry.file(function (file) { found.push({ file: file, folder: folder }); ok(); }, fail);
        });
      }
      if (!entry.isDirectory) return null;
      var inner = folder ? folder + "/" + entry.name : entry.name;
      var reader = entry.createReader();
      return new Promise(function (ok, fail) {
        var children = [];
        (function more() {
          reader.readEntries(function (batch) {
            if (!batch.length) { collect(children, inner, found).then(ok, fail); return; }
            children = children.concat(Array.prototype.slice.call(batch));
            more();
          }, fail);
        })();
      });
    })).then(function () { return found; });
  }

  // One upload per folder (the upload endpoint writes its files into one folder), in turn.
  function byFolder(found) {
    var groups = {};
    found.forEach(function (item) { (groups[item.folder] = groups[item.folder] || []).push(item.file); });
    return Object.keys(groups).sort().map(function (folder) { return { folder: folder, files: groups[folder] }; });
  }

  function refresh(zone, then) {
    var url = zone.getAttribute("data-browse-url") + "?path=" +
      encodeURIComponent(zone.getAttribute("data-directory"));
    if (!window.htmx) { window.location.reload(); return; }
    window.htmx.ajax("GET", url, { target: "#files", swap: "outerHTML" }).then(then);
  }

  function send(zone, group, progress) {
    return new Promise(function (ok, fail) {
      var token = zone.querySelector("input[name=csrfmiddlewaretoken]");
      var base = zone.getAttribute("data-directory");
      var body = new FormData();
      group.files.forEach(function (file) { body.append("files", file, file.name); });
      body.append("directory", group.folder ? base.replace(/\/$/, "") + "/" + group.folder : base);
      var request = new XMLHttpRequest();
      request.open("POST", zone.getAttribute("data-upload-url"));
      request.setRequestHeader("Accept", "application/json");
      if (token) request.setRequestHeader("X-CSRFToken", token.value);
      request.upload.addEventListener("progress", function (event) {
        if (event.lengthComputable) progress(event.loaded / event.total);
      });
      request.addEventListener("load", function () {
        var answer = {};
        try { answer = JSON.parse(request.responseText); } catch (ignored) { answer = {}; }
        if (request.status === 200) ok(answer);
        else fail(new Error(answer.error || "the server answered " + request.status));
      });
      request.addEventListener("error", function () {
        fail(new Error("the server could not be reached"));
      });
      request.send(body);
    });
  }

  function upload(zone, groups) {
    var count = groups.reduce(function (n, g) { return n + g.files.length; }, 0);
    var noun = count === 1 ? "file" : "files";
    var said = [];
    var done = 0;
    say("Uploading " + count + " " + noun + "…", false, 0);
    var chain = Promise.resolve();
    groups.forEach(function (group, index) {
      chain = chain.then(function () {
        return send(zone, group, function (part) {
          var percent = Math.round(100 * (done + part * group.files.length) / count);
          say("Uploading " + count + " " + noun + "… " + percent + " %", false, percent);
        }).then(function (answer) {
          done += group.files.length;
          said.push(answer.message);
        });
      });
    });
    chain.then(function () {
      refresh(zone, function () { say(said.join(" "), false, null); });
    }, function (error) {
      var before = said.length ? said.join(" ") + " " : "";
      say(before + "Upload failed: " + error.message, true, null);
    });
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
    collect(droppedEntries(event.dataTransfer), "", []).then(function (found) {
      if (!found.length) {
        say("Nothing to upload: drop files or folders with files in them.", true, null);
        return;
      }
      upload(zone, byFolder(found));
    }, function () {
      say("Upload failed: the browser could not read what was dropped.", true, null);
    });
  });
})();
