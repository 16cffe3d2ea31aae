"""``imagent duplicates``: the index's groups of exact copies and near-duplicates (nothing is deleted).

Registered on the main app by :mod:`imagent.cli.main`; the groups come from :mod:`imagent.index.duplicates`.
"""

from __future__ import annotations

import json
import sys

from rich.table import Table

from imagent.cli.common import ConfigOpt, IndexOpt, JsonOpt, SetOpt, console, err_console, user_errors
from imagent.cli.render import short_path


@user_errors
def duplicates(index_dir: IndexOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
               json_out: JsonOpt = False) -> None:
    """List groups of exact copies (same bytes) and near-duplicates (the same picture re-encoded or resized:
    perceptual hashes within indexing.duplicate_max_distance bits, confirmed by the pixel model's visual features,
    or else by image vectors that see pixels), with size, date and path per member. Nothing is deleted or moved;
    `imagent search --collapse-duplicates` keeps one photo per group in results."""
    from imagent.api import Workspace

    ws = Workspace.from_config(config, set_)
    gallery = ws.gallery(index_dir)
    if not json_out:
        err_console.print(f"looking for duplicates among {len(gallery)} photos…", highlight=False)
    groups = ws.duplicate_groups(index_dir)
    if json_out:
        sys.stdout.write(json.dumps({"groups": [g.to_dict() for g in groups]}, indent=2, ensure_ascii=False) + "\n")
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
                          (m.taken or "")[:19].replace("T", " "), short_path(m.path, 80))
        console.print(table)
    console.print(f"{len(groups)} group(s); nothing was changed", style="dim")
