"""Text hygiene where text enters imagent: model output, tool results, manifests, file names.

Python strings may hold lone surrogates (U+D800-U+DFFF) that no UTF-8 encoder accepts: a JSON reply with
``"\\ud800"``, a manifest read with ``errors="surrogateescape"``, a file name that is not valid UTF-8
(``os.listdir`` decodes its bytes with surrogateescape). One such character used to abort a whole
``imagent index`` or search at the first ``.encode("utf-8")`` (SQLite, cache keys, JSON output). The fix is
applied once, where text enters, with :func:`clean_text`; file names keep their exact bytes (so the file still
opens) and are only *shown* through :func:`display_path`.

Accents are taken off in one place (:func:`unaccent`: ``Café`` -> ``Cafe``), for every comparison that ignores
them (place names, the query reader's vocabulary, the text read in photos).

Counts are said with their noun in the right number (:func:`plural`: "1 result", "2 results").

Bracket nesting is checked before text reaches a recursive parser (:func:`nested_deeper_than`): ``json.loads`` and
``ast.literal_eval`` recurse once per level, and a model that writes ``[[[[...`` thousands of times drove them to
the recursion limit, where anything else that runs at that depth (a garbage collector's finalizer, the report of
its error) fails too.
"""

from __future__ import annotations

import os
import re
import unicodedata

REPLACEMENT = "\ufffd"


def clean_text(s: str) -> str:
    """``s`` with every lone surrogate replaced by U+FFFD; valid text is returned unchanged (same object).

    A surrogate *pair* held as two code points (as ``surrogatepass`` decoding produces) is joined into the
    character it encodes rather than replaced, so no real character is lost.
    """
    if not isinstance(s, str):
        s = str(s)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    # UTF-16 round trip: pairs combine into one character, lone halves become U+FFFD.
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def display_path(path: str | os.PathLike[str] | bytes) -> str:
    """A printable, UTF-8-safe rendering of a file name for messages and skip reasons.

    Bytes that are not valid UTF-8 (surrogate escapes in a ``str``) are shown as ``\\xNN`` (``caf\\xe9.jpg``),
    other lone surrogates as ``\\udNNN`` and control characters escaped, so the user can still tell which file
    is meant; never use the result to open the file."""
    raw = os.fspath(path)
    text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else str(raw)
    out = []
    for c in text:
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        elif not c.isprintable():
            # A newline or tab in a file name would break one-line messages.
            out.append(repr(c)[1:-1])
        else:
            out.append(c)
    return "".join(out)


def unaccent(text: str) -> str:
    """``text`` without accents (combining marks after NFKD), case kept: ``Café`` -> ``Cafe``."""
    norm = unicodedata.normalize("NFKD", text)
    return "".join(c for c in norm if not unicodedata.combining(c))


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 result``, ``2 results``, ``0 results`` (``many``: the plural when it is not ``word + "s"``, e.g.
    ``plural(n, "person", "people")``, ``plural(n, "match", "matches")``). Every count shown to a person goes
    through it (the web page has the same ``plural`` in its JavaScript)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


# The JSON nesting imagent accepts from a model or a server (what it asks for needs fewer than 8 levels).
MAX_JSON_NESTING = 64
_JSON_SYNTAX = re.compile(r'["\\\[\]{}]')


def nested_deeper_than(text: str, limit: int) -> bool:
    """Whether ``text`` opens more than ``limit`` brackets (``[`` or ``{``) inside one another, outside JSON
    strings (a backslash escapes the next character inside one). One pass, no recursion; unbalanced text counts
    what it opens."""
    depth, in_string, skip = 0, False, -1
    for m in _JSON_SYNTAX.finditer(text):
        pos, c = m.start(), m.group()
        if pos == skip:
            continue
        if in_string:
            if c == "\\":
                skip = pos + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return True
        elif c in "]}":
            depth = max(0, depth - 1)
    return False
