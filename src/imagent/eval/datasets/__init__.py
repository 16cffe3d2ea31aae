"""Benchmark loaders, one module per family, and the registry the CLI uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    EvalItem,
    MissingImagesError,
    Predictions,
)
from imagent.eval.datasets.circo import CIRCO
from imagent.eval.datasets.cirr import CIRR
from imagent.eval.datasets.disbench import DISBench
from imagent.eval.datasets.fashioniq import FashionIQ
from imagent.eval.datasets.genecis import GeneCIS
from imagent.eval.datasets.stamps import Stamps
from imagent.eval.datasets.tir import MSCOCO, Flickr30K
from imagent.eval.datasets.visdial import VisDial

BENCHMARKS: dict[str, type[Benchmark]] = {
    cls.name: cls for cls in (CIRR, CIRCO, FashionIQ, GeneCIS, Flickr30K, MSCOCO, VisDial, DISBench, Stamps)
}


ALIASES = {"coco": "mscoco", "flickr": "flickr30k", "fiq": "fashioniq"}


def canonical_name(name: str) -> str | None:
    """The registry name for ``name`` (case, dashes and a few aliases forgiven), or None."""
    key = name.lower().replace("-", "").replace("_", "")
    key = ALIASES.get(key, key)
    return key if key in BENCHMARKS else None


def load_benchmark(
    name: str, annotations: str | Path | None = None, images_root: str | Path | None = None, **options: Any
) -> Benchmark:
    key = canonical_name(name)
    if key is None:
        raise BenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[key](annotations, images_root, **options)


__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "BenchmarkError",
    "EvalItem",
    "MissingImagesError",
    "Predictions",
    "canonical_name",
    "load_benchmark",
]
