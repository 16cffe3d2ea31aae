"""Rendering results and traces for people (Rich); the JSON form is :func:`imagent.api.result_json`."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from imagent.api import result_rows
from imagent.core.types import Result
from imagent.index.gallery import Gallery


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_trace(console: Console, result: Result) -> None:
    t = result.trace
    tree = Tree(f"[bold]trace[/] {t.method}: {t.model_calls} model calls, {t.seconds:.2f} s")
    for step in t.steps:
        d = step.to_dict()
        label = f"[cyan]{step.name}[/] {step.seconds:.2f} s"
        if d["model_calls"] or d["cached_calls"]:
            label += f", {d['model_calls']} calls ({d['cached_calls']} cached)"
        if d["tool_calls"]:
            label += f", {d['tool_calls']} tool calls"
        node = tree.add(label)
        for k, v in step.outputs.items():
            node.add(f"{k}: {_short(v)}")
        for n in step.notes:
            node.add(f"[yellow]note[/] {n}")
    if t.counters:
        tree.add(f"counters: {t.counters}")
    console.print(tree)


def print_result(console: Console, result: Result, gallery: Gallery, title: str = "") -> None:
    table = Table(title=title or None)
    for col in ("rank", "id", "score", "caption"):
        table.add_column(col, overflow="fold")
    for row in result_rows(result, gallery):
        table.add_row(str(row["rank"]), row["id"], f"{row['score']:.4f}", row["caption"])
    console.print(table)
    print_trace(console, result)
