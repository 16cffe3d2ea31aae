"""Exact top-k search latency: imagent's scan against a bare numpy bound.

For N random L2-normalised d-dimensional vectors stored as a ``.npy`` file and opened memory-mapped
(as :meth:`imagent.index.gallery.Gallery.search` opens its snapshot), one query costs

- imagent: ``cosine_scores(matrix, q)`` then ``top_k(scores, k)`` (what ``Gallery.search`` does
  after loading the array; stable tie-breaking, sorted output);
- bare:    ``matrix @ q`` then ``np.argpartition(-s, k)[:k]`` (no tie handling, unsorted), in the
  matrix's own dtype: the least plain numpy can do.

Prints the median over several queries of each, in milliseconds, and the ratio imagent / bare.

Then the approximate store (``--ann-size``, default 1,000,000 rows), for the default data and for harder
spreads (``--ann-hard-spread``, default 2.0): clustered unit vectors (embeddings cluster; uniform random vectors
have no neighbours worth the name), the FAISS store built as ``imagent index`` builds it (training, filling, and the
calibration of ``nprobe`` to ``ann.target_recall`` on held-out stored rows), with the settings of
``AnnOptions()`` (``ann.min_rows``, ``ann.nprobe`` as the floor, ``ann.overfetch``). Every figure comes from
:func:`imagent.index.ann.search_pool`, the function ``Gallery.search`` runs for each query (store or exact scan
over the pool, filter scaling, fallback), given the pool a filter leaves: no filter, a random filter keeping
1% of the rows (below ``ann.min_rows`` at 1M: the function scans the pool exactly), one keeping 25% (the store
answers, under its calibrated filtered ``nprobe``), and the 1% filter forced through the store (``min_rows=1``,
as ``ann.mode = "on"``). Recall@50 is measured against the exact top-50 of the same pool over
``--ann-queries`` queries (a stored row plus noise, as a real query is near its answers but not on one). Where the
25% filter's probes reach every list (so the exact path answers it), the store's own time for it is printed too;
times are medians over up to ``--repeats`` x 3 of them. The exact scan (the same function without a store) is also set
against the memory-bandwidth bound: one streaming pass over the matrix (``np.add.reduce``, which reads every
byte once and computes almost nothing). The last line reads
``ann N=<rows> speedup=<x> recall@50=<r> filtered_recall@50=<r>`` (the default data; the 1% filter).

    python benchmarks/search_scan.py            # N = 100,000 and 1,000,000 (needs ~3 GB of disk and RAM)
    python benchmarks/search_scan.py --quick    # N = 100,000 only, ANN at 200,000
    python benchmarks/search_scan.py --sizes --ann-size 1000000   # the ANN section only
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import imagent  # noqa: F401, I001 - first: imagent's thread settings must reach OpenBLAS before numpy loads it (README, Speed)
import numpy as np
from imagent.core.config import AnnOptions
from imagent.index import ann, scoring
from imagent.index.ann import AnnParams, AnnStore, search_pool
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


def write_clustered(path: Path, n: int, d: int, seed: int = 0, clusters: int = 4096, spread: float = 1.0,
                    chunk: int = 65_536) -> np.ndarray:
    """Unit vectors drawn around ``clusters`` random centres; returns the centres (queries start from them)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        noise = rng.standard_normal((m, d), dtype=np.float32) * (spread / np.sqrt(d))
        block = centres[rng.integers(0, clusters, m)] + noise
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + m] = block
    out.flush()
    del out
    return centres


def exact_answers(matrix: np.ndarray, queries: np.ndarray, k: int, pools: list[np.ndarray | None],
                  block: int = 65_536) -> list[list[set[int]]]:
    """The exact top-``k`` rows of each query within each pool (None: every row), as sets: one pass over the
    matrix in blocks for all queries at once (the reference answers; the searches themselves run one query
    at a time through ``search_pool``)."""
    scores = np.empty((len(queries), matrix.shape[0]), dtype=np.float32)
    for start in range(0, matrix.shape[0], block):
        scores[:, start : start + block] = cosine_scores(np.asarray(matrix[start : start + block]), queries)
    out = []
    for rows in pools:
        sub = scores if rows is None else scores[:, rows]
        picked = [top_k(s, k) for s in sub]
        out.append([set((p if rows is None else rows[p]).tolist()) for p in picked])
    return out


def ann_section(n: int, d: int, n_queries: int, n_timed: int, budget: float, tmp: str, spread: float,
                label: str) -> dict[str, float]:
    """Build, calibrate and measure the store on ``n`` clustered rows; print a block, return its figures."""
    path = Path(tmp) / f"clustered{n}_{spread}.npy"
    write_clustered(path, n, d, spread=spread)
    matrix = np.load(path, mmap_mode="r")  # as the gallery maps its snapshot
    rng = np.random.default_rng(3)
    queries = []
    for r in rng.integers(0, n, n_queries):  # near a stored point, as a real query is near its answers
        q = np.asarray(matrix[r], dtype=np.float32) + 0.6 / np.sqrt(d) * rng.standard_normal(d, dtype=np.float32)
        queries.append(q / np.linalg.norm(q))
    options = AnnOptions()  # imagent's defaults: the threshold, the nprobe floor, over-fetch, target recall
    params = AnnParams.of(options)
    store = AnnStore(Path(tmp) / f"idx{spread}", "image")
    identity = {"rows": n}
    t0 = time.perf_counter()
    meta = store.build(matrix, identity, params)
    build_s = time.perf_counter() - t0
    k = 50
    pools: dict[str, np.ndarray | None] = {"none": None}
    for name, frac in (("1%", 0.01), ("25%", 0.25)):
        pools[name] = np.sort(rng.choice(n, size=max(k, int(n * frac)), replace=False))
    truth = dict(zip(pools, exact_answers(matrix, np.stack(queries), k, list(pools.values())), strict=True))

    def run(q: np.ndarray, rows: np.ndarray | None, min_rows: int | None = None) -> object:
        return search_pool(matrix, q, k, rows, store, identity, params, min_rows)

    def measure(name: str, min_rows: int | None = None) -> tuple[float, float, str]:
        rows = pools[name]
        got = [run(q, rows, min_rows) for q in queries]
        recall = float(np.mean([len(set(g.rows.tolist()) & t) / k for g, t in zip(got, truth[name], strict=True)]))
        paths = {p: sum(g.path == p for g in got) for p in sorted({g.path for g in got})}
        ms = median_ms(lambda q: run(q, rows, min_rows), queries[:n_timed], budget)
        return ms, recall, ", ".join(f"{p} {c}/{len(got)}" for p, c in paths.items())

    exact_ms = median_ms(lambda q: search_pool(matrix, q, k), queries[:n_timed], budget)  # no store: the scan
    stream_ms = median_ms(lambda q: np.add.reduce(matrix, axis=0), queries[:3], budget)
    ann_ms, recall, ann_paths = measure("none")
    f_ms, f_recall, f_paths = measure("1%")
    q_ms, q_recall, q_paths = measure("25%")
    forced_ms, forced_recall, forced_paths = measure("1%", min_rows=1)
    gb = matrix.nbytes / 1e9
    levels = ", ".join(f"{e['fraction']:g}: {e['nprobe']}" for e in meta.get("filtered", []))
    print(f"\nANN, {label}: {n:,} x {d} clustered float32 ({gb:.1f} GB), {meta['factory']}, built in "
          f"{build_s:.1f} s (training and filling {meta.get('build_seconds')} s, calibration "
          f"{meta.get('calibration_seconds')} s)")
    print(f"  nprobe {store.nprobe_for(params)} of {meta['nlist']} lists (floor {params.nprobe}; calibrated recall@"
          f"{meta.get('recall_k')} {meta.get('recall')} on {meta.get('calibration_queries')} held-out rows, target "
          f"{params.target_recall}{', CAPPED' if meta.get('capped') else ''}); under filters keeping {levels or '-'}")
    print(f"  exact scan       {exact_ms:8.2f} ms  ({gb / (exact_ms / 1000):.1f} GB/s); one streaming pass "
          f"{stream_ms:.2f} ms ({gb / (stream_ms / 1000):.1f} GB/s) = the bandwidth bound, scan/bound "
          f"{exact_ms / stream_ms:.2f}")
    print(f"  no filter        {ann_ms:8.2f} ms  speed-up {exact_ms / ann_ms:6.1f}x over the scan, "
          f"{stream_ms / ann_ms:6.1f}x over the bound  recall@50 {recall:.3f}  [{ann_paths}]")
    print(f"  1% filter        {f_ms:8.2f} ms  recall@50 {f_recall:.3f}  [{f_paths}]")
    print(f"  25% filter       {q_ms:8.2f} ms  recall@50 {q_recall:.3f}  [{q_paths}]")
    print(f"  1%, store forced {forced_ms:8.2f} ms  recall@50 {forced_recall:.3f}  [{forced_paths}]  (min_rows=1)")
    if store.nprobe_for(params, 0.25) >= meta["nlist"]:
        # The 25% filter's probes reach every list, so search_pool scans it exactly: what the store would cost.
        allowed = np.zeros(n, dtype=bool)
        allowed[pools["25%"]] = True
        every_ms = median_ms(lambda q: ann._rerank(matrix, q, store.candidates(q, k * params.overfetch, meta["nlist"],
                                                                               allowed), k), queries[:n_timed], budget)
        print(f"  25% via the store {every_ms:8.2f} ms  (every list probed; the exact path above answers instead)")
    if store.calibration_note():
        print(f"  warning: {store.calibration_note()}")
    matrix = None
    path.unlink()
    return {"n": n, "speedup": exact_ms / ann_ms, "recall": recall, "filtered_recall": f_recall}


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
    ap.add_argument("--sizes", type=int, nargs="*", help="gallery sizes (default 100000 1000000; none: skip)")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--ks", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"], choices=["float32", "float16"])
    ap.add_argument("--repeats", type=int, default=7, help="queries timed per cell (median reported)")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per cell before stopping early")
    ap.add_argument("--dir", help="where to write the vector files (default: a temporary folder)")
    ap.add_argument("--ann-size", type=int, help="rows for the ANN section (default 1,000,000; 200,000 with --quick)")
    ap.add_argument("--ann-spread", type=float, default=1.0,
                    help="noise around each cluster centre of the default data (1.0: a member's cosine to its "
                         "centre ~0.7)")
    ap.add_argument("--ann-hard-spread", type=float, nargs="*", default=[2.0],
                    help="harder data, one section each (neighbours barely above the rest; at 200,000 rows an "
                         "uncalibrated nprobe 32 gave recall@50 ~0.68 at 1.5 and ~0.27 at 2.0; at 1,000,000 rows "
                         "1.5 is about as easy as 1.0, 2.0 is not); none: skip")
    ap.add_argument("--ann-queries", type=int, default=100, help="queries recall is measured on")
    args = ap.parse_args(argv)
    sizes = args.sizes if args.sizes is not None else ([100_000] if args.quick else [100_000, 1_000_000])
    ann_n = args.ann_size or (200_000 if args.quick else 1_000_000)

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
        print(f"\nload: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
        main_ann = ann_section(ann_n, args.dim, args.ann_queries, args.repeats * 3, args.budget, tmp,
                               args.ann_spread, f"spread {args.ann_spread:g} (default data)")
        for spread in args.ann_hard_spread:
            ann_section(ann_n, args.dim, args.ann_queries, args.repeats * 3, args.budget, tmp, spread,
                        f"spread {spread:g} (harder)")
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    print(f"ann N={main_ann['n']} speedup={main_ann['speedup']:.1f} recall@50={main_ann['recall']:.3f} "
          f"filtered_recall@50={main_ann['filtered_recall']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
