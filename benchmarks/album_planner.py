"""Cost and speed of the ``album`` method (imagent's own planner): model calls, tokens and seconds a query.

Runs ``album`` over a DISBench-layout album (default: the shipped mini album, every query) with the offline llama.cpp
model and a fresh call cache (every call computed; the model files are linked in), and prints per query: model
calls, prompt tokens sent and evaluated (not reused from llama.cpp's KV prefix: the static prompt prefix should be
evaluated once per process), generated tokens, seconds and the answer's F1 / EM; then the model's own prompt and
generation speed measured in the same run, and a last line

    album_planner queries=<n> f1=<mean> em=<mean> calls=<mean> max_calls=<max> median_s=<median> mean_s=<mean>
                  evaluated=<mean evaluated prompt tokens a query> sent=<mean sent>

The goals of issue 38: at most 2 model calls a query and a median of at most 20 s a query with the 0.5B on 2 cores.
Measure on a quiet machine; the seconds move with the machine's load (the load average is printed first).

    python benchmarks/album_planner.py [--album DIR] [--queries q01,q02] [--set album.check=false]

Measured 2026-11-28 on the project's 2-core machine with other jobs running (load 3.8-4.0), commit 454c44e, the mini
album: ``album_planner queries=22 f1=66.9 em=22.7 calls=1.05 max_calls=2 median_s=1.5 mean_s=2.3 evaluated=77
sent=1277``: the first query evaluated the whole 1,217-token prompt (10.7 s), every later one 15-25 tokens (its own
words) and generated ~40 (1.3-3.4 s); q09 took the second call (a plan that found nothing, re-planned). Model speed
after the queries: prompt 135.5 tok/s, generation 18.4 tok/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_tokens import (  # the same token accounting
    ALBUM,
    CallLog,
    album_subset,
    fresh_workspace,
    measure_speed,
    run_method,
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--album", type=Path, default=ALBUM, help="DISBench-layout album (default: the mini album)")
    ap.add_argument("--queries", default="", help="query ids, comma-separated (default: every query)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config key=value (repeatable)")
    args = ap.parse_args(argv)

    work, ws, cfg, model_path, model_id, threads = fresh_workspace("album-planner-", args.sets)
    print(f"model {model_id}, {threads} threads; load average {os.getloadavg()[0]:.2f}", flush=True)

    log = CallLog()
    log.install()
    qids = [q.strip() for q in args.queries.split(",") if q.strip()]
    album = album_subset(args.album, qids, work)
    rows = run_method(ws, log, "album", "disbench", album, work)
    for r in rows:
        print(f"{r['qid']:<8} calls {r['calls']}  sent {r['sent']:>5}  evaluated {r['evaluated']:>5}  generated "
              f"{r['generated']:>4}  {r['seconds']:6.1f} s  F1 {r.get('f1', 0.0):5.1f} EM {r.get('em', 0.0):3.0f}"
              + (f"  error: {r['error']}" if r.get("error") else ""), flush=True)
    prompt, gen = measure_speed(model_path, threads, flash_attn=cfg.flash_attn)
    print(f"model speed after the queries: prompt {prompt:.1f} tok/s, generation {gen:.1f} tok/s; load average "
          f"{os.getloadavg()[0]:.2f}")
    if not rows:
        raise SystemExit("no query ran")

    def mean(key: str) -> float:
        return statistics.mean(float(r.get(key, 0.0)) for r in rows)

    print(f"album_planner queries={len(rows)} f1={mean('f1'):.1f} em={mean('em'):.1f} calls={mean('calls'):.2f} "
          f"max_calls={max(r['calls'] for r in rows)} median_s={statistics.median(r['seconds'] for r in rows):.1f} "
          f"mean_s={mean('seconds'):.1f} evaluated={mean('evaluated'):.0f} sent={mean('sent'):.0f}")


if __name__ == "__main__":
    main()
