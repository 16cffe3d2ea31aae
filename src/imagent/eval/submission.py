"""Test-server files: CIRR (``recall`` and ``recall_subset``) and CIRCO.

- CIRR: ``{"version": "rc2", "metric": "recall", "<pairid>": [top-50 names]}`` and
  ``{"version": "rc2", "metric": "recall_subset", "<pairid>": [top-3 subset names]}``, the reference
  never listed (CIRR's ``Test-split_server.md``); the server's limit is 5 MB per file.
- CIRCO: ``{"<query id>": [50 image ids as numbers]}``.

Files are written for any split (val files can be checked with ``imagent score``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from imagent.eval.datasets import Benchmark, EvalItem, Predictions

MAX_SERVER_BYTES = 5 * 1024 * 1024


def write_submissions(folder: Path, bench: Benchmark, split: str, predictions: Predictions,
                      items: Sequence[EvalItem]) -> list[Path]:
    files = bench.submissions(split, predictions, items)
    written = []
    for name, data in files.items():
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    return written


def oversized(path: Path) -> bool:
    """True when a server file exceeds the CIRR server's 5 MB upload limit."""
    return path.stat().st_size > MAX_SERVER_BYTES


__all__ = ["MAX_SERVER_BYTES", "oversized", "write_submissions"]
