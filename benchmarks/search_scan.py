"""Exact top-k search latency: imagent's scan against a bare numpy bound.

For N random L2-normalised d-dimensional vectors stored as a ``.npy`` file and opened memory-mapped
(as :meth:`imagent.index.gallery.Gallery.search` opens its snapshot), one query costs

- imagent: ``cosine_scores(matrix, q)`` then ``top_k(scores, k)`` (what ``Gallery.search`` does
  after loading the array; stable tie-breaking, sorted output);
- bare:    ``matrix @ q`` then ``np.argpartition(-s, k)[:k]`` (no tie handling, unsorted), in the
  matrix's own dtype: the least plain numpy can do.

Prints the median over several queries of each, in milliseconds, and the ratio imagent / bare.

    python benchmarks/search_scan.py            # N = 100,000 and 1,000,000 (needs ~3 GB of disk and RAM)
    python benchmarks/search_scan.py --quick    # N = 100,000 only (well under a minute)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from imagent.index import scoring
from imagent.index.scoring import cosine_scores, top_k


def write_vectors(path: Path, n: int, d: int, dtype: np.dtype, seed: int = 0, chunk: int = 65_536) -> None:
    """Random unit vectors written chunk by chunk, so a million rows never need two copies in memory."""
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, d))
    for start in range(0, n, chunk):
        block = rng.standard_normal((min(chunk, n - start), d), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = block.astype(dtype)
    out.flush()
    del out


def imagent_search(matrix: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    return top_k(cosine_scores(matrix, q), k)


def bare_search(matrix: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = matrix @ q.astype(matrix.dtype)
    return np.argpartition(-s, k)[:k]


def median_ms(fn: Callable[[np.ndarray], object], queries: list[np.ndarray], budget_s: float) -> float:
    """Median wall time over the queries, after one warm-up; stops early past ``budget_s`` (>= 3 runs)."""
    fn(queries[0])
    times: list[float] = []
    t_start = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and time.perf_counter() - t_start > budget_s:
            break
    return 1000.0 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only N = 100,000")
    ap.add_argument("--sizes", type=int, nargs="+", help="gallery sizes (default 100000 1000000)")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--ks", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"], choices=["float32", "float16"])
    ap.add_argument("--repeats", type=int, default=7, help="queries timed per cell (median reported)")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per cell before stopping early")
    ap.add_argument("--dir", help="where to write the vector files (default: a temporary folder)")
    args = ap.parse_args(argv)
    sizes = args.sizes or ([100_000] if args.quick else [100_000, 1_000_000])

    rng = np.random.default_rng(1)
    queries = []
    for _ in range(args.repeats):
        q = rng.standard_normal(args.dim).astype(np.float32)
        queries.append(q / np.linalg.norm(q))

    half = getattr(scoring, "half_backend", lambda: "numpy")()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"d={args.dim}, median of up to {args.repeats} queries; fp16 scoring via {half}")
    header = f"{'N':>10} {'dtype':>8} {'k':>4} {'imagent ms':>11} {'bare ms':>9} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in sizes:
            for dt in args.dtypes:
                path = Path(tmp) / f"v{n}_{dt}.npy"
                write_vectors(path, n, args.dim, np.dtype(dt))
                matrix = np.load(path, mmap_mode="r")  # as Gallery.vectors() opens the snapshot
                for k in args.ks:
                    a = median_ms(lambda q, m=matrix, k=k: imagent_search(m, q, k), queries, args.budget)
                    b = median_ms(lambda q, m=matrix, k=k: bare_search(m, q, k), queries, args.budget)
                    print(f"{n:>10,} {dt:>8} {k:>4} {a:>11.2f} {b:>9.2f} {a / b:>6.2f}", flush=True)
                matrix = None  # release the map before the file goes
                path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
