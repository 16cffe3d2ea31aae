"""Turn a run's ``results.jsonl`` into ``metrics.json``, ``report.md``, the plots and server files.

Everything here reads only the run directory's records, so a report can be rebuilt at any time
(``imagent eval`` does it after each run, also when nothing new ran).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.trace import stage_of
from imagent.eval import metrics as M
from imagent.eval.behaviour import behaviour, own_items, record_source
from imagent.eval.datasets import Benchmark, EvalItem, Predictions
from imagent.eval.identity import run_scaffold
from imagent.eval.records import (
    METRICS,
    REPORT_MD,
    USAGE,
    RunRecord,
    predictions_from_results,
    stage_names,
    write_json_atomic,
    write_text_atomic,
)

CURVE_PNG = "recall_at_k.png"
TIME_PNG = "time_per_stage.png"
SETS_PNG = "set_scores.png"


# --------------------------------------------------------------------------- aggregation


def step_stats(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Per stage (trace steps with their numbered repeats aggregated, :func:`stage_of`): in how many queries it
    ran (``runs``), how many steps that was (``steps``), its seconds per query (mean, p50, p95; total) and what
    it cost (model calls not served from cache, cache hits, tool calls, tokens). Order: first seen."""
    keys = ("model_calls", "cached_calls", "tool_calls", "prompt_tokens", "completion_tokens")
    acc: dict[str, dict[str, Any]] = {}
    for rec in records:
        per_query: dict[str, float] = {}
        for step in rec.steps:
            name = stage_of(str(step["name"]))
            a = acc.setdefault(name, {"seconds": [], "steps": 0, **dict.fromkeys(keys, 0)})
            per_query[name] = per_query.get(name, 0.0) + float(step.get("seconds", 0.0))
            a["steps"] += 1
            for k in keys:
                a[k] += int(step.get(k, 0) or 0)
        for name, secs in per_query.items():
            acc[name]["seconds"].append(secs)
    out = []
    for name, a in acc.items():
        s = np.asarray(a["seconds"], dtype=np.float64)
        out.append({
            "step": name,
            "runs": int(s.size),
            "steps": a["steps"],
            "mean_s": float(s.mean()),
            "p50_s": float(np.percentile(s, 50)),
            "p95_s": float(np.percentile(s, 95)),
            "total_s": float(s.sum()),
            **{k: a[k] for k in keys},
        })
    return out


def run_stats(records: Sequence[RunRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    secs = np.asarray([float(r.seconds or 0.0) for r in ok], dtype=np.float64)
    calls = sum(int(r.model_calls or 0) for r in ok)
    cached = sum(int(s.get("cached_calls", 0) or 0) for r in ok for s in r.steps)
    counters: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    warnings: Counter[str] = Counter()  # the methods' start-of-search checks (Method.preflight)
    models: Counter[str] = Counter()  # every call by the model that answered it (computed or from the cache)
    for r in ok:  # notes and warnings counted once per query, however many steps repeat them
        counters.update(r.counters)
        models.update(str(c.get("model") or "?") for s in r.steps for c in s.get("calls", []) or [])
        notes.update({n for s in r.steps for n in s.get("notes", [])})
        warnings.update(set(r.warnings))
    return {
        "queries_scored": len(ok),
        "errors": len(records) - len(ok),
        "seconds_per_query_mean": float(secs.mean()) if secs.size else 0.0,
        "seconds_per_query_p50": float(np.percentile(secs, 50)) if secs.size else 0.0,
        "seconds_per_query_p95": float(np.percentile(secs, 95)) if secs.size else 0.0,
        "seconds_total": float(secs.sum()),
        "model_calls": calls,
        "model_calls_per_query": calls / len(ok) if ok else 0.0,
        "cached_calls": cached,
        "cache_hit_rate": cached / (cached + calls) if (cached + calls) else None,
        "counters": dict(counters),
        "calls_by_model": dict(models.most_common()),
        "notes": dict(notes.most_common(20)),
        "warnings": dict(warnings),
    }


def score_run(bench: Benchmark, items: Sequence[EvalItem], records: dict[str, RunRecord]
              ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Official metrics of the final ranking and of each named stage."""
    final = bench.metrics(predictions_from_results(records), items)
    stages = {s: bench.metrics(predictions_from_results(records, s), items) for s in stage_names(records.values())}
    return final, stages


# --------------------------------------------------------------------------- plots


def _figure(width: float = 6.4, height: float = 4.2) -> Any:
    # The object API with the Agg canvas: no global pyplot state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _margins(fig: Any, left_chars: int = 6, bottom_lines: int = 2) -> None:
    """Fixed margins for a plot whose y tick labels are at most ``left_chars`` characters wide (fontsize 8) and
    whose x tick labels take ``bottom_lines`` lines, instead of a layout pass (``tight_layout`` measured 40% of a
    plot's time, and the plots most of an eval run's report)."""
    width, height = fig.get_size_inches()
    char_in, line_in = 8 * 0.62 / 72, 8 * 1.3 / 72  # one character / line of 8-point text, in inches
    left = (0.45 + left_chars * char_in) / width
    bottom = (0.42 + bottom_lines * line_in) / height
    fig.subplots_adjust(left=min(left, 0.6), right=1 - 0.25 / width, bottom=min(bottom, 0.5), top=1 - 0.35 / height)


def plot_recall_curve(curves: dict[str, dict[int, float]], title: str, path: Path) -> None:
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    for label, curve in curves.items():
        ks = sorted(curve)
        ax.plot(ks, [curve[k] for k in ks], marker="." if len(ks) <= 60 else None, label=label)
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k (%)")
    ax.set_ylim(0, 100)
    ax.set_xscale("log")
    ticks = sorted({k for c in curves.values() for k in c})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(k) for k in ticks], fontsize=8)
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    if len(curves) > 1:
        ax.legend(fontsize=8)
    _margins(fig, left_chars=4, bottom_lines=1)
    fig.savefig(path, format="png")


def plot_set_scores(scores: dict[str, dict[str, float]], title: str, path: Path) -> None:
    """Grouped bars: set precision, recall and F1 (%) per query group, each group labelled with its n."""
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    groups = list(scores)
    x = np.arange(len(groups))
    for i, (key, color) in enumerate((("precision", "#4c72b0"), ("recall", "#55a868"), ("f1", "#c44e52"))):
        vals = [scores[g][key] for g in groups]
        bars = ax.bar(x + (i - 1) * 0.26, vals, width=0.26, label=f"set {key}" if key != "f1" else "set F1",
                      color=color)
        for b, v in zip(bars, vals, strict=True):
            ax.text(b.get_x() + b.get_width() / 2, v + 1, f"{v:.0f}", ha="center", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{g}\n(n={scores[g]['queries']})" for g in groups], fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.legend(fontsize=8)
    ax.set_title(title)
    _margins(fig, left_chars=4, bottom_lines=2)
    fig.savefig(path, format="png")


def plot_time_per_stage(steps: list[dict[str, Any]], title: str, path: Path) -> None:
    height = max(2.5, 0.45 * len(steps) + 1.5)
    fig = _figure(6.4, height)
    ax = fig.add_subplot(1, 1, 1)
    names = [s["step"] for s in steps] or ["(no steps)"]
    means = [s["mean_s"] for s in steps] or [0.0]
    y = np.arange(len(names))
    ax.barh(y, means, color="#4c72b0")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean seconds per query")
    for i, s in enumerate(steps):
        if s["model_calls"]:
            ax.text(means[i], i, f"  {s['model_calls'] / max(s['runs'], 1):.1f} calls", va="center", fontsize=7)
    ax.set_title(title)
    _margins(fig, left_chars=max(len(n) for n in names), bottom_lines=1)
    fig.savefig(path, format="png")


# --------------------------------------------------------------------------- markdown


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.2f}"
    return str(v)


def metrics_table(columns: dict[str, dict[str, float]]) -> str:
    """Markdown table: one row per metric key, one column per ranking (final, stages, runs)."""
    keys: list[str] = []
    for col in columns.values():
        for k in col:
            if k not in keys:
                keys.append(k)
    lines = ["| metric | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(_fmt(col.get(k)) for col in columns.values()) + " |")
    return "\n".join(lines)


def per_query_table(rows: list[dict[str, Any]], limit: int = 1000) -> str:
    """Markdown table of a benchmark's per-query rows (columns: the first row's keys, empty ones dropped);
    at most ``limit`` rows (all of them are in metrics.json)."""
    cols = [k for k in rows[0] if any(r.get(k) not in (None, "") for r in rows)]
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows[:limit]:
        lines.append("| " + " | ".join(_fmt(r.get(k)).replace("|", "\\|") for k in cols) + " |")
    if len(rows) > limit:
        lines.append(f"\n... {len(rows) - limit} more rows in metrics.json (`per_query`)")
    return "\n".join(lines)


def target_rank(ids: Sequence[str], positives: Sequence[str]) -> int | None:
    """1-based rank of the first correct image in a stored ranking; None when none is in it."""
    wanted = set(positives)
    return next((i for i, image_id in enumerate(ids, 1) if image_id in wanted), None)


def query_rows(items: Sequence[EvalItem], records: dict[str, RunRecord]) -> list[dict[str, Any]]:
    """The generic per-query table: the result's source (``method``, ``fallback:<name>``, ``error``), target rank
    (of the first positive in the kept top-k; "-" when it is
    not there or the split has no labels), model calls, seconds, fall-backs taken (trace counters whose
    name says fallback), the error of a failed query, the rank in each stored stage and the method's own
    summary (trace step outputs ``report_line``; a column is left out when no query has a value)."""
    rows = []
    for it in items:
        rec = records.get(it.id)
        if rec is None:
            continue
        counters = rec.counters
        rows.append({
            "query": it.id,
            "source": record_source(rec),
            "target_rank": target_rank(rec.ids, it.positives) if it.positives else None,
            "calls": int(rec.model_calls or 0),
            "seconds": float(rec.seconds or 0.0),
            "fallbacks": sum(int(v) for k, v in counters.items() if "fallback" in k),
            "error": rec.error,
            # The same rank in each stored stage (OSCAR: fused similarity, composed set before the verifier), so a
            # reader sees per query what a later stage moved; "-" when the target is outside that stage's top-k.
            "stage_ranks": " ".join(f"{s}={target_rank(ids, it.positives) or '-'}"
                                    for s, ids in rec.stages.items()) if it.positives else "",
            # A method's own one-line summary of the query (OSCAR: the plan, set sizes, the verifier's effect).
            "detail": " ".join(str(st["outputs"]["report_line"]) for st in rec.steps
                               if (st.get("outputs") or {}).get("report_line")),
        })
    return rows


def provenance() -> dict[str, Any]:
    """What produced a report: the git commit of the imagent checkout it ran from (with ``dirty`` when the
    tree had uncommitted changes), else only the package version; and the date."""
    import subprocess
    from datetime import UTC, datetime

    import imagent

    out: dict[str, Any] = {"version": imagent.__version__, "commit": None, "dirty": None,
                           "date": datetime.now(UTC).isoformat(timespec="seconds")}
    src = Path(imagent.__file__).resolve().parent
    if not any((p / ".git").exists() for p in [src, *src.parents]):
        return out
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0:
            out["commit"] = head.stdout.strip()
            status = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            out["dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass  # no git binary: the version alone identifies the code
    return out


def _provenance_line(p: dict[str, Any]) -> str:
    code = (f"commit `{p['commit'][:12]}`{' (uncommitted changes)' if p.get('dirty') else ''}, "
            if p.get("commit") else "")
    return f"- code: {code}imagent {p.get('version', '?')}; report written {p.get('date', '?')}"


def _behaviour_lines(b: dict[str, Any] | None) -> list[str]:
    """The headline line: how many answers are the method's own, fallbacks, errors."""
    if not b or not b.get("queries"):
        return []
    n = b["queries"]
    fallbacks = sum(v for k, v in b["sources"].items() if k.startswith("fallback:"))
    errors = b["sources"].get("error", 0)
    out = [f"- **fallback rate: {100 * b['fallback_rate']:.1f}%** ({fallbacks} of {n} queries answered by a fallback "
           f"path); errors: {100 * b['error_rate']:.1f}% ({errors}); the method's own answers: "
           f"{100 * b['method_rate']:.1f}%"]
    if b.get("code_selected_share") is not None:  # who chose the answer sets (decision 10)
        origins = b.get("answer_origins") or {}
        out.append(f"- **code-selected share: {100 * b['code_selected_share']:.1f}%** of the answer sets' photos "
                   "equal a list computed by code (clear matches, a trip's photos, a fallback's candidates); answers "
                   "by origin over " + f"{sum(origins.values())} queries: "
                   + ", ".join(f"{k} {v}" for k, v in origins.items()))
    return out


def _behaviour_section(b: dict[str, Any] | None) -> list[str]:
    """Sources, the reasons of fallbacks and errors, and the method's own counts summed over the run."""
    if not b or not b.get("queries"):
        return []
    out = ["", "## Behaviour", "", "| source | queries |", "| --- | ---: |"]
    out += [f"| {k} | {v} |" for k, v in b["sources"].items()]
    if b.get("fallback_reasons"):
        out += ["", "Fallbacks:", "", *[f"- {r} ({c})" for r, c in b["fallback_reasons"].items()]]
    if b.get("error_reasons"):
        out += ["", "Errors (model calls failed; scored as empty answers, retried by the next run):", "",
                *[f"- {r} ({c})" for r, c in b["error_reasons"].items()]]
    if b.get("counts"):
        out += ["", "The method's own counts (summed over the queries): "
                + ", ".join(f"{k}={v}" for k, v in b["counts"].items())]
    return out


def render_report(config: dict[str, Any], metrics: dict[str, Any], steps: list[dict[str, Any]],
                  files: dict[str, str]) -> str:
    method = config["method"]
    out = [
        f"# {method['name']} on {config['benchmark']} ({config['split']})",
        "",
        f"- queries: {metrics['queries']} ({metrics['completed']} completed, {metrics['errors']} failed, "
        f"{metrics['missing']} not run){' - limited run' if metrics.get('limited') else ''}",
        *_behaviour_lines(metrics.get("behaviour")),
        *([f"- scaffold: **{metrics['scaffold']}** (the album agents' one scaffold profile: none = the papers' "
           "protocol, small = imagent's aids for small models)"] if metrics.get("scaffold") else []),
        f"- top-k kept per query: {config['top_k']}",
        _provenance_line(metrics.get("provenance") or {}),
        f"- method parameters: `{method['params']}`",
        f"- models: roles `{config['settings'].get('roles')}`; dual encoder "
        f"`{config['settings'].get('dual_encoder', {}).get('model')}` "
        f"({config['settings'].get('dual_encoder', {}).get('backend')})",
        *[f"- {k}: {v}" for k, v in (metrics.get("benchmark_info") or {}).items()],
        *[f"- **warning**: {w} ({n} queries)" for w, n in (metrics["run"].get("warnings") or {}).items()],
        "",
        "## Metrics",
        "",
    ]
    if metrics["metrics"] or metrics["stages"]:
        columns = {"final": metrics["metrics"], **metrics["stages"]}
        own = metrics.get("metrics_own")
        if own is not None:
            columns[f"own answers (n={own['queries']})"] = own["metrics"]
        out.append(metrics_table(columns))
        out.append("")
        out.append("Percentages; computed as the benchmark's official evaluation code does (see imagent.eval.metrics).")
        if own is not None:
            out.append(f"`final` scores every query (a fallback answer as it is, an error as an empty answer); "
                       f"`own answers` scores only the {own['queries']} queries the method answered itself.")
    else:
        out.append("No ground truth for this split: see the server files below.")
    out += _behaviour_section(metrics.get("behaviour"))
    if metrics.get("per_query"):
        out += ["", "## Per query", "", per_query_table(metrics["per_query"])]
    run = metrics["run"]
    out += [
        "",
        "## Cost",
        "",
        f"- seconds per query: mean {run['seconds_per_query_mean']:.3f}, p50 {run['seconds_per_query_p50']:.3f}, "
        f"p95 {run['seconds_per_query_p95']:.3f} (total {run['seconds_total']:.1f})",
        f"- model calls: {run['model_calls']} ({run['model_calls_per_query']:.2f} per query), "
        f"cache hits {run['cached_calls']}"
        + (f" (hit rate {100 * run['cache_hit_rate']:.1f}%)" if run["cache_hit_rate"] is not None else ""),
        "",
        "Per stage (an agent's turns, numbered steps of a loop, count as one stage; seconds are per query):",
        "",
        "| stage | runs | steps | mean s | p50 s | p95 s | total s | model calls | cached | tool calls "
        "| tokens in/out |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in steps:
        out.append(
            f"| {s['step']} | {s['runs']} | {s.get('steps', s['runs'])} | {s['mean_s']:.3f} | {s['p50_s']:.3f} | "
            f"{s['p95_s']:.3f} | "
            f"{s['total_s']:.2f} | {s['model_calls']} | {s['cached_calls']} | {s['tool_calls']} | "
            f"{s['prompt_tokens']}/{s['completion_tokens']} |"
        )
    if metrics.get("subset_pass"):
        sp = metrics["subset_pass"]
        out += ["", f"Subset-mode pass (recall_subset): {sp['completed']} of {sp['queries']} runs completed, "
                    f"{sp['model_calls']} model calls (not in the table above)."]
    if run["counters"]:
        out += ["", "Counters: " + ", ".join(f"{k}={v}" for k, v in sorted(run["counters"].items()))]
    if run["notes"]:
        out += ["", "Most frequent trace notes:", ""]
        out += [f"- {n} ({c} queries)" for n, c in run["notes"].items()]
    out += ["", "## Plots", ""]
    if "recall_curve" in files:
        out.append(f"![recall at k]({CURVE_PNG})")
    if "set_scores" in files:
        sets = metrics.get("set_scores") or {}
        out.append("Set precision, recall and F1 of the answered sets (queries per group: "
                   + ", ".join(f"{g} {v['queries']}" for g, v in sets.items()) + "):")
        out.append("")
        out.append(f"![set precision, recall, F1]({SETS_PNG})")
    out.append(f"![time per stage]({TIME_PNG})")
    subs = [v for k, v in files.items() if k.startswith("submission:")]
    if subs:
        out += ["", "## Server files", ""] + [f"- `{s}`" for s in subs]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- everything


def write_outputs(run_dir: Path, bench: Benchmark, split: str, items: Sequence[EvalItem],
                  records: Mapping[str, RunRecord | dict[str, Any]], config: dict[str, Any], top_k: int,
                  split_size: int | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Write metrics.json, the plots, report.md and server files; return (metrics.json content, files).

    ``records`` are :class:`RunRecord` s, or their ``results.jsonl`` dicts (read as records)."""
    records = {q: r if isinstance(r, RunRecord) else RunRecord.from_dict(r) for q, r in records.items()}
    ids = {it.id for it in items}
    recs = {q: r for q, r in records.items() if q in ids}
    # Companion runs (CIRR subset mode) are scored through the predictions, not counted as queries.
    companions = {it.id for it in bench.subset_items(items)}
    scored = {q: r for q, r in records.items() if q in ids or q in companions}
    final, stages = score_run(bench, items, scored)
    completed = sum(1 for r in recs.values() if r.ok)
    errors = sum(1 for r in recs.values() if not r.ok)
    ordered = [recs[it.id] for it in items if it.id in recs]
    steps = step_stats([r for r in ordered if r.ok])
    dup = sum(1 for r in ordered if M.duplicate_count(r.ids))
    metrics: dict[str, Any] = {
        "benchmark": bench.name,
        "split": split,
        "method": config["method"]["name"],
        "queries": len(items),
        "completed": completed,
        "errors": errors,
        "missing": len(items) - completed - errors,
        "limited": split_size is not None and len(items) < split_size,
        "metrics": final,
        "stages": stages,
        "run": run_stats(ordered),
        "rankings_with_duplicates": dup,
        "behaviour": behaviour(ordered),
    }
    scaffold = run_scaffold(config)
    if scaffold is not None:
        metrics["scaffold"] = scaffold
    own = own_items(items, recs)
    if final and len(own) < len(items):  # the headline numbers include fallbacks or errors: show the own ones too
        metrics["metrics_own"] = {"queries": len(own), "metrics": bench.metrics(predictions_from_results(scored), own)
                                  if own else {}}
    if companions:
        extra = [r for q, r in scored.items() if q in companions]
        metrics["subset_pass"] = {"queries": len(companions), "completed": sum(r.ok for r in extra),
                                  "model_calls": sum(int(r.model_calls or 0) for r in extra)}
    usage_path = run_dir / USAGE
    usage = json.loads(usage_path.read_text(encoding="utf-8")) if usage_path.is_file() else None
    info = bench.describe_run(usage)
    if info:
        metrics["benchmark_info"] = info
    per_query = bench.query_table(items, recs) or query_rows(items, recs)
    if per_query:
        metrics["per_query"] = per_query
    metrics["provenance"] = provenance()
    files: dict[str, str] = {}
    # Plots
    kmax = max(1, top_k)
    ks = sorted({k for k in (1, 2, 3, 5, 10, 20, 25, 50, 100) if k <= kmax} | {kmax})
    preds = predictions_from_results(recs)
    n_scored = sum(1 for it in items if it.positives and it.id in recs and recs[it.id].ok)
    title = f"{config['method']['name']} on {bench.name} {split}"
    set_scores = bench.set_scores(preds, items)
    if set_scores is not None:  # a set-valued benchmark: set precision / recall / F1, not recall@k
        metrics["set_scores"] = set_scores
        if set_scores:
            plot_set_scores(set_scores, f"{title}: answered sets", run_dir / SETS_PNG)
            files["set_scores"] = str(run_dir / SETS_PNG)
    elif any(it.positives for it in items):
        curves = {"final": _curve(bench, preds, items, ks)}
        for s in stages:
            curves[s] = _curve(bench, predictions_from_results(recs, s), items, ks)
        metrics["recall_curve"] = {name: {str(k): v for k, v in c.items()} for name, c in curves.items()}
        plot_recall_curve(curves, f"{title} (n={n_scored} queries)", run_dir / CURVE_PNG)
        files["recall_curve"] = str(run_dir / CURVE_PNG)
    plot_time_per_stage(steps, f"{title}: time per step (n={completed} queries)", run_dir / TIME_PNG)
    files["time_per_stage"] = str(run_dir / TIME_PNG)
    metrics["steps"] = steps
    # Server files
    from imagent.eval.submission import write_submissions

    for path in write_submissions(run_dir / "submissions", bench, split, predictions_from_results(scored), items):
        files[f"submission:{path.name}"] = str(path)
    write_json_atomic(run_dir / METRICS, metrics)
    files["metrics"] = str(run_dir / METRICS)
    write_text_atomic(run_dir / REPORT_MD, render_report(config, metrics, steps, files))
    files["report"] = str(run_dir / REPORT_MD)
    return metrics, files


def _curve(bench: Benchmark, preds: Predictions, items: Sequence[EvalItem], ks: list[int]) -> dict[int, float]:
    c = bench.curve(preds, items, ks)
    return {k: c[f"recall@{k}"] for k in ks}


__all__ = ["metrics_table", "provenance", "query_rows", "render_report", "run_stats", "score_run", "step_stats",
           "target_rank", "write_outputs"]
