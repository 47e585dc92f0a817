"""Terminal output as HTML: SGR colours and styles become spans with classes, every other
escape or control sequence is dropped, and a line rewritten with `\\r` (a progress bar)
shows as its last state.

The text is HTML-escaped piece by piece before any markup is added, so nothing a command
prints can become markup. Only classes are written (static/web/ansi.css), never a style=
attribute: the pages' Content-Security-Policy forbids inline styles. Colours: the 16 basic
ones and the 256 of xterm have a class each (`ansi-fg-N`, `ansi-bg-N`); a 24-bit colour is
drawn as the nearest of xterm's 240 fixed ones (indices 16-255; 0-15 are themed, so never
picked for a colour that asked for an exact value).

static/web/ansi.js does the same in the browser for the command runner's live stream.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace

# One token: a control sequence (CSI), an OSC string (a window title, a hyperlink), a DCS/PM/
# APC string, a character-set choice, a two-character escape, a line end, a carriage return,
# any other C0 control or DEL; or a run of ordinary text (tabs included).
_TOKEN = re.compile(
    r"(?P<csi>\x1b\[(?P<params>[0-?]*)[ -/]*(?P<final>[@-~]))"
    r"|(?P<osc>\x1b\][^\x07\x1b]*(?:\x07|\x1b\\))"
    r"|(?P<string>\x1b[P^_][^\x1b]*\x1b\\)"
    r"|(?P<charset>\x1b[()*+#%][0-9A-Za-z@])"
    r"|(?P<esc>\x1b[ -/]*[0-~])"
    r"|(?P<newline>\r?\n)"
    r"|(?P<cr>\r)"
    r"|(?P<control>[\x00-\x08\x0b-\x1f\x7f])"
    r"|(?P<text>[^\x00-\x08\x0a-\x1f\x7f]+)"
)
# What may still become a sequence when more text arrives (kept for the next chunk).
_UNFINISHED = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[P^_][^\x1b]*\x1b?|[()*+#%]|[ -/]*)?\Z|\r\Z"
)
MAX_UNFINISHED = 4096  # an "unfinished" OSC longer than this is junk: dropped, not held

# xterm's 256 colours beyond the 16 themed ones: a 6x6x6 cube and 24 greys.
_CUBE_LEVELS = (0, 95, 135, 175, 215, 255)


def _xterm_rgb(index: int) -> tuple[int, int, int]:
    if index >= 232:
        grey = 8 + 10 * (index - 232)
        return grey, grey, grey
    index -= 16
    return _CUBE_LEVELS[index // 36], _CUBE_LEVELS[index // 6 % 6], _CUBE_LEVELS[index % 6]


_FIXED = [(i, _xterm_rgb(i)) for i in range(16, 256)]


def nearest_colour(red: int, green: int, blue: int) -> int:
    """The xterm colour (16-255) nearest to a 24-bit one."""

    def distance(entry: tuple[int, tuple[int, int, int]]) -> int:
        r, g, b = entry[1]
        return (r - red) ** 2 + (g - green) ** 2 + (b - blue) ** 2

    return min(_FIXED, key=distance)[0]


@dataclass(frozen=True)
class Style:
    fg: int | None = None
    bg: int | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False

    def classes(self) -> str:
        names = [f"ansi-fg-{self.fg}"] if self.fg is not None else []
        names += [f"ansi-bg-{self.bg}"] if self.bg is not None else []
        flags = ("bold", "dim", "italic", "underline")
        names += [f"ansi-{flag}" for flag in flags if getattr(self, flag)]
        return " ".join(names)


_FLAGS_ON = {1: "bold", 2: "dim", 3: "italic", 4: "underline"}
_FLAGS_OFF = {22: ("bold", "dim"), 23: ("italic",), 24: ("underline",)}


def _extended(codes: list[int], at: int) -> tuple[int | None, int]:
    """The colour of `38;5;N` / `38;2;R;G;B` (or 48) starting at codes[at] (the 5 or 2), and
    how many codes it took; (None, n) for a malformed one."""
    if at < len(codes) and codes[at] == 5:
        if at + 1 < len(codes) and 0 <= codes[at + 1] <= 255:
            return codes[at + 1], 2
        return None, 2
    if at < len(codes) and codes[at] == 2:
        rgb = codes[at + 1 : at + 4]
        if len(rgb) == 3 and all(0 <= c <= 255 for c in rgb):
            return nearest_colour(*rgb), 4
        return None, 4
    return None, 1


def apply_sgr(style: Style, params: str) -> Style:
    """The style after one SGR sequence (`ESC [ params m`); unknown codes change nothing."""
    try:
        codes = [int(p) if p else 0 for p in params.replace(":", ";").split(";")]
    except ValueError:
        return style
    i = 0
    while i < len(codes):
        code = codes[i]
        i += 1
        if code == 0:
            style = Style()
        elif code in _FLAGS_ON:
            style = replace(style, **{_FLAGS_ON[code]: True})
        elif code in _FLAGS_OFF:
            style = replace(style, **dict.fromkeys(_FLAGS_OFF[code], False))
        elif 30 <= code <= 37 or 90 <= code <= 97:
            style = replace(style, fg=code - 30 if code < 90 else code - 82)
        elif 40 <= code <= 47 or 100 <= code <= 107:
            style = replace(style, bg=code - 40 if code < 100 else code - 92)
        elif code in (38, 48):
            colour, used = _extended(codes, i)
            i += used
            if colour is not None:
                style = replace(style, fg=colour) if code == 38 else replace(style, bg=colour)
        elif code == 39:
            style = replace(style, fg=None)
        elif code == 49:
            style = replace(style, bg=None)
    return style


class AnsiRenderer:
    """Terminal output, fed in chunks, as HTML. Each complete line is returned once it ends;
    a line rewritten after a `\\r` keeps only what was written last; an escape sequence cut
    between chunks waits for the rest."""

    def __init__(self) -> None:
        self.style = Style()
        self._unfinished = ""
        self._line: list[str] = []
        self._overwrite = False

    def feed(self, text: str) -> str:
        text = self._unfinished + text
        self._unfinished = ""
        held = _UNFINISHED.search(text)
        if held and len(text) - held.start() <= MAX_UNFINISHED:
            text, self._unfinished = text[: held.start()], text[held.start() :]
        done: list[str] = []
        for token in _TOKEN.finditer(text):
            self._take(token, done)
        return "".join(done)

    def finish(self) -> str:
        """What is left: the last line, without its line end."""
        self._unfinished = ""  # a sequence that never ended shows nothing
        last, self._line = "".join(self._line), []
        return last

    def _take(self, token: re.Match[str], done: list[str]) -> None:
        kind = token.lastgroup
        if kind == "text":
            if self._overwrite:
                self._line, self._overwrite = [], False
            self._line.append(self._span(token.group()))
        elif kind == "newline":
            done.append("".join(self._line) + "\n")
            self._line, self._overwrite = [], False
        elif kind == "cr":
            self._overwrite = True
        elif kind == "csi" and token.group("final") == "m":
            self.style = apply_sgr(self.style, token.group("params"))
        # anything else (cursor moves, titles, bells, ...) shows nothing

    def _span(self, text: str) -> str:
        escaped = html.escape(text, quote=False)
        classes = self.style.classes()
        return f'<span class="{classes}">{escaped}</span>' if classes else escaped


def ansi_to_html(text: str) -> str:
    """A whole output as HTML (safe to mark safe: every character of `text` is escaped)."""
    renderer = AnsiRenderer()
    return renderer.feed(text) + renderer.finish()
