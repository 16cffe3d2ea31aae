"""Per-query framework overhead of every method: what imagent itself costs beside the models.

Each registered method runs a few queries over a synthetic caption-mode gallery of N images (10,000 and
100,000 by default) with zero-latency stand-ins for the models: a hash text embedder (deterministic unit
vectors) and a chat model that answers every JSON request with the smallest instance of the requested
schema and every other prompt with "yes". Time spent inside the stand-ins is measured and subtracted, so
what is left is the framework: pools and filters, scans, fusion, sorting, trace, caching, prompt building.

    python benchmarks/overhead.py                 # N = 10,000 and 100,000
    python benchmarks/overhead.py --sizes 10000   # one size

Prints a table (median ms per query of overhead, model calls per query), the scan floor of each size (a bare
numpy ``matrix @ q`` over the gallery's own matrix, and ``matrix @ Q.T`` for 2 query vectors, timed between the
methods' queries under the thread count imagent's scans use: a reference for a noisy machine, where each
method's multiple of it says more than its milliseconds) and, last, ``overhead_ms_100k max=<x> method=<name>
ratio=<r>``: the largest overhead at the largest size, and ``r`` = that overhead / the same run's two-query scan
floor (the target: r <= 1.25); then ``album_ms_100k=<x> ... ratio=<r> within_3x=<bool>``: the ``album`` planner's
own work (its plan's reading, anchors, relations and cut; the model call is the stand-in's) against the same floor
(issue 46: within 3x). The album runs the same query as every method, over the whole gallery as one album.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import imagent  # noqa: F401, I001 - first: imagent's thread settings must reach OpenBLAS before numpy loads it (README, Speed)
import numpy as np
from imagent.core.types import ImageRecord, Query
from imagent.index.embedding import gallery_from_records
from imagent.index.gallery import Gallery
from imagent.index.scoring import blas_threads
from imagent.methods.base import MethodContext, list_methods
from imagent.models.base import ChatParams, ChatResponse, Message
from imagent.models.roles import Roles

WORDS = ["red", "blue", "green", "small", "large", "dress", "shirt", "cat", "dog", "bird", "car", "house",
         "tree", "flower", "beach", "city", "night", "striped", "wooden", "metal", "sleeveless", "long",
         "short", "old", "new", "two", "three"]


class Stopwatch:
    """Seconds spent inside the model stand-ins (encoders, chat), across threads."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def add(self, s: float) -> None:
        with self._lock:
            self.seconds += s


class HashEncoder:
    """Deterministic unit vectors from each text's hash; images through their captions (caption mode)."""

    sees_pixels = False

    def __init__(self, watch: Stopwatch, dim: int = 384, model_id: str = "hash-384") -> None:
        self.watch, self.dim, self.model_id = watch, dim, model_id

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        self.watch.add(time.perf_counter() - t0)
        return out

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return self.encode_texts([r.caption or r.derived_text for r in records])


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest value valid under ``schema`` (the subset of JSON Schema the methods use)."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return minimal_instance(schema[key][0])
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object":
        return {k: minimal_instance(v) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        n = max(1, int(schema.get("minItems", 1)))
        n = min(n, int(schema.get("maxItems", n)))
        return [minimal_instance(schema.get("items", {"type": "string"})) for _ in range(n)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    text = "a small red dress"
    return text[: int(schema.get("maxLength", len(text)))]


class InstantChat:
    """Zero-latency chat stand-in (not a model): JSON requests get the smallest valid instance."""

    backend, model_id, sees_images = "scripted", "instant", False

    def __init__(self, watch: Stopwatch) -> None:
        self.watch = watch
        self.calls = 0
        self._lock = threading.Lock()

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        t0 = time.perf_counter()
        with self._lock:
            self.calls += 1
        text = json.dumps(minimal_instance(params.json_schema)) if params.json_schema else "Yes"
        resp = ChatResponse(text=text, prompt_tokens=1, completion_tokens=1, finish_reason="stop")
        self.watch.add(time.perf_counter() - t0)
        return resp


def build_gallery(root: Path, n: int, enc: HashEncoder) -> Any:
    rng = np.random.default_rng(0)
    records = [ImageRecord(id=f"img{i:07d}", path=f"/g/{i}.jpg", caption_source="given",
                           captions=[" ".join(rng.choice(WORDS, 6))]) for i in range(n)]
    gallery_from_records(str(root), records, enc, enc, batch_size=2048)
    # Searched as a user's search opens it: a fresh Gallery over the index folder (memory-mapped snapshot), not
    # the object that built it (whose in-memory build state made every later method's timing vary 2x here).
    return Gallery(str(root))


def queries_for(method: type, gallery: Any, count: int) -> list[Query]:
    out = []
    for i in range(count):
        ref = gallery.record(gallery.ids[(i * 7919) % len(gallery)])
        if "cir" in method.tasks:
            out.append(Query(text="make it red and sleeveless", id=f"q{i}", reference=ref, exclude=[ref.id]))
        else:
            out.append(Query(text="a small red dress on a beach", id=f"q{i}"))
    return out


class ScanFloor:
    """Bare numpy products over the gallery's matrix: ``matrix @ q`` (1 query) and ``matrix @ Q.T`` (2)."""

    def __init__(self, gallery: Any) -> None:
        self.matrix = gallery.vector_shards("image").array()
        q = np.random.default_rng(1).standard_normal((2, self.matrix.shape[1])).astype(np.float32)
        self.q = q / np.linalg.norm(q, axis=1, keepdims=True)
        self.one: list[float] = []
        self.two: list[float] = []

    def sample(self, reps: int = 3) -> None:
        blas_threads(self.matrix.size)  # the BLAS thread count imagent's own scan of this matrix gets
        for _ in range(reps):
            t = time.perf_counter()
            self.matrix @ self.q[0]
            self.one.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            self.matrix @ self.q.T
            self.two.append(1000 * (time.perf_counter() - t))

    def medians(self) -> tuple[float, float]:
        return statistics.median(self.one), statistics.median(self.two)


def measure(n: int, queries: int, tmp: Path, only: list[str] | None = None,
            floors: dict[int, ScanFloor] | None = None) -> dict[str, tuple[float, float]]:
    watch = Stopwatch()
    enc = HashEncoder(watch)
    t0 = time.perf_counter()
    gallery = build_gallery(tmp / f"g{n}", n, enc)
    print(f"N={n:,}: gallery built in {time.perf_counter() - t0:.1f} s", flush=True)
    floor = ScanFloor(gallery)
    floor.sample()
    if floors is not None:
        floors[n] = floor
    results: dict[str, tuple[float, float]] = {}
    for name, cls in list_methods().items():
        if not ({"tir", "cir"} & set(cls.tasks)) or (only and name not in only):
            continue  # chat-only or album methods need another query shape
        chat = InstantChat(watch)
        ctx = MethodContext(gallery=gallery, dual=enc, text=enc, roles=Roles.from_models({"default": chat}))
        try:
            method = cls(ctx, cls.Config())
            try:
                method.preflight()
            except FileNotFoundError:
                if "demonstrations" not in cls.Config.model_fields:
                    raise
                # OSCAR without a golden library refuses to run silently without demonstrations: measure its
                # w/o Demo. ablation, what this benchmark measured before that check (no library here).
                method = cls(ctx, cls.Config(demonstrations=False))
                print(f"  {name}: no golden library here; measured with demonstrations=false")
        except Exception as exc:  # a method that needs tools or files this benchmark does not give
            print(f"  {name}: skipped ({exc})")
            continue
        overheads = []
        floor.sample()  # between methods: the floor sees the load the methods see
        calls0 = chat.calls
        for q in [*queries_for(cls, gallery, 1), *queries_for(cls, gallery, queries)]:
            watch.seconds = 0.0
            t = time.perf_counter()
            method.search(q, top_k=50)
            overheads.append(1000 * (time.perf_counter() - t - watch.seconds))
        overheads = overheads[1:]  # the first query warms caches (snapshot load, prompt files)
        calls = (chat.calls - calls0) / (queries + 1)
        results[name] = (statistics.median(overheads), calls)
        print(f"  {name:<12} {results[name][0]:8.2f} ms  {calls:6.1f} calls/query  "
              f"({results[name][0] / floor.medians()[0]:.2f}x scan floor)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=15)
    ap.add_argument("--methods", nargs="+", help="only these methods (default: every registered one)")
    args = ap.parse_args(argv)
    table: dict[int, dict[str, tuple[float, float]]] = {}
    floors: dict[int, ScanFloor] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            table[n] = measure(n, args.queries, Path(tmp), args.methods, floors)
    names = sorted({m for r in table.values() for m in r})
    print("\n" + f"{'method':<12}" + "".join(f"{f'{n:,} ms':>14}" for n in args.sizes))
    for m in names:
        print(f"{m:<12}" + "".join(f"{table[n][m][0]:>14.2f}" if m in table[n] else f"{'-':>14}"
                                   for n in args.sizes))
    for n in args.sizes:
        one, two = floors[n].medians()
        print(f"scan floor {n:,}: {one:.2f} ms (1 query) / {two:.2f} ms (2 queries)")
    largest = table[args.sizes[-1]]
    worst = max(largest, key=lambda m: largest[m][0])
    label = "100k" if args.sizes[-1] == 100_000 else f"{args.sizes[-1]}"
    two_query_floor = floors[args.sizes[-1]].medians()[1]
    print(f"overhead_ms_{label} max={largest[worst][0]:.2f} method={worst} "
          f"ratio={largest[worst][0] / two_query_floor:.2f}")
    if "album" in largest:  # issue 46: the album planner's own work within 3x the two-query scan floor
        album_ms = largest["album"][0]
        print(f"album_ms_{label}={album_ms:.2f} two_query_floor_ms={two_query_floor:.2f} "
              f"ratio={album_ms / two_query_floor:.2f} within_3x={album_ms <= 3 * two_query_floor}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
