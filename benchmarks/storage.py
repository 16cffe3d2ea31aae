"""Storage that grows: write and search a gallery whose vectors are larger than the memory a process may use.

A synthetic gallery of N random unit vectors (one space, float32) is written through the real index
(``Gallery.upsert`` into SQLite), then, each step in a fresh subprocess so that its peak resident memory
(``VmHWM``) is its own:

1. ``write``: ``Gallery.write_snapshot()`` streams SQLite into shard files; peak RSS against the vector bytes.
2. ``search`` under a limit: the address space (``RLIMIT_AS``) is capped at what the interpreter already maps
   plus ``--limit-mb`` (default: half the vector bytes), below the size of the vectors; the sharded gallery
   keeps ``--mapped-shards`` shards mapped and answers ``Gallery.search`` (exact, top-k). The same search over
   the vectors as one memory-mapped ``.npy`` (the single-file layout before shards) under the same cap fails:
   the whole file must be mapped.
3. scan time without a limit, all shards mapped against the single file (``Gallery.search``'s scan either
   way: scores + top-k on one array, the running top-k over shards), and with the bounded mapping; and
   whether the rankings are identical.

    python benchmarks/storage.py                      # N = 524,288 x 512 (1 GiB of vectors), 4 shards
    python benchmarks/storage.py --rows 1000000 --limit-mb 600

The last line reads ``storage N=<rows> vectors_mb=<mb> limit_mb=<mb> search_rss_growth_mb=<mb> sharded_vs_single=<x>``
(the growth: peak resident memory of the capped search beyond the opened gallery's).
Linux only (``RLIMIT_AS``, ``/proc/self/status``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from imagent.core.config import AnnOptions, IndexOptions
from imagent.core.types import ImageRecord
from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery
from imagent.index.scoring import PARALLEL_MIN_ELEMENTS, cosine_scores, top_k
from imagent.index.shards import DEFAULT_SHARD_ROWS

SPACE = SPACE_CAPTION_TEXT


def build(root: Path, n: int, d: int, batch: int = 8192) -> None:
    """N records with random unit vectors, committed in batches (no snapshot written here)."""
    g = Gallery(root, create=True)
    rng = np.random.default_rng(0)
    for start in range(0, n, batch):
        m = min(batch, n - start)
        vecs = rng.standard_normal((m, d), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        with g.transaction() as c:
            g.ensure_space(c, SPACE, f"random-{d}", d)
            for i in range(m):
                rec = ImageRecord(id=f"img{start + i:08d}", path=f"/synthetic/{start + i}.jpg")
                g.upsert(c, rec, f"record:{rec.id}", "synthetic", {SPACE: vecs[i]})


def queries(d: int, count: int) -> np.ndarray:
    q = np.random.default_rng(1).standard_normal((count, d), dtype=np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``; ``ru_maxrss`` would carry the parent's peak, which
    Linux keeps across fork and exec)."""
    return _status_mb("VmHWM")


def mapped_mb() -> float:
    """The address space this process maps now (``VmSize``)."""
    return _status_mb("VmSize")


def timed(fn: Callable[[np.ndarray], Any], qs: np.ndarray) -> tuple[float, list[Any]]:
    fn(qs[0])  # warm-up: pages in the page cache, maps made
    times, found = [], []
    for q in qs:
        t0 = time.perf_counter()
        found.append(fn(q))
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), found


# ---------------------------------------------------------------------- the subprocess steps
def child(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.root)
    opts = IndexOptions(shard_rows=args.shard_rows, mapped_shards=args.mapped_shards)
    qs = queries(args.dim, args.queries)
    if args.step == "write":
        g = Gallery(root)
        g.configure(opts, AnnOptions(mode="off"))
        base = peak_rss_mb()
        t0 = time.perf_counter()
        g.write_snapshot()
        return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "base_rss_mb": base}
    g = Gallery(root)
    g.configure(opts, AnnOptions(mode="off"))
    single = root.parent / "single.npy"
    if args.limit_mb:
        # BLAS maps its work buffers on first use, per thread: warm both scan paths (one thread, all threads)
        # so that the cap counts what the interpreter needs anyway, and the headroom is for the vectors.
        for rows in (1024, PARALLEL_MIN_ELEMENTS // args.dim + 1):
            cosine_scores(np.zeros((rows, args.dim), dtype=np.float32), qs[0])
        limit = int((mapped_mb() + args.limit_mb) * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    base = peak_rss_mb()
    try:
        if args.step == "sharded":
            ms, found = timed(lambda q: g.search(q, SPACE, args.k), qs)
            ranked = [r.ids for r in found]
            shards = g.vector_shards(SPACE)
            info = {"shards": shards.num_shards, "mapped_now": shards.mapped()}
        else:  # the single-file layout: one memory-mapped array, Gallery.search's one-array scan
            mat = np.load(single, mmap_mode="r")
            ms, found = timed(lambda q: top_k(cosine_scores(mat, q), args.k), qs)
            ranked = [[g.ids[int(r)] for r in best] for best in found]
            info = {}
    except (MemoryError, OSError, ValueError) as exc:  # mmap refused under the cap
        return {"failed": f"{type(exc).__name__}: {exc}"[:160], "peak_rss_mb": peak_rss_mb(), "base_rss_mb": base}
    return {"ms": ms, "peak_rss_mb": peak_rss_mb(), "base_rss_mb": base, "ranked": ranked, **info}


def run_child(args: argparse.Namespace, step: str, **over: object) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", step, "--root", str(args.root), "--dim", str(args.dim),
            "--k", str(args.k), "--queries", str(args.queries), "--shard-rows", str(args.shard_rows)]
    opts = {"mapped_shards": 0, "limit_mb": 0, **over}
    argv += ["--mapped-shards", str(opts["mapped_shards"]), "--limit-mb", str(opts["limit_mb"])]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{step} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=524_288)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--queries", type=int, default=15, help="queries timed per layout (median reported)")
    ap.add_argument("--shard-rows", type=int, default=DEFAULT_SHARD_ROWS)
    ap.add_argument("--mapped-shards", type=int, default=1, help="shards kept mapped under the limit")
    ap.add_argument("--limit-mb", type=int, help="address space allowed beyond the interpreter's (default: half "
                                                 "the vector bytes)")
    ap.add_argument("--dir", help="where to build the gallery (default: a temporary folder)")
    ap.add_argument("--child", choices=["write", "sharded", "single"], help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.step = args.child
        print(json.dumps(child(args)))
        return 0

    vec_mb = args.rows * args.dim * 4 / 2**20

    def grown(step: dict[str, Any]) -> str:
        extra = step["peak_rss_mb"] - step["base_rss_mb"]
        return f"+{extra:.0f} MiB over the opened gallery = {extra / vec_mb:.2f} x the vector bytes"

    limit_mb = args.limit_mb or int(vec_mb / 2)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}; N={args.rows:,} x {args.dim} float32 = {vec_mb:,.0f} MiB, "
          f"shards of {args.shard_rows:,} rows, k={args.k}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        args.root = Path(tmp) / "index"
        t0 = time.perf_counter()
        build(args.root, args.rows, args.dim)
        print(f"records and vectors into SQLite: {time.perf_counter() - t0:.1f} s")

        w = run_child(args, "write")
        print(f"write_snapshot (streamed into shards): {w['seconds']:.1f} s, peak RSS {w['peak_rss_mb']:.0f} MiB, "
              f"{grown(w)}")
        # The single-file layout of the same vectors, copied shard by shard (never whole in memory).
        g = Gallery(args.root)
        shards = g.vector_shards(SPACE)
        single = np.lib.format.open_memmap(args.root.parent / "single.npy", mode="w+", dtype=np.float32,
                                           shape=shards.shape)
        for start, part in shards.chunks():
            single[start : start + part.shape[0]] = part
        single.flush()
        del single, shards, g

        lim_sh = run_child(args, "sharded", mapped_shards=args.mapped_shards, limit_mb=limit_mb)
        lim_one = run_child(args, "single", limit_mb=limit_mb)
        print(f"\nunder RLIMIT_AS = interpreter + {limit_mb:,} MiB (vectors {vec_mb:,.0f} MiB):")
        if "failed" in lim_sh:
            print(f"  sharded, {args.mapped_shards} mapped: FAILED {lim_sh['failed']}")
        else:
            print(f"  sharded, {args.mapped_shards} mapped: {lim_sh['ms']:8.1f} ms/query, peak RSS "
                  f"{lim_sh['peak_rss_mb']:.0f} MiB, {grown(lim_sh)}; {lim_sh['shards']} shards")
        print("  single file:        " + (f"FAILED as expected ({lim_one['failed']})" if "failed" in lim_one
                                           else f"{lim_one['ms']:.1f} ms/query (the cap did not bind)"))

        free_sh = run_child(args, "sharded")
        free_one = run_child(args, "single")
        ratio = free_sh["ms"] / free_one["ms"]
        same = free_sh["ranked"] == free_one["ranked"] and lim_sh.get("ranked", free_sh["ranked"]) == free_sh["ranked"]
        print("\nno cap, page cache warm (median of one run per layout):")
        print(f"  single file          {free_one['ms']:8.1f} ms/query, peak RSS {free_one['peak_rss_mb']:.0f} MiB, "
              f"{grown(free_one)}")
        print(f"  sharded, all mapped  {free_sh['ms']:8.1f} ms/query, peak RSS {free_sh['peak_rss_mb']:.0f} MiB, "
              f"{grown(free_sh)}; sharded/single {ratio:.2f}")
        if "ms" in lim_sh:
            print(f"  sharded, {args.mapped_shards} mapped   {lim_sh['ms']:8.1f} ms/query "
                  f"(re-mapping costs {lim_sh['ms'] / free_one['ms']:.2f} x the single file)")
        print(f"  identical top-{args.k} rankings across layouts: {same}")
    growth = lim_sh["peak_rss_mb"] - lim_sh["base_rss_mb"] if "ms" in lim_sh else float("nan")
    print(f"storage N={args.rows} vectors_mb={vec_mb:.0f} limit_mb={limit_mb} search_rss_growth_mb={growth:.0f} "
          f"sharded_vs_single={ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
