/* The terminal page (templates/web/sandbox/terminal.html): xterm.js (static/web/vendor/xterm/)
   over the websocket of sandboxes/terminal_ws/. Output arrives as binary frames (on each
   connect the holder in the sandbox replays the scrollback first, so the screen is reset
   then and nothing shows twice); keystrokes and pastes go as binary frames, the window's
   size as {"t": "r", "cols", "rows"}. A dropped connection is retried with backoff to the
   same terminal; a close that says the terminal ended or may not be used is final.
   Copy: select, then Ctrl+Shift+C (or the browser's menu); paste: Ctrl+Shift+V, Ctrl+V or
   the right-click menu (xterm.js takes the browser's paste event). */
(function () {
  "use strict";
  var screen = document.getElementById("terminal");
  var statusLine = document.getElementById("terminal-status");
  if (!screen || !window.Terminal || !window.FitAddon) return;

  // xterm.js adds <style> elements of its own: the page's Content-Security-Policy lets in
  // those that carry its nonce (sandboxes/web/terminals.py).
  var nonce = screen.dataset.styleNonce;
  var createElement = document.createElement.bind(document);
  document.createElement = function (name, options) {
    var made = createElement(name, options);
    if (nonce && String(name).toLowerCase() === "style") made.nonce = nonce;
    return made;
  };

  var FINAL = {
    4401: "ended: sign in again",
    4403: "ended: you may not use this terminal",
    4404: "ended: no such terminal",
    4410: "ended",
    1009: "ended: too much input at once",
  };
  var MAX_DELAY_MS = 15000;
  var encoder = new TextEncoder();
  var term = new window.Terminal({
    cursorBlink: true,
    scrollback: 5000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
    fontSize: 14,
  });
  var fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(screen);
  fit.fit();
  term.focus();

  var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + screen.dataset.socket;
  var socket = null;
  var failures = 0;
  var ended = false;

  function setStatus(state, text) {
    statusLine.dataset.state = state;
    statusLine.textContent = text;
  }

  function send(data) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(data);
  }

  function sendSize() {
    send(JSON.stringify({ t: "r", cols: term.cols, rows: term.rows }));
  }

  function connect() {
    setStatus(failures ? "reconnecting" : "connecting", failures ? "reconnecting…" : "connecting…");
    socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    socket.onopen = function () {
      failures = 0;
      term.reset(); // the scrollback is replayed next: start from a clean screen
      setStatus("connected", "connected");
      sendSize();
    };
    socket.onmessage = function (event) {
      if (typeof event.data !== "string") term.write(new Uint8Array(event.data));
    };
    socket.onclose = function (event) {
      socket = null;
      if (FINAL[event.code]) {
        ended = true;
        term.options.disableStdin = true;
        setStatus("ended", FINAL[event.code] + (event.reason ? " (" + event.reason + ")" : ""));
        return;
      }
      failures += 1;
      var delay = Math.min(MAX_DELAY_MS, 500 * Math.pow(2, failures - 1)) * (0.8 + Math.random() * 0.4);
      setStatus("reconnecting", "disconnected: reconnecting in " + Math.ceil(delay / 1000) + " s…");
      window.setTimeout(connect, delay);
    };
  }

  term.onData(function (data) {
    send(encoder.encode(data));
  });
  term.onBinary(function (data) {
    var bytes = new Uint8Array(data.length);
    for (var i = 0; i < data.length; i += 1) bytes[i] = data.charCodeAt(i) & 255;
    send(bytes);
  });
  term.onResize(sendSize);

  // Ctrl+Shift+C copies the selection; Ctrl+Shift+V is left to the browser, whose paste
  // event xterm.js takes (so neither reaches the shell as a control character).
  term.attachCustomKeyEventHandler(function (event) {
    if (event.type !== "keydown" || !event.ctrlKey || !event.shiftKey) return true;
    var key = event.key.toLowerCase();
    if (key === "c" && term.hasSelection() && navigator.clipboard) {
      navigator.clipboard.writeText(term.getSelection());
      return false;
    }
    return key !== "v";
  });

  var pending = false;
  window.addEventListener("resize", function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () {
      pending = false;
      if (!ended) fit.fit();
    });
  });
  window.addEventListener("online", function () {
    if (!ended && socket === null) connect();
  });

  connect();
})();
