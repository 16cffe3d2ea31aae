"""Behaviour accounting through ``imagent eval`` (issue 27): a scripted agent that never answers, one that
answers only after the turn budget, one whose model calls fail, and a real endpoint that refuses every
connection; each query's ``source``, the report's per-query column and fallback rate, ``metrics.json``
``behaviour`` and ``--compare``'s rates."""

from __future__ import annotations

import json
import socket
from importlib.resources import files
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app
from imagent.eval.behaviour import behaviour, record_source

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))


def test_behaviour_sums_sources_and_counts():
    recs = [{"source": "method", "counts": {"turns": 3, "tool_calls.ImageSearch": 2}},
            {"source": "fallback:best_candidates", "source_reason": "no answer", "counts": {"turns": 5}},
            {"source": "error", "error": "model calls failed: boom", "source_reason": "boom", "counts": {}},
            {"error": "RuntimeError: raised"}]  # a query whose method raised: an error without a source
    b = behaviour(recs)
    assert (b["queries"], b["fallback_rate"], b["error_rate"], b["method_rate"]) == (4, 0.25, 0.5, 0.25)
    assert b["sources"] == {"error": 2, "fallback:best_candidates": 1, "method": 1}
    assert b["counts"] == {"tool_calls.ImageSearch": 2, "turns": 8}
    assert b["fallback_reasons"] == {"fallback:best_candidates: no answer": 1}
    assert b["error_reasons"] == {"boom": 1, "RuntimeError: raised": 1}
    assert record_source({"ids": ["a"]}) == "method"  # a record written before sources existed
    assert behaviour([])["fallback_rate"] == 0.0
    assert b["code_selected_share"] is None and b["answer_origins"] == {}  # no record says who chose its answer


def test_behaviour_averages_who_chose_the_answer_sets():
    recs = [{"source": "method", "answer_origin": "code", "code_selected_share": 1.0},
            {"source": "method", "answer_origin": "mixed", "code_selected_share": 0.5},
            {"source": "fallback:best_candidates", "answer_origin": "code", "code_selected_share": 1.0},
            {"source": "method", "answer_origin": "model", "code_selected_share": 0.0},
            {"source": "error", "error": "boom", "answer_origin": "code", "code_selected_share": 1.0},  # no answer
            {"source": "method", "ids": ["a"]}]  # a ranking method: no set, no origin
    b = behaviour(recs)
    assert b["code_selected_share"] == pytest.approx(2.5 / 4)
    assert b["answer_origins"] == {"code": 2, "mixed": 1, "model": 1}


def _config(tmp_path: Path, rules: list, default: str | None, name: str = "behaviour") -> Path:
    # The scripted model's id is its file name, which the session's call cache keys on: a name of its own.
    path = tmp_path / f"{name}-script.json"
    path.write_text(json.dumps({"rules": rules, "default": default}))
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'[models.script]\nbackend = "scripted"\nmodel = "{path}"\n[roles]\ndefault = "script"\n')
    return cfg


def _eval(cfg: Path, run_dir: Path, index: Path, limit: int, *extra: str) -> dict:
    res = CliRunner().invoke(app, ["eval", "disbench", "--images-root", str(ALBUM), "--method", "photocraft",
                                   "--limit", str(limit), "--sample", "first", "--config", str(cfg),
                                   "--run-dir", str(run_dir),
                                   "--index", str(index), "--json", *extra])
    assert res.exit_code == 0, res.output[-3000:]
    return json.loads(res.stdout)


@pytest.fixture
def user_env(monkeypatch, tmp_path):
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)


def search(query: str) -> str:
    return f'<tool_call>{json.dumps({"name": "ImageSearch", "arguments": {"query": query}})}</tool_call>'


def test_never_answers_answers_after_the_budget_and_chat_error(user_env, tmp_path):
    """q01: the agent searches and never answers (the fallback answers); q02: it answers only in the last call
    without tools (its own answer, forced); q03: every call fails (an error, not an answer)."""
    rules = [
        [r"\[REFLECTION", json.dumps({k: {"note": "fine", "ok": True} for k in ("anchor", "constraint", "target",
                                                                              "completeness")})],
        ["Query: The birds", search("pink flamingo")],  # q01: every turn (repeats are refused), never an answer
        ["Query: The fish .*used all 2 turns", 'The final answer is: ["u1001/13942060963"]'],
        ["Query: The fish", search("fish")],  # q02: searches until the budget is spent, then answers
        # q03 (the farm mammals): no rule, no default: every model call raises ChatError
    ]
    cfg = _config(tmp_path, rules, None)
    out = _eval(cfg, tmp_path / "run", tmp_path / "index", 3, "--set", "photocraft.max_turns=2")
    records = {json.loads(line)["qid"]: json.loads(line)
               for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()}
    assert records["q01"]["source"] == "fallback:best_candidates" and records["q01"]["error"] is None
    assert "budget was spent without a usable answer" in records["q01"]["source_reason"]
    assert records["q02"]["source"] == "method" and records["q02"]["counts"]["forced_final_answers"] == 1
    assert records["q03"]["source"] == "error" and records["q03"]["error"].startswith("model calls failed: ")
    assert "scripted model: no rule matches" in records["q03"]["error"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    b = metrics["behaviour"]
    assert b["fallback_rate"] == pytest.approx(1 / 3) and b["error_rate"] == pytest.approx(1 / 3)
    assert b["sources"] == {"error": 1, "fallback:best_candidates": 1, "method": 1}
    # q03's stand-in for its failed calls is a runtime fallback too (counted), though its source is the error
    assert b["counts"]["answer_fallbacks"] == 2 and b["counts"]["forced_final_answers"] == 1
    assert b["counts"]["episodes"] == 3 and b["counts"]["model_call_failed"] == 1
    assert metrics["errors"] == 1 and out["metrics"]["errors"] == 1  # the failed query is an error, not an answer
    # The headline metrics score every query; the method's own answers are scored apart.
    assert metrics["metrics_own"]["queries"] == 1
    report = (tmp_path / "run" / "report.md").read_text()
    assert "- **fallback rate: 33.3%** (1 of 3 queries answered by a fallback path); errors: 33.3% (1)" in report
    assert "own answers (n=1)" in report and "## Behaviour" in report
    rows = {r["qid"]: r for r in metrics["per_query"]}
    assert [rows[q]["source"] for q in ("q01", "q02", "q03")] == ["fallback:best_candidates", "method", "error"]
    assert "| q01 | fallback:best_candidates |" in report and "| q03 | error |" in report
    # No skill is learnt from a fallback's or an error's trajectory.
    assert "skills_distilled" not in b["counts"]

    # --compare puts the fallback and error rates beside the metrics.
    good = _config(tmp_path, [[r"\[REFLECTION", rules[0][1]], ["used all 2 turns", 'The final answer is: '
                                                                '["u1001/13942060963"]'], ["Query:", search("x")]],
                   None, "behaviour-good")
    _eval(good, tmp_path / "good", tmp_path / "index", 3, "--set", "photocraft.max_turns=2")
    res = CliRunner().invoke(app, ["eval", "--compare", str(tmp_path / "run"), str(tmp_path / "good"), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["metric"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows["behaviour/fallback_rate"]["delta"] == pytest.approx(-1 / 3)
    assert rows["behaviour/error_rate"]["delta"] == pytest.approx(-1 / 3)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when this returns: connections are refused


def test_an_eval_against_a_failing_endpoint_reports_errors_not_answers(user_env, tmp_path):
    cfg = tmp_path / "down.toml"
    cfg.write_text(f'[models.down]\nbackend = "openai"\nbase_url = "http://127.0.0.1:{_closed_port()}/v1"\n'
                   'model = "m"\nmax_retries = 0\ntimeout_s = 5\n[roles]\ndefault = "down"\n')
    out = _eval(cfg, tmp_path / "run", tmp_path / "index", 2)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["errors"] == 2 and metrics["completed"] == 0 and out["metrics"]["errors"] == 2
    assert metrics["behaviour"]["error_rate"] == 1.0 and metrics["behaviour"]["fallback_rate"] == 0.0
    assert metrics["metrics"]["overall/f1"] == 0.0  # nothing answered is scored as an answer
    assert metrics["metrics_own"] == {"queries": 0, "metrics": {}}
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert all(r["source"] == "error" and r["error"].startswith("model calls failed") for r in records)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Errors (model calls failed" in report and "errors: 100.0% (2)" in report
