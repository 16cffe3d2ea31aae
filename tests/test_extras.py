"""Extras install with any pip (issue 47): the built metadata names each extra as pyproject.toml writes it (a name
pip normalizes differently, such as ``offline-1.5b`` -> ``offline-1-5b``, is refused by pip 23.2, the pip of a
Python 3.11 virtual environment), and every ``pip install ...[extras]`` the README, the docs and the code's hints
show names extras the metadata has, exactly as written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `pip install "imagent[web]"`, `pip install -e ".[offline,web,dev]"`, `pip install 'imagent[offline-15b]'`
PIP_EXTRAS = re.compile(r"pip install[^\n]*?(?:imagent|\.)\[([^\]\n]+)\]")


def built_extras(tmp_path: Path) -> set[str]:
    """The ``Provides-Extra`` names of the metadata setuptools builds from pyproject.toml (in a copy: the working
    tree gets no egg-info)."""
    src = tmp_path / "project"
    (src / "src" / "imagent").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    (src / "src" / "imagent" / "__init__.py").write_text("")
    out = tmp_path / "meta"
    out.mkdir()
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True, check=True)
    metadata = (out / done.stdout.strip().splitlines()[-1] / "METADATA").read_text(encoding="utf-8")
    return {line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Provides-Extra:")}


def documented_installs() -> list[tuple[str, str]]:
    """``(where, extra)`` for every extra named in a ``pip install`` line of the README, docs/ and src/."""
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "src").rglob("*.py"))]
    found = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in PIP_EXTRAS.finditer(line):
                found += [(f"{path.relative_to(REPO)}:{n}", e.strip()) for e in m.group(1).split(",")
                          if "{" not in e]  # a hint built from a field (models/offline.py) is checked by its test
    return found


def test_extras_are_named_as_pip_normalizes_them_and_every_install_line_names_one(tmp_path):
    from packaging.utils import canonicalize_name

    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert {e for e in declared if canonicalize_name(e) != e} == set(), "extras pip would rename"
    built = built_extras(tmp_path)
    assert built == declared and {"offline", "offline-15b", "web", "dev"} <= built
    installs = documented_installs()
    assert any(e == "offline-15b" for _, e in installs)  # the larger model's install line is read
    wrong = [f"{where}: [{extra}]" for where, extra in installs if extra not in built]
    assert not wrong, f"pip install lines naming extras the built metadata lacks ({sorted(built)}): {wrong}"


def test_the_line_reader_finds_extras_in_each_way_the_docs_write_them():
    lines = ['pip install -e ".[offline,web,dev]"', "pip install 'imagent[offline-15b]'",
             'pip install "torch==2.13.0" -e ".[offline]"', "(pip install 'imagent[ann]' (faiss-cpu))"]
    assert [m.group(1) for line in lines for m in PIP_EXTRAS.finditer(line)] == [
        "offline,web,dev", "offline-15b", "offline", "ann"]
