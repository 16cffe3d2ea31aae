"""Side-by-side metrics of finished runs (``imagent eval --compare RUN_A RUN_B``), and for two runs of the
same queries a paired per-query comparison: wins, losses, ties, two significance tests, per-query deltas and
bootstrap confidence intervals of each metric difference. :mod:`imagent.eval.compare_html` renders it as HTML.

Either side may be a *group*: a folder holding several finished runs of one method (with one scaffold profile), one
run per album or seed (``runs/photocraft/s1``, ``runs/photocraft/s2``, ...). A group's metrics are the means over
its runs (cost: per query over all of them); its queries are named ``<album>:<query id>`` (the album: the run's
images root, else its annotations), so two groups are paired query by query across all their albums and the tests
and intervals pool them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagent.eval.records import RunFolder


def load_run(run_dir: Path) -> dict[str, Any]:
    """A finished run's metrics.json, with its config.json under ``config`` and its id under ``run_id``."""
    folder = RunFolder(run_dir)
    data = folder.metrics()
    data["config"] = folder.config()
    data["run_id"] = folder.run_id()
    return data


def is_group(path: Path) -> bool:
    """Whether ``path`` is a folder of finished runs (no run of its own)."""
    path = Path(path)
    return (path.is_dir() and not RunFolder(path).metrics_path.is_file()
            and any(RunFolder(p).metrics_path.is_file() for p in path.iterdir() if p.is_dir()))


def album_key(data: dict[str, Any]) -> str:
    """What a run's queries were asked of: its images root, else its annotations, else its run id."""
    cfg = data.get("config") or {}
    where = cfg.get("images_root") or (cfg.get("images") or {}).get("root") or cfg.get("annotations")
    return str(where or data.get("run_id"))


def load_group(group_dir: Path) -> dict[str, Any]:
    """A folder of finished runs of one method as one run: the members' metrics averaged (each run counts once),
    seconds and model calls per query over all their queries, their per-query rows with ``<album>:`` before each
    query id. A :class:`~imagent.eval.records.RunError` when the runs are of different methods, benchmarks,
    splits or scaffold profiles, or two of them asked the same album."""
    from imagent.eval.records import RunError

    members = [(p, load_run(p)) for p in sorted(Path(group_dir).iterdir())
               if p.is_dir() and RunFolder(p).metrics_path.is_file()]
    first = members[0][1]
    for p, data in members[1:]:
        for key in ("method", "benchmark", "split", "scaffold"):
            if data.get(key) != first.get(key):
                raise RunError(f"{group_dir} mixes runs: {p.name} has {key}={data.get(key)!r}, {members[0][0].name} "
                               f"has {first.get(key)!r} (a group holds one method's runs, one per album)")
    keys = [album_key(d) for _, d in members]
    if len(set(keys)) < len(keys):
        raise RunError(f"{group_dir} holds two runs of one album ({sorted(k for k in keys if keys.count(k) > 1)[0]})")

    def mean_of(dicts: list[dict[str, Any]]) -> dict[str, float]:
        shared = [k for k in dicts[0] if all(isinstance(d.get(k), (int, float)) for d in dicts)]
        return {k: float(np.mean([d[k] for d in dicts])) for k in shared}

    runs = [d.get("run") or {} for _, d in members]
    queries = [int(r.get("queries_scored") or d.get("queries") or 0) for r, (_, d) in zip(runs, members, strict=True)]
    total = max(1, sum(queries))
    cost: dict[str, Any] = {"errors": sum(int(r.get("errors") or 0) for r in runs)}
    for k in ("seconds_per_query_mean", "model_calls_per_query"):
        if all(isinstance(r.get(k), (int, float)) for r in runs):
            cost[k] = sum(float(r[k]) * n for r, n in zip(runs, queries, strict=True)) / total
    per_query = []
    for key, (_, d) in zip(keys, members, strict=True):
        for row in d.get("per_query") or []:
            name = f"{key}:{row.get('query') or row.get('qid') or row.get('id')}"
            per_query.append({**row, **{k: name for k in ("query", "qid", "id") if k in row}, "qid": name})
    ids = [str(d.get("run_id")) for _, d in members]
    return {
        "benchmark": first.get("benchmark"), "split": first.get("split"), "method": first.get("method"),
        "scaffold": first.get("scaffold"), "queries": sum(int(d.get("queries") or 0) for _, d in members),
        "metrics": mean_of([d.get("metrics") or {} for _, d in members]),
        "behaviour": mean_of([d.get("behaviour") or {} for _, d in members]),
        "run": cost, "per_query": per_query, "config": {},
        "run_id": "group-" + "-".join(i[:6] for i in ids),
        "members": [{"run_dir": str(p), "run_id": d.get("run_id"), "album": k, "queries": d.get("queries"),
                     "metrics": d.get("metrics") or {}} for (p, d), k in zip(members, keys, strict=True)],
    }


def load_side(path: Path) -> dict[str, Any]:
    """One side of a comparison: a run (:func:`load_run`) or a group of runs (:func:`load_group`)."""
    return load_group(path) if is_group(path) else load_run(path)


def run_label(run_dir: Path, data: dict[str, Any], taken: set[str]) -> str:
    label = data.get("method") or Path(run_dir).name
    if data.get("method") and data.get("scaffold"):  # an album agent: its scaffold profile names the run too
        label = f"{label} (scaffold {data['scaffold']})"
    if label in taken:
        label = Path(run_dir).name
    taken.add(label)
    return label


def compare_runs(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """``{"runs": {label: {...}}, "rows": [{"metric", label: value, ..., "delta"?}], "warnings": [...]}``.

    Rows cover the final metrics, then each run's stages (``stage/<name>/<metric>``), then the fallback and error
    rates (``behaviour/...``: a run whose answers are more often fallbacks is not the better method), then cost.
    With two runs a ``delta`` (second minus first) is added."""
    runs = [(Path(d), load_side(Path(d))) for d in run_dirs]
    taken: set[str] = set()
    labels = [run_label(d, data, taken) for d, data in runs]
    warnings = []
    first = runs[0][1]
    for (d, data), label in zip(runs[1:], labels[1:], strict=True):
        for key in ("benchmark", "split", "queries"):
            if data.get(key) != first.get(key):
                warnings.append(f"{label} ({d}) has {key}={data.get(key)!r}, {labels[0]} has {first.get(key)!r}")
    columns: list[dict[str, float]] = []
    for _, data in runs:
        col = dict(data.get("metrics", {}))
        for stage, ms in (data.get("stages") or {}).items():
            col.update({f"stage/{stage}/{k}": v for k, v in ms.items()})
        b = data.get("behaviour") or {}
        if b.get("code_selected_share") is not None:  # who chose the answer sets, next to the metrics
            col["behaviour/code_selected_share"] = b["code_selected_share"]
        for k in ("fallback_rate", "error_rate"):  # whose numbers they are: compared as the metrics are
            if k in b:
                col[f"behaviour/{k}"] = b[k]
        run = data.get("run", {})
        for k in ("seconds_per_query_mean", "model_calls_per_query", "errors"):
            if k in run:
                col[f"cost/{k}"] = run[k]
        columns.append(col)
    keys: list[str] = []
    for col in columns:
        keys += [k for k in col if k not in keys]
    rows = []
    for k in keys:
        row: dict[str, Any] = {"metric": k}
        for label, col in zip(labels, columns, strict=True):
            row[label] = col.get(k)
        if len(columns) == 2 and all(isinstance(c.get(k), (int, float)) for c in columns):
            row["delta"] = columns[1][k] - columns[0][k]
        rows.append(row)
    out = {
        "runs": {label: {"run_dir": str(d), "run_id": data.get("run_id"), "benchmark": data.get("benchmark"),
                         "split": data.get("split"), "queries": data.get("queries"), "scaffold": data.get("scaffold"),
                         **({"members": data["members"]} if "members" in data else {})}
                 for (d, data), label in zip(runs, labels, strict=True)},
        "rows": rows,
        "warnings": warnings,
    }
    out["curves"] = {label: {"recall": (data.get("recall_curve") or {}).get("final") or {},
                             "sets": data.get("set_scores") or {}}
                     for (_, data), label in zip(runs, labels, strict=True)}
    groups = [{m["album"] for m in data["members"]} for _, data in runs if "members" in data]
    if len(groups) == 2 and groups[0] != groups[1]:
        warnings.append("the groups asked different albums: only in one of them "
                        + ", ".join(sorted(groups[0] ^ groups[1])))
    elif len(groups) == 1 and len(runs) == 2:
        warnings.append("one side is a group of runs and the other a single run: no query is paired")
    if len(runs) == 2:
        rows_a, rows_b = runs[0][1].get("per_query") or [], runs[1][1].get("per_query") or []
        paired = paired_comparison(rows_a, rows_b, labels)
        if paired is None:
            warnings.append("no per-query table shared by both runs (re-run `imagent eval` on an older run to "
                            "rebuild its report): no wins/losses or significance test")
        else:
            out["per_query"] = paired
            out["bootstrap"] = bootstrap_differences(rows_a, rows_b)
    return out


def per_query_scores(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each per-query metric a run's table allows, by query id (x100 where the benchmark reports percent):
    from the target rank, recall@1/5/10/50 (hit within the top K) and the reciprocal rank; a set-valued
    benchmark's own ``f1`` and ``em``. Failed queries are left out."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        qid = str(r.get("query") or r.get("qid") or r.get("id") or "")
        if not qid or r.get("error"):
            continue
        if "target_rank" in r:
            rank = r.get("target_rank")
            ok = isinstance(rank, (int, float)) and rank > 0
            for k in (1, 5, 10, 50):
                out.setdefault(f"recall@{k}", {})[qid] = 100.0 if ok and rank <= k else 0.0
            out.setdefault("reciprocal_rank", {})[qid] = 1.0 / float(rank) if ok else 0.0
        for col in ("f1", "em"):
            if isinstance(r.get(col), (int, float)):
                out.setdefault(col, {})[qid] = float(r[col])
    return out


def bootstrap_ci(diff: np.ndarray, resamples: int = 2000, seed: int = 0, level: float = 0.95
                 ) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of paired per-query differences (queries
    resampled with replacement, a fixed seed)."""
    if diff.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diff.size, size=(resamples, diff.size))
    means = diff[idx].mean(axis=1)
    lo, hi = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_differences(rows_a: Sequence[dict[str, Any]], rows_b: Sequence[dict[str, Any]],
                          resamples: int = 2000) -> list[dict[str, Any]]:
    """For every per-query metric both runs have (:func:`per_query_scores`), on the queries both answered: the
    two means, their difference (B - A) and its 95% paired bootstrap interval."""
    a, b = per_query_scores(rows_a), per_query_scores(rows_b)
    out = []
    for metric in [m for m in a if m in b]:
        common = [q for q in a[metric] if q in b[metric]]
        if not common:
            continue
        va = np.asarray([a[metric][q] for q in common], dtype=np.float64)
        vb = np.asarray([b[metric][q] for q in common], dtype=np.float64)
        lo, hi = bootstrap_ci(vb - va, resamples)
        out.append({"metric": metric, "queries": len(common), "mean_a": float(va.mean()), "mean_b": float(vb.mean()),
                    "difference": float((vb - va).mean()), "ci_low": lo, "ci_high": hi,
                    "excludes_zero": bool(lo > 0 or hi < 0)})
    return out


def compare_markdown(result: dict[str, Any]) -> str:
    """:func:`compare_runs`'s result as a Markdown report: the runs, the metrics side by side (with the delta
    for two runs), the paired per-query comparison, and the warnings."""
    labels = list(result["runs"])
    lines = ["# Comparison: " + " vs ".join(labels), ""]
    for label, info in result["runs"].items():
        scaffold = f", scaffold {info['scaffold']}" if info.get("scaffold") else ""
        if info.get("members"):
            lines.append(f"- {label}: the mean of {len(info['members'])} runs in `{info['run_dir']}` "
                         f"({info['benchmark']} {info['split']}, {info['queries']} queries{scaffold}):")
            lines += [f"  - run `{m['run_id']}` ({Path(m['run_dir']).name}) on `{m['album']}`, {m['queries']} queries"
                      for m in info["members"]]
            continue
        lines.append(f"- {label}: run `{info.get('run_id')}` in `{info['run_dir']}` ({info['benchmark']} "
                     f"{info['split']}, {info['queries']} queries{scaffold})")
    two = len(labels) == 2
    lines += ["", "| metric | " + " | ".join(labels) + (" | delta |" if two else " |"),
              "| --- |" + " ---: |" * (len(labels) + (1 if two else 0))]

    def cell(v: Any) -> str:
        return "" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    for row in result["rows"]:
        values = [cell(row.get(lab)) for lab in labels] + ([cell(row.get("delta"))] if two else [])
        lines.append(f"| {row['metric']} | " + " | ".join(values) + " |")
    pq = result.get("per_query")
    if pq:
        a, b = pq["labels"]
        significant = min(pq["sign_test_p"], pq["permutation_p"]) < 0.05
        lines += ["", "## Per query", "",
                  f"Score: {pq['score']}, on the {pq['queries']} queries both runs answered. {b} wins {pq['wins']}, "
                  f"loses {pq['losses']}, ties {pq['ties']} against {a}; mean {pq['mean_a']:.3f} -> "
                  f"{pq['mean_b']:.3f}.", "",
                  f"Paired tests of no difference: sign test p = {pq['sign_test_p']:.3g}, permutation test "
                  f"p = {pq['permutation_p']:.3g}" + ("." if significant else " (not significant at 0.05)."),
                  "", f"Wins (first 10): {', '.join(pq['examples']['wins']) or 'none'}",
                  "", f"Losses (first 10): {', '.join(pq['examples']['losses']) or 'none'}"]
    boot = result.get("bootstrap")
    if boot:
        a_lab, b_lab = labels
        lines += ["", f"## Differences {b_lab} - {a_lab} with 95% paired bootstrap intervals", "",
                  "| metric | queries | " + a_lab + " | " + b_lab + " | difference | 95% CI |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"]
        for r in boot:
            lines.append(f"| {r['metric']} | {r['queries']} | {r['mean_a']:.2f} | {r['mean_b']:.2f} | "
                         f"{r['difference']:+.2f} | [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"
                         + (" (excludes 0)" if r["excludes_zero"] else "") + " |")
    if result["warnings"]:
        lines += ["", "## Warnings", "", *[f"- {w}" for w in result["warnings"]]]
    return "\n".join(lines) + "\n"


def default_report_path(result: dict[str, Any]) -> Path:
    """Where ``--compare`` writes its report when not told: ``compare-<id A>-vs-<id B>.md`` beside the run
    folders (in the folder holding the first run), inside neither run, so it is never taken for one run's
    results and a rerun of either run cannot leave it describing other numbers."""
    runs = list(result["runs"].values())
    ids = [str(r.get("run_id") or Path(r["run_dir"]).name) for r in runs]
    safe = ["".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in i) for i in ids]
    return Path(runs[0]["run_dir"]).resolve().parent / f"compare-{'-vs-'.join(safe)}.md"


# Per-query scores for the paired comparison, by the per-query table's columns: the reciprocal rank of
# the first correct image (0 when it is not in the kept top-k), else a benchmark's own per-query metric.
_SCORE_COLUMNS = ("target_rank", "f1", "em")


def _query_scores(rows: Sequence[dict[str, Any]], column: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        qid = str(r.get("query") or r.get("qid") or r.get("id") or "")
        if not qid or r.get("error"):
            continue
        v = r.get(column)
        if column == "target_rank":
            out[qid] = 1.0 / float(v) if isinstance(v, (int, float)) and v > 0 else 0.0
        elif isinstance(v, (int, float)):
            out[qid] = float(v)
    return out


def paired_comparison(rows_a: Sequence[dict[str, Any]], rows_b: Sequence[dict[str, Any]], labels: list[str],
                      resamples: int = 10000) -> dict[str, Any] | None:
    """Per-query wins, losses and ties of run B against run A on the queries both answered, with two
    paired tests of "no difference": an exact two-sided sign test on wins vs losses, and a paired
    permutation test (random sign flips of the per-query differences; exact when there are at most
    16 non-zero differences) on the mean difference. None when the runs share no per-query column."""
    column = next((c for c in _SCORE_COLUMNS if any(c in r for r in rows_a) and any(c in r for r in rows_b)), None)
    if column is None:
        return None
    a, b = _query_scores(rows_a, column), _query_scores(rows_b, column)
    common = [q for q in a if q in b]
    if not common:
        return None
    diff = np.asarray([b[q] - a[q] for q in common], dtype=np.float64)
    wins = [q for q, d in zip(common, diff, strict=True) if d > 0]
    losses = [q for q, d in zip(common, diff, strict=True) if d < 0]
    label_a, label_b = labels
    score = "reciprocal rank of the first correct image" if column == "target_rank" else column
    return {
        "score": score,
        "queries": len(common),
        "mean_a": float(np.mean([a[q] for q in common])),
        "mean_b": float(np.mean([b[q] for q in common])),
        "mean_difference": float(diff.mean()),
        "wins": len(wins),  # queries where B (the second run) scores higher than A
        "losses": len(losses),
        "ties": len(common) - len(wins) - len(losses),
        "sign_test_p": sign_test(len(wins), len(losses)),
        "permutation_p": permutation_test(diff, resamples),
        "better": label_b if diff.mean() > 0 else label_a if diff.mean() < 0 else None,
        "examples": {"wins": wins[:10], "losses": losses[:10]},
        "deltas": sorted(({"query": q, "a": a[q], "b": b[q], "delta": float(d)}
                          for q, d in zip(common, diff, strict=True)), key=lambda r: (-r["delta"], r["query"])),
        "labels": [label_a, label_b],
    }


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided binomial sign test (ties left out): P of a split at least this uneven under p=1/2."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def permutation_test(diff: np.ndarray, resamples: int = 10000, seed: int = 0) -> float:
    """Two-sided paired permutation test of mean(diff) = 0: the share of sign flips whose |mean| is at
    least the observed one (exact enumeration for <= 16 non-zero differences; else ``resamples`` random
    flips with a fixed seed, counting the observed one, so p is never 0)."""
    d = diff[diff != 0]
    if d.size == 0:
        return 1.0
    observed = abs(d.mean()) - 1e-12
    if d.size <= 16:
        signs = ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1) * 2 - 1
        return float(np.mean(np.abs((signs * d).mean(axis=1)) >= observed))
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(resamples, d.size))
    hits = int(np.sum(np.abs((signs * d).mean(axis=1)) >= observed))
    return (hits + 1) / (resamples + 1)


__all__ = ["bootstrap_ci", "bootstrap_differences", "compare_runs", "load_run", "paired_comparison",
           "per_query_scores", "permutation_test", "sign_test"]
