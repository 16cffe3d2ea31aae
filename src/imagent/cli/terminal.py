"""Terminal-safe output: what comes from files, captions or models is printed as text, never as terminal
commands or Rich markup.

A file named ``photo\\x1b[2J.jpg``, a caption holding ``\\x1b]8;;javascript:...`` or a model answering with
``\\x1b[2J`` would otherwise clear the screen, retitle the window or plant a hyperlink; Rich markup such as
``[link=javascript:...]x[/link]`` in a file name would become an OSC-8 link if the name were printed as markup.
Two layers:

- :class:`SafeConsole` (every console the CLI prints through): each text segment's control characters
  (C0 except newline and tab, DEL, C1, and the bidirectional overrides that reorder what a reader sees)
  are written as visible escapes (``\\x1b``, ``\\u202e``) just before output, whatever printed them; Rich's
  own cursor controls (the live status line) pass. Hyperlink styles are dropped: imagent prints none, so a
  link can only come from markup that was not meant as markup.
- :func:`plain` for code that builds Rich renderables: untrusted text as a :class:`rich.text.Text` (never
  parsed as markup), already escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.text import Text

# C0 controls but \t and \n, DEL, C1, and the bidi embedding/override/isolate controls (Trojan Source).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: Any) -> str:
    """``text`` with every control character written as a visible escape (newlines and tabs kept)."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape_char, s) if _UNSAFE.search(s) else s


def plain(text: Any, style: str = "") -> Text:
    """Untrusted text as a Rich ``Text``: no markup is interpreted, no control character is kept."""
    return Text(terminal_safe(text), style=style)


class SafeConsole(Console):
    """A Rich console that never writes a control character it did not generate itself (see module doc)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(_safe_segments(buffer))


def _safe_segments(buffer: Iterable[Segment]) -> Iterable[Segment]:
    for segment in buffer:
        text, style, control = segment
        if control:  # Rich's own cursor movements and clears (Live, status lines)
            yield segment
            continue
        if style is not None and style.link:
            style = style.update_link(None)
        yield Segment(terminal_safe(text), style, control)


__all__ = ["SafeConsole", "plain", "terminal_safe"]
