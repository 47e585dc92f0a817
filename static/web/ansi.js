// Terminal output into an element, as it streams in: SGR colours and styles become spans with
// classes (static/web/ansi.css; never a style attribute: the CSP forbids them), every other
// escape or control sequence is dropped, and a line rewritten after "\r" (a progress bar)
// shows its last state. Text goes in as text nodes, never as markup. The same rules as
// sandboxes/web/ansi.py, which renders stored output on the server.
//   var writer = SandhubAnsi.writer(element);
//   writer.write(text, "stdout" | "stderr");   // chunks may cut a sequence in two
(function () {
  "use strict";

  var TOKEN = new RegExp(
    "(\\x1b\\[([0-?]*)[ -/]*([@-~]))" +              // 1 CSI (2 params, 3 final)
    "|(\\x1b\\][^\\x07\\x1b]*(?:\\x07|\\x1b\\\\))" +  // 4 OSC: titles, hyperlinks
    "|(\\x1b[P^_][^\\x1b]*\\x1b\\\\)" +               // 5 DCS, PM, APC
    "|(\\x1b[()*+#%][0-9A-Za-z@])" +                  // 6 character sets
    "|(\\x1b[ -/]*[0-~])" +                           // 7 other escapes
    "|(\\r?\\n)" +                                    // 8 line end
    "|(\\r)" +                                        // 9 carriage return
    "|([\\x00-\\x08\\x0b-\\x1f\\x7f])" +              // 10 other controls
    "|([^\\x00-\\x08\\x0a-\\x1f\\x7f]+)",             // 11 text
    "g"
  );
  var UNFINISHED = /\x1b(?:\[[0-?]*[ -\/]*|\][^\x07\x1b]*\x1b?|[P^_][^\x1b]*\x1b?|[()*+#%]|[ -\/]*)?$|\r$/;
  var MAX_UNFINISHED = 4096;
  var LEVELS = [0, 95, 135, 175, 215, 255];

  function xtermRgb(index) {
    if (index >= 232) { var grey = 8 + 10 * (index - 232); return [grey, grey, grey]; }
    index -= 16;
    return [LEVELS[Math.floor(index / 36)], LEVELS[Math.floor(index / 6) % 6], LEVELS[index % 6]];
  }

  function nearest(r, g, b) {
    var best = 16, bestDistance = Infinity;
    for (var i = 16; i < 256; i++) {
      var c = xtermRgb(i);
      var d = (c[0] - r) * (c[0] - r) + (c[1] - g) * (c[1] - g) + (c[2] - b) * (c[2] - b);
      if (d < bestDistance) { best = i; bestDistance = d; }
    }
    return best;
  }

  function fresh() {
    return { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false };
  }

  // [colour or null, codes used] for 38/48's "5;N" or "2;R;G;B" starting at codes[at].
  function extended(codes, at) {
    if (codes[at] === 5) {
      var n = codes[at + 1];
      return [n >= 0 && n <= 255 ? n : null, 2];
    }
    if (codes[at] === 2) {
      var rgb = codes.slice(at + 1, at + 4);
      var ok = rgb.length === 3 && rgb.every(function (c) { return c >= 0 && c <= 255; });
      return [ok ? nearest(rgb[0], rgb[1], rgb[2]) : null, 4];
    }
    return [null, 1];
  }

  function applySgr(style, params) {
    var codes = params.replace(/:/g, ";").split(";").map(function (p) { return p ? Number(p) : 0; });
    if (codes.some(isNaN)) return style;
    var s = Object.assign({}, style);
    for (var i = 0; i < codes.length;) {
      var code = codes[i++];
      if (code === 0) s = fresh();
      else if (code === 1) s.bold = true;
      else if (code === 2) s.dim = true;
      else if (code === 3) s.italic = true;
      else if (code === 4) s.underline = true;
      else if (code === 22) { s.bold = false; s.dim = false; }
      else if (code === 23) s.italic = false;
      else if (code === 24) s.underline = false;
      else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) s.fg = code < 90 ? code - 30 : code - 82;
      else if ((code >= 40 && code <= 47) || (code >= 100 && code <= 107)) s.bg = code < 100 ? code - 40 : code - 92;
      else if (code === 38 || code === 48) {
        var found = extended(codes, i);
        i += found[1];
        if (found[0] !== null) { if (code === 38) s.fg = found[0]; else s.bg = found[0]; }
      }
      else if (code === 39) s.fg = null;
      else if (code === 49) s.bg = null;
    }
    return s;
  }

  function classesOf(style) {
    var names = [];
    if (style.fg !== null) names.push("ansi-fg-" + style.fg);
    if (style.bg !== null) names.push("ansi-bg-" + style.bg);
    ["bold", "dim", "italic", "underline"].forEach(function (flag) {
      if (style[flag]) names.push("ansi-" + flag);
    });
    return names;
  }

  // Remove what the element shows after its last line end (a "\r" rewrites the line).
  function clearLastLine(element) {
    var node = element.lastChild;
    while (node) {
      var text = node.textContent;
      var end = text.lastIndexOf("\n");
      if (end >= 0) {
        if (end < text.length - 1) node.textContent = text.slice(0, end + 1);
        return;
      }
      var previous = node.previousSibling;
      element.removeChild(node);
      node = previous;
    }
  }

  function writer(element) {
    var streams = {};
    var overwrite = false;

    function stateOf(stream) {
      if (!streams[stream]) streams[stream] = { style: fresh(), unfinished: "" };
      return streams[stream];
    }

    function show(text, classes) {
      if (overwrite) { clearLastLine(element); overwrite = false; }
      if (!classes.length) { element.appendChild(document.createTextNode(text)); return; }
      var span = document.createElement("span");
      span.className = classes.join(" ");
      span.textContent = text;
      element.appendChild(span);
    }

    function write(text, stream) {
      var state = stateOf(stream || "stdout");
      text = state.unfinished + text;
      state.unfinished = "";
      var held = UNFINISHED.exec(text);
      if (held && text.length - held.index <= MAX_UNFINISHED) {
        state.unfinished = text.slice(held.index);
        text = text.slice(0, held.index);
      }
      var extra = stream === "stderr" ? ["stderr"] : [];
      TOKEN.lastIndex = 0;
      var m;
      while ((m = TOKEN.exec(text)) !== null) {
        if (m[11] !== undefined) show(m[11], extra.concat(classesOf(state.style)));
        else if (m[8] !== undefined) { overwrite = false; show("\n", extra); }
        else if (m[9] !== undefined) overwrite = true;
        else if (m[1] !== undefined && m[3] === "m") state.style = applySgr(state.style, m[2]);
      }
    }

    return { write: write };
  }

  window.SandhubAnsi = { writer: writer };
})();
