"""The ``imagent`` command line (Typer + Rich).

Every command takes ``--config FILE``, ``--set dotted.key=value`` (repeatable) and ``--index DIR``;
every command that prints results takes ``--json``. Errors a user can fix (bad config, missing
index, unreachable model server, unreadable image) print one clear line and exit with status 2.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from imagent.api import Workspace
from imagent.cli import eval_cmd, oscar_cmd, people_cmd, photos_cmd, skills_cmd
from imagent.cli.common import (
    ConfigOpt,
    HintedError,
    IndexOpt,
    JsonOpt,
    SetOpt,
    console,
    err_console,
    expand_sets,
    progress_bar,
    user_errors,
    workspace,
)
from imagent.cli.render import SCORE_HELP
from imagent.core.text import plural

app = typer.Typer(
    name="imagent",
    help="Training-free, agentic image retrieval: index a gallery, search it, evaluate methods.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Show or check the resolved configuration.", no_args_is_help=True)
models_app = typer.Typer(help="Configured models, which see pixels, and ready presets.")

# Results a search without --top-k shows when its ranking has no match levels (a method's own re-ranking).
DEFAULT_TOP_K = 10


# --------------------------------------------------------------------------- index


@app.command()
@user_errors
def index(
    source: Annotated[Path, typer.Argument(help="a folder of images, or a manifest (.json/.jsonl/.csv)")],
    index_dir: IndexOpt = None,
    caption_missing: Annotated[bool, typer.Option(help="caption uncaptioned images with the captioner role")] = False,
    captions: Annotated[Path | None, typer.Option(
        "--captions", help="import captions: JSONL/JSON/CSV rows {id|file|path, caption} (stored as given)")] = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", help="compute every per-photo stage (pixels, embedding, faces) on a Ray cluster: local (start one "
                      "here), auto (join this one's), or HOST:PORT")] = None,
    ray_actors: Annotated[int, typer.Option(help="index actors on the Ray cluster", min=1)] = 2,
    ray_gpus: Annotated[float, typer.Option(help="GPUs per Ray actor (1 on a GPU cluster)", min=0)] = 0.0,
    ray_chunk: Annotated[int, typer.Option(help="photos a Ray task computes (each committed as it returns)", min=1)
                         ] = 64,
    prune: Annotated[bool, typer.Option(
        "--prune", help="remove every photo of a source that now holds none of them, with their faces, names and "
                        "marks (refused without it: an unmounted disk looks like an empty folder)")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Index a gallery: records, metadata (EXIF time/GPS), embeddings. Incremental and resumable.

    With --ray the same build computes every per-photo stage on a Ray cluster (actors holding the models; the
    database stays here and is committed chunk by chunk, so a killed run resumes like a local one)."""
    from rich.markup import escape
    from rich.text import Text

    from imagent.core.text import display_path

    ws = workspace(config, [*(set_ or []), "indexing.prune=true"] if prune else set_)
    root = index_dir or ws.settings.index
    with progress_bar("images/s") as bar:
        task = bar.add_task("indexing", total=None, item="")

        def on_progress(done: int, total: int, path: str) -> None:
            bar.update(task, completed=done, total=total, item=escape(Path(path).name[:40]))

        report = ws.index(source, index_dir, caption_missing=caption_missing, captions=captions, ray=ray,
                          ray_actors=ray_actors, ray_gpus=ray_gpus, ray_chunk=ray_chunk, progress=on_progress)
    if json_out:
        console.print_json(json.dumps({"index": display_path(root), **report.to_dict()}, default=str))
        return
    imported = f", {plural(report.imported, 'caption')} imported" if captions is not None else ""
    console.print(
        f"[bold]{escape(display_path(root))}[/]: {report.added} new, {report.updated} changed, "
        f"{report.unchanged} unchanged, {report.removed} removed, {len(report.skipped)} skipped{imported} "
        f"({report.seconds:.1f} s)"
    )
    if report.skipped:
        table = Table(title="skipped files")
        table.add_column("file", overflow="fold")
        table.add_column("reason", overflow="fold")
        for path, reason in report.skipped[:50]:
            table.add_row(Text(str(path)), Text(reason))
        console.print(table)
        if len(report.skipped) > 50:
            console.print(f"... and {len(report.skipped) - 50} more (use --json for all)")
    for warning in report.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    people_cmd.print_face_pass(report.faces)
    if report.caption_note():
        console.print(Text(report.caption_note()))
    if report.pixel_note():  # what answers an image search, per photo (caption, pixels, names)
        console.print(Text(report.pixel_note()))
    if report.text_note():  # the words read in photos (the text stage)
        console.print(Text(report.text_note()))


# --------------------------------------------------------------------------- search


@app.command(epilog=SCORE_HELP)
@user_errors
def search(
    text: Annotated[str, typer.Argument(help="the query, or the modification text with --ref (optional with "
                                        "--where: the matching photos in time order)")] = "",
    ref: Annotated[str | None, typer.Option("--ref", help="reference image: a gallery id or an image file")] = None,
    method: Annotated[str | None, typer.Option("--method", "-m", help="retrieval method (default: chosen for the "
                                               "query and the index: album-style queries go to the album method, "
                                               "others to the best content search; clip with --ref)")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", "-k", min=1, help="results to return, each with its match "
                                              "level (default: the strong and possible matches, at most "
                                              "results.default_max, or 10 for a ranking without levels; a --where "
                                              "filter alone: every match)")] = None,
    keep_reference: Annotated[bool, typer.Option(
        "--keep-reference", help="let a gallery reference appear in its own results")] = False,
    max_calls: Annotated[int | None, typer.Option(
        "--max-calls", min=0, help="cap on this search's model calls (cache hits are free)")] = None,
    where: Annotated[str | None, typer.Option(
        "--where", help="only photos matching this filter: time >= '2019-07-14', time = '2019-07' (a prefix is the "
        "whole period), place ~ 'Vienna', device ~ 'iphone', near('Vienna', 10), near(48.2, 16.4, 5) (km); "
        "and/or/not, parentheses")] = None,
    sort: Annotated[str, typer.Option("--sort", help="score (the method's order) or time (when taken)")] = "score",
    like: Annotated[str | None, typer.Option(
        "--like", help="more like this photo (a gallery id or an image file), instead of a query text")] = None,
    collapse_duplicates: Annotated[bool, typer.Option(
        "--collapse-duplicates", help="one photo per group of copies / near-duplicates (imagent duplicates)")] = False,
    paths: Annotated[bool, typer.Option("--paths", help="print only the result files, one per line "
                                        "(pipe into a viewer)")] = False,
    no_server: Annotated[bool, typer.Option(
        "--no-server", help="search in this process even when `imagent serve` runs on this index")] = False,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Search the gallery with a text query, or a reference image plus modification text.

    Before it starts, the method's estimated model calls are printed (stderr); while it runs, a live
    line shows the step, calls so far and time (on a terminal)."""
    from imagent.api import SearchRequest
    from imagent.cli.progress import SearchStatus
    from imagent.core.trace import Trace

    # Everything a user can get wrong is checked before any model loads.
    check_photo_options(text, where, sort, ref, like)
    route = None
    ws = workspace(config, set_ if method is not None else [s for s in set_ or [] if "." in s.split("=")[0]],
                       method)
    gallery = ws.gallery(index_dir)
    if method is None:
        method, route = default_method(text, ref, like, gallery)
        if set_:  # the chosen method's parameters
            ws = workspace(config, set_, method)
            gallery = ws.gallery(index_dir)
    if where is not None:
        check_where(where, gallery)
    stop = None  # no --top-k: the results stop where the matches stop (imagent.index.levels), else after 10
    if top_k is None:  # a filter alone lists every photo it matches ("person = 'Anna'": all of her photos)
        alone = (where is not None and not text.strip()) or (route is not None and route.kind == "filter")
        if alone and ref is None and like is None:
            top_k = max(1, len(gallery))
        else:
            top_k, stop = max(DEFAULT_TOP_K, ws.settings.results.default_max), DEFAULT_TOP_K
    request = SearchRequest(text, method=method, top_k=top_k, reference=ref, keep_reference=keep_reference,
                            max_calls=max_calls, index=index_dir, where=where, sort=sort, like=like,
                            collapse_duplicates=collapse_duplicates, read_query=route is not None)
    prepared = prepare_search(ws, request)
    title = f"{method}: {text}" + (f" (where {where})" if where else "") + (" (by time)" if sort == "time" else "")
    if like is not None or not prepared.uses_method:  # more like a photo, or a filter alone: no model call
        result = ws.run(prepared)
        shown = prepared.request.where
        show_result(result, gallery, f"like {like}" + (f" (where {where})" if where else "") if like is not None
                    else f"{text} (where {shown})" if prepared.reading is not None else f"--where {where}",
                    json_out, paths, stop)
        return
    estimate = prepared.estimate
    if estimate and not json_out and not paths:
        cap = f", capped at {max_calls}" if max_calls is not None else ""
        err_console.print(f"{method}: up to ~{plural(estimate, 'model call')} at the current settings{cap}",
                          highlight=False)
    status = SearchStatus(err_console, method, estimate if max_calls is None else min(estimate, max_calls))
    trace = Trace(listeners=[status])  # the request's max_calls caps it
    with status:  # a server on this index answers with its models loaded (nothing is loaded here)
        result = served_search(ws, request, config, set_, no_server, status)
    if result is None:  # no server on this index (or --no-server): search in this process
        for warning in prepared.warnings:  # no model call: missing tools, missing captions
            err_console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
        with status:
            result = ws.run(prepared, trace=trace)
    if route is not None:
        result = route.label(result)
    show_result(result, gallery, title, json_out, paths, stop)


def default_method(text: str, ref: str | None, like: str | None, gallery: Any) -> tuple[str, Any]:
    """No --method: a composed query (--ref), --like or a filter alone keeps the clip baseline; a query in words
    goes where :func:`imagent.api.route_method` sends it (said on stderr, with the fallback when there is one)."""
    if ref is not None or like is not None or not text.strip():
        return "clip", None
    from imagent.api import route_method

    route = route_method(text, gallery)
    why = route.fallback or route.reason
    method = route.method if route.kind != "filter" else "filter"
    err_console.print(f"method: {method} ({why}; --method picks another)", highlight=False, markup=False,
                      soft_wrap=True)
    if route.understood is not None:  # what the query reader linked: people, places, dates, and the content
        err_console.print(f"understood: {route.understood['describe']}", highlight=False, markup=False,
                          soft_wrap=True)
        for note in route.understood["notes"]:
            err_console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    return route.method, route


def show_result(result: Any, gallery: Any, title: str, json_out: bool, paths: bool, stop: int | None = None) -> None:
    """``result`` as a table, JSON or paths. ``stop`` (no --top-k given): a ranking with match levels is cut to its
    strong and possible matches (:func:`imagent.api.matches_only`), one without to its first ``stop``."""
    from imagent.api import matches_only, result_json
    from imagent.cli.render import print_result

    if stop is not None:
        levelled = result.ranking.cut is not None and result.answer_set is None
        result = matches_only(result, len(result.ranking)) if levelled else replace(
            result, ranking=result.ranking.top(stop))

    if json_out:
        sys.stdout.write(result_json(result, gallery) + "\n")
    elif paths:
        for image_id in result.ranking.ids:
            sys.stdout.write(str(Path(gallery.record(image_id).path).expanduser().resolve()) + "\n")
    else:
        print_result(console, result, gallery, title=title)


def check_photo_options(text: str, where: str | None, sort: str, ref: str | None, like: str | None = None) -> None:
    """The photo options of a search (filter, order, more like this), checked before anything loads."""
    if sort not in ("score", "time"):
        raise HintedError(f"unknown --sort {sort!r}", "use --sort score (the method's order) or --sort time")
    if like is not None and (text.strip() or ref is not None):
        raise HintedError("--like ranks by the photo alone", "drop the query text and --ref, or use --ref IMAGE "
                          "with a text for a composed query")
    if not text.strip() and ref is None and where is None and like is None:
        raise HintedError("a search needs a query text, a --ref image, --like or a --where filter",
                          'e.g. imagent search "a penguin", or imagent search --where "place ~ \'Vienna\'"')


def check_where(where: str, gallery: Any) -> None:
    """A --where expression that does not parse is reported with where and why, before any model loads."""
    from imagent.tools.filter_lang import FilterError
    from imagent.tools.photo_search import where_rows

    try:
        where_rows(gallery, where)
    except FilterError as exc:
        msg, _, allowed = str(exc).partition(". Allowed:")
        raise HintedError(msg, f"Allowed:{allowed}" if allowed else "see imagent search --help") from None


def served_search(ws: Workspace, request: Any, config: Path | None, sets: list[str] | None, no_server: bool,
                  listener: Any) -> Any:
    """``request``'s result from an `imagent serve` running on its index (models already loaded), or None. The
    method's parameters given here (``--set``) travel with the request."""
    from imagent.cli.served import served_search_allowed, try_served_search

    if not served_search_allowed(config, expand_sets(sets, request.method), request.method, no_server):
        return None
    params = dict(ws.settings.methods.get(request.method, {}))
    return try_served_search(request.index or ws.settings.index, request.model_copy(update={"params": params}),
                             listener, generation=ws.gallery(request.index).loaded_generation)


def prepare_search(ws: Workspace, request: Any) -> Any:
    """``ws.prepare(request)`` with the mistakes a user can make said in the CLI's words: a method that does not
    take (or needs) a reference, a parameter that does not validate (with the class's valid keys)."""
    from pydantic import ValidationError

    from imagent.api import TaskMismatch, UnknownReference
    from imagent.cli.common import format_validation_error
    from imagent.methods.base import get_method

    try:
        return ws.prepare(request)
    except TaskMismatch as exc:
        if exc.task == "tir":
            raise HintedError(f"method {exc.method!r} needs a reference image (it handles composed queries)",
                              "add --ref IMAGE (a gallery id or an image file)") from None
        raise HintedError(f"method {exc.method!r} takes no reference image", "drop --ref, or use --method clip") \
            from None
    except UnknownReference as exc:
        raise HintedError(str(exc), "give a gallery id (see `imagent search ... --json` ids) or a path to an image "
                          "file") from None
    except ValidationError as exc:
        cls = get_method(request.method)  # known: only the config failed
        raise HintedError(f"invalid parameters for method {request.method!r}:\n"
                          + format_validation_error(exc, cls.Config, f"methods.{request.method}"),
                          "`imagent config methods` lists every method's keys and defaults") from None


# --------------------------------------------------------------------------- models


@models_app.callback(invoke_without_command=True)
@user_errors
def models(
    ctx: typer.Context,
    check: Annotated[bool, typer.Option("--check", help="load each part and time one call")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What is configured (encoders, chat models, roles, which of them see pixels), and with --check
    whether each loads and how fast. `imagent models presets` lists ready setups, `use NAME` picks one."""
    if ctx.invoked_subcommand:
        return
    from imagent.models.registry import sees_pixels_for

    ws = workspace(config, set_)
    s = ws.settings
    rows: list[dict[str, Any]] = [
        {"part": "dual_encoder", "backend": s.dual_encoder.backend, "model": s.dual_encoder.model,
         "sees_pixels": s.dual_encoder.backend != "caption", "spaces": ["image", "caption_dual"]},
        {"part": "text_embedder", "backend": s.text_embedder.backend, "model": s.text_embedder.model,
         "sees_pixels": False, "spaces": ["caption_text"]},
    ]
    if s.pixels.model != "none":  # the pixel model: labels, visual features, ConSE (imagent/models/pixels.py)
        rows.append({"part": "pixels", "backend": s.pixels.model,
                     "model": f"EfficientNet-Lite{s.pixels.model[-1]}, ImageNet-1k",
                     "sees_pixels": True, "spaces": ["visual", "image (captionless photos, caption mode)"]})
    for ext in ws.extra_encoders:  # [encoders.<name>]: extra retrievers, each its own index spaces
        cfg = s.encoders[ext.name]
        rows.append({"part": f"encoders.{ext.name}", "backend": cfg.backend, "model": cfg.model, "kind": ext.kind,
                     "spaces": ext.spaces, "sees_pixels": bool(sees_pixels_for(ext.kind, cfg))})
    for name, m in s.models.items():
        used_by = sorted(r for r, e in s.roles.items() if e == name)
        rows.append({"part": f"models.{name}", "backend": m.backend, "model": m.model,
                     "roles": used_by, "vision": m.vision, "sees_pixels": m.vision, "base_url": m.base_url})
    roles = role_vision(s)
    if check:
        for row in rows:
            row.update(_check_part(ws, row["part"]))
    if json_out:
        role_rows = [{"part": f"role.{r['role']}", "model": r["model"], "sees_pixels": r["sees_pixels"]}
                     for r in roles]
        console.print_json(json.dumps(rows + role_rows, default=str))
        return
    table = Table(title="configured models")
    cols = ["part", "backend", "model", "roles", "sees_pixels"] + (["spaces"] if s.encoders else []) \
        + (["status", "load_s", "call_s"] if check else [])
    for c in cols:
        table.add_column(c.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*[_cell(row.get(c)) for c in cols])
    console.print(table)
    seeing = [r["role"] for r in roles if r["sees_pixels"]]
    extra_seeing = [r["part"] for r in rows if r["part"].startswith("encoders.") and r["sees_pixels"]]
    console.print("roles that see pixels: " + (", ".join(seeing) if seeing else "none")
                  + ("; the dual encoder sees pixels" if rows[0]["sees_pixels"]
                     else "; the dual encoder does not (caption mode: images are searched by their captions)")
                  + (f"; extra encoders that see pixels: {', '.join(extra_seeing)} (their own image spaces)"
                     if extra_seeing else ""))
    if s.pixels.model != "none":
        console.print(f"the pixel model ({s.pixels.model}) labels every photo at index time; photos without captions "
                      "are searched by what it sees")
    elif not seeing and not rows[0]["sees_pixels"]:
        console.print("content search over uncaptioned images needs a model that sees pixels: "
                      "`imagent models presets`")


def role_vision(s: Any) -> list[dict[str, Any]]:
    """Every role methods use (and every configured one): its model entry and whether it sees pixels."""
    known = ["captioner", "reasoner", "verifier", "evaluator", "imaginer", "questioner"]
    out = []
    for role in known + sorted(r for r in s.roles if r not in known and r != "default"):
        try:
            entry, cfg = s.model_for_role(role)
        except Exception as exc:  # a role naming a missing entry: show it, do not crash the listing
            out.append({"role": role, "model": None, "sees_pixels": False, "error": str(exc)})
            continue
        out.append({"role": role, "model": entry, "sees_pixels": bool(cfg.vision)})
    return out


@models_app.command("presets")
@user_errors
def models_presets(json_out: JsonOpt = False) -> None:
    """Ready setups (small and large CLIP/SigLIP, the papers' setup) with what their first use downloads."""
    from imagent.models.presets import PRESETS

    rows = [{"name": p.name, "what": p.summary, "downloads": p.download, "notes": list(p.notes),
             "settings": p.settings} for p in PRESETS.values()]
    if json_out:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title="model presets (imagent models use NAME)")
    for c in ("name", "what", "first use downloads"):
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(r["name"], r["what"] + "".join(f"\n{n}" for n in r["notes"]), r["downloads"])
    console.print(table)
    console.print("Downloads go through the Hugging Face hub (with a progress bar) into its usual cache, "
                  "on the first index or search that needs them.")


@models_app.command("use")
@user_errors
def models_use(
    name: Annotated[str, typer.Argument(help="a preset name (imagent models presets)")],
    to: Annotated[Path | None, typer.Option("--to", help="config file to write (default: the one read now, "
                                            "else the user config file)")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a preset into the config file (merged: other settings stay) and show what was written."""
    from imagent.core.config import load_settings
    from imagent.models.presets import apply_preset, default_config_path, dump_toml, get_preset, prepare_preset

    path = (to or default_config_path()).expanduser()
    preset = get_preset(name)
    from imagent.models.offline import OfflineModelError

    try:  # the model file first: a preset whose parts are missing or corrupt leaves the config as it was
        model_file = prepare_preset(name, load_settings(config_file=path if path.is_file() else None).cache_dir)
    except OfflineModelError as exc:
        raise HintedError(f"preset {name!r}: {exc}", f"the config file {path} was not changed") from None
    written = apply_preset(name, path)
    if json_out:
        sys.stdout.write(json.dumps({"config": str(path), "preset": name, "written": written,
                                     "model_file": str(model_file) if model_file else None}) + "\n")
        return
    if model_file is not None:
        console.print(f"model file (checked): {model_file}", highlight=False, markup=False)
    console.print(f"wrote preset [bold]{name}[/] into {path}:", highlight=False)
    console.print(dump_toml(written), markup=False, highlight=False)
    console.print(f"first use downloads: {preset.download}", highlight=False)
    for n in preset.notes:
        console.print(n, highlight=False, markup=False)
    console.print("an index built with other encoders needs `imagent index` again", highlight=False)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
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
        elif part == "pixels":
            model = ws.pixel_model
            load = time.perf_counter() - t0
            t1 = time.perf_counter()
            model.analyze([])
        elif part.startswith("encoders."):
            enc = ws.encoder(part.split(".", 1)[1])
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
    ws = workspace(config, set_)
    data = ws.settings.model_dump(mode="json")
    if json_out:
        console.print_json(json.dumps(data))
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


@config_app.command("methods")
@user_errors
def config_methods(json_out: JsonOpt = False) -> None:
    """Every method's hyper-parameters with their defaults, each marked as the paper's (with the section or table
    setting it) or imagent's own."""
    from imagent.methods.base import describe_methods
    from imagent.methods.origins import field_origins

    data = describe_methods()
    for name, info in data.items():
        info["fields"] = field_origins(name, json.loads(json.dumps(info["defaults"])))
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
    token: Annotated[str | None, typer.Option(
        "--token", help="require this token from every client (generated when --host is not loopback)")] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="also answer requests for this Host name (repeatable; loopback names always)")] = None,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """The web UI: search the gallery in a browser and see every step of the method's trace.

    The address is printed once the server listens (with ?token=... when a token is required)."""
    from imagent.server.app import serve as run_server
    from imagent.server.security import server_access

    ws = workspace(config, set_)
    token, hosts, url = server_access(host, port, token, allow_host or [], ws.settings.server.token_env)
    run_server(ws, index_dir, host=host, port=port, token=token, allowed_hosts=hosts,
               on_listening=lambda: console.print(f"imagent web UI on {url}  (Ctrl-C stops)", soft_wrap=True))


# --------------------------------------------------------------------------- demo


@app.command()
@user_errors
def demo(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Build a small gallery from real photos and run a text query and a composed query, offline."""
    from imagent.cli.demo import run_demo

    run_demo(workspace(config, set_), console, json_out=json_out)


# Every command module's app, one way: a group under its name, or (no name) its commands at the top level.
app.add_typer(config_app, name="config")
app.add_typer(models_app, name="models")
app.add_typer(people_cmd.app, name="people")
app.add_typer(skills_cmd.app, name="skills")
app.add_typer(oscar_cmd.app, name="oscar")
app.add_typer(photos_cmd.app)  # duplicates
app.add_typer(eval_cmd.app)  # score, eval, pack, replay


if __name__ == "__main__":  # pragma: no cover
    app()
