"""The code stays ruff clean (the project's lint configuration is in pyproject.toml)."""

import shutil
import subprocess
from pathlib import Path


def test_ruff_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the dev extra"
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([ruff, "check", "src", "tests", "benchmarks"], cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]
