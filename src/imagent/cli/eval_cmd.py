"""``imagent score``, ``imagent eval``, ``imagent pack`` and ``imagent replay``: official benchmark metrics,
runs and their reproduction packs from the command line.

Their commands are on this module's ``app``, which the main CLI adds (:mod:`imagent.cli.main`); a command builds its
workspace with :func:`imagent.cli.common.workspace`, as every command does.

``--set`` keys are routed by their first part (:func:`imagent.cli.common.route_sets`): ``<benchmark>.key`` is a
loader option (e.g. ``circo.shared_concept=true``, ``fashioniq.caption_join=first``); a registered method's name
(``imagescope.tau``) and a bare key (``tau``, meaning the ``--method``'s field) go to ``methods.<method>.<key>``;
anything else is a settings key (``roles.default=vllm``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from imagent.cli.common import (
    JsonOpt,
    SetOpt,
    console,
    err_console,
    progress_bar,
    route_sets,
    user_errors,
    workspace,
)
from imagent.core.config import ConfigError
from imagent.core.text import plural

app = typer.Typer()


def _print_json(data: Any, json_out: bool) -> None:
    text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
    if json_out:
        print(text)
    else:
        console.print_json(text)


def _metrics_table(title: str, columns: dict[str, dict[str, Any]], delta: bool = False) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for name in columns:
        table.add_column(name, justify="right")
    if delta:
        table.add_column("delta", justify="right")
    keys: list[str] = []
    for col in columns.values():
        keys += [k for k in col if k not in keys]

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if v != v else f"{v:.2f}"
        return "-" if v is None else str(v)

    for k in keys:
        vals = [col.get(k) for col in columns.values()]
        row = [k] + [fmt(v) for v in vals]
        if delta:
            a, b = vals
            row.append(f"{b - a:+.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) else "")
        table.add_row(*row)
    return table


@app.command()
@user_errors
def score(
    benchmark: Annotated[str, typer.Argument(help="cirr, circo, fashioniq, genecis, flickr30k, mscoco, "
                                             "visdial, disbench or stamps")],
    annotations: Annotated[Path, typer.Option("--annotations", "-a", help="annotation file (or folder) "
                                              "with ground truth")],
    predictions: Annotated[Path, typer.Option("--predictions", "-p", help="predictions: the server "
                                              "format (CIRR, CIRCO) or {query id: [ranked ids]}")],
    split: Annotated[str | None, typer.Option(help="split (default: read from the file name)")] = None,
    partial: Annotated[bool, typer.Option(help="score only the predicted queries")] = False,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Score a predictions file against annotations with the official metrics; prints them as JSON
    (with --json: also the benchmark, split, number of queries and warnings)."""
    from imagent.eval.scoring import score_file

    options, _ = route_sets(set_, benchmark, None)
    result = score_file(benchmark, annotations, predictions, split=split, partial=partial, **options)
    for w in result["warnings"]:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
    _print_json(result["metrics"] if not json_out else result, json_out)

@app.command("eval")
@user_errors
def eval_(
    benchmark: Annotated[str | None, typer.Argument(help="benchmark (see `imagent score --help`)")] = None,
    method: Annotated[str, typer.Option("--method", "-m", help="retrieval method")] = "clip",
    split: Annotated[str | None, typer.Option(help="split (default: the benchmark's own)")] = None,
    limit: Annotated[int | None, typer.Option(help="run N queries (dialogues) of the split, chosen by "
                                              "--sample", min=1)] = None,
    sample: Annotated[str, typer.Option("--sample", help="how --limit chooses: stratified (a seeded sample "
                                        "of every query kind in proportion) or first (the first N)")
                      ] = "stratified",
    seed: Annotated[int, typer.Option("--seed", help="seed of the stratified --limit sample")] = 0,
    annotations: Annotated[Path | None, typer.Option("--annotations", "-a", help="annotation file or "
                                                     "folder")] = None,
    images_root: Annotated[Path | None, typer.Option("--images-root", help="folder with the benchmark's "
                                                     "images (layout shown if wrong)")] = None,
    index_dir: Annotated[Path | None, typer.Option("--index", "-i", help="gallery index to build once "
                                                   "and share (default: one per benchmark, "
                                                   "split and encoders under the cache dir)")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="run directory (default: "
                                                 "runs/<bench>-<split>-<method>[-n<limit>]-<run id>; a folder "
                                                 "holding another run is refused)")] = None,
    top_k: Annotated[int, typer.Option("--top-k", help="ranking depth kept and scored", min=1)] = 50,
    workers: Annotated[int, typer.Option(help="queries run in parallel", min=1)] = 1,
    ray: Annotated[str | None, typer.Option(
        "--ray", help="run queries on a Ray cluster: local, auto or HOST:PORT (--workers actors; default one "
                      "per GPU)")] = None,
    allow_missing: Annotated[bool, typer.Option(help="index the images found, skip the rest")] = False,
    compare: Annotated[tuple[Path, Path] | None, typer.Option("--compare", help="two runs' metrics side by "
                                                              "side, per-query deltas, paired tests and "
                                                              "bootstrap intervals, as Markdown and HTML "
                                                              "(RUN_A RUN_B; each may be a folder of runs, "
                                                              "one per album: their means, pooled tests)")
                                                 ] = None,
    compare_report: Annotated[Path | None, typer.Option(
        "--compare-report", help="where --compare writes its Markdown report (default: "
        "compare-<id A>-vs-<id B>.md beside RUN_A's folder)")] = None,
    check: Annotated[bool, typer.Option("--check", help="only check the benchmark's set-up (annotations, "
                                        "images present and missing, protocol options); no model loads")
                     ] = False,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="config file (TOML or YAML)")] = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a method over a benchmark (resumable) and write metrics, report, plots and server files."""
    if check and benchmark:
        from imagent.eval.setup_check import check_setup, render_check

        options, _ = route_sets(set_, benchmark, None)
        found = check_setup(benchmark, split, annotations, images_root, options)
        if json_out:
            _print_json(found, True)
        else:
            console.print(render_check(found), highlight=False, soft_wrap=True, markup=False)
        if not found["ok"]:
            raise typer.Exit(1)
        return
    if compare:
        _compare(list(compare), json_out, compare_report)
        return
    if not benchmark:
        raise ConfigError("name a benchmark (imagent eval BENCH --method M) or use --compare RUN_A RUN_B")
    from imagent.eval.runner import RunSpec, run_eval

    options, settings_sets = route_sets(set_, benchmark, method)
    ws = workspace(config, settings_sets)
    spec = RunSpec(benchmark=benchmark, method=method, split=split, annotations=annotations,
                   images_root=images_root, bench_options=options, top_k=top_k, limit=limit,
                   sample=sample, seed=seed,
                   run_dir=run_dir, index=index_dir, workers=workers, ray=ray, allow_missing=allow_missing)
    with progress_bar() as bar:
        tasks: dict[str, Any] = {}

        def on_progress(phase: str, done: int, total: int, label: str) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task("indexing" if phase == "index" else phase, total=total or None,
                                            item="")
            bar.update(tasks[phase], completed=done, total=total or None, item=str(label)[:40])
            if phase != "index" and not err_console.is_terminal:  # piped: one plain line per query (or
                # per training query of an OSCAR library built first: "trajectories")
                err_console.print(f"{phase} {done}/{total or '?'}: {str(label)[:80]}", highlight=False,
                                  markup=False, soft_wrap=True)

        summary = run_eval(ws, spec, progress=on_progress,
                           log=lambda m: err_console.print(m, highlight=False, soft_wrap=True))
    if json_out:
        _print_json(summary.to_dict(), True)
        return
    m = summary.metrics
    console.print(
        f"[bold]{summary.method}[/] on {summary.benchmark} {summary.split}: "
        f"{plural(summary.total, 'query', 'queries')} "
        f"({summary.already_done} resumed, {summary.new} run, {summary.errors} failed) -> {summary.run_dir} "
        f"(run {summary.run_id})"
    )
    if m.get("metrics"):
        console.print(_metrics_table("metrics (%)", {"final": m["metrics"], **m.get("stages", {})}))
    for key, value in (m.get("benchmark_info") or {}).items():  # how a metric was computed (CIRR subset mode)
        console.print(f"{key}: {value}", highlight=False, soft_wrap=True)
    for name, path in summary.files.items():
        if name.startswith("submission:") or name in ("report",):
            console.print(f"{name}: {path}")

@app.command()
@user_errors
def pack(
    run_dir: Annotated[Path, typer.Argument(help="an eval run folder (what `imagent eval` printed)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="the pack file to write (a zip archive)")],
    json_out: JsonOpt = False,
) -> None:
    """Write a reproduction pack of an eval run: its resolved config, code and package versions,
    fingerprints of the benchmark, index, encoders and prompts, the captions and every model and tool
    call it made (from the call cache), its predictions, metrics and report. No secret is written."""
    from imagent.core.config import user_cache_dir
    from imagent.eval.packs import write_pack

    summary = write_pack(run_dir, out, cache_dir=user_cache_dir())
    if json_out:
        _print_json(summary, True)
        return
    console.print(f"pack of run {summary['run_id']}: {plural(summary['calls'], 'call')}, "
                  f"{plural(summary['captions'], 'caption')}, {plural(summary['queries'], 'query', 'queries')} -> "
                  f"{summary['pack']}", highlight=False, soft_wrap=True)

@app.command()
@user_errors
def replay(
    pack_file: Annotated[Path, typer.Argument(help="a reproduction pack (`imagent pack`)")],
    images_root: Annotated[Path | None, typer.Option("--images-root", help="the benchmark's images here "
                                                     "(default: where the pack's run found them)")] = None,
    annotations: Annotated[Path | None, typer.Option("--annotations", "-a", help="the benchmark's "
                                                     "annotations here")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="run folder of the replay (default: "
                                                 "runs/replay-<pack's run id>)")] = None,
    force: Annotated[bool, typer.Option("--force", help="replay even when fingerprints differ (a call the "
                                        "pack lacks is still an error)")] = False,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="config file whose settings "
                                                "replace the pack's (named if they change results)")] = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-run a pack's evaluation with the pack's calls as a read-only cache: 0 model calls on the same
    encoders, and the metrics compared with the pack's. Differing fingerprints are named before anything
    runs; a call missing from the pack is an error, never a new call."""
    from imagent.eval.packs import read_pack
    from imagent.eval.packs import replay as run_replay

    pk = read_pack(pack_file)
    _, settings_sets = route_sets(set_, pk.config["benchmark"], pk.config["method"]["name"])

    def make_workspace(overrides: dict[str, Any]) -> Any:  # the pack's settings, under the config file and --set
        return workspace(config, settings_sets, overrides=overrides)

    result = run_replay(pk, make_workspace, images_root, annotations, run_dir, force,
                        log=lambda m: err_console.print(m, highlight=False, soft_wrap=True))
    if json_out:
        _print_json(result.to_dict(), True)
    else:
        verdict = "identical metrics" if result.identical else "DIFFERENT metrics"
        console.print(f"replay of run {result.pack_run_id}: {verdict}, {plural(result.model_calls, 'model call')}, "
                      f"{plural(result.calls_served, 'call')} served from the pack -> {result.run_dir}",
                      highlight=False, soft_wrap=True)
        for d in result.differences[:20]:
            console.print(f"  {d}", highlight=False, soft_wrap=True)
    if not result.identical:
        raise typer.Exit(1)

def _compare(run_dirs: list[Path], json_out: bool, report: Path | None = None) -> None:
    from imagent.core.redact import redact
    from imagent.eval.compare import compare_markdown, compare_runs, default_report_path
    from imagent.eval.compare_html import compare_html

    result = compare_runs(run_dirs)
    for w in result["warnings"]:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
    report = report or default_report_path(result)
    report.write_text(redact(compare_markdown(result)), encoding="utf-8")  # like report.md: no key in a file
    page = report.with_suffix(".html")  # beside it: curves, bootstrap intervals, per-query deltas
    page.write_text(redact(compare_html(result)), encoding="utf-8")
    result["report"] = str(report)
    result["report_html"] = str(page)
    if json_out:
        _print_json(result, True)
        return
    labels = list(result["runs"])
    columns = {lab: {r["metric"]: r.get(lab) for r in result["rows"]} for lab in labels}
    console.print(_metrics_table("comparison", columns, delta=len(labels) == 2))
    for lab, info in result["runs"].items():
        console.print(f"{lab}: run {info.get('run_id')} in {info['run_dir']} ({info['benchmark']} {info['split']}, "
                      f"{plural(info['queries'], 'query', 'queries')})", highlight=False, soft_wrap=True)
    pq = result.get("per_query")
    if pq:
        a, b = pq["labels"]
        console.print(
            f"per query ({pq['score']}, {plural(pq['queries'], 'query', 'queries')} both answered): "
            f"{b} wins {pq['wins']}, "
            f"loses {pq['losses']}, ties {pq['ties']} against {a}; mean {pq['mean_a']:.3f} -> {pq['mean_b']:.3f}",
            highlight=False)
        console.print(f"paired tests of no difference: sign test p = {pq['sign_test_p']:.3g}, "
                      f"permutation test p = {pq['permutation_p']:.3g}"
                      + ("" if min(pq["sign_test_p"], pq["permutation_p"]) < 0.05 else
                         " (not significant at 0.05)"), highlight=False)
    console.print(f"report: {report} and {page}", highlight=False, soft_wrap=True)


__all__ = ["app", "route_sets"]
