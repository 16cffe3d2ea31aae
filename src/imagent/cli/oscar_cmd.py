"""``imagent oscar``: OSCAR's offline side from the command line.

- ``imagent oscar solve INSTANCE.json [--json]``: both MIPs on one instance file (issue 14's format), so
  golden trajectories can be inspected and debugged; weights default to ``methods.oscar.*``.
- ``imagent oscar build-library BENCH --split S [--fraction F] [--library PATH]``: atomic retrievals and both
  MIPs on a benchmark's training queries, appended to the golden library (resumable, with a progress bar).
- ``imagent oscar library [PATH] [--show KEY]``: list the entries, or show one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from imagent.cli.common import (
    ConfigOpt,
    JsonOpt,
    SetOpt,
    console,
    err_console,
    progress_bar,
    route_sets,
    user_errors,
    workspace,
)

app = typer.Typer(help="OSCAR offline: solve MIP instances, build and inspect the golden library.",
                        no_args_is_help=True)

LibraryOpt = Annotated[Path | None, typer.Option("--library", "-l", help="golden library file (JSONL; default: "
                                                 "methods.oscar.library, else <data dir>/oscar/library.jsonl)")]


def _oscar_config(ws: Any) -> Any:
    from imagent.eval.oscar_library import oscar_config

    return oscar_config(ws)


@app.command("solve")
@user_errors
def solve(
    instance: Annotated[Path, typer.Argument(help="instance JSON: gallery, positives, retrievals, weights?")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Solve both MIPs of one instance and print the plan (stage 1 selection, stage 2 composition, final set)."""
    from imagent.tools.oscar_mip import read_instance_file, solve_document

    ws = workspace(config, set_, "oscar")
    cfg = _oscar_config(ws)
    inst, plan = solve_document(read_instance_file(instance), cfg.weights(), cfg.mip_time_limit_s)
    for stage in (plan.stage1, plan.stage2):
        if not stage.optimal:
            err_console.print("[yellow]warning:[/] the time limit stopped HiGHS before it proved optimality")
    if json_out:
        sys.stdout.write(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False) + "\n")
        return
    _print_plan(inst, plan)

def _print_plan(inst: Any, plan: Any) -> None:
    w = inst.weights
    console.print(f"[bold]instance[/]: {len(inst.gallery)} images, {len(inst.positives)} positives, "
                  f"{len(inst.retrievals)} retrievals; weights w_R={w.w_R} w_P={w.w_P} "
                  f"lambda_div={w.lambda_div if w.lambda_div is not None else f'{inst.lambda_div:.3g} (tie-break)'}"
                  " "
                  f"lambda_fp={w.lambda_fp}")
    by_id = {r.id: r for r in inst.retrievals}
    pos = set(inst.positives)

    def table(title: str, ids: list[str]) -> Table:
        t = Table(title=title, title_justify="left")
        for col in ("id", "tool", "polarity", "k", "query", "|S|", "positives in S"):
            t.add_column(col, overflow="fold")
        for i in ids:
            r = by_id[i]
            t.add_row(r.id, r.tool, r.polarity, str(r.k), r.query, str(len(r.items)),
                      str(len(set(r.items) & pos)))
        return t

    s1, s2 = plan.stage1, plan.stage2
    console.print(table(f"stage I: {len(s1.selected)} selected, objective {s1.objective:.6g} "
                        f"({s1.covered_positives} positives and {s1.covered_negatives} others covered, "
                        f"tools {', '.join(s1.tools) or 'none'})", s1.selected))
    console.print(table(f"stage II positives (UNION): |union| = {s2.union}", s2.positive))
    console.print(table(f"stage II negatives (INTERSECT, then DIFFERENCE removed {s2.removed})", s2.negative))
    console.print(f"stage II objective {s2.objective:.6g} over |U| = {s2.universe}: {s2.kept_positives} "
                  f"positives and {s2.kept_negatives} others kept")
    console.print(f"[bold]final[/] ({len(plan.final)}): {', '.join(plan.final) or '(empty)'}")

@app.command("build-library")
@user_errors
def build_library_cmd(
    benchmark: Annotated[str, typer.Argument(help="benchmark with ground truth (stamps, cirr, circo, fashioniq)")],
    split: Annotated[str, typer.Option(help="the split to learn from (stamps, cirr: train; circo: val; "
                                       "fashioniq: a category or all, with --set "
                                       "fashioniq.annotation_split=train)")] = "train",
    fraction: Annotated[float, typer.Option(help="share of the split's queries used (paper: 0.1 of CIRR "
                                            "and FashionIQ train)", min=0.0, max=1.0)] = 1.0,
    seed: Annotated[int, typer.Option(help="seed of the --fraction sample")] = 0,
    limit: Annotated[int | None, typer.Option(help="at most N queries (after --fraction)", min=1)] = None,
    library: LibraryOpt = None,
    annotations: Annotated[Path | None, typer.Option("--annotations", "-a", help="annotation file or "
                                                     "folder")] = None,
    images_root: Annotated[Path | None, typer.Option("--images-root", help="the benchmark's images")] = None,
    index_dir: Annotated[Path | None, typer.Option("--index", "-i", help="gallery index to build once and "
                                                   "share (default: beside the library)")] = None,
    allow_missing: Annotated[bool, typer.Option(help="index the images found, skip the rest")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run atomic retrievals and both MIPs on training queries; append each optimal trajectory."""
    from imagent.eval.datasets import load_benchmark
    from imagent.eval.oscar_library import build_benchmark_library, training_items

    options, settings_sets = route_sets(set_, benchmark, "oscar")
    ws = workspace(config, settings_sets)
    path = library or _oscar_config(ws).library_path()
    bench = load_benchmark(benchmark, annotations, images_root, **options)
    split = bench.check_split(split)
    items = training_items(bench, split, fraction, seed, limit)
    with progress_bar() as bar:
        tasks: dict[str, Any] = {}

        def on_progress(phase: str, done: int, total: int, label: str) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task("indexing" if phase != "trajectories" else phase,
                                            total=total or None, item="")
            bar.update(tasks[phase], completed=done, total=total or None, item=str(label)[-40:])

        built = build_benchmark_library(ws, bench, split, path, items, images_root=images_root,
                                        index_dir=index_dir, allow_missing=allow_missing,
                                        progress=on_progress)
    report, summary = built.report, built.summary()
    if json_out:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
        return
    console.print(f"[bold]{path}[/]: {report.added} added ({report.non_optimal} not proved optimal, "
                  f"{report.rewriter_failed} with the rewriter failed), {report.already} already there, "
                  f"{report.no_target} without a reachable target, {len(report.errors)} failed "
                  f"({report.seconds:.1f} s, MIPs {report.mip_seconds:.2f} s); {summary['entries']} entries")
    for key, err in report.errors[:10]:
        err_console.print(f"[red]failed[/] {key}: {err}", highlight=False)

@app.command("library")
@user_errors
def library_cmd(
    path: Annotated[Path | None, typer.Argument(help="library file (default: as build-library)")] = None,
    show: Annotated[str | None, typer.Option("--show", help="print one entry in full (its key)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List the golden library's entries (key, modification, calls, set operations, objectives), or show one."""
    from imagent.methods.oscar.library import GoldenLibrary

    ws = workspace(config, set_, "oscar")
    lib = GoldenLibrary(path or _oscar_config(ws).library_path())
    if not lib.exists():
        raise FileNotFoundError(f"no golden library at {lib.path}; build one with `imagent oscar build-library`")
    entries = lib.entries()
    if show is not None:
        found = [e for e in entries if e.key == show]
        if not found:
            raise KeyError(f"no entry {show!r} in {lib.path}")
        d = found[0].to_dict()
        d.pop("embedding")
        if json_out:
            sys.stdout.write(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
        else:
            console.print_json(json.dumps(d, ensure_ascii=False))
            console.print(found[0].demonstration(), markup=False, highlight=False)
        return
    rows = [{"key": e.key, "modification": e.modification, "calls": len(e.calls),
             "negatives": sum(c.get("polarity") == "-" for c in e.calls), "ops": [s["op"] for s in e.steps],
             "stage1": e.stage1.get("objective"), "stage2": e.stage2.get("objective"),
             "kept": f"{e.stats.get('targets_kept')}/{e.stats.get('targets')}",
             "final_size": e.stats.get("final_size"), "optimal": e.optimal, "task": e.task,
             "rewriter_ok": bool(e.stats.get("rewriter_ok", True))} for e in entries]
    if json_out:
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        return
    bad = sum(not r["optimal"] for r in rows)
    t = Table(title=f"{lib.path}: {len(rows)} trajectories ({bad} not proved optimal)", title_justify="left")
    for col in ("key", "modification", "calls", "negatives", "ops", "stage1/2", "kept", "final_size", "optimal"):
        t.add_column(col, overflow="fold")
    for r in rows:
        flag = "yes" if r["optimal"] else "[yellow]no[/]"
        if not r["rewriter_ok"]:
            flag += " [yellow](rewriter failed)[/]"
        t.add_row(r["key"], r["modification"], str(r["calls"]), str(r["negatives"]), " ".join(r["ops"]),
                  f"{r['stage1']:.4g}/{r['stage2']:.4g}", r["kept"], str(r["final_size"]), flag)
    console.print(t)


__all__ = ["app"]
