"""``imagent skills list | show ID | rm ID``: the PhotoCraft skill library the user owns.

The library is a JSONL file (one skill per line): ``--path FILE``, else the configured
``methods.photocraft.skills_path``, else ``<user data dir>/skills.jsonl``. It may also be edited by hand;
these commands read it strictly (a broken line is reported with its number, never overwritten).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from imagent.cli.common import ConfigOpt, JsonOpt, console, user_errors
from imagent.core.text import plural

app = typer.Typer(help="List, show or remove the skills PhotoCraft has learned (its semantic memory).",
                  no_args_is_help=True)

PathOpt = Annotated[Path | None, typer.Option("--path", "-p", help="skill library file (default: the configured "
                                              "methods.photocraft.skills_path, else <user data dir>/skills.jsonl)")]


def library_path(path: Path | None, config: Path | None) -> Path:
    """The library file the commands act on (see the module doc)."""
    if path is not None:
        return path.expanduser()
    from imagent.core.config import load_settings
    from imagent.methods.album.skills import default_skills_path

    configured = load_settings(config).methods.get("photocraft", {}).get("skills_path")
    return Path(configured).expanduser() if configured else default_skills_path()


def _library(path: Path | None, config: Path | None):
    from imagent.methods.album.skills import SkillLibrary

    return SkillLibrary(library_path(path, config))


@app.command("list")
@user_errors
def list_(path: PathOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Every skill: id, confidence, support (episodes merged into it), origin and task pattern."""
    lib = _library(path, config)
    skills = lib.load()
    if json_out:
        print(json.dumps({"path": str(lib.path), "skills": [s.to_dict() for s in skills]}, indent=2,
                         ensure_ascii=False))
        return
    if not skills:
        console.print(f"no skills in {lib.path}", highlight=False)
        return
    table = Table(title=f"{plural(len(skills), 'skill')} in {lib.path}", title_justify="left")
    for col in ("id", "confidence", "support", "origin", "task pattern"):
        table.add_column(col, overflow="fold")
    for s in skills:
        table.add_row(s.id, f"{s.confidence:.2f}", str(s.support), s.origin, s.task_pattern)
    console.print(table)


@app.command()
@user_errors
def show(skill_id: Annotated[str, typer.Argument(help="skill id (see `imagent skills list`)")],
         path: PathOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """One skill in full, with the queries it was learned from."""
    skill = _library(path, config).get(skill_id)
    if json_out:
        print(json.dumps(skill.to_dict(), indent=2, ensure_ascii=False))
        return
    for key in ("id", "task_pattern", "strategy", "key_insight", "applicable_when", "confidence", "support",
                "origin", "created", "updated", "source_query"):
        console.print(f"[bold]{key}[/]: {getattr(skill, key)}", highlight=False)
    if len(skill.source_queries) > 1:
        console.print("[bold]merged from[/]:", highlight=False)
        for q in skill.source_queries:
            console.print(f"  - {q}", highlight=False)


@app.command()
@user_errors
def rm(skill_id: Annotated[str, typer.Argument(help="skill id to remove")],
       path: PathOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Remove one skill from the library."""
    lib = _library(path, config)
    skill = lib.remove(skill_id)
    if json_out:
        print(json.dumps({"removed": skill.id, "path": str(lib.path)}))
        return
    console.print(f"removed {skill.id} ({skill.task_pattern}) from {lib.path}", highlight=False)


__all__ = ["app", "library_path"]
