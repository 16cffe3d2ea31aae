"""The documentation site (issue 39 item 5): ``mkdocs build --strict`` passes (every link, anchor and nav entry
resolves; the API reference renders from the docstrings), and the method pages say what the code does: each
hyper-parameter table lists exactly the method's config fields with their defaults and origins, each trace step a
page names exists in the methods' code, and every registered method has a row on the methods overview."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
METHOD_PAGES = sorted((DOCS / "methods").glob("*.md"))
TABLE_MARK = re.compile(r"^<!-- hyper-parameters: (\w+) -->$", re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site built once, strictly, into a temporary folder: its directory and the build's log."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about MkDocs 2.0, not a warning
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    return out, log


def test_the_site_builds_strictly_with_no_warning(site: tuple[Path, str]) -> None:
    out, log = site
    warnings = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert not warnings, "\n".join(warnings)
    for page in ("index.html", "methods/xr/index.html", "reference/api/index.html", "faithfulness/index.html"):
        assert (out / page).is_file(), page
    assert not (out / "_hooks").exists()


def test_the_api_reference_renders_the_docstrings_cleanly(site: tuple[Path, str]) -> None:
    out, _ = site
    api = (out / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "Workspace" in api and "SearchRequest" in api and "prepare" in api
    leftovers = [(p.relative_to(out).as_posix(), m.group(0))
                 for p in sorted((out / "reference").rglob("*.html"))
                 for m in re.finditer(r":(?:class|meth|func|mod|attr|data):`[^`]*`", p.read_text(encoding="utf-8"))]
    assert not leftovers, leftovers[:10]
    # Doctest examples are code blocks, not Markdown quotes (">>>" read as three nested blockquotes).
    quoted = [p.relative_to(out).as_posix() for p in sorted((out / "reference").rglob("*.html"))
              if "<blockquote>" in p.read_text(encoding="utf-8")]
    assert not quoted, quoted


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text`` as (header cells, body rows), pipes inside code spans kept."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|\s*-", lines[i + 1]):
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append(_cells(lines[j]))
                j += 1
            tables.append((_cells(lines[i]), rows))
            i = j
        else:
            i += 1
    return tables


def _cells(line: str) -> list[str]:
    cells, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    return [*cells, cell.strip()]


def _documented_fields() -> dict[str, dict[str, tuple[str, str]]]:
    """``{method: {field: (default cell, origin cell)}}`` from every marked hyper-parameter table."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for page in METHOD_PAGES:
        text = page.read_text(encoding="utf-8")
        for mark in TABLE_MARK.finditer(text):
            header, rows = _tables(text[mark.end():])[0]
            assert header[:3] == ["field", "default", "origin"], (page.name, header)
            out[mark.group(1)] = {row[0].strip("`"): (row[1], row[2]) for row in rows}
    return out


def test_hyper_parameter_tables_match_the_config_classes() -> None:
    from imagent.methods.base import describe_methods
    from imagent.methods.origins import field_origins

    documented = _documented_fields()
    assert {"clip", "caption", "cirevl", "imagescope", "xr", "tacir", "oscar"} <= set(documented)
    described = describe_methods()
    problems = []
    for method, rows in documented.items():
        defaults = json.loads(json.dumps(described[method]["defaults"]))
        origins = field_origins(method, defaults)
        if missing := sorted(set(defaults) - set(rows)):
            problems.append(f"{method}: fields not documented: {missing}")
        if stale := sorted(set(rows) - set(defaults)):
            problems.append(f"{method}: documented fields the config does not have: {stale}")
        for name in sorted(set(rows) & set(defaults)):
            default_cell, origin_cell = rows[name]
            value = defaults[name]
            if not isinstance(value, dict) and default_cell != f"`{json.dumps(value)}`":
                problems.append(f"{method}.{name}: page says {default_cell}, code says {json.dumps(value)}")
            origin = origins[name]["origin"]
            if origin_cell.split(" ")[0] != origin:
                problems.append(f"{method}.{name}: page says {origin_cell!r}, origins.py says {origin}")
    assert not problems, "\n".join(problems)


def _step_literals() -> list[re.Pattern[str]]:
    """Every string literal in the methods' and the agent runtime's code that can name a trace step, an f-string's
    fields as wildcards (``f"tacir.tool.{tool}"`` matches ``tacir.tool.search``)."""
    found: set[str] = set()
    src = REPO / "src" / "imagent"
    for path in [*(src / "methods").rglob("*.py"), *(src / "agents").rglob("*.py")]:  # the agent runtime's turns
        found |= set(re.findall(r"""f?["']([a-z][a-z0-9_.{}]*)["']""", path.read_text(encoding="utf-8")))
    return [re.compile(re.sub(r"\\\{[a-z_]+\\\}", ".+", re.escape(s)) + "$") for s in found]


def test_trace_steps_named_on_method_pages_exist_in_the_code() -> None:
    literals = _step_literals()
    problems = []
    for page in METHOD_PAGES:
        for header, rows in _tables(page.read_text(encoding="utf-8")):
            if len(header) < 2 or "trace step" not in header[1]:
                continue
            for row in rows:
                step = re.search(r"`([^`]+)`", row[1])
                if step is None:
                    continue
                name = re.sub(r"<[a-z]+>|\*", "x", step.group(1))
                if not any(p.match(name) for p in literals):
                    problems.append(f"{page.name}: step {step.group(1)!r} is not a step name in src/imagent/methods")
    assert not problems, "\n".join(problems)


def test_every_registered_method_has_a_row_on_the_methods_overview() -> None:
    from imagent.methods.base import METHODS

    overview = (DOCS / "methods" / "index.md").read_text(encoding="utf-8")
    listed = {row[0].strip("`") for header, rows in _tables(overview) if header[0] == "method" for row in rows}
    # The shipped methods (tests register doubles of their own in the same registry while the suite runs).
    shipped = {n for n in METHODS.names() if METHODS[n].__module__.startswith("imagent.")}
    assert {"clip", "album", "photocraft"} <= shipped and shipped <= listed, sorted(shipped - listed)
