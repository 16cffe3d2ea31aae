"""End to end: `imagent eval` on the stamps mini benchmark with the real baselines (caption mode,
MiniLM), resuming, a SIGKILLed run, stage reports, comparisons."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.api import Workspace
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking
from imagent.eval.identity import differences, select_items
from imagent.eval.runner import ResultsLog, RunSpec, ensure_index, limit_items, run_eval
from imagent.methods.base import METHODS, Method, register_method
from testkit import eval_app as app

pytestmark = pytest.mark.slow

SLOW_METHOD = '''
import os, time
from imagent.methods.base import METHODS, register_method
from imagent.methods.baselines import CaptionBaseline

if "slow_caption" not in METHODS:
    @register_method
    class SlowCaption(CaptionBaseline):
        """caption, with a pause per query so a test can kill a run half-way"""
        name = "slow_caption"

        def run(self, query, top_k, trace):
            time.sleep(float(os.environ.get("IMAGENT_TEST_SLOW", "0")))
            return super().run(query, top_k, trace)
'''

KILL_SCRIPT = '''
import sys
sys.path.insert(0, sys.argv[1])
import slow_method  # noqa: F401  (registers slow_caption)
from pathlib import Path
from imagent.api import Workspace
from imagent.eval.runner import RunSpec, run_eval
args = [Path(a) for a in sys.argv[2:]]
run_eval(Workspace.from_config(), RunSpec(benchmark="stamps", method="slow_caption", annotations=args[0],
         images_root=args[1], index=args[2], run_dir=args[3], limit=6))
'''


@register_method
class TwoStage(Method):
    """Test method: a coarse stage (reverse gallery order) and a final one (caption baseline order)."""

    name = "test_two_stage"
    tasks = frozenset({"tir", "cir"})

    def run(self, query: Query, top_k: int, trace: Trace):
        from imagent.methods.base import get_method

        with trace.step("coarse"):
            ids = [i for i in reversed(self.ctx.gallery.ids) if i not in query.exclude][:top_k]
            coarse = Ranking(ids, [0.0] * len(ids))
        final = get_method("caption")(self.ctx).run(query, top_k, trace)
        return final, {"coarse": coarse}


def invoke(*args: str) -> dict:
    res = CliRunner().invoke(app(), ["eval", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def env(tmp_path_factory, stamps_root):
    """Queries (the shipped file, else one made here), and one gallery index shared by every run."""
    base = tmp_path_factory.mktemp("eval-e2e")
    shipped = Path(__file__).resolve().parents[2] / "src/imagent/eval/data/stamps_mini/queries.json"
    ann = base / "queries.json"
    if shipped.is_file():
        ann.write_text(shipped.read_text())
    else:
        rows = [json.loads(x) for x in (stamps_root / "captions.jsonl").read_text().splitlines()[:40]]
        qs = [{"pairid": i, "task": "tir", "reference": None, "caption": r["caption"], "target_hard": r["id"],
               "target_soft": {r["id"]: 1.0}} for i, r in enumerate(rows[:6])]
        qs += [{"pairid": 100 + i, "task": "cir", "reference": rows[i]["id"], "caption": rows[20 + i]["caption"],
                "target_hard": rows[20 + i]["id"], "target_soft": {rows[20 + i]["id"]: 1.0}} for i in range(6)]
        ann.write_text(json.dumps(qs))
    index = base / "index"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IMAGENT_DATA_DIR", str(base / "data"))
        mp.setenv("IMAGENT_CACHE_DIR", os.environ.get("IMAGENT_TEST_CACHE_DIR") or str(base / "cache"))
        from imagent.eval.datasets import load_benchmark

        info = ensure_index(Workspace.from_config(), load_benchmark("stamps", ann), "all", stamps_root, index, base)
        assert info["built"] and info["images"] == 627
    (base / "slow_method.py").write_text(SLOW_METHOD)
    return {"base": base, "ann": ann, "root": stamps_root, "index": index}


def common(env) -> list[str]:
    return ["--annotations", str(env["ann"]), "--images-root", str(env["root"]), "--index", str(env["index"])]


def test_caption_run_writes_everything_and_resumes(env, tmp_path):
    run = tmp_path / "run"
    first = invoke("stamps", "--method", "caption", "--limit", "4", "--run-dir", str(run), *common(env))
    assert first["new"] == 4 and first["already_done"] == 0 and first["errors"] == 0
    for name in ("config.json", "results.jsonl", "metrics.json", "report.md", "recall_at_k.png", "time_per_stage.png"):
        assert (run / name).is_file(), name
    for png in ("recall_at_k.png", "time_per_stage.png"):
        assert (run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = (run / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4
    rec = json.loads(lines[0])
    assert len(rec["ids"]) == 50 and rec["trace"]["steps"][0]["name"] == "retrieve"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["queries"] == 4 and metrics["completed"] == 4 and metrics["limited"]
    assert "overall/recall@10" in metrics["metrics"] and "overall/map@10" in metrics["metrics"]
    assert metrics["steps"][0]["step"] == "retrieve" and metrics["steps"][0]["runs"] == 4
    report = (run / "report.md").read_text()
    assert "| overall/recall@1 |" in report and "| retrieve | 4 |" in report
    assert "recall_at_k.png" in report and "time_per_stage.png" in report
    config = json.loads((run / "config.json").read_text())
    assert config["method"]["params"] == {"concurrency": None, "max_calls": None,
                                                "include_reference_caption": False}
    # The same command again: nothing new to run, same numbers.
    again = invoke("stamps", "--method", "caption", "--limit", "4", "--run-dir", str(run), *common(env))
    assert again["new"] == 0 and again["already_done"] == 4
    assert again["metrics"]["metrics"] == first["metrics"]["metrics"]
    # A larger limit is another run: its own folder by default, and refused in this one (the limit named).
    more = CliRunner().invoke(app(), ["eval", "stamps", "--method", "caption", "--limit", "6", "--run-dir", str(run),
                                      *common(env)])
    assert more.exit_code == 2 and "selection.limit: 4 -> 6" in " ".join(more.output.split())
    assert json.loads((run / "metrics.json").read_text())["queries"] == 4


def test_every_baseline_runs(env, tmp_path):
    # No --images-root: the shared index built for this benchmark with these encoders is reused as is.
    clip = invoke("stamps", "--method", "clip", "--limit", "4", "--workers", "2", "--run-dir", str(tmp_path / "clip"),
                  "--annotations", str(env["ann"]), "--index", str(env["index"]))
    assert clip["errors"] == 0 and clip["metrics"]["metrics"]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": "a red bird"}))
    sets = ["--set", "models.s.backend=scripted", "--set", f"models.s.model={script}", "--set", "roles.default=s"]
    out = invoke("stamps", "--method", "cirevl", "--split", "cir", "--limit", "3",
                 "--run-dir", str(tmp_path / "cirevl"), *common(env), *sets)
    assert out["errors"] == 0 and out["new"] == 3
    recs = [json.loads(x) for x in (tmp_path / "cirevl" / "results.jsonl").read_text().splitlines()]
    refs = {it["pairid"]: it["reference"] for it in json.loads(env["ann"].read_text()) if it["task"] == "cir"}
    for rec in recs:
        assert refs[int(rec["qid"])] not in rec["ids"]  # CIR: the reference is never returned
    run_info = out["metrics"]["run"]
    assert run_info["model_calls"] + run_info["cached_calls"] >= 3  # one edit per query
    assert "edit_description" in (tmp_path / "cirevl" / "report.md").read_text()
    assert set(out["metrics"]["metrics"]) >= {"cir/recall@1", "overall/map@50"}
    # cirevl cannot answer text-only queries: refused up front with a hint, nothing run.
    res = CliRunner().invoke(app(), ["eval", "stamps", "--method", "cirevl", "--limit", "2",
                                     "--run-dir", str(tmp_path / "bad"), *common(env), *sets])
    assert res.exit_code == 2 and "--split cir" in res.output


def test_stage_rankings_are_scored_side_by_side_and_compare(env, tmp_path):
    staged = invoke("stamps", "--method", "test_two_stage", "--limit", "4", "--run-dir", str(tmp_path / "a"),
                    *common(env))
    metrics = staged["metrics"]
    assert set(metrics["stages"]) == {"coarse"}
    assert metrics["stages"]["coarse"]["overall/recall@50"] <= metrics["metrics"]["overall/recall@50"]
    assert "| metric | final | coarse |" in (tmp_path / "a" / "report.md").read_text()
    invoke("stamps", "--method", "caption", "--limit", "4", "--run-dir", str(tmp_path / "b"), *common(env))
    res = CliRunner().invoke(app(), ["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.stdout)
    row = next(r for r in cmp["rows"] if r["metric"] == "overall/recall@1")
    assert row["delta"] == pytest.approx(row["caption"] - row["test_two_stage"])
    assert any(r["metric"] == "stage/coarse/overall/recall@1" for r in cmp["rows"])
    table = CliRunner().invoke(app(), ["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert table.exit_code == 0 and "delta" in table.output


def test_changed_config_is_refused_and_default_run_dir_resumes(env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = invoke("stamps", "--method", "caption", "--limit", "2", *common(env))
    run_dir = Path(first["run_dir"])
    assert run_dir.parent.name == "runs" and run_dir.name.startswith("stamps-all-caption-")
    assert invoke("stamps", "--method", "caption", "--limit", "2", *common(env))["new"] == 0
    res = CliRunner().invoke(app(), ["eval", "stamps", "--method", "caption", "--limit", "2", "--run-dir",
                                     str(run_dir), "--set", "include_reference_caption=true", *common(env)])
    assert res.exit_code == 2 and "different configuration (differs in: method.params.include_reference_caption: " \
        "false -> true)" in " ".join(res.output.split())
    # Another setting means another default directory, not a clash.
    other = invoke("stamps", "--method", "caption", "--limit", "2", "--set", "include_reference_caption=true",
                   *common(env))
    assert Path(other["run_dir"]) != run_dir and other["new"] == 2


def test_killed_run_resumes_to_the_clean_metrics(env, tmp_path, monkeypatch):
    sys.path.insert(0, str(env["base"]))
    try:
        spec = importlib.util.spec_from_file_location("slow_method", env["base"] / "slow_method.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(env["base"]))
    assert "slow_caption" in METHODS
    killed = tmp_path / "killed"
    script = tmp_path / "kill_me.py"
    script.write_text(KILL_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(env["base"]), str(env["ann"]), str(env["root"]), str(env["index"]),
         str(killed)],
        env={**os.environ, "IMAGENT_TEST_SLOW": "1.0"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    results = killed / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if results.is_file() and results.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    done_before = results.read_text().count("\n")
    assert 1 <= done_before < 6
    with open(results, "a") as f:  # as if the kill had also torn a line mid-write
        f.write('{"qid": "torn", "ids": ["a"')
    ws = Workspace.from_config()
    spec_kw = {"benchmark": "stamps", "method": "slow_caption", "annotations": env["ann"],
               "images_root": env["root"], "index": env["index"], "limit": 6}
    resumed = run_eval(ws, RunSpec(run_dir=killed, **spec_kw))
    assert resumed.already_done == done_before and resumed.new == 6 - done_before and resumed.errors == 0
    clean = run_eval(ws, RunSpec(run_dir=tmp_path / "clean", **spec_kw))
    assert clean.new == 6
    assert resumed.metrics["metrics"] == clean.metrics["metrics"]
    lines = results.read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(x)["qid"] != "torn" for x in lines)


# ----------------------------------------------------------------------------- units


def test_results_log_repairs_torn_tail_and_prefers_successes(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"qid": "1", "ids": ["a"], "error": null}\n{"qid": "2", "error": "boom"}\n{"qid": "3", "id')
    log = ResultsLog(path)
    assert path.read_text().endswith("\n")
    log.append({"qid": "2", "ids": ["b"], "error": None})
    log.append({"qid": "1", "error": "later failure"})
    loaded = log.load()
    assert set(loaded) == {"1", "2"}
    assert loaded["1"]["ids"] == ["a"] and loaded["2"]["ids"] == ["b"]


def test_limit_keeps_whole_groups():
    from imagent.eval.datasets import EvalItem

    items = [EvalItem(Query("t", id=f"{d}:{r}"), group=str(d)) for d in range(3) for r in range(2)]
    assert [it.id for it in limit_items(items, 2)] == ["0:0", "0:1", "1:0", "1:1"]
    assert limit_items(items, None) == items


def test_runs_differing_in_limit_keep_two_folders_and_a_compare_lives_in_neither(env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = invoke("stamps", "--method", "caption", "--limit", "3", *common(env))
    b = invoke("stamps", "--method", "caption", "--limit", "2", *common(env))
    run_a, run_b = Path(a["run_dir"]), Path(b["run_dir"])
    assert run_a != run_b and a["run_id"] != b["run_id"] and a["new"] == 3 and b["new"] == 2
    assert json.loads((run_a / "metrics.json").read_text())["queries"] == 3  # both reports kept
    assert json.loads((run_b / "metrics.json").read_text())["queries"] == 2
    assert "- queries: 3 (3 completed" in (run_a / "report.md").read_text()
    # --run-dir at the other run's folder: refused, the difference named, nothing written there.
    before = (run_a / "results.jsonl").read_text()
    res = CliRunner().invoke(app(), ["eval", "stamps", "--method", "caption", "--limit", "2", "--run-dir", str(run_a),
                                     *common(env)])
    assert res.exit_code == 2 and "selection.limit: 3 -> 2" in " ".join(res.output.split())
    assert (run_a / "results.jsonl").read_text() == before
    # The same settings again resume (nothing new to run).
    assert invoke("stamps", "--method", "caption", "--limit", "3", *common(env))["new"] == 0
    # A comparison names both runs by id and is written beside them, inside neither.
    cmp = CliRunner().invoke(app(), ["eval", "--compare", str(run_a), str(run_b), "--json"])
    assert cmp.exit_code == 0, cmp.output
    report = Path(json.loads(cmp.stdout)["report"])
    assert report.parent.resolve() == run_a.parent.resolve() and report.is_file()
    assert a["run_id"] in report.name and b["run_id"] in report.name
    text = report.read_text()
    assert a["run_id"] in text and b["run_id"] in text


def test_missing_or_empty_images_root_is_refused_before_anything_runs(env, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for root, why in ((tmp_path / "nope", "does not exist"), (empty, "is empty")):
        run = tmp_path / f"run-{root.name}"
        res = CliRunner().invoke(app(), ["eval", "stamps", "--method", "caption", "--limit", "2", "--run-dir", str(run),
                                         "--annotations", str(env["ann"]), "--images-root", str(root),
                                         "--index", str(env["index"])])
        assert res.exit_code == 2 and why in res.output and "Expected layout" in res.output
        assert not run.exists()


def test_identity_names_every_setting_that_changes_results():
    base = {"benchmark": "stamps", "split": "all", "bench_options": {}, "top_k": 50,
            "method": {"name": "caption", "params": {"k": 1}}, "selection": {"limit": 5, "sample": "stratified"},
            "images": {"root": "/a"}, "index": {"dir": None}, "settings": {"roles": {"default": "x"},
                                                                         "cache_dir": "/c1"}}
    other = json.loads(json.dumps(base))
    other["settings"]["cache_dir"] = "/c2"  # where the cache lives: the same run
    assert differences(base, other) == []
    other["images"]["root"] = "/b"
    other["selection"]["limit"] = 2
    other["settings"]["roles"]["default"] = "y"
    assert differences(base, other) == ["images.root: /a -> /b", "selection.limit: 5 -> 2",
                                        "settings.roles.default: x -> y"]


def test_limit_takes_a_seeded_stratified_sample_of_whole_groups():
    from imagent.eval.datasets import EvalItem

    items = [EvalItem(Query("t", id=f"a{i}:{r}", extra={"task": "a"}), group=f"a{i}") for i in range(8) for r in (0, 1)]
    items += [EvalItem(Query("t", id=f"b{i}", extra={"task": "b"}), group=f"b{i}") for i in range(4)]

    def kind(it):
        return it.query.extra["task"]

    pick = select_items(items, 3, "stratified", 0, kind)
    groups = {it.group for it in pick}
    assert len(groups) == 3 and {g[0] for g in groups} == {"a", "b"}  # every kind present, 2 + 1
    assert all(f"{g}:1" in {it.id for it in pick} for g in groups if g.startswith("a"))  # rounds stay together
    assert [it.id for it in pick] == [it.id for it in items if it.group in groups]  # benchmark order
    assert select_items(items, 3, "stratified", 0, kind) == pick  # seeded
    assert {it.group for it in select_items(items, 3, "first", 0, kind)} == {"a0", "a1", "a2"}
    assert len({tuple(it.id for it in select_items(items, 6, "stratified", s, kind)) for s in range(5)}) > 1
