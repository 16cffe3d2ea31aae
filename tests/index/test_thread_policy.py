"""Importing imagent makes torch's OpenMP threads wait passively (they would spin against the scan that follows an
encode) and numpy's OpenBLAS threads stop spinning soon after a product (they would spin against the torch scan
that follows), unless the user chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = ("import os, imagent; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OPENBLAS_THREAD_TIMEOUT'))")
VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")


@pytest.mark.parametrize(("given", "want"), [
    ({}, "PASSIVE 4"),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE 4"),
    ({"GOMP_SPINCOUNT": "1000"}, "None 4"),
    ({"OPENBLAS_THREAD_TIMEOUT": "28"}, "PASSIVE 28"),
])
def test_import_sets_passive_thread_waits_unless_the_user_chose(given: dict[str, str], want: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**env, **given}, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == want
