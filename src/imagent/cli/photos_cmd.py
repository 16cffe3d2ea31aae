"""``imagent duplicates``: the index's groups of exact copies and near-duplicates (nothing is deleted).

Its command is on this module's ``app`` (added at the top level by :mod:`imagent.cli.main`); the groups come from the
library service (:meth:`imagent.library.LibraryService.duplicates`, over :mod:`imagent.index.duplicates`).
"""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from imagent.cli.common import ConfigOpt, IndexOpt, JsonOpt, SetOpt, console, err_console, library, user_errors
from imagent.cli.render import short_path
from imagent.core.text import display_path, plural

app = typer.Typer()


@app.command()
@user_errors
def duplicates(index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
               json_out: JsonOpt = False) -> None:
    """List groups of exact copies (same bytes) and near-duplicates (the same picture re-encoded or resized:
    perceptual hashes within indexing.duplicate_max_distance bits, confirmed by the pixel model's visual features,
    or else by image vectors that see pixels), with size, date and path per member. Nothing is deleted or moved;
    `imagent search --collapse-duplicates` keeps one photo per group in results."""
    lib = library(config, set_, index_dir)
    if not json_out:
        err_console.print(f"looking for duplicates among {plural(len(lib.gallery), 'photo')}…", highlight=False)
    groups = lib.duplicates()
    if json_out:
        shown = [{**g.to_dict(), "members": [{**m.to_dict(), "path": display_path(m.path)} for m in g.members]}
                 for g in groups]  # paths for showing: a name that is not UTF-8 reads caf\xe9.jpg
        sys.stdout.write(json.dumps({"groups": shown}, indent=2, ensure_ascii=False) + "\n")
        return
    if not groups:
        console.print("no duplicates found")
        return
    for n, g in enumerate(groups, 1):
        what = "exact copies" if g.kind == "exact" else f"near-duplicates (pHash within {g.max_distance} bits)"
        table = Table(title=f"group {n}: {len(g.members)} {what}", title_justify="left")
        for col in ("id", "size", "taken", "path"):
            table.add_column(col, overflow="fold")
        for m in g.members:
            table.add_row(m.id or "(skipped copy)", f"{m.size:,}" if m.size is not None else "?",
                          (m.taken or "")[:19].replace("T", " "), short_path(display_path(m.path), 80))
        console.print(table)
    console.print(f"{plural(len(groups), 'group')}; nothing was changed", style="dim")


__all__ = ["app"]
