"""OSCAR end to end with the real offline models (MiniLM in caption mode, Qwen2.5 0.5B in-process), through
the commands a user runs: ``imagent oscar build-library`` on the stamps training split, ``imagent oscar library``,
then ``imagent eval stamps --split cir --method oscar`` with and without demonstrations.

Kept small for CI (two training queries, one evaluated query per run, two verified candidates): a 0.5B model
plans poorly, so this checks that the pipeline completes and what the report and traces show (the plan, the set
sizes, the verifier's effect as a separate stage), not retrieval quality.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture
def user_env(monkeypatch, tmp_path, offline_model_cache):
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(offline_model_cache))
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)


def invoke(*args: str) -> dict | list:
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output[-3000:]
    return json.loads(res.stdout)


def test_build_library_then_eval_with_and_without_demonstrations(user_env, stamps_dir, tmp_path):
    index, lib = tmp_path / "index", tmp_path / "lib.jsonl"
    built = invoke("oscar", "build-library", "stamps", "--split", "train", "--limit", "2", "--images-root",
                   str(stamps_dir), "--index", str(index), "--library", str(lib))
    assert built["added"] + built["no_target"] == 2 and not built["errors"]
    assert built["added"] >= 1, "the composed query alone reaches the first training targets"
    rows = invoke("oscar", "library", str(lib))
    assert len(rows) == built["added"] and all(r["calls"] >= 1 for r in rows)
    entry = invoke("oscar", "library", str(lib), "--show", rows[0]["key"])
    assert entry["steps"][-1]["name"] == "final" and entry["stats"]["atomic_retrievals"] % 10 == 0

    common = ["--split", "cir", "--limit", "1", "--images-root", str(stamps_dir), "--index", str(index),
              "--set", f"library={lib}", "--set", "max_verified=2", "--set", "plan_retries=0",
              "--set", "planner_max_tokens=384"]
    reports = {}
    for name, extra in (("demo", []), ("nodemo", ["--set", "demonstrations=false"])):
        run = tmp_path / name
        out = invoke("eval", "stamps", "--method", "oscar", "--run-dir", str(run), *common, *extra)
        assert out["errors"] == 0 and out["new"] == 1
        rec = json.loads((run / "results.jsonl").read_text().splitlines()[0])
        steps = {s["name"]: s for s in rec["trace"]["steps"]}
        cases = steps["demonstrations"]["outputs"].get("cases", [])
        assert (len(cases) == 1) == (name == "demo")
        plan = steps["plan"]["outputs"]["plan"]
        assert plan["calls"] and plan["steps"][-1]["op"] in ("UNION", "INTERSECT", "DIFFERENCE")
        ops = steps["set_operations"]["outputs"]
        assert ops["composed"] == len(rec["answer_set"]) and all("sizes" in s for s in ops["steps"])
        verified = steps["verify"]["outputs"]["scores"]
        assert 1 <= len(verified) <= 2 and all(0.0 <= v["score"] <= 1.0 for v in verified)
        # one planner call + one verifier call per verified candidate
        assert rec["model_calls"] <= 1 + len(verified)  # cache hits are not counted
        assert set(rec["stages"]) == {"fused", "composed"}
        reports[name] = (run / "report.md").read_text()
    for report in reports.values():
        # the verifier's effect: final vs the composed set before it; the plan and set sizes per query
        assert "| metric | final | fused | composed |" in report and "cir/recall@1" in report
        assert "calls: #" in report and "sets: final=" in report and "verified " in report
