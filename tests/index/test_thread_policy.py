"""Importing imagent makes torch's OpenMP threads wait passively (they would spin against the scan that follows an
encode), unless the user chose a wait policy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import os, imagent; print(os.environ.get('OMP_WAIT_POLICY'))"


@pytest.mark.parametrize(("given", "want"), [
    ({}, "PASSIVE"),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
    ({"GOMP_SPINCOUNT": "1000"}, "None"),
])
def test_import_sets_a_passive_openmp_wait_unless_the_user_chose(given: dict[str, str], want: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**env, **given}, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == want
