"""The ``album`` method end to end with a scripted planner: the result's fields (answer set, source, who chose it,
calls), the second call that re-plans a plan that found nothing, the named fallbacks, the ranking, the registry
and config origins, and ``imagent eval disbench --method album`` on the shipped mini album."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.core.types import Query
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.method import AlbumSearch
from imagent.methods.album.plan import plan_schema
from imagent.methods.base import describe_methods, get_method
from imagent.methods.origins import field_origins

from .conftest import SYNTHETIC_ALBUM

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))
IDS = [row[0] for row in SYNTHETIC_ALBUM]


def plan_reply(**fields) -> str:
    plan = {"target": "", "anchor": "", "relation": "none", "count": 0, "season": "", "exclude": "", "person": ""}
    return json.dumps({**plan, **fields})


@pytest.fixture
def method(album_method):
    return album_method


def test_result_says_code_chose_the_answer_and_what_it_cost(method, scripted):
    model = scripted(default=plan_reply(target="dogs", anchor="lighthouse", relation="same day"))
    result = method(model).search(Query(text="dogs on the day of the lighthouse", id="q", candidates=IDS))
    assert set(result.answer_set) == {"a2", "a3"} and result.source == "method"
    assert result.answer_origin == "code" and result.code_selected_share == 1.0
    assert len(model.calls) == 1 and result.counts["planner_calls"] == 1
    assert result.counts["anchor_candidates"] == 2 and result.counts["anchor_weighed"] == 1
    assert result.ranking.ids[:2] == result.answer_set and len(result.ranking) == len(IDS)
    assert all(a >= b for a, b in zip(result.ranking.scores, result.ranking.scores[1:], strict=False))
    steps = {s.name: s for s in result.trace.steps}
    assert {"album.plan", "album.anchor", "album.constraint", "album.target", "answer"} <= set(steps)
    assert steps["album.plan"].outputs["reads"].startswith("find 'dogs' in the anchor's day")
    assert steps["answer"].outputs["anchor"] == "a1"
    assert result.trace.to_dict()["steps"]  # the plan and each step reach every renderer of the trace
    assert AlbumSearch.estimate_calls(AlbumConfig()) == 2 and AlbumSearch.estimate_calls(AlbumConfig(check=False)) == 1


def test_a_plan_that_finds_nothing_is_checked_once(method, scripted):
    """The relation keeps no photo for any anchor candidate: one more call, the failed relation left out of its
    grammar; the second plan's answer stands when it finds photos."""
    text = "dogs in the month before the snowman, or the day of it"
    model = scripted([(r"That plan found no photo", plan_reply(target="dogs", anchor="snowman", relation="same day"))],
                     default=plan_reply(target="dogs", anchor="snowman", relation="month before"))
    result = method(model).search(Query(text=text, id="q", candidates=IDS))
    assert len(model.calls) == 2 and result.counts["planner_calls"] == 2
    second = model.calls[1][1].json_schema
    assert "month before" in json.dumps(plan_schema(text)) and "month before" not in json.dumps(second)
    assert result.trace.counters.get("album.check_replanned") == 1
    assert result.source == "method" and result.answer_set == ["g1"]
    # Without the check, the same plan falls back by name: never silent.
    model = scripted(default=plan_reply(target="dogs", anchor="snowman", relation="month before"))
    result = method(model, check=False).search(Query(text=text, id="q", candidates=IDS))
    assert len(model.calls) == 1 and result.source == "fallback:target_search" and "kept no photo" in \
        result.source_reason
    assert result.answer_set and result.answer_origin == "code"


def test_unusable_reply_and_missing_people_are_named_fallbacks(method, scripted):
    result = method(scripted(default="no plan here")).search(Query(text="the dogs", id="q", candidates=IDS))
    assert result.source == "fallback:plan_unparsed" and result.answer_set
    assert any("not a plan" in n for s in result.trace.steps for n in s.notes)
    model = scripted(default=plan_reply(target="dogs", anchor="lighthouse", relation="same day", person="Anna"))
    result = method(model).search(Query(text="Anna with dogs on the day of the lighthouse, with Anna", id="q",
                                        candidates=IDS))
    assert result.source == "fallback:without_person" and "no people" in result.source_reason
    assert set(result.answer_set) == {"a2", "a3"}


def test_call_cap_and_registry(method, scripted):
    model = scripted(default=plan_reply(target="dogs", anchor="snowman", relation="month before"))
    result = method(model, max_calls=1).search(Query(text="dogs in the month before the snowman", id="q",
                                                     candidates=IDS))
    assert len(model.calls) == 1 and result.is_error  # the check call was refused by the cap: said, not hidden
    assert get_method("album") is AlbumSearch
    assert "not a paper's" in describe_methods()["album"]["description"]
    origins = field_origins("album", AlbumConfig().model_dump())
    assert {o["origin"] for o in origins.values()} == {"imagent"}


def test_eval_disbench_album_on_the_mini_album(monkeypatch, tmp_path, scripted):
    """``imagent eval disbench --method album``: answer sets scored, the sources counted, one call a query."""
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)
    from imagent.cli.main import app

    rules = [["pink flamingo", plan_reply(target="birds", anchor="pink flamingo", relation="same day")],
             ["seahorse", plan_reply(target="fish", anchor="seahorse", relation="same trip")]]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": rules, "default": "no plan"}))
    cfg = tmp_path / "imagent.toml"
    cfg.write_text(f'[models.script]\nbackend = "scripted"\nmodel = "{script}"\n[roles]\ndefault = "script"\n')
    res = CliRunner().invoke(app, ["eval", "disbench", "--images-root", str(ALBUM), "--method", "album", "--limit",
                                   "2", "--sample", "first", "--config", str(cfg), "--run-dir", str(tmp_path / "run"),
                                   "--index", str(tmp_path / "index"), "--json"])
    assert res.exit_code == 0, res.output[-3000:]
    metrics = json.loads(res.stdout)["metrics"]["metrics"]
    assert metrics["overall/f1"] > 50
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert [r["counts"]["planner_calls"] for r in records] == [1, 1] and all(r["answer_set"] for r in records)
    assert all(r["source"] == "method" for r in records)
    behaviour = json.loads((tmp_path / "run" / "metrics.json").read_text())["behaviour"]
    assert behaviour["sources"] == {"method": 2} and behaviour["counts"]["planner_calls"] == 2
