"""Benchmark loaders, one module per family, and the registry the CLI uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagent.core.registry import Registry
from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    EvalItem,
    MissingImagesError,
    Predictions,
)

# Benchmark loaders by import path: a loader's module is imported when its benchmark is first asked for.
BENCHMARKS: Registry[type[Benchmark]] = Registry("benchmark", {
    "cirr": "imagent.eval.datasets.cirr:CIRR",
    "circo": "imagent.eval.datasets.circo:CIRCO",
    "fashioniq": "imagent.eval.datasets.fashioniq:FashionIQ",
    "genecis": "imagent.eval.datasets.genecis:GeneCIS",
    "flickr30k": "imagent.eval.datasets.tir:Flickr30K",
    "mscoco": "imagent.eval.datasets.tir:MSCOCO",
    "visdial": "imagent.eval.datasets.visdial:VisDial",
    "disbench": "imagent.eval.datasets.disbench:DISBench",
    "stamps": "imagent.eval.datasets.stamps:Stamps",
}, error=BenchmarkError)


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
