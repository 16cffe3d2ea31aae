"""The package's layers import one way (DESIGN.md): core <- models, index <- tools <- methods <- eval, api
<- cli, server. A module importing upwards would tie a low layer to an interface and is refused here."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "imagent"

# What each top-level part may import from the package (besides itself).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "models": {"core"},
    "index": {"core", "models"},
    "tools": {"core", "models", "index"},
    "agents": {"core", "models", "index", "tools"},
    "methods": {"core", "models", "index", "tools", "agents"},
    "eval": {"__init__", "core", "models", "index", "tools", "agents", "methods"},
    "api": {"core", "models", "index", "tools", "agents", "methods"},
    "server": {"core", "models", "index", "tools", "agents", "methods", "api"},
    "demo": {"core", "models", "index", "methods", "api", "cli"},
    "cli": {"__init__", "core", "models", "index", "tools", "agents", "methods", "eval", "api", "server", "demo"},
    "__init__": {"core"},
}


def imported_parts(path: Path) -> set[str]:
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            bits = name.split(".")
            if bits[0] == "imagent":
                parts.add(bits[1] if len(bits) > 1 else "__init__")
    return parts


def test_layers_import_one_way():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        part = rel.parts[0].removesuffix(".py")
        assert part in ALLOWED, f"{rel}: a new top-level part; give it a place in ALLOWED"
        for target in imported_parts(path) - {part} - ALLOWED[part]:
            wrong.append(f"{rel} imports imagent.{target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)
