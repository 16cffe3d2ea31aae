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

    common = ["--split", "cir", "--limit", "1", "--sample", "first", "--images-root", str(stamps_dir),
              "--index", str(index),
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
        assert 1 <= len(verified) <= 2
        # Appendix F's score from the first token's yes/no logprobs, never the parsed 1/0/0.5 fallback: a
        # probability strictly inside (0, 1) (the 0.5B model is never certain to float precision here)
        assert "verifier_without_logprobs" not in rec["trace"]["counters"]
        assert all(0.0 < v["score"] < 1.0 and v["score"] != 0.5 for v in verified)
        # exactly one planner call (plan_retries=0) and one verifier call per verified candidate, cached or not
        chat = [c["role"] for st in rec["trace"]["steps"] for c in st["calls"] if c["kind"] == "chat"]
        assert sorted(chat) == sorted(["planner"] + ["verifier"] * len(verified))
        # decision 3: the composed set first, its verified members by score, then the rest in fused order;
        # the reference is never returned
        ids, answer = rec["ids"], rec["answer_set"]
        n = min(len(answer), len(ids))
        assert n >= 1 and ids[:n] == answer[:n] and rec["trace"]["query"]["reference"]["id"] not in ids
        by_score = {v["id"]: v["score"] for v in verified}
        assert [i for i in ids if i in by_score] == sorted(by_score, key=lambda i: -by_score[i])
        assert set(rec["stages"]) == {"fused", "composed"}
        assert sorted(rec["stages"]["composed"][:n]) == sorted(ids[:n])
        reports[name] = (run / "report.md").read_text()
    for report in reports.values():
        # the verifier's effect: final vs the composed set before it; the plan and set sizes per query
        assert "| metric | final | fused | composed |" in report and "cir/recall@1" in report
        assert "calls: #" in report and "sets: final=" in report and "verified " in report


def test_library_on_the_evaluated_split_never_shows_a_query_its_own_plan(user_env, stamps_dir, tmp_path):
    """Issue 27's leakage case and issue 28's grammar on the real 0.5B model: a library built on the stamps CIR
    split, then the same queries evaluated with it. No query sees its own entry (each had it excluded, and
    the report's counts say so), and every plan decoded under the JSON grammar is usable (no fallback)."""
    index, lib = tmp_path / "index", tmp_path / "lib.jsonl"
    built = invoke("oscar", "build-library", "stamps", "--split", "cir", "--limit", "3", "--images-root",
                   str(stamps_dir), "--index", str(index), "--library", str(lib))
    assert built["added"] >= 2 and not built["errors"] and built["non_optimal"] == 0
    keys = {r["key"] for r in invoke("oscar", "library", str(lib))}
    run = tmp_path / "run"
    out = invoke("eval", "stamps", "--method", "oscar", "--split", "cir", "--limit", "3", "--sample", "first",
                 "--images-root",
                 str(stamps_dir), "--index", str(index), "--run-dir", str(run), "--set", f"library={lib}",
                 "--set", "max_verified=1", "--set", "planner_max_tokens=512")
    assert out["errors"] == 0
    for line in (run / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        steps = {s["name"]: s for s in rec["trace"]["steps"]}
        own = f"stamps/cir/{rec['qid']}"
        shown = [c["key"] for c in steps["demonstrations"]["outputs"]["cases"]]
        assert own not in shown and len(shown) == 1
        if own in keys:  # the first 3 queries of the split: those the library was built from
            assert steps["demonstrations"]["outputs"]["excluded"] == [own]
            assert rec["trace"]["counters"]["self_demonstrations_excluded"] == 1
        plan = steps["plan"]
        assert plan["inputs"]["protocol"] == "json"
        assert plan["outputs"]["source"] == "method", plan["outputs"]["attempts"]
        assert "plan_fallbacks" not in rec["trace"]["counters"]


def test_text_to_image_oscar_with_ndcg(user_env, stamps_dir, tmp_path):
    """Sec. 4.5: OSCAR without a reference. A library built on the stamps TIR split, then
    ``imagent eval stamps --split tir --method oscar`` reports NDCG@10 and R@10."""
    index, lib = tmp_path / "index", tmp_path / "lib.jsonl"
    built = invoke("oscar", "build-library", "stamps", "--split", "tir", "--limit", "2", "--images-root",
                   str(stamps_dir), "--index", str(index), "--library", str(lib))
    assert built["added"] >= 1 and not built["errors"]
    entry = invoke("oscar", "library", str(lib), "--show", invoke("oscar", "library", str(lib))[0]["key"])
    assert entry["task"] == "tir" and entry["reference_caption"] == ""
    run = tmp_path / "run"
    out = invoke("eval", "stamps", "--method", "oscar", "--split", "tir", "--limit", "2", "--sample", "first",
                 "--images-root",
                 str(stamps_dir), "--index", str(index), "--run-dir", str(run), "--set", f"library={lib}",
                 "--set", "max_verified=1")
    assert out["errors"] == 0
    metrics = json.loads((run / "metrics.json").read_text())
    flat = json.dumps(metrics)
    assert "tir/ndcg@10" in flat and "tir/recall@10" in flat
    rec = json.loads((run / "results.jsonl").read_text().splitlines()[0])
    steps = {s["name"]: s for s in rec["trace"]["steps"]}
    assert steps["plan"]["outputs"]["plan"]["calls"] and not rec["trace"]["query"].get("reference")
