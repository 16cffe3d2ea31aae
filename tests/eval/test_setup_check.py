"""``imagent eval BENCH --check``: a complete layout, a layout with missing images and a wrong root, reported
before any model loads (the workspace factory of the test app refuses to build one)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

SHIPPED = Path(__file__).resolve().parents[2] / "src/imagent/eval/data/stamps_mini"


@pytest.fixture(autouse=True)
def no_workspace(monkeypatch):
    """--check must not build a workspace (no model, no index)."""
    from imagent.cli import eval_cmd

    def no_models(*_a, **_k):
        raise AssertionError("--check must not build a workspace")

    monkeypatch.setattr(eval_cmd, "workspace", no_models)


def app() -> typer.Typer:
    from testkit import eval_app

    return eval_app()


def check(*args: str) -> tuple[int, dict, str]:
    res = CliRunner().invoke(app(), ["eval", *args, "--check", "--json"])
    human = CliRunner().invoke(app(), ["eval", *args, "--check"])
    assert res.exit_code == human.exit_code
    return res.exit_code, json.loads(res.stdout), " ".join(human.output.split())


def test_complete_layout_is_ready():
    code, found, text = check("stamps", "--split", "cir", "--images-root", str(SHIPPED))
    assert code == 0 and found["ok"] and found["problems"] == []
    assert found["queries"] == 73 and found["gallery"] == {"needed": 627, "present": 627, "missing": 0,
                                                            "first_missing": []}
    assert "stamps cir: ready" in text and "627 of 627 present" in text


def test_missing_images_are_counted_and_named(tmp_path):
    root = tmp_path / "stamps"
    (root / "images").mkdir(parents=True)
    shutil.copy(SHIPPED / "captions.jsonl", root)
    rows = [json.loads(x) for x in (SHIPPED / "captions.jsonl").read_text().splitlines()]
    for r in rows[:3]:
        shutil.copy(SHIPPED / r["file"], root / r["file"])
    code, found, text = check("stamps", "--images-root", str(root))
    assert code == 1 and not found["ok"]
    assert found["gallery"]["present"] == 3 and found["gallery"]["missing"] == 624
    assert found["gallery"]["first_missing"] == [r["file"] for r in rows[3:8]]
    assert "624 of 627 gallery images missing" in text and rows[3]["file"] in text and "--allow-missing" in text


def test_wrong_root_and_missing_annotations_say_what_is_expected(tmp_path):
    code, found, text = check("stamps", "--images-root", str(tmp_path / "nope"))
    assert code == 1 and "does not exist" in text and "captions.jsonl" in text  # the layout
    empty = tmp_path / "empty"
    empty.mkdir()
    code, found, text = check("cirr", "--images-root", str(empty))
    assert code == 1 and found["queries"] is None
    assert "cap.rc2.val.json or captions/cap.rc2.val.json" in text  # each file named once
    assert f"{empty} is empty" in text and "<images-root>/dev/<name>.png" in text
    assert "subset_mode = True --set cirr.subset_mode=..." in text  # the protocol options and their flags


def test_cirr_annotations_found_images_missing(tmp_path):
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "benchmarks" / "cirr"
    if not (shared / "cap.rc2.val.json").is_file():
        pytest.skip("../shared CIRR annotations are not available")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "x.png").write_bytes(b"")
    code, found, text = check("cirr", "--annotations", str(shared), "--images-root", str(tmp_path))
    assert code == 1 and found["queries"] == 4181
    assert found["gallery"]["needed"] == 2297 and found["gallery"]["present"] == 0
    assert "2297 of 2297 gallery images missing" in text and found["gallery"]["first_missing"][0].startswith("dev/")


def test_fashioniq_says_its_known_gap(tmp_path):
    code, found, text = check("fashioniq", "--images-root", str(tmp_path / "nope"))
    assert code == 1 and "lack some images" in found["notes"] and "lack some images" in text
    assert any(o["name"] == "caption_join" and o["value"] == "and" for o in found["options"])
