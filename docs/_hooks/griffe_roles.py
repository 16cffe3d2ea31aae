"""A griffe extension for the API reference: imagent's docstrings are prose written with Sphinx-style roles
(``:class:`Workspace```, ``:meth:`~imagent.api.Workspace.prepare```) and reST literal-block markers (``::``),
which Markdown would print as they are. This renders each role as a code span of its target (``~`` keeps the
last dotted part, as Sphinx does) and a paragraph's closing ``::`` as ``:``. The docstrings in ``src/`` are not
changed; only what mkdocstrings renders is.

Loaded by ``mkdocs.yml`` (``plugins.mkdocstrings.handlers.python.options.extensions``); not part of the site
(``exclude_docs``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# :role:`target` or :domain:role:`target`, e.g. :class:`~imagent.core.types.Result`, :py:func:`f`.
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|obj|exc|const|ref|term):`([^`]+)`")


def _target(match: re.Match[str]) -> str:
    text = match.group(1).strip()
    if "<" in text and text.endswith(">"):  # :class:`title <target>` -> the title
        return f"`{text.split('<', 1)[0].strip()}`"
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text.lstrip('.!')}`"


def render_roles(text: str) -> str:
    """``text`` with Sphinx roles as Markdown code spans, reST ``::`` markers as ``:`` and doctest examples
    (``>>>`` lines up to the next blank line) as fenced ``pycon`` blocks (Markdown reads ``>>>`` as quotes)."""
    lines: list[str] = []
    doctest = False
    for line in ROLE.sub(_target, text).split("\n"):
        end = line.rstrip()
        if doctest and not end.strip():
            lines.append("```")
            doctest = False
        elif not doctest and end.lstrip().startswith(">>>"):
            lines.append(end[: len(end) - len(end.lstrip())] + "```pycon")
            doctest = True
        if doctest:
            lines.append(end)
        elif end.strip() == "::":  # a bare marker line: the indented block after it is the literal block
            continue
        else:
            lines.append(end[:-1] if end.endswith("::") else line)  # "as follows::" -> "as follows:"
    if doctest:
        lines.append("```")
    return "\n".join(lines)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring griffe reads (modules, classes, functions, attributes)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = render_roles(obj.docstring.value)
