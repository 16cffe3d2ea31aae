"""``imagent oscar library``: list and show entries of a golden library file; a torn last line (a build killed
mid-write) is skipped and the next append starts on a fresh line; clear errors for a missing file or key."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from imagent.cli.main import app
from imagent.methods.oscar.library import GoldenLibrary, LibraryEntry


def entry(key: str, modification: str, optimal: bool = True) -> LibraryEntry:
    return LibraryEntry(
        key=key, context=f"{modification} A frog.", embedding=[1.0, 0.0], embedder="test", modification=modification,
        reference_caption="A frog.", rewrites={"positive": ["a toad"], "negative": ["water"]},
        calls=[{"name": "caption_search_text", "arguments": {"query": "a toad", "top_k": 10}, "polarity": "+"},
               {"name": "caption_search_dual", "arguments": {"query": "water", "top_k": 5}, "polarity": "-"}],
        steps=[{"name": "positive", "op": "UNION", "operands": [0]},
               {"name": "negative", "op": "INTERSECT", "operands": [1]},
               {"name": "final", "op": "DIFFERENCE", "operands": ["positive", "negative"]}],
        stage1={"selected": ["a"], "objective": 1.02, "optimal": optimal},
        stage2={"positive": ["a"], "negative": ["b"], "objective": 0.9, "optimal": True},
        stats={"targets": 1, "targets_kept": 1, "final_size": 3},
    )


def test_list_show_and_torn_line(tmp_path):
    path = tmp_path / "lib.jsonl"
    lib = GoldenLibrary(path)
    lib.append(entry("stamps/train/1", "a toad instead"))
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"key": "stamps/train/2", "cont')  # killed mid-write
    assert [e.key for e in GoldenLibrary(path).entries()] == ["stamps/train/1"]
    GoldenLibrary(path).append(entry("stamps/train/3", "two of them", optimal=False))
    assert [e.key for e in GoldenLibrary(path).entries()] == ["stamps/train/1", "stamps/train/3"]

    runner = CliRunner()
    rows = json.loads(runner.invoke(app, ["oscar", "library", str(path), "--json"]).stdout)
    assert [(r["key"], r["calls"], r["negatives"], r["ops"], r["optimal"]) for r in rows] == [
        ("stamps/train/1", 2, 1, ["UNION", "INTERSECT", "DIFFERENCE"], True),
        ("stamps/train/3", 2, 1, ["UNION", "INTERSECT", "DIFFERENCE"], False)]
    shown = runner.invoke(app, ["oscar", "library", str(path), "--show", "stamps/train/3"])
    assert shown.exit_code == 0 and "<tool_call>" in shown.output and '"set_operation"' in shown.output
    table = runner.invoke(app, ["oscar", "library", str(path)])
    assert table.exit_code == 0 and "trajectories" in table.output and "UNION" in table.output
    assert "1 not proved optimal" in table.output and "optimal" in table.output
    missing = runner.invoke(app, ["oscar", "library", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2 and "no golden library" in missing.output
    unknown = runner.invoke(app, ["oscar", "library", str(path), "--show", "nope"])
    assert unknown.exit_code == 2 and "no entry 'nope'" in unknown.output
