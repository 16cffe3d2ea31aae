"""A cold ``imagent search`` against ``python -c "import torch"`` on the same machine (issue 40's CLI goal).

- cold:  ``imagent search "a penguin" --index I`` in a fresh process, exactly as a user types it (the default
         method the query is routed to, the table on stdout): imports, settings, the index, the text embedder,
         one query encoding, the scan, the output. No ``imagent serve`` runs on the index (one would answer it).
- torch: ``python -c "import torch"`` in a fresh process: what any Python program that touches torch pays.

The index is built here: a folder of 1,000 photos (the stamps that ship inside imagent, re-saved as camera-named
JPEGs with EXIF dates over five years and GPS around Vienna, 48 to a month folder), indexed with the configured
(default: offline) encoders. Both commands run once to warm the OS file cache, then ``--runs`` times, alternating;
the medians of the wall-clock times are compared. The last line reads ``cold_s=<s> torch_s=<s> cold_ratio=<x>``
(the line before it: the same comparison in CPU time and as the median of each run's ratio); the goal is
``cold_ratio <= 1.5`` (it was 4.1 with sentence-transformers loaded for the query: 12.5 s against 3.0 s).

    python benchmarks/cli_start.py [--runs 7] [--photos 1000] [--index DIR] [--query "a penguin"]

``--index DIR`` times an existing index instead (nothing is built). The machine's load average is printed with
the numbers: on a shared machine the timings are noisy, re-run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from importlib.resources import files
from pathlib import Path


def imagent_cmd() -> list[str]:
    exe = shutil.which("imagent")
    return [exe] if exe else [sys.executable, "-m", "imagent.cli.main"]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one run of ``cmd`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return dt, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def photo_folder(dest: Path, count: int) -> Path:
    """``count`` JPEGs made from the shipped stamps, each with its own EXIF date and GPS (so each is its own
    photo, never a duplicate of another)."""
    from PIL import Image

    stamps = Path(str(files("imagent.eval") / "data" / "stamps_mini"))
    rows = [json.loads(line) for line in (stamps / "captions.jsonl").read_text().splitlines()]
    start = datetime(2019, 1, 5, 9, 30)
    for i in range(count):
        taken = start + timedelta(hours=41 * i)
        folder = dest / taken.strftime("%Y-%m")
        folder.mkdir(parents=True, exist_ok=True)
        ex = Image.Exif()
        ex.get_ifd(0x8769)[0x9003] = taken.strftime("%Y:%m:%d %H:%M:%S")
        gps = ex.get_ifd(0x8825)
        lat, lon = 48.15 + (i % 17) * 0.01, 16.30 + (i % 13) * 0.01
        gps[1], gps[2], gps[3], gps[4] = "N", (float(int(lat)), float(int(lat % 1 * 60)), 0.0), "E", \
            (float(int(lon)), float(int(lon % 1 * 60)), 0.0)
        with Image.open(stamps / rows[i % len(rows)]["file"]) as im:
            im.convert("RGB").save(folder / f"IMG_{i:04d}.jpg", "JPEG", quality=90, exif=ex)
    return dest


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--photos", type=int, default=1000)
    ap.add_argument("--index", type=Path, default=None, help="an existing index (default: build one)")
    ap.add_argument("--query", default="a penguin")
    args = ap.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("IMAGENT_NO_SERVER", None)
    with tempfile.TemporaryDirectory(prefix="imagent-cli-start-") as tmp:
        env.setdefault("IMAGENT_CACHE_DIR", str(Path(tmp) / "cache"))
        index = args.index
        if index is None:
            index = Path(tmp) / "index"
            folder = photo_folder(Path(tmp) / "photos", args.photos)
            t0 = time.perf_counter()
            subprocess.run([*imagent_cmd(), "index", str(folder), "--index", str(index), "--json"], env=env,
                           check=True, capture_output=True)
            print(f"indexed {args.photos} photos in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        if (Path(index) / ".imagent-server.json").exists():
            raise SystemExit(f"an imagent serve runs on {index}: it would answer the search; stop it first")
        cold = [*imagent_cmd(), "search", args.query, "--index", str(index)]
        torch = [sys.executable, "-c", "import torch"]
        timed(torch, env)  # warm the OS file cache for both
        timed(cold, env)
        cold_s, torch_s, cold_cpu, torch_cpu = [], [], [], []
        for i in range(args.runs):
            wall, cpu = timed(cold, env)
            cold_s.append(wall)
            cold_cpu.append(cpu)
            wall, cpu = timed(torch, env)
            torch_s.append(wall)
            torch_cpu.append(cpu)
            print(f"run {i + 1}: imagent search {cold_s[-1]:.2f} s ({cold_cpu[-1]:.2f} s CPU), "
                  f"import torch {torch_s[-1]:.2f} s ({torch_cpu[-1]:.2f} s CPU)", file=sys.stderr)
    c, t = statistics.median(cold_s), statistics.median(torch_s)
    paired = statistics.median(a / b for a, b in zip(cold_s, torch_s, strict=True))
    cpu = statistics.median(cold_cpu) / statistics.median(torch_cpu)
    print(f"photos={args.photos if args.index is None else 'given'} runs={args.runs} "
          f"python={sys.version.split()[0]} cpus={os.cpu_count()} load_average={load_average()}")
    print(f"cpu_ratio={cpu:.2f} paired_ratio={paired:.2f} (median of each run's ratio; CPU time is steadier on a "
          f"busy machine)")
    print(f"cold_s={c:.2f} torch_s={t:.2f} cold_ratio={c / t:.2f}")


if __name__ == "__main__":
    main()
