"""Paths of the shared benchmark files; tests that need them skip when ../shared is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("IMAGENT_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def bench_dir() -> Path:
    path = SHARED / "data" / "benchmarks"
    if not path.is_dir():
        pytest.skip("../shared/data/benchmarks is not available")
    return path


@pytest.fixture(scope="session")
def stamps_root() -> Path:
    path = SHARED / "data" / "stamps"
    if not (path / "captions.jsonl").is_file():
        pytest.skip("../shared/data/stamps is not available")
    return path
