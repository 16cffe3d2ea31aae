"""Paths of the benchmark files: the shipped stamps, and the shared ones (tests that need those skip when
../shared is absent)."""

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
    """The stamps shipped with the package (the same 627 images as ../shared/data/stamps)."""
    path = REPO / "src" / "imagent" / "eval" / "data" / "stamps_mini"
    if not (path / "captions.jsonl").is_file():
        pytest.skip("the shipped stamps images are missing")
    return path
