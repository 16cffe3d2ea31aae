"""Throughput of ``imagent eval --workers N`` against one worker, with a chat backend that answers after a
fixed delay (a stand-in for a served model: vLLM, a llama.cpp server with parallel slots, an API).

The run is the real evaluation runner (``imagent.eval.runner.run_eval``) on the stamps mini benchmark's
composed queries with ``cirevl`` (one chat call per query) and the real MiniLM text embedder in caption mode;
only the chat model is replaced, and the call cache is off so every query pays its delay. The same queries run
with 1 worker and with N, each into its own run directory over one shared index; ``--repeat`` pairs of runs
alternate which goes first, so a change in the machine's load falls on both sides.

    python benchmarks/eval_workers.py                      # delay 0.5 s, 32 queries, workers 1 and 8, 3 pairs
    python benchmarks/eval_workers.py --images-root ../shared/data/stamps --delay 1.0 --repeat 5

Each pair prints both runs' seconds (the whole ``run_eval``: set-up, queries, report) and the machine's load
(``os.getloadavg``, 1 and 5 minutes) while it ran; ``loop`` is the queries alone (from the first query's start to
the last record written), the part the workers share. Last line: ``workers=<N> speedup=<x> load=<l>``: the median
over the pairs of (whole-run seconds with 1 worker / with N), and the mean 1-minute load during the pairs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.eval.runner import RunSpec, run_eval
from imagent.models.base import ChatParams, ChatResponse, Message


class DelayedChat:
    """Answers every call after ``delay`` seconds with the modification text (not a model: a timing stand-in)."""

    backend, model_id, sees_images = "scripted", "delayed", False

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        time.sleep(self.delay)
        return ChatResponse(text="a photo of the edited object", prompt_tokens=1, completion_tokens=1,
                            finish_reason="stop")


def run(ws: Workspace, workers: int, queries: int, args: argparse.Namespace, tmp: Path,
        name: str) -> tuple[float, float]:
    """One eval run: its whole seconds and its query loop's (first query started to last record written)."""
    marks: list[float] = []

    def progress(phase: str, done: int, total: int, _label: str) -> None:
        if phase == "queries" and done in (0, total):
            marks.append(time.perf_counter())

    spec = RunSpec(benchmark="stamps", method="cirevl", split="cir", images_root=args.images_root,
                   limit=queries, run_dir=tmp / name, index=tmp / "index", workers=workers)
    t0 = time.perf_counter()
    summary = run_eval(ws, spec, progress=progress)
    seconds = time.perf_counter() - t0
    if summary.errors:
        raise SystemExit(f"{summary.errors} queries failed in {tmp / name}")
    return seconds, (marks[-1] - marks[0]) if len(marks) >= 2 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images-root", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data" / "stamps")
    ap.add_argument("--delay", type=float, default=0.5, help="seconds each chat call takes")
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="pairs of runs (1 worker, N workers)")
    args = ap.parse_args(argv)
    n = args.workers
    ratios: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ws = Workspace(Settings(cache_calls=False, cache_dir=tmp / "cache"))
        ws.parts.chat_models["offline"] = DelayedChat(args.delay)  # the default model entry: the delayed stand-in
        run(ws, 1, 1, args, tmp, "warm")  # builds the shared index and loads MiniLM outside the timed runs
        print(f"{args.queries} queries, chat delay {args.delay:.2f} s, {os.cpu_count()} cores")
        for r in range(args.repeat):
            before = os.getloadavg()
            order = (1, n) if r % 2 == 0 else (n, 1)
            timed = {w: run(ws, w, args.queries, args, tmp, f"p{r}-w{w}") for w in order}
            after = os.getloadavg()
            (one, one_loop), (many, many_loop) = timed[1], timed[n]
            load = (before[0] + after[0]) / 2
            ratios.append(one / many)
            loads.append(load)
            print(f"pair {r + 1}: 1 worker {one:.2f} s ({args.queries / one:.2f} q/s; loop {one_loop:.2f} s), "
                  f"{n} workers {many:.2f} s ({args.queries / many:.2f} q/s; loop {many_loop:.2f} s): "
                  f"{one / many:.2f}x (loop {one_loop / many_loop:.2f}x), load {load:.2f} "
                  f"(1 min {before[0]:.2f} -> {after[0]:.2f}, 5 min {after[1]:.2f})")
    print(f"workers={n} speedup={statistics.median(ratios):.2f} load={statistics.mean(loads):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
