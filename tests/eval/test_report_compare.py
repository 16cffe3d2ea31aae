"""Eval reports (issue 15): the per-query table, the code's commit and date, n in every plot, the benchmark
index shared by runs with the same models, and `--compare` with per-query wins/losses and paired tests.

Real parts: the stamps mini benchmark and the real MiniLM (caption mode); no chat model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from imagent.api import Workspace
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking
from imagent.eval.compare import paired_comparison, permutation_test, sign_test
from imagent.eval.runner import RunSpec, run_eval, shared_index_dir
from imagent.methods.base import METHODS, Method, register_method
from testkit import chromium_path
from testkit import eval_app as app

REPO = Path(__file__).resolve().parents[2]
ANNOTATIONS = REPO / "src/imagent/eval/data/stamps_mini/queries.json"


class Backwards(Method):
    """Test method: the caption baseline's ranking, reversed (so it loses every query that has a target)."""

    name = "test_backwards"
    tasks = frozenset({"tir", "cir"})

    def run(self, query: Query, top_k: int, trace: Trace) -> Ranking:
        from imagent.methods.base import get_method

        full = get_method("caption")(self.ctx).run(query, len(self.ctx.gallery), trace)
        ids = list(reversed(full.ids))[:top_k]
        return Ranking(ids, [0.0] * len(ids))


if "test_backwards" not in METHODS:
    register_method(Backwards)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, stamps_root):
    """Two runs of the same 6 text queries without --index: caption, then the reversed caption ranking."""
    base = tmp_path_factory.mktemp("report-compare")
    titles: list[str] = []
    logs: dict[str, list[str]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IMAGENT_CACHE_DIR", str(base / "cache"))  # a fresh cache: the first run builds the index
        import imagent.eval.report as report

        for name in ("plot_recall_curve", "plot_time_per_stage"):
            original = getattr(report, name)

            def capture(data, title, path, _original=original):
                titles.append(title)
                return _original(data, title, path)

            mp.setattr(report, name, capture)
        ws = Workspace.from_config()
        out = {}
        for method in ("caption", "test_backwards"):
            logs[method] = []
            out[method] = run_eval(ws, RunSpec(benchmark="stamps", method=method, split="tir", limit=6,
                                               annotations=ANNOTATIONS, images_root=stamps_root,
                                               run_dir=base / method), log=logs[method].append)
        from imagent.eval.datasets import load_benchmark

        index = shared_index_dir(ws, load_benchmark("stamps", ANNOTATIONS), "tir", stamps_root)
    return {"base": base, "out": out, "titles": titles, "logs": logs, "index": index, "ws": ws}


def test_benchmark_index_is_shared_by_runs_with_the_same_encoders(runs, stamps_root):
    index = runs["index"]
    assert index.parent == runs["base"] / "cache" / "eval-indexes" and index.name.startswith("stamps-tir-")
    assert (index / "records.sqlite").is_file()
    assert not (runs["base"] / "caption" / "index").exists()
    assert any("gallery index" in m for m in runs["logs"]["caption"])  # built by the first run
    assert not any("gallery index" in m for m in runs["logs"]["test_backwards"])  # reused by the second
    ws = runs["ws"]
    from imagent.eval.datasets import load_benchmark

    bench = load_benchmark("stamps", ANNOTATIONS)
    other = Workspace(ws.settings.model_copy(update={"text_embedder": ws.settings.text_embedder.model_copy(
        update={"batch_size": 7})}))
    assert shared_index_dir(other, bench, "tir", stamps_root) != index  # other encoder settings, other index
    assert shared_index_dir(ws, bench, "cir", stamps_root) != index


def test_report_has_per_query_table_provenance_and_n(runs):
    summary = runs["out"]["caption"]
    rows = summary.metrics["per_query"]
    assert [r["query"] for r in rows] == [json.loads(x)["qid"] for x in
                                          (runs["base"] / "caption" / "results.jsonl").read_text().splitlines()]
    assert all(set(r) >= {"query", "source", "target_rank", "calls", "seconds", "fallbacks", "error"} for r in rows)
    assert all(r["calls"] == 0 and r["fallbacks"] == 0 and r["source"] == "method" for r in rows)
    recs = {json.loads(x)["qid"]: json.loads(x) for x in
            (runs["base"] / "caption" / "results.jsonl").read_text().splitlines()}
    from imagent.eval.datasets import load_benchmark

    positives = {it.id: set(it.positives) for it in load_benchmark("stamps", ANNOTATIONS).queries("tir")}
    for r in rows:  # the target rank is where the first labelled target sits in the stored ranking
        ids = recs[r["query"]]["ids"]
        hits = [n for n, i in enumerate(ids, 1) if i in positives[r["query"]]]
        assert r["target_rank"] == (hits[0] if hits else None)
    report = (runs["base"] / "caption" / "report.md").read_text()
    assert "## Per query" in report and "| query | source | target_rank | calls | seconds | fallbacks |" in report
    assert "- **fallback rate: 0.0%** (0 of 6 queries" in report
    prov = summary.metrics["provenance"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert prov["commit"] == head.stdout.strip() and f"commit `{prov['commit'][:12]}`" in report
    assert prov["date"][:4].isdigit() and "report written" in report and prov["version"]
    assert runs["titles"] and all("(n=6 queries)" in t for t in runs["titles"])


def _compare_json(base: Path) -> dict:
    """``imagent eval --compare`` of the two runs, as JSON."""
    res = CliRunner().invoke(app(), ["eval", "--compare", str(base / "test_backwards"), str(base / "caption"),
                                     "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_compare_counts_wins_and_losses_with_paired_tests(runs):
    base = runs["base"]
    out = _compare_json(base)
    pq = out["per_query"]
    ranks = [r["target_rank"] for r in runs["out"]["caption"].metrics["per_query"]]
    back = [r["target_rank"] for r in runs["out"]["test_backwards"].metrics["per_query"]]
    rr = lambda r: 1 / r if r else 0.0  # noqa: E731
    expected_wins = sum(rr(a) > rr(b) for a, b in zip(ranks, back, strict=True))
    assert pq["queries"] == 6 and pq["wins"] == expected_wins >= 5 and pq["losses"] == 0
    assert pq["sign_test_p"] == pytest.approx(2 / 2 ** expected_wins)
    assert pq["better"] == "caption" and pq["labels"] == ["test_backwards", "caption"]
    human = CliRunner().invoke(app(), ["eval", "--compare", str(base / "test_backwards"), str(base / "caption")])
    assert f"caption wins {expected_wins}, loses 0" in " ".join(human.output.split())
    assert "sign test p =" in human.output and "permutation test p =" in human.output
    # The comparison is also written as a report: beside the runs (inside neither, named by both run ids), or
    # where --compare-report says.
    report = Path(out["report"])
    assert report.parent == base and report.name == f"compare-{out['runs']['test_backwards']['run_id']}-vs-" \
        f"{out['runs']['caption']['run_id']}.md"
    written = report.read_text()
    assert written.startswith("# Comparison: test_backwards vs caption")
    assert "| metric | test_backwards | caption | delta |" in written
    assert f"caption wins {expected_wins}, loses 0" in written and "sign test p =" in written
    elsewhere = base / "cmp.md"
    CliRunner().invoke(app(), ["eval", "--compare", str(base / "test_backwards"), str(base / "caption"),
                               "--compare-report", str(elsewhere)])
    assert elsewhere.read_text() == written


def test_paired_tests_match_hand_computed_values():
    assert sign_test(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0
    assert permutation_test(np.array([1.0, 1.0, 1.0])) == pytest.approx(2 / 8)  # exact: 2 of 8 sign patterns
    assert permutation_test(np.zeros(4)) == 1.0
    big = permutation_test(np.full(40, 0.5))
    assert 0 < big < 0.001  # random flips never reach the all-positive mean; p counts the observed one
    a = [{"query": str(i), "target_rank": 1} for i in range(4)] + [{"query": "x", "target_rank": 2, "error": "boom"}]
    b = [{"query": str(i), "target_rank": 2 if i else 1} for i in range(4)]
    out = paired_comparison(a, b, ["A", "B"])
    assert (out["queries"], out["wins"], out["losses"], out["ties"]) == (4, 0, 3, 1)
    assert out["mean_difference"] == pytest.approx(-0.375) and out["better"] == "A"
    assert paired_comparison([{"query": "1"}], [{"query": "1"}], ["A", "B"]) is None


def test_compare_html_renders_in_real_chromium_with_curves_deltas_and_intervals(runs):
    base = runs["base"]
    out = _compare_json(base)
    page_path = Path(out["report_html"])
    assert page_path.suffix == ".html" and page_path.with_suffix(".md") == Path(out["report"])
    boot = {r["metric"]: r for r in out["bootstrap"]}
    assert set(boot) >= {"recall@1", "recall@10", "reciprocal_rank"} and boot["recall@10"]["queries"] == 6
    for r in boot.values():
        assert r["ci_low"] <= r["difference"] <= r["ci_high"]
    assert boot["reciprocal_rank"]["difference"] > 0 and boot["reciprocal_rank"]["excludes_zero"]
    deltas = out["per_query"]["deltas"]
    assert len(deltas) == 6 and [d["delta"] for d in deltas] == sorted((d["delta"] for d in deltas), reverse=True)
    chromium = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(page_path.as_uri())
        curves = page.locator("svg.chart polyline.curve")
        assert curves.count() == 2  # both runs' recall@k curves, overlaid in one chart
        assert {curves.nth(i).get_attribute("data-run") for i in range(2)} == {"caption", "test_backwards"}
        for i in range(2):
            box = curves.nth(i).bounding_box()
            assert box and box["width"] > 100  # drawn across the chart, not collapsed
        assert page.locator("#deltas tr").count() == 1 + 6
        assert page.locator("#bootstrap tr").count() == 1 + len(boot)
        ids = page.inner_text("#runs")
        assert out["runs"]["caption"]["run_id"] in ids and out["runs"]["test_backwards"]["run_id"] in ids
        browser.close()
    assert not errors


def test_bootstrap_interval_of_a_constant_and_a_mixed_difference():
    from imagent.eval.compare import bootstrap_ci

    assert bootstrap_ci(np.full(10, 2.5)) == pytest.approx((2.5, 2.5))
    lo, hi = bootstrap_ci(np.array([1.0, -1.0] * 20))
    assert lo < 0 < hi and lo == pytest.approx(-hi, abs=0.2)
    lo, hi = bootstrap_ci(np.array([1.0] * 30 + [0.0] * 10))
    assert 0.5 < lo < 0.75 < hi < 0.95


def _album_run(folder: Path, method: str, album: str, f1: list[float], seconds: float, calls: float,
               scaffold: str | None = "small") -> Path:
    """A finished DISBench-style run folder written by hand (config.json and metrics.json as a run writes them)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"run_id": f"{method}-{album}", "images_root": f"/albums/{album}"}))
    rows = [{"qid": f"g{i:02d}", "f1": v, "em": 100.0 if v == 100 else 0.0, "source": "method"}
            for i, v in enumerate(f1)]
    metrics = {"benchmark": "disbench", "split": "all", "method": method, "queries": len(f1),
               "scaffold": scaffold, "metrics": {"overall/f1": float(np.mean(f1))},
               "behaviour": {"fallback_rate": 0.0, "code_selected_share": 0.5},
               "run": {"queries_scored": len(f1), "errors": 0, "seconds_per_query_mean": seconds,
                       "model_calls_per_query": calls}, "per_query": rows}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def test_compare_groups_of_runs_pairs_queries_across_albums(tmp_path):
    """A folder of runs (one per album) is one side: metrics averaged over its runs, queries paired album by album
    (the same query id on two albums is two queries), the tests and intervals pooled over all of them."""
    from imagent.eval.compare import compare_runs
    from imagent.eval.records import RunError

    a, b = tmp_path / "agent", tmp_path / "album"
    _album_run(a / "s1", "photocraft", "s1", [0.0, 50.0, 100.0], 100.0, 8.0)
    _album_run(a / "s2", "photocraft", "s2", [0.0, 0.0], 200.0, 10.0)
    _album_run(b / "s1", "album", "s1", [100.0, 50.0, 100.0], 2.0, 1.0, scaffold=None)
    _album_run(b / "s2", "album", "s2", [100.0, 0.0], 4.0, 1.0, scaffold=None)
    out = compare_runs([a, b])
    assert list(out["runs"]) == ["photocraft (scaffold small)", "album"] and not out["warnings"]
    assert [m["album"] for m in out["runs"]["album"]["members"]] == ["/albums/s1", "/albums/s2"]
    rows = {r["metric"]: r for r in out["rows"]}
    assert rows["overall/f1"]["photocraft (scaffold small)"] == pytest.approx((50.0 + 0.0) / 2)  # each run once
    assert rows["overall/f1"]["album"] == pytest.approx((250 / 3 + 50.0) / 2)
    assert rows["cost/seconds_per_query_mean"]["photocraft (scaffold small)"] == pytest.approx(700 / 5)  # per query
    pq = out["per_query"]
    assert pq["queries"] == 5 and pq["wins"] == 2 and pq["losses"] == 0 and pq["ties"] == 3
    assert set(pq["examples"]["wins"]) == {"/albums/s1:g00", "/albums/s2:g00"}
    f1 = next(r for r in out["bootstrap"] if r["metric"] == "f1")
    assert f1["queries"] == 5 and f1["difference"] == pytest.approx(200 / 5) and f1["ci_low"] >= 0
    # the CLI writes the report with the members named
    res = CliRunner().invoke(app(), ["eval", "--compare", str(a), str(b), "--compare-report", str(tmp_path / "c.md")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "c.md").read_text()
    assert "the mean of 2 runs" in text and "on `/albums/s2`, 2 queries" in text
    # groups of different albums are compared, with a warning; a group mixing methods or asking one album twice
    # is refused
    _album_run(b / "s3", "album", "s3", [100.0], 2.0, 1.0, scaffold=None)
    assert any("only in one of them /albums/s3" in w for w in compare_runs([a, b])["warnings"])
    _album_run(a / "s3", "imageseeker", "s3", [0.0], 50.0, 5.0)
    with pytest.raises(RunError, match="mixes runs"):
        compare_runs([a, b])
    (a / "s3" / "metrics.json").unlink()
    _album_run(b / "s1-again", "album", "s1", [0.0], 2.0, 1.0, scaffold=None)
    with pytest.raises(RunError, match="two runs of one album"):
        compare_runs([a, b])
