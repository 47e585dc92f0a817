// The sandbox pages' script (templates/web/sandbox/_scripts.html loads it): the command runner
// reads its NDJSON stream as it arrives (sandboxes/web/sandbox_run.py), so output shows while
// the command runs.
(function () {
  "use strict";

  // htmx leaves 4xx answers unswapped; inside [data-show-errors] they carry the message.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if (status >= 400 && status < 600 && event.detail.elt.closest("[data-show-errors]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
  // A job's live tail keeps its newest line in view.
  document.body.addEventListener("htmx:afterSwap", function () {
    var out = document.getElementById("job-output");
    if (out) out.scrollTop = out.scrollHeight;
  });

  var form = document.getElementById("run-form");
  if (!form) return;
  var output = document.getElementById("run-output");
  var submit = document.getElementById("run-submit");
  var exit = document.getElementById("run-exit");
  var state = document.getElementById("run-state");
  var duration = document.getElementById("run-duration");
  var truncated = document.getElementById("run-truncated");
  var link = document.getElementById("run-link");

  // Terminal colours as classes, other escapes dropped (static/web/ansi.js; new per run).
  var terminal = null;

  function append(text, stream) {
    // Follow the end only if the reader is already there (he may be scrolling back).
    var atEnd = output.scrollHeight - output.scrollTop - output.clientHeight < 40;
    if (terminal) {
      terminal.write(text, stream);
    } else if (stream === "stderr") {
      var span = document.createElement("span");
      span.className = "stderr";
      span.textContent = text;
      output.appendChild(span);
    } else {
      output.appendChild(document.createTextNode(text));
    }
    if (atEnd) output.scrollTop = output.scrollHeight;
  }

  function finish(event) {
    state.textContent = event.status;
    state.className = "status status-" + event.status;
    exit.textContent = event.exit_code === null ? "none" : String(event.exit_code);
    duration.textContent = event.duration === null ? "" : "after " + event.duration.toFixed(2) + " s";
    if (event.resumed_seconds !== null && event.resumed_seconds !== undefined) {
      // The sandbox was paused or stopped: the command resumed it first.
      duration.textContent += " (resumed the sandbox first: " + event.resumed_seconds.toFixed(2) + " s)";
      var badge = document.getElementById("sandbox-status");
      if (badge) { badge.textContent = "running"; badge.className = "status status-running"; }
    }
    truncated.hidden = !event.truncated;
    if (event.error) append("\n" + event.error + "\n", "stderr");
    link.href = event.url;
    link.hidden = false;
  }

  function handle(line) {
    if (!line) return;
    var event = JSON.parse(line);
    if (event.t === "out") append(event.d, event.s);
    else if (event.t === "note") append("\n" + event.d + "\n", "stderr");
    else if (event.t === "end") finish(event);
    else if (event.t === "error") { append(event.d + "\n", "stderr"); state.textContent = "refused"; }
  }

  async function run() {
    output.textContent = "";
    terminal = window.SandhubAnsi ? window.SandhubAnsi.writer(output) : null;
    exit.textContent = "";
    duration.textContent = "";
    truncated.hidden = true;
    link.hidden = true;
    state.className = "muted";
    state.textContent = "running…";
    submit.disabled = true;
    try {
      var response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { "X-Sandhub-Stream": "ndjson" },
        credentials: "same-origin",
      });
      if (!response.ok) {
        append(await response.text() + "\n", "stderr");
        state.textContent = "refused";
        return;
      }
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var pending = "";
      for (;;) {
        var chunk = await reader.read();
        if (chunk.done) break;
        pending += decoder.decode(chunk.value, { stream: true });
        var lines = pending.split("\n");
        pending = lines.pop();
        lines.forEach(handle);
      }
      handle(pending + decoder.decode());
    } catch (error) {
      append("\nThe connection broke off: " + error + "\n", "stderr");
      state.textContent = "unknown (see the history)";
    } finally {
      submit.disabled = false;
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    run();
  });
  form.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      if (!submit.disabled) run();
    }
  });
})();
