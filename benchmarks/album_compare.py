"""The album methods on generated albums nobody tuned on: ``album``, PhotoCraft and ImageSeeker (both scaffold
profiles) over several seeds, compared with ``imagent eval --compare`` (paired, pooled over the seeds).

Generates one album per seed with ``benchmarks/holdout_album.py`` (report seeds by default: never run while
developing), runs each configuration on each album with ``imagent eval disbench`` exactly as a user would (one run
folder per configuration and seed, ``OUT/runs/<config>/s<seed>``; an interrupted run resumes), then compares the
run folders configuration against configuration (``imagent eval --compare OUT/runs/A OUT/runs/B``: each side the
mean over its seeds, queries paired album by album, a paired 95% bootstrap interval of the F1 difference), and
prints per configuration and per comparison a line

    album_compare config=<name> seeds=<n> queries=<n> f1=<mean over seeds> em=<..> calls=<per query> s=<per query>
                  code_share=<share of answers equal to a code-computed list>
    album_compare diff=<B>-<A> queries=<n> f1=<difference> ci=[<low>,<high>] wins=<n> losses=<n> sign_p=<p>

The album agents take minutes a query with the offline 0.5B on 2 cores; ``--limit`` takes a stratified sample of
each album's queries (the same queries for every configuration). A fresh call cache under ``OUT/cache`` (every
model call computed; the assembled GGUFs are linked in), one llama.cpp thread per run, ``--jobs`` runs at once.
``calls`` counts every call a method made; ``s`` is honest only for calls computed in this folder's cache (a query
whose calls were cached by an earlier run takes well under a second).

    python benchmarks/album_compare.py OUT [--seeds 2101,2102,2103] [--limit 4] [--jobs 2]
        [--configs album,photocraft:small,photocraft:none,imageseeker:small,imageseeker:none]

Measured 2026-11-28 on the project's 2-core machine (two runs at once): see docs/benchmarks.md, "The album methods
on generated albums".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIGS = "album,photocraft:small,photocraft:none,imageseeker:small,imageseeker:none"
# (A, B) pairs compared: the agents against album, then PhotoCraft against ImageSeeker under each profile
PAIRS = [("photocraft:small", "album"), ("photocraft:none", "album"), ("imageseeker:small", "album"),
         ("imageseeker:none", "album"), ("imageseeker:small", "photocraft:small"),
         ("imageseeker:none", "photocraft:none")]


def folder_name(config: str) -> str:
    return config.replace(":", "-")


def environment(out: Path) -> dict[str, str]:
    """The runs' environment: their own data and call cache folders (the assembled GGUFs linked in)."""
    from imagent.core.config import load_settings

    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    models = Path(load_settings().cache_dir).expanduser() / "models"
    models.mkdir(parents=True, exist_ok=True)
    if not (cache / "models").exists():
        (cache / "models").symlink_to(models, target_is_directory=True)
    return {**os.environ, "IMAGENT_DATA_DIR": str(out / "data"), "IMAGENT_CACHE_DIR": str(cache),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def imagent(*args: str) -> list[str]:
    return [sys.executable, "-m", "imagent.cli.main", *args]


def run_one(config: str, album: Path, run_dir: Path, limit: int, sets: list[str], env: dict[str, str]) -> int:
    method, _, scaffold = config.partition(":")
    cmd = imagent("eval", "disbench", "--images-root", str(album), "--method", method, "--run-dir", str(run_dir),
                  "--set", "models.offline.n_threads=1")
    if limit:
        cmd += ["--limit", str(limit)]
    if scaffold:
        cmd += ["--set", f"scaffold={scaffold}"]
    for s in sets:
        cmd += ["--set", s]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.log", "w", encoding="utf-8") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    print(f"ran {config} on {album.name}: exit {done.returncode} -> {run_dir}", flush=True)
    return done.returncode


def compare(a: Path, b: Path, env: dict[str, str], report: Path) -> dict:
    done = subprocess.run(imagent("eval", "--compare", str(a), str(b), "--compare-report", str(report), "--json"),
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="work folder: albums/, runs/, compare/, cache/")
    ap.add_argument("--seeds", default="2101,2102,2103", help="album seeds (default: the report seeds)")
    ap.add_argument("--limit", type=int, default=4, help="queries per album (stratified; 0: all 21)")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="method[:scaffold] list")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once")
    ap.add_argument("--stamps", type=Path, default=None, help="stamps folder for holdout_album.py")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config key=value for every run")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    env = environment(out)
    albums = {}
    for seed in seeds:
        album = out / "albums" / f"s{seed}"
        if not (album / "queries.jsonl").is_file():
            cmd = [sys.executable, str(HERE / "holdout_album.py"), str(album), "--seed", str(seed)]
            if args.stamps:
                cmd += ["--stamps", str(args.stamps)]
            subprocess.run(cmd, check=True, env=env)
        albums[seed] = album
    jobs = [(c, albums[s], out / "runs" / folder_name(c) / f"s{s}") for c in configs for s in seeds]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        codes = list(pool.map(lambda j: run_one(*j, args.limit, args.sets, env), jobs))
    failed = [str(j[2]) for j, code in zip(jobs, codes, strict=True) if code != 0]
    if failed:
        raise SystemExit(f"runs failed (their .log beside them): {', '.join(failed)}")
    (out / "compare").mkdir(exist_ok=True)
    for config in configs:
        metrics = [json.loads((out / "runs" / folder_name(config) / f"s{s}" / "metrics.json").read_text())
                   for s in seeds]
        n = sum(m["queries"] for m in metrics)
        f1, em = (sum(m["metrics"].get(k, 0.0) for m in metrics) / len(metrics) for k in ("overall/f1", "overall/em"))
        # every call the method made (served by the call cache or not: a resumed or repeated run has cached ones)
        calls = sum(m["run"].get("model_calls", 0) + m["run"].get("cached_calls", 0) for m in metrics) / max(1, n)
        secs = sum(m["run"]["seconds_per_query_mean"] * m["queries"] for m in metrics) / max(1, n)
        share = [m.get("behaviour", {}).get("code_selected_share") for m in metrics]
        share_text = f"{sum(share) / len(share):.2f}" if all(isinstance(x, (int, float)) for x in share) else "n/a"
        print(f"album_compare config={config} seeds={len(seeds)} queries={n} f1={f1:.1f} em={em:.1f} "
              f"calls={calls:.2f} s={secs:.1f} code_share={share_text}", flush=True)
    for a, b in PAIRS:
        if a not in configs or b not in configs:
            continue
        result = compare(out / "runs" / folder_name(a), out / "runs" / folder_name(b), env,
                         out / "compare" / f"{folder_name(b)}-vs-{folder_name(a)}.md")
        f1 = next(r for r in result["bootstrap"] if r["metric"] == "f1")
        pq = result["per_query"]
        print(f"album_compare diff={b}-{a} queries={f1['queries']} f1={f1['difference']:+.1f} "
              f"ci=[{f1['ci_low']:+.1f},{f1['ci_high']:+.1f}] wins={pq['wins']} losses={pq['losses']} "
              f"sign_p={pq['sign_test_p']:.3g}", flush=True)


if __name__ == "__main__":
    main()
