"""Rendering results and traces for people (Rich); the JSON form is :func:`imagent.api.result_json`."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from imagent.api import result_rows
from imagent.cli.terminal import plain
from imagent.core.text import plural
from imagent.core.types import MATCH_POSSIBLE, MATCH_STRONG, Result
from imagent.index.gallery import Gallery


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _turn_lines(out: dict[str, Any]) -> list[str]:
    """An agent turn, readably: its reasoning, each tool call (tool, arguments, what came back), the answer
    and any feedback (the full fields are in ``--json``)."""
    lines = []
    if out.get("reasoning"):
        lines.append(f"[dim]thought[/] {escape(_short(' '.join(str(out['reasoning']).split()), 240))}")
    for c in out.get("calls") or []:
        args = escape(_short(c.get("arguments") or {}, 160))
        mark = "[red]error[/] " if c.get("error") else ""
        seen = escape(_short(c.get("observation", ""), 200))
        lines.append(f"[bold]{escape(str(c.get('tool')))}[/] {args} -> {mark}{seen}")
    if out.get("answer") is not None:
        lines.append(f"[green]answer[/] {escape(_short(out['answer'], 200))}")
    if out.get("feedback"):
        lines.append(f"[yellow]feedback[/] {escape(_short(out['feedback'], 200))}")
    return lines or [escape(f"{k}: {_short(v)}") for k, v in out.items()]


def _is_turn(out: dict[str, Any]) -> bool:
    """An agent turn's outputs (:mod:`imagent.agents.runtime`): its reasoning and tool calls, or its answer."""
    return "reasoning" in out and ("tool" in out or "calls" in out or "answer" in out)


def print_trace(console: Console, result: Result) -> None:
    t = result.trace
    # Everything from the method's outputs (captions, model text, file names) is escaped: text, never markup.
    tree = Tree(f"[bold]trace[/] {escape(t.method)}: {plural(t.model_calls, 'model call')}, {t.seconds:.2f} s")
    for step in t.steps:
        d = step.to_dict()
        label = f"[cyan]{escape(step.name)}[/] {step.seconds:.2f} s"
        if d["model_calls"] or d["cached_calls"]:
            label += f", {plural(d['model_calls'], 'call')} ({d['cached_calls']} cached)"
        if d["tool_calls"]:
            label += f", {plural(d['tool_calls'], 'tool call')}"
        node = tree.add(label)
        for line in _turn_lines(step.outputs) if _is_turn(step.outputs) else [
                escape(f"{k}: {_short(v)}") for k, v in step.outputs.items()]:
            node.add(line)
        for n in step.notes:
            node.add(f"[yellow]note[/] {escape(n)}")
    if t.counters:
        tree.add(escape(f"counters: {t.counters}"))
    console.print(tree)


# What a result's score is, by method (shown under the results and in `imagent search --help`).
SCORE_MEANING: dict[str, str] = {
    "clip": "cosine similarity of the query (text, fused with the reference) and the image vector; -1..1",
    "caption": "cosine similarity of the query text and the image's captions (text embedder); -1..1",
    "cirevl": "cosine similarity of the LLM-edited target description and the image vector; -1..1",
    "imagescope": "stage-1 fused cosine s (tau * caption + (1 - tau) * image, mean over 3 descriptions); "
                  "stage 2 adds 10 per verified proposition (10 * matches + s), stage 3 puts its pick 10 above",
    "xr": "the top k': the question agents' re-ranking score (questions answered right + weighted similarity); "
          "below them reciprocal-rank fusion shifted under it (only the order counts)",
    "tacir": "cos(target description, image) + cos(tool proxy, image): up to 2 with a proxy",
}
SCORE_HELP = "Scores by method (higher is better; compare within one method only): " + " | ".join(
    f"{m}: {t}" for m, t in SCORE_MEANING.items()) + "."


def short_path(path: str, limit: int = 48) -> str:
    """A path to show in a table: relative to the working directory when under it, ``~`` for the home
    folder, the middle elided when still long (the file name is always kept)."""
    from pathlib import Path

    p = Path(path).expanduser()
    try:
        text = str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        home = str(Path.home())
        text = "~" + str(p)[len(home):] if str(p).startswith(home + "/") else str(p)
    if len(text) <= limit:
        return text
    tail = f"{p.parent.name}/{p.name}" if p.parent.name else p.name
    return "…/" + tail if len(tail) <= limit - 2 else "…/" + p.name


# ``matched_by`` in words (imagent.index.pixels.answered_by).
ANSWERED = {"pixels": "pixels (the image encoder, or the pixel model's labels)", "caption": "caption",
            "names": "file-name words, date and place", "looks": "looks (the pixel model's visual features)",
            "nothing": "nothing (no caption, no pixels seen, no names)", "text": "text read in the photo"}


def answered_words(by: str) -> str:
    """``matched_by`` in words; ``text+pixels`` is both ("text read in the photo and pixels (...)")."""
    return " and ".join(ANSWERED.get(part, part) for part in by.split("+"))


def _cell(row: dict[str, Any], col: str) -> str:
    """A result row's cell: the date without seconds' fractions, labels by name (those above the cards' floor)."""
    value = row.get(col)
    if col == "taken":
        return (value or "")[:19].replace("T", " ")
    if col == "labels":
        return ", ".join(x["name"] for x in value or [])
    if col == "text":  # the words read in the photo, when the search matched them: its first lines
        return " / ".join(x if len(x) <= 40 else x[:39] + "…" for x in (value or [])[:3])
    return value or ""


NARROW = 110  # columns below which results are stacked (one block per photo) instead of a wide table


def fit_path(path: str, limit: int) -> str:
    """:func:`short_path`, then cut in the middle to ``limit`` characters at most (the end of the file name kept)."""
    text = short_path(path, limit)
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def match_summary(result: Result, gallery: Gallery) -> str:
    """One line on where a ranking's matches stop (:mod:`imagent.index.levels`): how many strong and possible matches
    it holds and what the rest of the gallery is; "" for a ranking without match levels."""
    cut = result.ranking.cut
    if cut is None or result.answer_set is not None:
        return ""
    levels = [cut.level(float(s)) for s in result.ranking.scores]
    strong, possible = levels.count(MATCH_STRONG), levels.count(MATCH_POSSIBLE)
    if not strong and not possible:  # nothing kept: the cut's own warning says it (matches_only)
        return "no photo matches: the best scored like the rest of the library" if result.ranking.ids else ""
    shown = " and ".join(plural(n, what + " match", what + " matches") for n, what in
                         ((strong, "strong"), (possible, "possible")) if n)
    none = len(levels) - strong - possible
    return shown + (f"; the other {none} shown do not match" if none else
                    "; the other photos did not match (--top-k N lists more, each with its level)")


def _first_cell(row: dict[str, Any], levels: bool) -> str:
    return row["match"] if levels else f"{row['score']:.4f}"


def _wide_table(rows: list[dict[str, Any]], extra: list[str], title: str, levels: bool) -> Table:
    table = Table(title=title or None)
    for col in ("rank", "match" if levels else "score", "id", "path", *extra, "caption"):
        table.add_column("by" if col == "matched_by" else col, overflow="fold")
    for row in rows:
        cells = [str(row["rank"]), _first_cell(row, levels), row["id"], short_path(row["path"] or "")]
        cells += [_cell(row, c) for c in extra]
        table.add_row(*(plain(c) for c in (*cells, row["caption"] or "")))  # text, never markup
    return table


def _stacked_table(rows: list[dict[str, Any]], extra: list[str], title: str, width: int, levels: bool) -> Table:
    """A narrow terminal's results: rank and match (or score), then one block per photo: its path on one line
    (shortened to fit), its id, when and where, labels, what matched it, and the caption (wrapped)."""
    table = Table(title=title or None, show_lines=True)
    table.add_column("rank", no_wrap=True, justify="right")
    table.add_column("match" if levels else "score", no_wrap=True)
    table.add_column("photo", overflow="fold")
    room = max(20, width - 29)  # the photo column: the width less the first two columns, borders and padding
    for row in rows:
        when_where = " · ".join(x for x in (_cell(row, "taken"), row.get("place") or "") if x)
        lines = [fit_path(row["path"] or "", room), row["id"], when_where]
        lines += [f"{'by' if c == 'matched_by' else c}: {_cell(row, c)}" for c in extra
                  if c not in ("taken", "place") and _cell(row, c)]
        lines.append(row["caption"] or "")
        table.add_row(str(row["rank"]), _first_cell(row, levels), plain("\n".join(x for x in lines if x)))
    return table


def print_result(console: Console, result: Result, gallery: Gallery, title: str = "") -> None:
    """The results as a table (stacked, one block per photo, on a terminal narrower than :data:`NARROW`
    columns: a path never folds over lines), where the matches stop, what answered them, the score's meaning and the
    trace."""
    rows = result_rows(result, gallery)
    answered = {r.get("matched_by") for r in rows} - {None}
    levels = any(r["match"] is not None for r in rows)  # a match column instead of the raw score (kept in --json)
    # What answered each result: a column when it differs between rows, else one line under the table.
    # the text read in the photos: when the search matched it, or every result has some (a text filter's listing)
    with_text = result.text_matches or (rows and all(r.get("text") for r in rows))
    shown = ("taken", "place", "labels", "text") if with_text else ("taken", "place", "labels")
    extra = [c for c in shown if any(r.get(c) for r in rows)] + (
        ["matched_by"] if len(answered) > 1 else [])
    if rows:
        console.print(_stacked_table(rows, extra, title, console.width, levels) if console.width < NARROW
                      else _wide_table(rows, extra, title, levels))
    else:  # nothing shown: what the search said about it (a filter's near miss: use place ~ 'Kyoto')
        for warning in result.warnings:
            console.print(warning, style="yellow", highlight=False, markup=False, soft_wrap=True)
    summary = match_summary(result, gallery)
    if summary:
        console.print(summary, highlight=False, markup=False)
    if len(answered) == 1:
        console.print(f"every result answered by its {answered_words(next(iter(answered)))}",
                      style="dim", highlight=False, markup=False)
    if result.is_error:
        console.print(f"the method could not answer (error: {result.source_reason}); shown instead: a stand-in, "
                      "so the answer is never empty", style="yellow", highlight=False, markup=False)
    elif result.is_fallback:
        console.print(f"not the method's own answer: {result.source}"
                      + (f" ({result.source_reason})" if result.source_reason else ""), style="yellow",
                      highlight=False, markup=False)
    meaning = SCORE_MEANING.get(result.trace.method)
    if meaning:  # with match levels the score itself is in --json; what it measures is said either way
        console.print(f"score: {meaning}" + (" (the match column reads it; --json has the number)" if levels else ""),
                      style="dim", highlight=False)
    print_trace(console, result)
