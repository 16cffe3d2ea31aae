"""Wall time of an incremental ``imagent index`` that finds nothing new (issue 15 item 7, issue 16).

Indexes the stamps manifest once, then times ``--runs`` no-op re-runs of the real CLI in fresh processes
(``lazy``: what ``imagent index`` does now, comparing model ids from the config and loading no encoder), and
the same re-run with the encoders loaded first (``eager``: what it did before, loading MiniLM only to read
its id). Each run is a new Python process, as a user's is.

Prints one line per variant (median and min seconds) and a last line
``noop_lazy_s=<s> noop_eager_s=<s> saved_s=<s>``.

    python benchmarks/index_noop.py [--source ../shared/data/stamps/captions.jsonl] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The eager variant: the CLI as before, with both encoders loaded before the build starts.
EAGER = """
import sys
from imagent.cli import main
orig = main.workspace
def eager(*a, **k):
    ws = orig(*a, **k)
    ws.text_embedder, ws.dual_encoder  # load both, as the index command used to
    return ws
main.workspace = eager
sys.argv = ["imagent", *sys.argv[1:]]
main.app()
"""


def _run(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=str(here.parent / "shared" / "data" / "stamps" / "captions.jsonl"))
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGENT")}
        env.update(IMAGENT_CACHE_DIR=f"{tmp}/cache", IMAGENT_DATA_DIR=f"{tmp}/data", HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", XDG_CONFIG_HOME=f"{tmp}/cfg")
        cli = [sys.executable, "-m", "imagent.cli.main", "index", a.source, "--index", f"{tmp}/idx", "--json"]
        eager = [sys.executable, "-c", EAGER, "index", a.source, "--index", f"{tmp}/idx", "--json"]
        first = _run(cli, env)
        print(f"first build: {first:.2f} s")
        results = {}
        for name, args in (("lazy", cli), ("eager", eager)):
            times = [_run(args, env) for _ in range(a.runs)]
            results[name] = statistics.median(times)
            print(f"{name:5}: median {results[name]:.2f} s, min {min(times):.2f} s over {a.runs} runs")
    print(f"noop_lazy_s={results['lazy']:.2f} noop_eager_s={results['eager']:.2f} "
          f"saved_s={results['eager'] - results['lazy']:.2f}")


if __name__ == "__main__":
    main()
