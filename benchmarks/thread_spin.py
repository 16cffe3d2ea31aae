"""Threads that spin after their work, against the scan that follows: what imagent's thread settings buy.

After a threaded product, numpy's OpenBLAS keeps its worker threads spinning for a while (~0.1 s by default),
and torch's OpenMP threads do the same after an encode unless ``OMP_WAIT_POLICY=PASSIVE``. A scan on the same
cores in that window competes with them. Each case runs in a fresh process that imports numpy *before*
imagent (so OpenBLAS loads with whatever ``OPENBLAS_THREAD_TIMEOUT`` the case gives it) and times torch's
2-query scan of an N x d float32 matrix (X^R's and OSCAR's path) right after:

- nothing (the scan alone);
- a threaded numpy product (``matrix @ q`` on every core), OpenBLAS's default timeout;
- the same with ``OPENBLAS_THREAD_TIMEOUT=4`` (what importing imagent first sets);
- imagent's own one-query scan (``cosine_scores``: blocks on imagent's threads, one BLAS thread each).

It also prints the time of the two one-query products themselves (imagent's blocks, OpenBLAS's threads).
Medians in ms. The last line reads ``spin alone=<ms> after_openblas=<ms> after_openblas_timeout4=<ms>
after_imagent_scan=<ms>``.

    python benchmarks/thread_spin.py [--rows 100000] [--dim 384] [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

CASE = r"""
import json, os, statistics, sys, time, warnings
import numpy as np  # before imagent: OpenBLAS loads with the case's own environment
sys.path.insert(0, os.environ["IMAGENT_SRC"])
import torch
from imagent.index import scoring

rows, dim, runs, prior = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
m = rng.standard_normal((rows, dim), dtype=np.float32)
m /= np.linalg.norm(m, axis=1, keepdims=True)
q = rng.standard_normal((2, dim), dtype=np.float32)
warnings.simplefilter("ignore")
tm, tq = torch.from_numpy(m), torch.from_numpy(q)

def openblas_threaded():
    scoring.blas_threads(m.size)  # every core
    m @ q[0]

before = {"none": lambda: None, "openblas": openblas_threaded, "imagent": lambda: scoring.cosine_scores(m, q[0])}[prior]
scans, priors = [], []
with torch.inference_mode():
    for _ in range(runs):
        tm @ tq.T  # torch's threads warm
        t = time.perf_counter()
        before()
        priors.append(1000 * (time.perf_counter() - t))
        t = time.perf_counter()
        tm @ tq.T  # the timed scan, right after the case's product
        scans.append(1000 * (time.perf_counter() - t))
# In its own process, so no other case's threads run beside it: the prior product's own time.
out = {"scan_ms": statistics.median(scans), "prior_ms": statistics.median(priors)}
print(json.dumps(out))
"""


def run_case(prior: str, timeout: str | None, args: argparse.Namespace) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env["IMAGENT_SRC"] = SRC
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch's side of the policy, as importing imagent sets it
    if timeout is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = timeout
    out = subprocess.run([sys.executable, "-c", CASE, str(args.rows), str(args.dim), str(args.runs), prior],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    print(f"torch 2-query scan of {args.rows:,} x {args.dim} float32, {os.cpu_count()} CPUs, median of "
          f"{args.runs} ms, right after:")
    runs = {
        "nothing": run_case("none", None, args),
        "a threaded numpy product": run_case("openblas", None, args),
        "a threaded numpy product, OPENBLAS_THREAD_TIMEOUT=4": run_case("openblas", "4", args),
        "imagent's one-query scan": run_case("imagent", None, args),
    }
    for label, r in runs.items():
        print(f"  {label:<55} {r['scan_ms']:7.2f}")
    own = runs["imagent's one-query scan"]["prior_ms"]
    blas = runs["a threaded numpy product"]["prior_ms"]
    blas4 = runs["a threaded numpy product, OPENBLAS_THREAD_TIMEOUT=4"]["prior_ms"]
    print(f"one-query product itself: imagent's blocks {own:.2f} ms, OpenBLAS threaded {blas:.2f} ms (its threads "
          f"spinning between products), {blas4:.2f} ms with OPENBLAS_THREAD_TIMEOUT=4")
    v = [r["scan_ms"] for r in runs.values()]
    print(f"spin alone={v[0]:.2f} after_openblas={v[1]:.2f} after_openblas_timeout4={v[2]:.2f} "
          f"after_imagent_scan={v[3]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
