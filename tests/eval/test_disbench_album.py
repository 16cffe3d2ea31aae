"""DISBench end to end on the shipped mini album: EM/F1 against hand-worked cases (empty sets included),
the loader (per-user galleries, captions sidecar, Standard vs Open track), and `imagent eval disbench`
with photocraft and imageseeker driven by the scripted chat backend: answer sets scored, the per-query
table, skills distilled into the run's own library, and `--compare` of the two runs."""

from __future__ import annotations

import json
import shutil
from importlib.resources import files
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app
from imagent.eval import metrics as M
from imagent.eval.datasets import BenchmarkError, Predictions, load_benchmark

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))


# --------------------------------------------------------------------------- EM / F1, worked by hand


@pytest.mark.parametrize(("pred", "gold", "em", "f1"), [
    (["a", "b", "c"], ["b", "c", "d", "e"], 0.0, 4 / 7),  # P = 2/3, R = 1/2 -> 2PR/(P+R) = 4/7
    (["a", "a", "b"], ["b", "a"], 1.0, 1.0),  # a set: order and repeats do not count
    ([], [], 1.0, 1.0),  # both empty: the official evaluate.py scores F1 = 1
    ([], ["a"], 0.0, 0.0),  # only one empty: 0
    (["a"], [], 0.0, 0.0),
    (["x"], ["a", "b"], 0.0, 0.0),
    (["a"], ["a", "b", "c", "d"], 0.0, 0.4),  # P = 1, R = 1/4 -> 0.5/1.25
])
def test_set_em_and_f1_by_hand(pred, gold, em, f1):
    assert M.set_exact_match(pred, gold) == em
    assert M.set_f1(pred, gold) == pytest.approx(f1)


def test_disbench_scores_average_per_group():
    s = M.disbench_scores([["a"], ["a", "b", "c"], []], [["a"], ["b", "c", "d", "e"], []],
                          ["intra-event", "inter-event", "inter-event"])
    assert s["intra/em"] == 100.0 and s["intra/f1"] == 100.0
    assert s["inter/em"] == 50.0 and s["inter/f1"] == pytest.approx(100 * (4 / 7 + 1) / 2)
    assert s["overall/em"] == pytest.approx(200 / 3) and s["overall/f1"] == pytest.approx(100 * (2 + 4 / 7) / 3)


# --------------------------------------------------------------------------- the album and the loader


def test_mini_album_layout_and_queries():
    bench = load_benchmark("disbench", images_root=ALBUM)
    assert bench.options.track == "open"  # the captions sidecar is there
    items = bench.queries()
    assert len(items) >= 20
    assert {it.truth["event_type"] for it in items} == {"intra-event", "inter-event"}
    assert len(bench.queries("intra")) >= 10 and len(bench.queries("inter")) >= 10
    users = bench.users()
    assert len(users) >= 2
    for it in items:  # every answer is one of the user's photos, and the gallery holds only that user's
        user = it.query.extra["user_id"]
        assert it.truth["answer"] and set(it.truth["answer"]) <= set(it.query.candidates)
        assert all(c.startswith(f"{user}/") for c in it.query.candidates)
    rows = bench.gallery_manifest()
    assert 60 <= len(rows) <= 120 and all(Path(r["file"]).is_file() for r in rows)
    assert all(r["caption"] and r["device"] and r["taken_time"] and r["address"] for r in rows)
    assert (ALBUM / "COPYRIGHT").is_file() and "GPL-2" in (ALBUM / "COPYRIGHT").read_text()


def test_track_option_and_caption_sidecar(tmp_path):
    std = load_benchmark("disbench", images_root=ALBUM, track="standard")
    assert std.options.track == "standard" and not any("caption" in r for r in std.gallery_manifest())
    assert std.describe_run({"track": "Standard", "reasons": []})["track"] == "Standard"
    root = tmp_path / "album"
    shutil.copytree(ALBUM, root, ignore=shutil.ignore_patterns("captions"))
    auto = load_benchmark("disbench", images_root=root)
    assert auto.options.track == "standard"  # no sidecar: Standard track
    (root / "captions").mkdir()
    (root / "captions" / "u1001.jsonl").write_text('{"photo_id": "13942060001"}\n')
    bad = load_benchmark("disbench", images_root=root)
    assert bad.options.track == "open"
    with pytest.raises(BenchmarkError, match="caption"):
        bad.gallery_manifest()


def test_answer_set_is_scored_apart_from_the_ranking():
    bench = load_benchmark("disbench", images_root=ALBUM)
    item = bench.queries()[0]
    gold = item.truth["answer"]
    ranking = [*gold, "u1001/13942060999"]  # the ranking has an extra id; the set is exact
    preds = Predictions({item.id: ranking}, sets={item.id: [g.split("/")[1] for g in gold]})
    assert bench.metrics(preds, [item])["overall/em"] == 100.0
    assert bench.metrics(Predictions({item.id: ranking}), [item])["overall/em"] == 0.0
    assert bench.outcome_score(item, ranking, gold) == 1.0
    assert bench.outcome_score(item, ranking, gold[:1]) == pytest.approx(2 / (len(gold) + 1))


# --------------------------------------------------------------------------- `imagent eval disbench`, scripted


def script(tmp_path: Path) -> Path:
    """The agent answers q01 correctly and q02 with one right photo of four; audits pass; skills parse."""
    queries = {json.loads(line)["query_id"]: json.loads(line) for line in (ALBUM / "queries.jsonl").read_text()
               .splitlines()}
    q1, q2 = queries["q01"], queries["q02"]
    answer1 = json.dumps([f"u1001/{a}" for a in q1["answer"]])
    answer2 = json.dumps([f"u1001/{q2['answer'][0]}"])
    rules = [
        ["reusable search strategy", json.dumps({
            "task_pattern": "targets of one kind on the same day as a visually identified anchor",
            "strategy": "Search the anchor with short keywords, read its date, filter that day, search inside.",
            "key_insight": "Scoping to the anchor's day removes look-alikes from other days.",
            "applicable_when": "The query names an anchor seen on a day and asks for other photos of that day."})],
        [r"\[REFLECTION", json.dumps({k: {"note": "fine", "ok": True} for k in ("anchor", "constraint", "target",
                                                                              "completeness")})],
        [r"Query: The birds .* pink flamingo.*\[GetMetadata\]", f"The final answer is: {answer1}"],
        [r"Query: The birds .* pink flamingo.*\[ImageSearch\]",
         '<tool_call>{"name": "GetMetadata", "arguments": {"photo_ids": ["u1001/13942060112"]}}</tool_call>'],
        ["Query: The birds .* pink flamingo",
         '<tool_call>{"name": "ImageSearch", "arguments": {"query": "pink flamingo"}}</tool_call>'],
        [r"Query: The fish .* seahorse.*\[FilterMetadata\]", f"The final answer is: {answer2}"],
        ["Query: The fish .* seahorse", '<tool_call>{"name": "FilterMetadata", "arguments": {"expression": '
         "\"time >= '2014-09-06' and time < '2014-09-07'\", \"save_as\": \"day\"}}</tool_call>"],
    ]
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"rules": rules, "default": "The final answer is: []"}))
    cfg = tmp_path / "imagent.toml"
    cfg.write_text(f'[models.script]\nbackend = "scripted"\nmodel = "{path}"\n[roles]\ndefault = "script"\n')
    return cfg


@pytest.fixture
def user_env(monkeypatch, tmp_path):
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)


def eval_run(cfg: Path, run_dir: Path, index: Path, method: str, *extra: str) -> dict:
    res = CliRunner().invoke(app, ["eval", "disbench", "--images-root", str(ALBUM), "--method", method,
                                   "--limit", "2", "--sample", "first", "--config", str(cfg), "--run-dir", str(run_dir),
                                   "--index", str(index), "--json", *extra])
    assert res.exit_code == 0, res.output[-3000:]
    return json.loads(res.stdout)


def test_eval_disbench_photocraft_and_imageseeker_scripted(user_env, tmp_path):
    cfg = script(tmp_path)
    index = tmp_path / "index"
    pc = eval_run(cfg, tmp_path / "pc", index, "photocraft")
    m = pc["metrics"]["metrics"]
    f1_q2 = 100 * M.set_f1(["x"], ["x", "y", "z", "w"])
    assert m["overall/em"] == 50.0 and m["overall/f1"] == pytest.approx((100 + f1_q2) / 2)
    records = [json.loads(line) for line in (tmp_path / "pc" / "results.jsonl").read_text().splitlines()]
    assert all(r["answer_set"] for r in records)
    steps = {s["name"] for s in records[0]["trace"]["steps"]}
    assert {"turn.1", "turn.2", "turn.3", "memory.skill", "memory.audit", "answer", "memory.distill"} <= steps
    # Semantic memory: q01 (F1 1.0 > 0.85) left a skill in the run's own library, q02 (F1 0.4) did not.
    distill = [next(s for s in r["trace"]["steps"] if s["name"] == "memory.distill") for r in records]
    assert distill[0]["outputs"]["distilled"] is True and distill[1]["outputs"]["distilled"] is False
    lib = tmp_path / "pc" / "skills.jsonl"
    assert len(lib.read_text().splitlines()) == 1
    assert not (tmp_path / "data" / "skills.jsonl").exists()  # the user's own library is untouched
    report = (tmp_path / "pc" / "report.md").read_text()
    assert "track: Open" in report and "## Per query" in report and "| q01 | method | intra-event |" in report
    assert "- **fallback rate: 0.0%** (0 of 2 queries" in report  # beside the headline metrics
    behaviour = json.loads((tmp_path / "pc" / "metrics.json").read_text())["behaviour"]
    assert behaviour["fallback_rate"] == 0.0 and behaviour["sources"] == {"method": 2}
    counts = behaviour["counts"]
    assert counts["episodes"] == 2 and counts["tool_calls.ImageSearch"] == 1 and counts["audits_passed"] == 2
    assert counts["skills_distilled"] == 1 and counts["skills_injected"] == 0
    # The track is derived from the index (caption-mode encoder, the sidecar's captions), with the reason.
    assert "track_reason: its search space 'image' is embedded by caption:" in report
    assert "photos of the index have captions" in report
    assert "reconstruction" not in report  # the ImageSeeker note belongs to ImageSeeker's reports only
    per_query = json.loads((tmp_path / "pc" / "metrics.json").read_text())["per_query"]
    assert per_query[0]["turns"] == 3 and per_query[0]["tool_calls"] == 2 and per_query[0]["tokens"] > 0
    # The scaffold profile (auto: none for the scripted text protocol) is in the run's identity and its reports, and
    # who chose each answer: the model wrote both (no list computed by code was shown), so the share is 0.
    metrics = json.loads((tmp_path / "pc" / "metrics.json").read_text())
    assert metrics["scaffold"] == "none" and "- scaffold: **none**" in report
    config = json.loads((tmp_path / "pc" / "config.json").read_text())
    from imagent.eval.identity import identity

    assert identity(config)["scaffold"] == "none" and config["method"]["params"]["scaffold"] == "auto"
    assert behaviour["code_selected_share"] == 0.0 and behaviour["answer_origins"] == {"model": 2}
    assert "- **code-selected share: 0.0%**" in report and "model 2" in report
    assert [r["origin"] for r in per_query] == ["model", "model"] and [r["code_share"] for r in per_query] == [0, 0]
    assert all(r["answer_origin"] == "model" and r["code_selected_share"] == 0.0 for r in records)

    ims = eval_run(cfg, tmp_path / "is", index, "imageseeker")
    assert ims["metrics"]["metrics"]["overall/em"] == 50.0
    rec = json.loads((tmp_path / "is" / "results.jsonl").read_text().splitlines()[0])
    names = {s["name"] for s in rec["trace"]["steps"]}
    assert not names & {"memory.audit", "memory.skill", "memory.distill"}  # the memoryless baseline

    res = CliRunner().invoke(app, ["eval", "--compare", str(tmp_path / "is"), str(tmp_path / "pc"), "--json"])
    assert res.exit_code == 0, res.output
    compared = json.loads(res.stdout)
    rows = {r["metric"]: r for r in compared["rows"]}
    assert rows["overall/f1"]["delta"] == pytest.approx(0.0) and "inter/em" in rows
    # who chose the answers, beside F1, and each run's scaffold in its label
    assert rows["behaviour/code_selected_share"]["delta"] == pytest.approx(0.0)
    assert set(compared["runs"]) == {"imageseeker (scaffold none)", "photocraft (scaffold none)"}
    keys = [r["metric"] for r in compared["rows"]]
    assert keys.index("behaviour/code_selected_share") < keys.index("behaviour/fallback_rate")


def test_disbench_report_plots_set_scores_and_real_counts_on_two_queries(user_env, tmp_path):
    import re

    cfg = script(tmp_path)
    out = eval_run(cfg, tmp_path / "is", tmp_path / "index", "imageseeker")
    run = tmp_path / "is"
    metrics = json.loads((run / "metrics.json").read_text())
    sets = metrics["set_scores"]
    assert sets["overall"]["queries"] == 2 and sum(v["queries"] for k, v in sets.items() if k != "overall") == 2
    assert sets["overall"]["f1"] == pytest.approx(out["metrics"]["metrics"]["overall/f1"])
    # q01 answered with all 4 photos, q02 with 1 of its 4: precision 100 both, recall 100 and 25.
    assert sets["overall"]["precision"] == pytest.approx(100.0) and sets["overall"]["recall"] == pytest.approx(62.5)
    assert (run / "set_scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (run / "recall_at_k.png").exists() and "recall_curve" not in metrics
    report = (run / "report.md").read_text()
    assert "set_scores.png" in report and "recall_at_k.png" not in report and "overall 2" in report
    # Every count is the real one: no "(N queries)" above the 2 that ran; the agent's turns are one stage.
    assert all(int(n) <= 2 for n in re.findall(r"\((\d+) queries\)", report))
    stages = [s["step"] for s in metrics["steps"]]
    assert "turn" in stages and not any(re.fullmatch(r"turn\.\d+", s) for s in stages)
    turn = next(s for s in metrics["steps"] if s["step"] == "turn")
    assert turn["runs"] == 2 and turn["steps"] >= 2
