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
(:mod:`imagent.index.people`); every command here goes through the library service
(:class:`imagent.library.LibraryService`), as the web's People page does. Added to the main app by
:mod:`imagent.cli.main`. Options given before the subcommand (``imagent people --index DIR name 3 Anna``) apply to it
too. A group or face id the index does not hold (however large) is one error line.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from imagent.cli.common import (
    ConfigOpt,
    HintedError,
    IndexOpt,
    JsonOpt,
    SetOpt,
    console,
    library,
    user_errors,
)
from imagent.cli.render import short_path
from imagent.core.text import display_path, plural

if TYPE_CHECKING:
    from imagent.library import LibraryService

app = typer.Typer(help="People found in the photos: list, name, merge, split, remove, forget.",
                  invoke_without_command=True, no_args_is_help=False)

_NO_FACES_HINT = ("`imagent index FOLDER` finds faces in photos indexed from a folder (faces.mode = \"auto\"; "
                  "\"on\" for manifests too); the face models come with the offline extra")


def _library(ctx: typer.Context, index_dir: Path | None, config: Path | None, sets: list[str] | None
             ) -> LibraryService:
    """The library service, with options given before the subcommand as defaults."""
    parent = ctx.obj or {}
    return library(config or parent.get("config"), (parent.get("sets") or []) + (sets or []),
                   index_dir or parent.get("index"))


@contextlib.contextmanager
def _face_data(lib: LibraryService) -> Iterator[None]:
    """The index's missing face data as the commands' one hinted error."""
    from imagent.index.face_store import FaceDataMissing

    try:
        yield
    except FaceDataMissing:
        raise HintedError(f"the index at {display_path(lib.gallery.root)} has no face data", _NO_FACES_HINT) \
            from None


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


def _path(lib: LibraryService, photo: str) -> str:
    return display_path(lib.gallery.record(photo).path)


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
    lib = _library(ctx, None, None, None)
    with _face_data(lib):
        groups, summary = lib.people()
    rows = []
    for p in groups:
        photos = [{"id": i, "path": _path(lib, i)} for i in p.photos]
        rows.append({"id": p.id, "name": p.name, "count": len(photos), "faces": len(p.faces), "tiny": p.tiny,
                     "photos": photos})
    if json_out:
        _write({"index": display_path(lib.gallery.root), "people": rows, "faces": summary.to_dict()})
        return
    if not rows:
        console.print(f"no people yet: {plural(summary.photos_scanned, 'photo')} looked at, "
                      f"{plural(summary.faces, 'face')}", highlight=False)
        return
    table = Table(title=f"people in {display_path(lib.gallery.root)}", title_justify="left")
    for col in ("id", "name", "faces", "photos", "files"):
        table.add_column(col, overflow="fold")
    for r in rows:
        files = ", ".join(short_path(ph["path"], 40) for ph in r["photos"][:3])
        more = f" … +{len(r['photos']) - 3}" if len(r["photos"]) > 3 else ""
        table.add_row(str(r["id"]), Text(r["name"] or "(unnamed)"), str(r["faces"]), str(r["count"]),
                      Text(files + more), style="dim" if r["tiny"] else None)
    console.print(table)
    tiny = sum(r["tiny"] for r in rows)
    min_group = lib.settings.faces.min_group
    console.print(f"{len(rows)} {'person' if len(rows) == 1 else 'people'} from {plural(summary.faces, 'face')} in "
                  f"{plural(summary.photos_scanned, 'photo')}"
                  + (f"; {plural(tiny, 'tiny group')} (fewer than {plural(min_group, 'face')}) last" if tiny else "")
                  + ". Name one: imagent people name ID NAME", highlight=False)


@app.command("show")
@user_errors
def show(ctx: typer.Context, person: Annotated[str, typer.Argument(help="a group id or name")],
         index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
         json_out: JsonOpt = False) -> None:
    """One group's faces: face id, photo, box (fractions of the photo) and size; the ids split and remove take."""
    lib = _library(ctx, index_dir, config, set_)
    with _face_data(lib):
        p = lib.person(person)
    faces = [{**f.to_dict(), "path": _path(lib, f.photo)} for f in p.faces]
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


def search_hint(name: str) -> str:
    """The command that lists a person's photos, safe to paste into a POSIX shell whatever the name holds (both
    quote kinds, ``$``, backticks): the filter in the filter language's own quoting, the argument in the shell's."""
    import shlex

    from imagent.tools.filter_lang import quote_string

    return f"imagent search --where {shlex.quote(f'person = {quote_string(name)}')}"


@app.command("name")
@user_errors
def name(ctx: typer.Context, person: Annotated[int, typer.Argument(help="the group id (imagent people)")],
         new_name: Annotated[str | None, typer.Argument(metavar="NAME", help="the person's name")] = None,
         clear: Annotated[bool, typer.Option("--clear", help="take the name off")] = False,
         index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
         json_out: JsonOpt = False) -> None:
    """Name a group. The name is kept through every re-index; search with --where "person = 'NAME'"."""
    if (new_name is None) == (not clear):
        raise HintedError("give a NAME, or --clear to take the name off", 'e.g. imagent people name 3 "Anna"')
    lib = _library(ctx, index_dir, config, set_)
    with _face_data(lib):
        done = lib.name(person, None if clear else new_name)
    line = (f"group {person} is now named {done.name!r}" if done.name else f"group {person} has no name now")
    if done.name:
        line += f"; search: {search_hint(done.name)}"
    _done(ctx, json_out, done.to_dict(), line)


@app.command("merge")
@user_errors
def merge(ctx: typer.Context, into: Annotated[int, typer.Argument(help="the group that stays")],
          others: Annotated[list[int], typer.Argument(help="groups whose faces join it")],
          index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
          json_out: JsonOpt = False) -> None:
    """One person split over several groups: every face of the others joins the first; the others go."""
    lib = _library(ctx, index_dir, config, set_)
    with _face_data(lib):
        done = lib.merge(into, others)
    _done(ctx, json_out, done.to_dict(), f"{plural(done.faces_moved, 'face')} of "
          f"{'group' if len(done.merged) == 1 else 'groups'} {', '.join(map(str, done.merged))} joined group {into}"
          + (f" ({done.name})" if done.name else ""))


@app.command("split")
@user_errors
def split(ctx: typer.Context, face: Annotated[int, typer.Argument(help="a face id (imagent people show ID)")],
          to: Annotated[int | None, typer.Option("--to", help="move it to this group (default: a new one)")] = None,
          index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
          json_out: JsonOpt = False) -> None:
    """A face in the wrong group: move it to a new group of its own (or --to another); it stays there."""
    lib = _library(ctx, index_dir, config, set_)
    with _face_data(lib):
        done = lib.split(face, to)
    where = f"a new group {done.to}" if done.new_group else f"group {done.to}"
    _done(ctx, json_out, done.to_dict(), f"face {face} moved from group {done.from_group} to {where}")


@app.command("remove")
@user_errors
def remove(ctx: typer.Context, face: Annotated[int, typer.Argument(help="a face id (imagent people show ID)")],
           index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
           json_out: JsonOpt = False) -> None:
    """A face that is nobody (a false detection, a stranger): its box and descriptor are deleted and its photo is
    not looked at again."""
    lib = _library(ctx, index_dir, config, set_)
    with _face_data(lib):
        done = lib.remove_face(face)
    _done(ctx, json_out, done.to_dict(), f"face {face} deleted (it was in group {done.from_group})")


@app.command("forget")
@user_errors
def forget(ctx: typer.Context, yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
           index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
           json_out: JsonOpt = False) -> None:
    """Delete all face data of the index: every face box, descriptor, group and name (the photos, their records
    and search stay). The next `imagent index` finds faces again unless faces.mode = "off"."""
    lib = _library(ctx, index_dir, config, set_)
    root = display_path(lib.gallery.root)
    if not yes:
        if not sys.stdin.isatty():
            raise HintedError("forget deletes every face, descriptor and name of the index", "add --yes to confirm")
        typer.confirm(f"Delete all face data of {root}?", abort=True)
    done = lib.forget()
    again = ("the next `imagent index` finds faces again; to keep them off: --set faces.mode=off or "
             "[faces] mode = \"off\" in the config" if lib.settings.faces.mode != "off"
             else "faces.mode is \"off\": `imagent index` will not look for faces")
    _done(ctx, json_out, {**done.to_dict(), "database": display_path(done.database), "note": again},
          f"deleted all face data of {root}: {plural(done.faces, 'face')} (boxes and descriptors), "
          f"{plural(done.people, 'person', 'people')}, the scans of {plural(done.photos_scanned, 'photo')}; "
          f"{plural(done.files_removed, 'file')} removed ({Path(done.database).name}), "
          f"{plural(done.face_crops_removed, 'cached face crop')} of the web page deleted; nothing about a face is "
          f"left in the index. {again}")


__all__ = ["app", "print_face_pass", "search_hint"]
