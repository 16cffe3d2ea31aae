"""Terminal-safe output (issue 25, item 4): file names, captions and model text are printed as text.

A hostile file name and caption (ESC sequences that clear the screen or retitle the window, an OSC-8
hyperlink, Rich markup ``[link=javascript:...]``, a bidi override) go through the result table, the trace
and the error line on a console that believes it is a terminal (so styles and links would be emitted),
and through the ``imagent index`` and ``imagent search`` commands. No raw control character and no
hyperlink may reach the output; the text must still be there, visibly escaped, markup shown literally.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.cli.terminal import SafeConsole, terminal_safe

ESC_CLEAR = "\x1b[2J"
OSC_TITLE = "\x1b]0;pwned\x07"
OSC_LINK = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
MARKUP_LINK = "[link=javascript:alert(1)]click me[/link]"
BIDI = "\u202egnp.exe"
HOSTILE_NAME = f"evil{ESC_CLEAR}[link=javascript:alert(1)]click me{OSC_TITLE}.jpg"  # no "/": a file name
HOSTILE_CAPTION = f"a red car {ESC_CLEAR} [bold]not bold[/bold] {MARKUP_LINK} {OSC_LINK} {BIDI} \x9b31m"


def assert_inert(out: str) -> None:
    """No raw control character but newline (and Rich's own SGR colour codes), no hyperlink, no title."""
    assert "\x1b]" not in out, "an OSC sequence (hyperlink or window title) reached the output"
    assert "\x07" not in out and "\x9b" not in out and "\u202e" not in out and "\x1b[2J" not in out
    without_sgr = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", without_sgr), repr(without_sgr[:500])


def terminal() -> tuple[SafeConsole, io.StringIO]:
    buf = io.StringIO()
    return SafeConsole(file=buf, force_terminal=True, color_system="truecolor", width=400), buf


def test_terminal_safe_escapes_visibly() -> None:
    assert terminal_safe("a\x1b[2Jb\tc\nd\x7f\x9b\u202e") == "a\\x1b[2Jb\tc\nd\\x7f\\x9b\\u202e"
    assert terminal_safe("plain [bold]text[/bold]") == "plain [bold]text[/bold]"
    console, buf = terminal()
    console.print(f"[bold]ours[/] {ESC_CLEAR} [link=https://x.example]a link[/link]", highlight=False)  # markup too
    assert_inert(buf.getvalue())
    assert "\\x1b[2J" in buf.getvalue() and "ours" in buf.getvalue()


@pytest.fixture(scope="module")
def hostile_gallery(tmp_path_factory: pytest.TempPathFactory, caption_dual, minilm):
    from imagent.core.types import ImageRecord
    from imagent.index.embedding import gallery_from_records

    base = tmp_path_factory.mktemp("terminal")
    records = [ImageRecord(id=f"id-{ESC_CLEAR}{MARKUP_LINK}", path=f"/photos/{HOSTILE_NAME}",
                           captions=[HOSTILE_CAPTION]),
               ImageRecord(id="plain", path="/photos/plain.jpg", captions=["a blue bicycle"])]
    return gallery_from_records(str(base / "index"), records, caption_dual, minilm)


def test_result_table_and_trace_print_hostile_text_as_text(hostile_gallery) -> None:
    from imagent.api import Workspace
    from imagent.cli.render import print_result
    from imagent.core.config import Settings

    ws = Workspace(Settings(index=hostile_gallery.root, cache_calls=False))
    result = ws.search(f"red car {ESC_CLEAR} {MARKUP_LINK}", method="caption", index=hostile_gallery.root)
    console, buf = terminal()
    print_result(console, result, hostile_gallery)
    out = buf.getvalue()
    assert_inert(out)
    assert "\\x1b[2J" in out and "[bold]not bold[/bold]" in out and "[link=javascript:alert(1)]" in out, out
    assert "\\u202egnp.exe" in out and "\\x1b]0;pwned\\x07" in out


def test_error_lines_print_hostile_text_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagent.cli import common
    from imagent.models.base import ChatError

    console, buf = terminal()
    monkeypatch.setattr(common, "err_console", console)
    common.print_error(ChatError(f"the model said {ESC_CLEAR}{OSC_LINK} {MARKUP_LINK}"))
    out = buf.getvalue()
    assert_inert(out)
    assert "error:" in out and "\\x1b[2J" in out and MARKUP_LINK in out


def test_index_and_search_commands_print_hostile_names_as_text(hostile_gallery, tmp_path: Path) -> None:
    from imagent.cli.main import app

    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / HOSTILE_NAME).write_bytes(b"not an image at all")  # skipped: its name is printed in the table
    runner = CliRunner()
    res = runner.invoke(app, ["index", str(folder), "--index", str(tmp_path / "idx")])
    assert res.exit_code == 0, res.output
    assert_inert(res.output)
    assert "skipped" in res.output and "\\x1b[2J" in res.output, res.output
    res = runner.invoke(app, ["search", "a red car", "--method", "caption", "--index", str(hostile_gallery.root)])
    assert res.exit_code == 0, res.output
    assert_inert(res.output)
    assert "a red car \\x1b[2J" in res.output and "[bold]not" in res.output, res.output  # shown, not obeyed
