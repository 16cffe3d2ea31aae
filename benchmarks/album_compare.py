"""The album methods on generated albums nobody tuned on, with captions and pixels only, over planner models and
seeds: ``album`` (imagent's own) and, on request, PhotoCraft and ImageSeeker (both scaffold profiles), compared with
``imagent eval --compare`` (paired, pooled over the seeds).

Generates one album per seed with ``benchmarks/holdout_album.py`` (every question in three wordings), and its
pixels-only twin (the same photos, dates, places and questions without the captions sidecar; indexed with the pixel
model as the image encoder, ``dual_encoder.backend = effnet-lite0``, so its search sees only what the ImageNet
classifier saw: labels and ConSE vectors). Runs each configuration on each album with ``imagent eval disbench``
exactly as a user would (one run folder per configuration and seed, ``OUT/runs/<config>/s<seed>``; an interrupted
run resumes), then prints per configuration

    album_compare config=<name> planner=<model> seeds=<n> queries=<n> questions=<n> f1=<mean over seeds>
                  worst_wording_f1=<mean of each question's worst wording> em=<..> calls=<per query>
                  prompt_tokens=<per query> completion_tokens=<per query> median_s=<median seconds a query>
                  code_share=<share of answers equal to a code-computed list>

and per comparison (``imagent eval --compare OUT/runs/A OUT/runs/B``: each side the mean over its seeds, queries
paired album by album, a paired 95% bootstrap interval of the F1 difference)

    album_compare diff=<B>-<A> queries=<n> f1=<difference> ci=[<low>,<high>] wins=<n> losses=<n> sign_p=<p>

A configuration is ``method[:scaffold][@planner][+pixels]``: ``planner`` ``0.5b`` (Qwen2.5 0.5B, the offline
default model) or ``1.5b`` (Qwen2.5-Coder 1.5B, ``imagent models use offline-1.5b``; ``album`` plans with the
model named, ``planner_model=role``); ``+pixels`` runs the pixels-only
album. A fresh call cache under ``OUT/cache`` (every model call computed; the assembled GGUFs are linked in), and
one of their own under ``OUT/cache-pixels`` for the pixels-only twins (they ask the same questions: shared, their
calls would be served from the cache and their seconds would not count the model); one llama.cpp process of
``--threads`` threads per run, ``--jobs`` runs at once. ``calls`` counts every call a method made, the tokens those
calls read and wrote; ``median_s`` is honest only for calls computed in this folder's caches. ``--limit`` takes a
stratified sample of each album's questions, every wording of each (the same for every configuration): the album
agents take minutes a query.

    python benchmarks/album_compare.py OUT [--seeds 4101,4102,4103] [--limit 0] [--jobs 1] [--threads 2]
        [--configs album@0.5b,album@1.5b,album@0.5b+pixels,album@1.5b+pixels]

Measured: see docs/album.md ("Numbers") and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLANNERS = {"0.5b": "offline:qwen2.5-0.5b-instruct", "1.5b": "offline:qwen2.5-coder-1.5b-instruct"}
DEFAULT_CONFIGS = "album@0.5b,album@1.5b,album@0.5b+pixels,album@1.5b+pixels"
REPORT_SEEDS = "4101,4102,4103"


def parse_config(config: str) -> tuple[str, str, str, bool]:
    """``method[:scaffold][@planner][+pixels]`` -> (method, scaffold, planner model, pixels only)."""
    rest, pixels = (config[: -len("+pixels")], True) if config.endswith("+pixels") else (config, False)
    rest, _, planner = rest.partition("@")
    method, _, scaffold = rest.partition(":")
    planner = planner or "0.5b"
    if planner not in PLANNERS:
        raise SystemExit(f"unknown planner {planner!r} in {config!r}: one of {', '.join(PLANNERS)}")
    return method, scaffold, PLANNERS[planner], pixels


def folder_name(config: str) -> str:
    return config.replace(":", "-").replace("@", "_").replace("+", "-")


def environment(out: Path, cache_name: str = "cache") -> dict[str, str]:
    """The runs' environment: their own data and call cache folders (the assembled GGUFs linked in)."""
    from imagent.core.config import load_settings

    cache = out / cache_name
    cache.mkdir(parents=True, exist_ok=True)
    models = Path(load_settings().cache_dir).expanduser() / "models"
    models.mkdir(parents=True, exist_ok=True)
    if not (cache / "models").exists():
        (cache / "models").symlink_to(models, target_is_directory=True)
    return {**os.environ, "IMAGENT_DATA_DIR": str(out / "data"), "IMAGENT_CACHE_DIR": str(cache),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def imagent(*args: str) -> list[str]:
    return [sys.executable, "-m", "imagent.cli.main", *args]


def pixels_twin(album: Path) -> Path:
    """The album without its captions sidecar (photos, metadata and questions linked): pixels only."""
    twin = album.with_name(album.name + "-pixels")
    if not (twin / "queries.jsonl").exists():
        twin.mkdir(parents=True, exist_ok=True)
        for part in ("images", "metadata", "queries.jsonl", "COPYRIGHT"):
            if (album / part).exists() and not (twin / part).exists():
                (twin / part).symlink_to((album / part).resolve())
    return twin


def run_one(config: str, album: Path, run_dir: Path, index: Path, limit: int, threads: int, sets: list[str],
            env: dict[str, str]) -> int:
    method, scaffold, planner, pixels = parse_config(config)
    cmd = imagent("eval", "disbench", "--images-root", str(album), "--method", method, "--run-dir", str(run_dir),
                  "--index", str(index), "--set", f"models.offline.n_threads={threads}",
                  "--set", f"models.offline.model={planner}")
    if method == "album":  # the planner named, not the offline default's own choice (planner_model)
        cmd += ["--set", "planner_model=role"]
    if pixels:  # the pixel model as the image encoder: what the classifier saw is the search space
        cmd += ["--set", "dual_encoder.backend=effnet-lite0"]
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


def summary(config: str, runs: list[Path]) -> str:
    """One configuration's line: means over its seeds, per-query medians over all its queries."""
    metrics = [json.loads((r / "metrics.json").read_text()) for r in runs]
    records = [json.loads(line) for r in runs for line in (r / "results.jsonl").read_text().splitlines() if line]
    n = sum(m["queries"] for m in metrics)

    def mean(key: str) -> float:
        return sum(m["metrics"].get(key, 0.0) for m in metrics) / len(metrics)

    # every call the method made (served by the call cache or not: a resumed or repeated run has cached ones)
    calls = sum(m["run"].get("model_calls", 0) + m["run"].get("cached_calls", 0) for m in metrics) / max(1, n)
    made = [c for r in records for s in (r.get("trace") or {}).get("steps", []) for c in s.get("calls", [])]
    prompt = sum(int(c.get("prompt_tokens") or 0) for c in made) / max(1, n)
    completion = sum(int(c.get("completion_tokens") or 0) for c in made) / max(1, n)
    secs = statistics.median(float(r.get("seconds") or 0.0) for r in records) if records else 0.0
    share = [m.get("behaviour", {}).get("code_selected_share") for m in metrics]
    share_text = f"{sum(share) / len(share):.2f}" if all(isinstance(x, (int, float)) for x in share) else "n/a"
    models = {c.get("model") for c in made}
    planner = ",".join(sorted(m for m in models if m)) or parse_config(config)[2]
    questions = sum(int(m["metrics"].get("wording/questions", 0)) for m in metrics)
    return (f"album_compare config={config} planner={planner} seeds={len(runs)} queries={n} questions={questions} "
            f"f1={mean('overall/f1'):.1f} worst_wording_f1={mean('wording/f1_worst'):.1f} em={mean('overall/em'):.1f} "
            f"calls={calls:.2f} prompt_tokens={prompt:.0f} completion_tokens={completion:.0f} median_s={secs:.1f} "
            f"code_share={share_text}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="work folder: albums/, runs/, compare/, cache/, index/")
    ap.add_argument("--seeds", default=REPORT_SEEDS, help="album seeds (default: report seeds never looked at)")
    ap.add_argument("--limit", type=int, default=0, help="queries per album (stratified; 0: all)")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="method[:scaffold][@planner][+pixels] list")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads a run")
    ap.add_argument("--stamps", type=Path, default=None, help="stamps folder for holdout_album.py")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config key=value for every run")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in configs:
        parse_config(c)
    env = environment(out)
    # the pixels-only twins ask the same questions: a call cache of their own, so their seconds are computed too
    env_pixels = environment(out, "cache-pixels")
    albums = {}
    for seed in seeds:
        album = out / "albums" / f"s{seed}"
        if not (album / "queries.jsonl").is_file():
            shutil.rmtree(album, ignore_errors=True)
            cmd = [sys.executable, str(HERE / "holdout_album.py"), str(album), "--seed", str(seed)]
            if args.stamps:
                cmd += ["--stamps", str(args.stamps)]
            subprocess.run(cmd, check=True, env=env)
        albums[seed] = album
    jobs = []
    for c in configs:
        pixels = parse_config(c)[3]
        for s in seeds:
            album = pixels_twin(albums[s]) if pixels else albums[s]
            jobs.append((c, album, out / "runs" / folder_name(c) / f"s{s}", out / "index" / album.name,
                         env_pixels if pixels else env))
    # Runs over one index one after another (it is built by the first); other runs at once, up to --jobs.
    by_index: dict[Path, list[tuple]] = {}
    for j in jobs:
        by_index.setdefault(j[3], []).append(j)

    def lane(js: list[tuple]) -> list[int]:
        return [run_one(*j[:4], args.limit, args.threads, args.sets, j[4]) for j in js]

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        codes = [c for cs in pool.map(lane, by_index.values()) for c in cs]
    ordered = [j for js in by_index.values() for j in js]
    failed = [str(j[2]) for j, code in zip(ordered, codes, strict=True) if code != 0]
    if failed:
        raise SystemExit(f"runs failed (their .log beside them): {', '.join(failed)}")
    (out / "compare").mkdir(exist_ok=True)
    for config in configs:
        print(summary(config, [out / "runs" / folder_name(config) / f"s{s}" for s in seeds]), flush=True)
    for a in configs:
        for b in configs[configs.index(a) + 1:]:
            if parse_config(a)[3] != parse_config(b)[3]:
                continue  # captions and pixels only are different albums: not paired
            result = compare(out / "runs" / folder_name(a), out / "runs" / folder_name(b), env,
                             out / "compare" / f"{folder_name(b)}-vs-{folder_name(a)}.md")
            f1 = next(r for r in result["bootstrap"] if r["metric"] == "f1")
            pq = result["per_query"]
            print(f"album_compare diff={b}-{a} queries={f1['queries']} f1={f1['difference']:+.1f} "
                  f"ci=[{f1['ci_low']:+.1f},{f1['ci_high']:+.1f}] wins={pq['wins']} losses={pq['losses']} "
                  f"sign_p={pq['sign_test_p']:.3g}", flush=True)


if __name__ == "__main__":
    main()
