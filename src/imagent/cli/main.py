"""The ``imagent`` command line (Typer + Rich).

Every command takes ``--config FILE``, ``--set dotted.key=value`` (repeatable) and ``--index DIR``;
every command that prints results takes ``--json``. Errors a user can fix (bad config, missing
index, unreachable model server, unreadable image) print one clear line and exit with status 2.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from imagent.api import Workspace
from imagent.cli import eval_cmd
from imagent.cli.common import ConfigOpt, IndexOpt, JsonOpt, SetOpt, console, progress_bar, user_errors
from imagent.core.config import load_settings

app = typer.Typer(
    name="imagent",
    help="Training-free, agentic image retrieval: index a gallery, search it, evaluate methods.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Show or check the resolved configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


def expand_sets(sets: list[str] | None, method: str | None) -> list[str]:
    """``tau=0.2`` -> ``methods.<method>.tau=0.2``; ``imagescope.tau=0.2`` -> ``methods.imagescope.tau``."""
    from imagent.cli.eval_cmd import route_sets

    return route_sets(sets, None, method)[1]


def get_workspace(config: Path | None, sets: list[str] | None, method: str | None = None) -> Workspace:
    return Workspace(load_settings(config, sets=expand_sets(sets, method)))


# --------------------------------------------------------------------------- index


@app.command()
@user_errors
def index(
    source: Annotated[Path, typer.Argument(help="a folder of images, or a manifest (.json/.jsonl/.csv)")],
    index_dir: IndexOpt = None,
    caption_missing: Annotated[bool, typer.Option(help="caption uncaptioned images with the captioner role")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Index a gallery: records, metadata (EXIF time/GPS), embeddings. Incremental and resumable."""
    from imagent.index.builder import build_index

    if not source.exists():
        raise FileNotFoundError(f"no such file or folder: {source}")
    ws = get_workspace(config, set_)
    root = index_dir or ws.settings.index
    options = ws.settings.indexing.model_copy(update={"caption_missing": caption_missing or
                                                      ws.settings.indexing.caption_missing})
    captioner = ws.roles["captioner"] if options.caption_missing else None
    with progress_bar() as bar:
        task = bar.add_task("indexing", total=None, item="")

        def on_progress(done: int, total: int, path: str) -> None:
            bar.update(task, completed=done, total=total, item=Path(path).name[:40])

        report = build_index(source, root, ws.dual_encoder, ws.text_embedder, options, captioner=captioner,
                             progress=on_progress)
    if json_out:
        console.print_json(json.dumps({"index": str(root), **report.to_dict()}, default=str))
        return
    console.print(
        f"[bold]{root}[/]: {report.added} new, {report.updated} changed, {report.unchanged} unchanged, "
        f"{report.removed} removed, {len(report.skipped)} skipped ({report.seconds:.1f} s)"
    )
    if report.skipped:
        table = Table(title="skipped files")
        table.add_column("file", overflow="fold")
        table.add_column("reason", overflow="fold")
        for path, reason in report.skipped[:50]:
            table.add_row(str(path), reason)
        console.print(table)
        if len(report.skipped) > 50:
            console.print(f"... and {len(report.skipped) - 50} more (use --json for all)")


# --------------------------------------------------------------------------- search


@app.command()
@user_errors
def search(
    text: Annotated[str, typer.Argument(help="the query, or the modification text with --ref")],
    ref: Annotated[str | None, typer.Option("--ref", help="reference image: a gallery id or an image file")] = None,
    method: Annotated[str, typer.Option("--method", "-m", help="retrieval method")] = "clip",
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="results to return")] = 10,
    keep_reference: Annotated[bool, typer.Option(
        "--keep-reference", help="let a gallery reference appear in its own results")] = False,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Search the gallery with a text query, or a reference image plus modification text."""
    from imagent.api import result_json
    from imagent.cli.render import print_result

    ws = get_workspace(config, set_, method)
    result = ws.search(text, method=method, top_k=top_k, reference=ref, index=index_dir,
                       keep_reference=keep_reference)
    gallery = ws.gallery(index_dir)
    if json_out:
        sys.stdout.write(result_json(result, gallery) + "\n")
    else:
        print_result(console, result, gallery, title=f"{method}: {text}")


# --------------------------------------------------------------------------- models


@app.command()
@user_errors
def models(
    check: Annotated[bool, typer.Option("--check", help="load each part and time one call")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What is configured (encoders, chat models, roles), and with --check whether it loads and how fast."""
    ws = get_workspace(config, set_)
    s = ws.settings
    rows: list[dict[str, Any]] = [
        {"part": "dual_encoder", "backend": s.dual_encoder.backend, "model": s.dual_encoder.model},
        {"part": "text_embedder", "backend": s.text_embedder.backend, "model": s.text_embedder.model},
    ]
    for name, m in s.models.items():
        used_by = sorted(r for r, e in s.roles.items() if e == name)
        rows.append({"part": f"models.{name}", "backend": m.backend, "model": m.model,
                     "roles": used_by, "vision": m.vision, "base_url": m.base_url})
    if check:
        for row in rows:
            row.update(_check_part(ws, row["part"]))
    if json_out:
        console.print_json(json.dumps(rows, default=str))
        return
    table = Table(title="configured models")
    cols = ["part", "backend", "model", "roles"] + (["status", "load_s", "call_s"] if check else [])
    for c in cols:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*[_cell(row.get(c)) for c in cols])
    console.print(table)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return ", ".join(v)
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _check_part(ws: Workspace, part: str) -> dict[str, Any]:
    from imagent.models.base import ChatParams, Message

    t0 = time.perf_counter()
    try:
        if part == "dual_encoder":
            enc = ws.dual_encoder
            load = time.perf_counter() - t0
            t1 = time.perf_counter()
            enc.encode_texts(["a photo of a cat"])
        elif part == "text_embedder":
            enc = ws.text_embedder
            load = time.perf_counter() - t0
            t1 = time.perf_counter()
            enc.encode_texts(["a photo of a cat"])
        else:
            model = ws.chat_model(part.split(".", 1)[1])
            load = time.perf_counter() - t0
            t1 = time.perf_counter()
            model.chat([Message.user("Answer with one word: what colour is the sky on a clear day?")],
                       ChatParams(max_tokens=4))
        return {"status": "ok", "load_s": load, "call_s": time.perf_counter() - t1}
    except Exception as exc:  # report, don't crash: the point is to see what fails
        return {"status": f"error: {exc}", "load_s": None, "call_s": None}


# --------------------------------------------------------------------------- config


@config_app.command("show")
@user_errors
def config_show(config: ConfigOpt = None, set_: SetOpt = None, json_out: JsonOpt = False) -> None:
    """Print the resolved configuration (defaults <- file <- environment <- --set)."""
    ws = get_workspace(config, set_)
    data = ws.settings.model_dump(mode="json")
    if json_out:
        console.print_json(json.dumps(data))
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


@config_app.command("methods")
@user_errors
def config_methods(json_out: JsonOpt = False) -> None:
    """Every method's hyper-parameters with their defaults (the papers')."""
    from imagent.methods.base import describe_methods

    data = describe_methods()
    if json_out:
        console.print_json(json.dumps(data))
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


# --------------------------------------------------------------------------- serve


@app.command()
@user_errors
def serve(
    host: Annotated[str, typer.Option("--host", help="address to listen on (127.0.0.1: this machine only)")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535)] = 8765,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """The web UI: search the gallery in a browser and see every step of the method's trace."""
    from imagent.server import serve as run_server

    ws = get_workspace(config, set_)
    console.print(f"imagent web UI on http://{host}:{port}/  (Ctrl-C stops)")
    run_server(ws, index_dir, host=host, port=port)


# --------------------------------------------------------------------------- demo


@app.command()
@user_errors
def demo(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Build a small gallery from real photos and run a text query and a composed query, offline."""
    from imagent.demo import run_demo

    run_demo(get_workspace(config, set_), console, json_out=json_out)


eval_cmd.register(app, get_workspace)


if __name__ == "__main__":  # pragma: no cover
    app()
