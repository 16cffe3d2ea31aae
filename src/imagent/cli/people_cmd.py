"""``imagent people``: the people found in the index's photos, and the corrections a user makes.

::

    imagent people [--json]               the groups: id, name, faces, photos (with paths); tiny groups last
    imagent people show ID [--json]       one group's faces: face id, photo, box (for split and remove)
    imagent people name ID NAME           name a group (--clear takes the name off)
    imagent people merge ID OTHER...      one person in several groups: their faces join ID
    imagent people split FACE [--to ID]   a face in the wrong group: to a new group of its own, or to ID
    imagent people remove FACE            a face that is nobody (a false detection): deleted, not found again
    imagent people forget [--yes]         delete all face data of the index (faces, descriptors, people)

Faces are found by ``imagent index`` (``faces.mode``; :mod:`imagent.index.faces`) and grouped there
(:mod:`imagent.index.people`). Registered on the main app by :mod:`imagent.cli.main`. Options given before the
subcommand (``imagent people --index DIR name 3 Anna``) apply to it too.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from imagent.cli.common import ConfigOpt, HintedError, IndexOpt, JsonOpt, SetOpt, console, user_errors
from imagent.cli.render import short_path

app = typer.Typer(help="People found in the photos: list, name, merge, split, remove, forget.",
                  invoke_without_command=True, no_args_is_help=False)

_NO_FACES_HINT = ("`imagent index FOLDER` finds faces in photos indexed from a folder (faces.mode = \"auto\"; "
                  "\"on\" for manifests too); the face models come with the offline extra")


def _context(ctx: typer.Context, index_dir: Path | None, config: Path | None, sets: list[str] | None) -> Any:
    """The workspace and gallery, with options given before the subcommand as defaults."""
    from imagent.api import Workspace

    parent = ctx.obj or {}
    ws = Workspace.from_config(config or parent.get("config"), (parent.get("sets") or []) + (sets or []))
    return ws, ws.gallery(index_dir or parent.get("index"))


@contextlib.contextmanager
def _face_data(gallery: Any) -> Iterator[None]:
    """The index's missing face data as the commands' one hinted error."""
    from imagent.index.face_store import FaceDataMissing

    try:
        yield
    except FaceDataMissing:
        raise HintedError(f"the index at {gallery.root} has no face data", _NO_FACES_HINT) from None


def print_face_pass(faces: Any) -> None:
    """The face pass of ``imagent index`` in a few lines: the summary and the first notes (bad photos)."""
    if faces is None or not faces.summary():
        return
    console.print(Text(faces.summary(), style="yellow" if faces.status == "unavailable" else ""))
    for path, note in faces.notes[:10]:
        console.print(Text(f"  {path}: {note}", style="yellow"))
    if len(faces.notes) > 10:
        console.print(f"  ... and {len(faces.notes) - 10} more notes (--json lists all)")


def _write(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@app.callback()
@user_errors
def people(
    ctx: typer.Context,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List the people (groups of faces) of the index: id, name, faces, photos with their paths; the larger
    groups first, tiny ones (fewer than faces.min_group faces) last. Subcommands name, merge, split,
    remove and forget correct them."""
    ctx.obj = {"index": index_dir, "config": config, "sets": set_ or [], "json": json_out}
    if ctx.invoked_subcommand:
        return
    from imagent.index.people import list_people, scan_summary

    ws, gallery = _context(ctx, None, None, None)
    with _face_data(gallery):
        groups = list_people(gallery, ws.settings.faces.min_group)
        summary = scan_summary(gallery)
    rows = []
    for p in groups:
        photos = [{"id": i, "path": gallery.record(i).path} for i in p.photos]
        rows.append({"id": p.id, "name": p.name, "count": len(photos), "faces": len(p.faces), "tiny": p.tiny,
                     "photos": photos})
    if json_out:
        _write({"index": str(gallery.root), "people": rows, "faces": summary})
        return
    if not rows:
        console.print(f"no people yet: {summary['photos_scanned']} photos looked at, {summary['faces']} faces",
                      highlight=False)
        return
    table = Table(title=f"people in {gallery.root}", title_justify="left")
    for col in ("id", "name", "faces", "photos", "files"):
        table.add_column(col, overflow="fold")
    for r in rows:
        files = ", ".join(short_path(ph["path"], 40) for ph in r["photos"][:3])
        more = f" … +{len(r['photos']) - 3}" if len(r["photos"]) > 3 else ""
        table.add_row(str(r["id"]), Text(r["name"] or "(unnamed)"), str(r["faces"]), str(r["count"]),
                      Text(files + more), style="dim" if r["tiny"] else None)
    console.print(table)
    tiny = sum(r["tiny"] for r in rows)
    console.print(f"{len(rows)} {'person' if len(rows) == 1 else 'people'} from {summary['faces']} faces in "
                  f"{summary['photos_scanned']} photos"
                  + (f"; {tiny} tiny group(s) (fewer than {ws.settings.faces.min_group} faces) last"
                     if tiny else "")
                  + ". Name one: imagent people name ID NAME", highlight=False)


@app.command("show")
@user_errors
def show(ctx: typer.Context, person: Annotated[str, typer.Argument(help="a group id or name")],
         index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
         json_out: JsonOpt = False) -> None:
    """One group's faces: face id, photo, box (fractions of the photo) and size; the ids split and remove take."""
    from imagent.index.people import get_person

    _ws, gallery = _context(ctx, index_dir, config, set_)
    with _face_data(gallery):
        p = get_person(gallery, person)
    faces = [{**f.to_dict(), "path": gallery.record(f.photo).path} for f in p.faces]
    if json_out or (ctx.obj or {}).get("json"):
        _write({"id": p.id, "name": p.name, "faces": faces})
        return
    table = Table(title=f"group {p.id}: {p.name or '(unnamed)'}", title_justify="left")
    for col in ("face", "photo", "box", "size", "pinned"):
        table.add_column(col, overflow="fold")
    for f in faces:
        table.add_row(str(f["id"]), Text(short_path(f["path"], 60)), ", ".join(f"{v:.2f}" for v in f["box"]),
                      f"{f['size']} px", "yes" if f["pinned"] else "")
    console.print(table)


def _done(ctx: typer.Context, json_out: bool, data: dict[str, Any], line: str) -> None:
    if json_out or (ctx.obj or {}).get("json"):
        _write(data)
    else:
        console.print(Text(line))


@app.command("name")
@user_errors
def name(ctx: typer.Context, person: Annotated[int, typer.Argument(help="the group id (imagent people)")],
         new_name: Annotated[str | None, typer.Argument(metavar="NAME", help="the person's name")] = None,
         clear: Annotated[bool, typer.Option("--clear", help="take the name off")] = False,
         index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
         json_out: JsonOpt = False) -> None:
    """Name a group. The name is kept through every re-index; search with --where "person = 'NAME'"."""
    from imagent.index.people import name_person

    if (new_name is None) == (not clear):
        raise HintedError("give a NAME, or --clear to take the name off", 'e.g. imagent people name 3 "Anna"')
    _ws, gallery = _context(ctx, index_dir, config, set_)
    with _face_data(gallery):
        done = name_person(gallery, person, None if clear else new_name)
    line = (f"group {person} is now named {done['name']!r}" if done["name"] else f"group {person} has no name now")
    if done["name"]:
        line += f"; search: imagent search --where \"person = {_quoted(done['name'])}\""
    _done(ctx, json_out, done, line)


def _quoted(text: str) -> str:
    from imagent.tools.filter_lang import quote_string

    return quote_string(text)


@app.command("merge")
@user_errors
def merge(ctx: typer.Context, into: Annotated[int, typer.Argument(help="the group that stays")],
          others: Annotated[list[int], typer.Argument(help="groups whose faces join it")],
          index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
          json_out: JsonOpt = False) -> None:
    """One person split over several groups: every face of the others joins the first; the others go."""
    from imagent.index.people import merge_people

    _ws, gallery = _context(ctx, index_dir, config, set_)
    with _face_data(gallery):
        done = merge_people(gallery, into, others)
    _done(ctx, json_out, done, f"{done['faces_moved']} face(s) of group(s) {', '.join(map(str, done['merged']))} "
          f"joined group {into}" + (f" ({done['name']})" if done["name"] else ""))


@app.command("split")
@user_errors
def split(ctx: typer.Context, face: Annotated[int, typer.Argument(help="a face id (imagent people show ID)")],
          to: Annotated[int | None, typer.Option("--to", help="move it to this group (default: a new one)")] = None,
          index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
          json_out: JsonOpt = False) -> None:
    """A face in the wrong group: move it to a new group of its own (or --to another); it stays there."""
    from imagent.index.people import split_face

    _ws, gallery = _context(ctx, index_dir, config, set_)
    with _face_data(gallery):
        done = split_face(gallery, face, to)
    where = f"a new group {done['to']}" if done["new_group"] else f"group {done['to']}"
    _done(ctx, json_out, done, f"face {face} moved from group {done['from']} to {where}")


@app.command("remove")
@user_errors
def remove(ctx: typer.Context, face: Annotated[int, typer.Argument(help="a face id (imagent people show ID)")],
           index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
           json_out: JsonOpt = False) -> None:
    """A face that is nobody (a false detection, a stranger): its box and descriptor are deleted and its photo is
    not looked at again."""
    from imagent.index.people import remove_face

    _ws, gallery = _context(ctx, index_dir, config, set_)
    with _face_data(gallery):
        done = remove_face(gallery, face)
    _done(ctx, json_out, done, f"face {face} deleted (it was in group {done['from']})")


@app.command("forget")
@user_errors
def forget(ctx: typer.Context, yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
           index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
           json_out: JsonOpt = False) -> None:
    """Delete all face data of the index: every face box, descriptor, group and name (the photos, their records
    and search stay). The next `imagent index` finds faces again unless faces.mode = "off"."""
    from imagent.index.people import forget as forget_faces

    ws, gallery = _context(ctx, index_dir, config, set_)
    if not yes:
        if not sys.stdin.isatty():
            raise HintedError("forget deletes every face, descriptor and name of the index", "add --yes to confirm")
        typer.confirm(f"Delete all face data of {gallery.root}?", abort=True)
    done = forget_faces(gallery)
    again = ("the next `imagent index` finds faces again; to keep them off: --set faces.mode=off or "
             "[faces] mode = \"off\" in the config" if ws.settings.faces.mode != "off"
             else "faces.mode is \"off\": `imagent index` will not look for faces")
    done["note"] = again
    _done(ctx, json_out, done,
          f"deleted all face data of {gallery.root}: {done['faces']} faces (boxes and descriptors), "
          f"{done['people']} people, the scans of {done['photos_scanned']} photos; {done['files_removed']} file(s) "
          f"removed ({Path(done['database']).name}), {done.get('face_crops_removed', 0)} cached face crop(s) of the "
          f"web page deleted; nothing about a face is left in the index. {again}")


__all__ = ["app", "print_face_pass"]
