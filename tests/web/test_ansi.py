"""Terminal colours in command output (sandboxes/web/ansi.py and its `ansi` filter): SGR
sequences become classed spans, every other escape is dropped, and nothing a command prints
becomes markup. The live stream's JS twin is tested in Chromium
(tests/web/test_browser_pages26.py)."""

from __future__ import annotations

import shlex

import pytest

from sandboxes import services
from sandboxes.web.ansi import AnsiRenderer, ansi_to_html, nearest_colour
from tests.fakes import FakeBackend

ESC = "\x1b"


@pytest.fixture
def printf(monkeypatch) -> None:
    """The fake backend learns `printf FORMAT` (escapes like \\033 interpreted, as bash's)."""
    original = FakeBackend._interpret

    def interpret(self, box, argv, env, timeout):
        if argv[:2] == ["bash", "-c"] and argv[2].startswith("printf "):
            text = shlex.split(argv[2])[1].encode().decode("unicode_escape")
            return text.encode(), b"", 0, False
        return original(self, box, argv, env, timeout)

    monkeypatch.setattr(FakeBackend, "_interpret", interpret)


def test_sixteen_colours_bold_underline_and_reset():
    html = ansi_to_html(f"{ESC}[31mred{ESC}[0m plain {ESC}[1;4;92mbright{ESC}[22mthin{ESC}[m")
    assert html == (
        '<span class="ansi-fg-1">red</span> plain '
        '<span class="ansi-fg-10 ansi-bold ansi-underline">bright</span>'
        '<span class="ansi-fg-10 ansi-underline">thin</span>'
    )


def test_256_colours_and_backgrounds_and_truecolor_to_the_nearest_class():
    assert (
        ansi_to_html(f"{ESC}[38;5;208;48;5;17mx") == '<span class="ansi-fg-208 ansi-bg-17">x</span>'
    )
    assert ansi_to_html(f"{ESC}[44;39mx{ESC}[49my") == '<span class="ansi-bg-4">x</span>y'
    # 24-bit colours: the nearest of xterm's fixed 240 (pure red is 196, a near-grey a grey).
    assert ansi_to_html(f"{ESC}[38;2;250;5;5mx") == '<span class="ansi-fg-196">x</span>'
    assert nearest_colour(128, 128, 130) == 244
    assert ansi_to_html(f"{ESC}[38;2;300;0;0mx{ESC}[38;5mz") == "xz"  # malformed: no colour


def test_other_sequences_and_controls_are_dropped():
    text = (
        f"{ESC}]0;a window title{ESC}\\{ESC}]8;;http://x/{ESC}\\link{ESC}]8;;\x07"
        f"{ESC}[2J{ESC}[1;1H{ESC}[?25l{ESC}(Bok\x07\x08\x00{ESC}=\tend"
    )
    assert ansi_to_html(text) == "linkok\tend"


def test_progress_lines_show_their_last_state():
    text = "downloading  10%\rdownloading  60%\rdownloading 100%\r\ndone\nx\r"
    assert ansi_to_html(text) == "downloading 100%\ndone\nx"
    assert ansi_to_html("a\r\r\nb\r\n") == "a\nb\n"


def test_a_sequence_cut_between_chunks_waits_for_the_rest():
    renderer = AnsiRenderer()
    shown = [renderer.feed(part) for part in ("a\x1b", "[3", "1mred\r", "\nnext", f"{ESC}]0;t")]
    assert shown == ["", "", "", 'a<span class="ansi-fg-1">red</span>\n', ""]
    assert renderer.finish() == '<span class="ansi-fg-1">next</span>'


def test_markup_in_coloured_output_is_escaped():
    text = f'{ESC}[31m<script>alert(1)</script>{ESC}[0m<img src=x onerror="alert(2)">&amp;'
    html = ansi_to_html(text)
    assert "<script" not in html and "<img" not in html
    assert html == (
        '<span class="ansi-fg-1">&lt;script&gt;alert(1)&lt;/script&gt;</span>'
        '&lt;img src=x onerror="alert(2)"&gt;&amp;amp;'
    )


@pytest.mark.django_db
def test_the_command_page_shows_colours_and_no_markup(login, sandbox, alice, as_alice, printf):
    command = r"printf '\033[31m<script>alert(1)</script>\033[0m<img src=x onerror=alert(2)>\n'"
    result = services.run_command(as_alice, sandbox, command)
    assert "\x1b[31m" in result.stdout
    page = login(alice).get(f"/sandboxes/{sandbox}/commands/{result.id}/").content.decode()
    stdout = page.split('id="command-stdout">', 1)[1].split("</pre>", 1)[0]
    assert stdout == (
        '<span class="ansi-fg-1">&lt;script&gt;alert(1)&lt;/script&gt;</span>'
        "&lt;img src=x onerror=alert(2)&gt;\n"
    )
    assert "web/ansi.css" in page


@pytest.mark.django_db
def test_a_jobs_tail_shows_colours(login, sandbox, alice, as_alice, printf):
    job = services.start_background(as_alice, sandbox, r"printf '\033[1m\033[32mok\033[0m\n'")
    client = login(alice)
    tail = client.get(f"/sandboxes/{sandbox}/jobs/{job.id}/tail/").content.decode()
    assert '<span class="ansi-fg-2 ansi-bold">ok</span>' in tail and "[32m" not in tail
    page = client.get(f"/sandboxes/{sandbox}/jobs/{job.id}/").content.decode()
    assert "web/ansi.css" in page and '<span class="ansi-fg-2 ansi-bold">ok</span>' in page
