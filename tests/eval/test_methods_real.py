"""Every LLM method through `imagent eval` on the stamps mini benchmark, with the real offline models
(MiniLM in caption mode, Qwen2.5 0.5B in-process): the command a user runs, the report it writes.

Kept small for CI (one or two queries, small k): a 0.5B model reasons poorly, so these check that the
pipeline completes, what the report shows (stage metrics side by side, calls per step, tool use) and
the model-call counts, not retrieval quality.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory):
    return tmp_path_factory.mktemp("stamps-eval-index") / "index"


@pytest.fixture
def user_env(monkeypatch, tmp_path, offline_model_cache):
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(offline_model_cache))
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)


def run_eval(stamps_dir, index, run_dir, *args):
    res = CliRunner().invoke(app, ["eval", "stamps", "--images-root", str(stamps_dir), "--index", str(index),
                                   "--run-dir", str(run_dir), "--json", "--sample", "first", *args])
    assert res.exit_code == 0, res.output[-3000:]
    out = json.loads(res.stdout)
    assert out["errors"] == 0 and out["new"] >= 1
    return out, (run_dir / "report.md").read_text()


def steps_of(run_dir):
    return [json.loads(line)["trace"]["steps"] for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_cirevl(user_env, stamps_dir, shared_index, tmp_path):
    out, report = run_eval(stamps_dir, shared_index, tmp_path / "run", "--method", "cirevl", "--split", "cir",
                           "--limit", "2")
    assert out["metrics"]["run"]["model_calls"] == 2
    assert "edit_description" in report and "cir/recall@1" in report


def test_imagescope_tir_and_cir(user_env, stamps_dir, shared_index, tmp_path):
    for split in ("tir", "cir"):
        run = tmp_path / split
        _out, report = run_eval(stamps_dir, shared_index, run, "--method", "imagescope", "--split", split,
                               "--limit", "1", "--set", "k=3", "--set", "alpha=1")
        # stage-1/2/3 rankings scored side by side
        for stage in ("stage1", "stage2", "stage3"):
            assert stage in report
        names = [s["name"] for s in steps_of(run)[0]]
        assert any("stage2" in n for n in names) and any("stage3" in n for n in names)


def test_xr_coarse_vs_full(user_env, stamps_dir, shared_index, tmp_path):
    _out, report = run_eval(stamps_dir, shared_index, tmp_path / "run", "--method", "xr", "--split", "cir",
                           "--limit", "1", "--set", "k_prime=3", "--set", "num_questions=2")
    assert "coarse" in report and "full" in report
    steps = {s["name"]: s for s in steps_of(tmp_path / "run")[0]}
    assert steps["coarse.rrf"]["outputs"]
    assert "fine.rerank" in steps


def test_tacir_with_offline_exemplar_search(user_env, stamps_dir, shared_index, stamp_records, minilm, tmp_path):
    from imagent.index.embedding import gallery_from_records

    # The exemplar collection: a held-apart quarter of the stamps, indexed on its own.
    exemplars = tmp_path / "exemplars"
    gallery_from_records(str(exemplars), stamp_records[1::4], None, minilm)
    _out, report = run_eval(
        stamps_dir, shared_index, tmp_path / "run", "--method", "tacir", "--split", "cir", "--limit", "1",
        "--set", "tools.search.backend=exemplar", "--set", f"tools.search.options.source={exemplars}",
        "--set", "tool_policy=always_search",
        # The exemplar folder here is a quarter of the evaluated stamps: keep its results usable.
        "--set", "exclude_gallery_exemplars=false",
    )
    steps = {s["name"]: s for s in steps_of(tmp_path / "run")[0]}
    tool_step = next(s for n, s in steps.items() if n.startswith("tacir.tool"))
    assert tool_step["tool_calls"] >= 1 and tool_step["outputs"]["proxy"]["backend"] == "exemplar"
    assert "tacir.refine" in steps
    assert "tacir.chose_search=1" in report  # how often each tool was chosen
    assert "initial" in report  # T_t^(0) alone, scored beside the final ranking: the tool's effect
