"""The README and the docs never send a reader outside the repository (issue 24): no ``../shared`` folder, no
absolute path of the machine the project was written on, and every relative link resolves to a file here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "src" / "imagent" / "eval" / "data").glob("*/README.md"))]


def test_docs_point_only_inside_the_repository():
    bad = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for needle in ("../shared", "/work/"):
            if needle in text:
                bad.append(f"{path.relative_to(REPO)}: mentions {needle}")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target) or target.endswith(".png"):
                continue
            if not (path.parent / target).exists():
                bad.append(f"{path.relative_to(REPO)}: link {target} does not exist")
    assert not bad, "\n".join(bad)
