"""Throughput of ``imagent eval --workers N`` against one worker, with a chat backend that answers after a
fixed delay (a stand-in for a served model: vLLM, a llama.cpp server with parallel slots, an API).

The run is the real evaluation runner (``imagent.eval.runner.run_eval``) on the stamps mini benchmark's
composed queries with ``cirevl`` (one chat call per query) and the real MiniLM text embedder in caption mode;
only the chat model is replaced, and the call cache is off so every query pays its delay. The same queries run
with 1 worker and with N, each into its own run directory over one shared index.

    python benchmarks/eval_workers.py                      # delay 0.5 s, 32 queries, workers 1 and 8
    python benchmarks/eval_workers.py --images-root ../shared/data/stamps --delay 1.0

Last line: ``workers=<N> speedup=<x>`` (queries per second with N workers / with 1).
"""

from __future__ import annotations

import argparse
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


def run(ws: Workspace, workers: int, queries: int, args: argparse.Namespace, tmp: Path, name: str) -> float:
    spec = RunSpec(benchmark="stamps", method="cirevl", split="cir", images_root=args.images_root,
                   limit=queries, run_dir=tmp / name, index=tmp / "index", workers=workers)
    t0 = time.perf_counter()
    summary = run_eval(ws, spec)
    seconds = time.perf_counter() - t0
    if summary.errors:
        raise SystemExit(f"{summary.errors} queries failed in {tmp / name}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images-root", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data" / "stamps")
    ap.add_argument("--delay", type=float, default=0.5, help="seconds each chat call takes")
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ws = Workspace(Settings(cache_calls=False, cache_dir=tmp / "cache"))
        ws.parts.chat_models["offline"] = DelayedChat(args.delay)  # the default model entry: the delayed stand-in
        run(ws, 1, 1, args, tmp, "warm")  # builds the shared index and loads MiniLM outside the timed runs
        one = run(ws, 1, args.queries, args, tmp, "w1")
        many = run(ws, args.workers, args.queries, args, tmp, f"w{args.workers}")
    print(f"{args.queries} queries, chat delay {args.delay:.2f} s: 1 worker {one:.2f} s "
          f"({args.queries / one:.2f} q/s), {args.workers} workers {many:.2f} s ({args.queries / many:.2f} q/s)")
    print(f"workers={args.workers} speedup={one / many:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
