"""`imagent score` on the official annotation files, checked against independent re-implementations
of the official evaluation code (CIRCO's ``src/evaluation.py``, CIRR's recall with the reference removed)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from typer.testing import CliRunner

from imagent.eval.datasets import MissingImagesError, Predictions, load_benchmark
from imagent.eval.scoring import score_file
from testkit import eval_app as make_app

# ----------------------------------------------------------------------------- CIRCO


def circo_official(annotations: list[dict], predictions: dict[str, list[int]], ranks=(5, 10, 25, 50)):
    """What CIRCO's evaluation script computes and prints (numpy, int ids, annotations by position)."""
    aps = defaultdict(list)
    sem = defaultdict(list)
    for qid, preds in predictions.items():
        ann = annotations[int(qid)]
        gt = ann["gt_img_ids"]
        labels = np.isin(np.array(preds, dtype=int), gt)
        prec = np.cumsum(labels, axis=0) * labels
        prec = prec / np.arange(1, labels.shape[0] + 1)
        for r in ranks:
            aps[r].append(float(np.sum(prec[:r]) / min(len(gt), r)))
        for aspect in ann["semantic_aspects"]:
            sem[aspect].append(float(np.sum(prec[:10]) / min(len(gt), 10)))
    maps = {r: float(np.mean(aps[r])) for r in ranks}
    printed = [f"mAP@{r}: {maps[r] * 100:.2f}" for r in ranks]
    return maps, {a: float(np.mean(v)) for a, v in sem.items()}, printed


# Pinned: what CIRCO's script prints for its own submission_examples/submission_val.json.
CIRCO_SUBMISSION_VAL = {"map@5": 0.4861111111111111, "map@10": 0.5177669552669554,
                        "map@25": 0.5400354476441432, "map@50": 0.6020391550163254}
CIRCO_PRINTED = ["mAP@5: 0.49", "mAP@10: 0.52", "mAP@25: 0.54", "mAP@50: 0.60"]


def test_circo_submission_val_matches_official(bench_dir):
    ann = json.loads((bench_dir / "circo" / "val.json").read_text())
    sub = json.loads((bench_dir / "circo" / "submission_val.json").read_text())
    maps, sem, printed = circo_official(ann, sub)
    assert printed == CIRCO_PRINTED
    result = score_file("circo", bench_dir / "circo" / "val.json", bench_dir / "circo" / "submission_val.json")
    assert result["queries"] == 220
    m = result["metrics"]
    for k in (5, 10, 25, 50):
        assert m[f"map@{k}"] == maps[k] * 100  # bit-identical, not just close
        assert m[f"map@{k}"] == pytest.approx(CIRCO_SUBMISSION_VAL[f"map@{k}"], abs=1e-12)
    assert [f"mAP@{k}: {m[f'map@{k}']:.2f}" for k in (5, 10, 25, 50)] == printed
    for aspect, v in sem.items():
        assert m[f"semantic_map@10/{aspect}"] == v * 100


def test_circo_score_command_prints_json(bench_dir):
    res = CliRunner().invoke(make_app(), [
        "score", "circo", "--annotations", str(bench_dir / "circo" / "val.json"),
        "--predictions", str(bench_dir / "circo" / "submission_val.json"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["metrics"]["map@10"] == pytest.approx(CIRCO_SUBMISSION_VAL["map@10"], abs=1e-12)


def test_circo_strictness_and_partial(bench_dir, tmp_path):
    sub = json.loads((bench_dir / "circo" / "submission_val.json").read_text())
    few = {k: v for k, v in list(sub.items())[:10]}
    p = tmp_path / "few.json"
    p.write_text(json.dumps(few))
    with pytest.raises(ValueError, match="cover 10 of 220"):
        score_file("circo", bench_dir / "circo" / "val.json", p)
    part = score_file("circo", bench_dir / "circo" / "val.json", p, partial=True)
    assert part["queries"] == 10
    maps, _, _ = circo_official(json.loads((bench_dir / "circo" / "val.json").read_text()), few)
    assert part["metrics"]["map@5"] == maps[5] * 100
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"9999": [1, 2]}))
    with pytest.raises(ValueError, match="not in the circo val"):
        score_file("circo", bench_dir / "circo" / "val.json", bad, partial=True)


def test_circo_ids_cast_as_the_official_int_and_duplicates_refused(bench_dir, tmp_path):
    sub = json.loads((bench_dir / "circo" / "submission_val.json").read_text())
    maps, _, _ = circo_official(json.loads((bench_dir / "circo" / "val.json").read_text()), sub)
    # Floats, zero-padded strings and "123.0" strings are the ids the official int cast reads.
    styles = [lambda x: float(x), lambda x: f"{int(x):012d}", lambda x: f"{int(x)}.0"]
    recast = {f"{int(k):03d}": [styles[n % 3](x) for n, x in enumerate(v)] for k, v in sub.items()}
    p = tmp_path / "recast.json"
    p.write_text(json.dumps(recast))
    m = score_file("circo", bench_dir / "circo" / "val.json", p)["metrics"]
    assert [m[f"map@{k}"] for k in (5, 10, 25, 50)] == [maps[k] * 100 for k in (5, 10, 25, 50)]
    # A repeated ground truth would push AP@k above 1; the official script raises, and so does score.
    first = next(iter(sub))
    gt = json.loads((bench_dir / "circo" / "val.json").read_text())[int(first)]["gt_img_ids"][0]
    dup = dict(sub, **{first: [gt, str(gt).zfill(12), *sub[first][:48]]})
    p.write_text(json.dumps(dup))
    with pytest.raises(ValueError, match=f"query '{first}' lists image {gt} more than once"):
        score_file("circo", bench_dir / "circo" / "val.json", p)
    res = CliRunner().invoke(make_app(), ["score", "circo", "--annotations", str(bench_dir / "circo" / "val.json"),
                                          "--predictions", str(p)])
    assert res.exit_code != 0 and "duplicate predictions" in res.output


def test_circo_loader_and_shared_concept_flag(bench_dir):
    plain = load_benchmark("circo", bench_dir / "circo")
    items = plain.queries("val")
    assert len(items) == 220 and len(plain.queries("test")) == 800
    assert items[0].query.text == "shows two people and has a more colorful background"
    assert items[0].query.exclude == []  # CIRCO does not remove the reference
    flagged = load_benchmark("circo", bench_dir / "circo", shared_concept=True).queries("val")
    assert "a girl with a traditional Chinese umbrella" in flagged[0].query.text


def test_circo_submission_file_format(bench_dir):
    bench = load_benchmark("circo", bench_dir / "circo")
    items = bench.queries("test")[:2]
    preds = Predictions({"0": [str(i) for i in range(60)], "1": ["5", "6"]})
    files = bench.submissions("test", preds, items)
    data = files["circo_test.json"]
    assert list(data) == ["0", "1"] and len(data["0"]) == 50 and data["1"] == [5, 6]
    assert all(isinstance(x, int) for x in data["0"])


# ----------------------------------------------------------------------------- CIRR


def cirr_reference_scores(entries, rankings):
    """Straightforward CIRR recall: drop the reference, then look for target_hard in the top K;
    the subset metric ranks the members other than the reference."""
    out = {}
    for k in (1, 5, 10, 50):
        hits = 0
        for e in entries:
            ranked = [x for x in rankings[str(e["pairid"])] if x != e["reference"]]
            hits += e["target_hard"] in ranked[:k]
        out[f"recall@{k}"] = 100.0 * hits / len(entries)
    for k in (1, 2, 3):
        hits = 0
        for e in entries:
            members = [m for m in e["img_set"]["members"] if m != e["reference"]]
            ranked = [x for x in rankings[str(e["pairid"])] if x in members]
            hits += e["target_hard"] in ranked[:k]
        out[f"recall_subset@{k}"] = 100.0 * hits / len(entries)
    return out


def pseudo_random_cirr(entries, images, seed=7):
    """Top-60 lists with the target, the reference and the members at random places (some absent)."""
    rng = np.random.default_rng(seed)
    preds = {}
    for e in entries:
        picks = list(rng.choice(images, size=60, replace=False))
        for name in [e["target_hard"], e["reference"], *e["img_set"]["members"]]:
            if rng.random() < 0.8:
                if name in picks:
                    picks.remove(name)
                picks.insert(int(rng.integers(0, 60)), name)
        preds[str(e["pairid"])] = picks[:60]
    return preds


def test_cirr_val_plain_predictions_match_reference_computation(bench_dir, tmp_path):
    entries = json.loads((bench_dir / "cirr" / "cap.rc2.val.json").read_text())
    images = sorted(json.loads((bench_dir / "cirr" / "split.rc2.val.json").read_text()))
    preds = pseudo_random_cirr(entries, images)
    p = tmp_path / "cirr_val.json"
    p.write_text(json.dumps(preds))
    result = score_file("cirr", bench_dir / "cirr" / "cap.rc2.val.json", p)
    assert result["split"] == "val" and result["queries"] == 4181  # every val query, no truncation
    expected = cirr_reference_scores(entries, preds)
    for k, v in expected.items():
        assert result["metrics"][k] == pytest.approx(v, abs=1e-9), k
    assert 0 < result["metrics"]["recall@1"] < result["metrics"]["recall@50"] < 100


def test_cirr_server_files_round_trip(bench_dir, tmp_path):
    """The runner's server files score, through `imagent score`, to what the full lists score."""
    bench = load_benchmark("cirr", bench_dir / "cirr")
    entries = json.loads((bench_dir / "cirr" / "cap.rc2.val.json").read_text())
    images = sorted(json.loads((bench_dir / "cirr" / "split.rc2.val.json").read_text()))
    preds = pseudo_random_cirr(entries, images, seed=3)
    # As in a run (full-gallery ranking), every member is ranked somewhere.
    for e in entries:
        ranking = preds[str(e["pairid"])]
        ranking += [m for m in e["img_set"]["members"] if m not in ranking]
    items = bench.queries("val")
    files = bench.submissions("val", Predictions(preds), items)
    recall, subset = files["cirr_val_recall.json"], files["cirr_val_recall_subset.json"]
    assert recall["version"] == "rc2" and recall["metric"] == "recall"
    assert subset["metric"] == "recall_subset"
    first = entries[0]
    assert first["reference"] not in recall[str(first["pairid"])] and len(recall[str(first["pairid"])]) <= 50
    assert len(subset[str(first["pairid"])]) == 3
    expected = cirr_reference_scores(entries, preds)
    app = make_app()
    for name, keys in (("cirr_val_recall.json", ("recall@1", "recall@5", "recall@10", "recall@50")),
                       ("cirr_val_recall_subset.json", ("recall_subset@1", "recall_subset@2", "recall_subset@3"))):
        path = tmp_path / name
        path.write_text(json.dumps(files[name]))
        res = CliRunner().invoke(app, ["score", "cirr", "-a", str(bench_dir / "cirr" / "cap.rc2.val.json"),
                                       "-p", str(path), "--json"])
        assert res.exit_code == 0, res.output
        got = json.loads(res.stdout)["metrics"]
        assert set(got) == set(keys)  # a server file is scored with its own metric only
        for k in keys:
            assert got[k] == pytest.approx(expected[k], abs=1e-9)


def test_cirr_subset_file_is_padded_to_three(bench_dir):
    bench = load_benchmark("cirr", bench_dir / "cirr")
    item = bench.queries("val")[0]
    members = [m for m in item.query.extra["members"] if m != item.query.reference.id]
    files = bench.submissions("val", Predictions({item.id: [members[3]]}), [item])
    assert files["cirr_val_recall_subset.json"][item.id] == [members[3], members[0], members[1]]


def test_cirr_loader(bench_dir):
    bench = load_benchmark("cirr", bench_dir / "cirr")
    val, test = bench.queries("val"), bench.queries("test1")
    assert len(val) == 4181 and len(test) == 4148
    q = val[0].query
    assert q.exclude == [q.reference.id] and len(q.extra["members"]) == 6
    assert not test[0].has_truth
    with pytest.raises(ValueError, match="no ground truth"):
        score_file("cirr", bench_dir / "cirr" / "cap.rc2.test1.json", bench_dir / "circo" / "submission_val.json")


def test_missing_images_message_has_counts_and_layout(bench_dir, tmp_path):
    bench = load_benchmark("cirr", bench_dir / "cirr")
    (tmp_path / "dev").mkdir()
    for name in ("dev-244-0-img0", "dev-1028-1-img1"):
        (tmp_path / "dev" / f"{name}.png").write_bytes(b"x")
    with pytest.raises(MissingImagesError) as err:
        bench.gallery_manifest("val", tmp_path)
    msg = str(err.value)
    assert "2 of 2297" in msg and "2295 missing" in msg and "<images-root>/dev/<name>.png" in msg
    rows = bench.gallery_manifest("val", tmp_path, allow_missing=True)
    assert len(rows) == 2
    with pytest.raises(MissingImagesError, match="unlabeled2017"):
        load_benchmark("circo", bench_dir / "circo").gallery_manifest("val", tmp_path)
    with pytest.raises(MissingImagesError, match="--images-root"):
        bench.gallery_manifest("val", None)


# ----------------------------------------------------------------------------- FashionIQ, GeneCIS, VisDial


def test_fashioniq_scores_per_category_and_average(bench_dir, tmp_path):
    bench = load_benchmark("fashioniq", bench_dir / "fashioniq")
    items = bench.queries("all")
    assert len(items) == 2017 + 2038 + 1961
    assert items[0].query.text == "is shiny and silver with shorter sleeves and fit and flare"
    rng = np.random.default_rng(1)
    preds, expected = {}, {}
    for cat in ("dress", "shirt", "toptee"):
        gallery = json.loads((bench_dir / "fashioniq" / f"split.{cat}.val.json").read_text())
        caps = json.loads((bench_dir / "fashioniq" / f"cap.{cat}.val.json").read_text())
        hits = {10: 0, 50: 0}
        for i, e in enumerate(caps):
            ranking = list(rng.choice(gallery, size=50, replace=False))
            if rng.random() < 0.5:
                ranking.insert(int(rng.integers(0, 50)), e["target"])
            preds[f"{cat}:{i}"] = ranking
            for k in hits:
                hits[k] += e["target"] in ranking[:k]
        expected[cat] = {k: 100.0 * v / len(caps) for k, v in hits.items()}
    p = tmp_path / "fiq.json"
    p.write_text(json.dumps(preds))
    m = score_file("fashioniq", bench_dir / "fashioniq", p)["metrics"]
    for cat, d in expected.items():
        for k, v in d.items():
            assert m[f"{cat}/recall@{k}"] == pytest.approx(v)
    assert m["average/recall@10"] == pytest.approx(np.mean([d[10] for d in expected.values()]))
    assert m["average/average"] == pytest.approx((m["average/recall@10"] + m["average/recall@50"]) / 2)
    assert load_benchmark("fashioniq", bench_dir / "fashioniq", caption_join="first").queries("dress")[0].query.text \
        == "is shiny and silver with shorter sleeves"


def test_genecis_target_first_and_recall(bench_dir, tmp_path):
    bench = load_benchmark("genecis", bench_dir / "genecis")
    items = bench.queries("change_object")
    assert len(items) == 1960
    it = items[0]
    assert it.query.candidates[0] == it.truth["target"] and len(it.query.candidates) == 15
    assert it.query.text == "wall"
    # Reverse gallery order: the target (index 0) comes last -> no hit at 1..3.
    preds = {x.id: list(reversed(x.query.candidates)) for x in items}
    p = tmp_path / "g.json"
    p.write_text(json.dumps(preds))
    m = score_file("genecis", bench_dir / "genecis" / "change_object.json", p)["metrics"]
    assert m["change_object/recall@3"] == pytest.approx(100.0 * sum(
        x.truth["target"] in list(reversed(x.query.candidates))[:3] for x in items) / len(items))
    assert m["change_object/recall@1"] < 1.0


def test_visdial_rounds_and_hits(bench_dir, tmp_path):
    bench = load_benchmark("visdial", bench_dir / "visdial")
    items = bench.queries("val")
    assert len(items) == 2064 * 11
    r3 = next(x for x in items if x.id == "0:3")
    assert len(r3.query.dialogue) == 3 and r3.query.task == "chat"
    assert r3.query.extra["plugir_text"].startswith("a bedroom is filled with lots of posters")
    folded = bench.adapt_query(r3, {"tir"})
    assert folded.task == "tir" and folded.text == r3.query.extra["plugir_text"]
    assert folded.text.count(", ") >= 3
    # Dialogue d is found at round d % 11 and at no other round.
    preds = {}
    for x in items:
        d, r = x.truth["dialog"], x.truth["round"]
        preds[x.id] = [x.truth["target"]] if r == d % 11 else ["nothing"]
    p = tmp_path / "v.json"
    p.write_text(json.dumps(preds))
    m = score_file("visdial", bench_dir / "visdial", p)["metrics"]
    n = 2064
    for r in range(11):
        found_by_r = sum(1 for d in range(n) if d % 11 <= r)
        assert m[f"hits@1/round_{r}"] == pytest.approx(100.0 * found_by_r / n)
        assert m[f"recall@10/round_{r}"] == pytest.approx(100.0 * sum(1 for d in range(n) if d % 11 == r) / n)


def test_test_split_run_outputs_are_server_files(bench_dir, tmp_path):
    """A test-split run has no metrics; its outputs are the server files (written from results.jsonl)."""
    from imagent.eval.report import write_outputs

    for name, split, files in (("cirr", "test1", ("cirr_test1_recall.json", "cirr_test1_recall_subset.json")),
                               ("circo", "test", ("circo_test.json",))):
        bench = load_benchmark(name, bench_dir / name)
        items = bench.queries(split)
        records = {}
        for it in items:
            ids = [f"img{i}" for i in range(60)]
            if name == "cirr":
                ids = [it.query.extra["members"][2], *ids, *it.query.extra["members"]]
                extras = bench.record_extras(it, ids)
            else:
                ids, extras = [str(100 + i) for i in range(60)], {}
            records[it.id] = {"qid": it.id, "ids": ids[:50], "extras": extras, "stages": {}, "error": None,
                              "seconds": 0.1, "model_calls": 0, "trace": {"steps": []}}
        config = {"method": {"name": "m", "params": {}}, "top_k": 50, "settings": {}, "benchmark": name,
                  "split": split}
        run = tmp_path / name
        run.mkdir()
        metrics, _ = write_outputs(run, bench, split, items, records, config, 50, len(items))
        assert metrics["metrics"] == {} and metrics["completed"] == len(items)
        for f in files:
            data = json.loads((run / "submissions" / f).read_text())
            assert len([k for k in data if k not in ("version", "metric")]) == len(items)
        assert "No ground truth" in (run / "report.md").read_text()
    recall_subset = json.loads((tmp_path / "cirr" / "submissions" / "cirr_test1_recall_subset.json").read_text())
    first = load_benchmark("cirr", bench_dir / "cirr").queries("test1")[0]
    assert recall_subset[first.id][0] == first.query.extra["members"][2] and len(recall_subset[first.id]) == 3
    assert first.query.reference.id not in recall_subset[first.id]


def chatir_cumulative_hits(target_ranks: np.ndarray, k: int) -> list[float]:
    """ChatIR eval.py's get_first_hitting_time + cumulative_hits_per_round (torch -> numpy): ``target_ranks`` is
    (11 rounds, n dialogues) of 0-based ranks."""
    hits = np.less(target_ranks.T, k)
    final = np.full(hits.shape[0], np.inf)
    times = []
    for r in range(11):
        rh = hits[:, r]
        final[rh] = np.minimum(final[rh], r)
        times.append(final.copy())
    times = np.stack(times)
    return list((times < np.inf).sum(axis=-1) * 100 / times[0].shape[0])


def test_visdial_round_text_and_hits_match_chatir_eval(bench_dir, tmp_path):
    bench = load_benchmark("visdial", bench_dir / "visdial")
    items = bench.queries("val")
    dialogs = json.loads((bench_dir / "visdial" / "VisDial_v1.0_queries_val.json").read_text())
    for x in items[:40] + items[-11:]:  # the query at round r is ", ".join(dialog[:r+1]), exactly
        d, r = x.truth["dialog"], x.truth["round"]
        assert bench.adapt_query(x, {"tir"}).text == ", ".join(dialogs[d]["dialog"][: r + 1])
        assert [f"{t.question} {t.answer}" for t in x.query.dialogue] == dialogs[d]["dialog"][1: r + 1]
    rng = np.random.default_rng(5)
    ranks = rng.integers(0, 14, size=(11, len(dialogs)))
    preds = {}
    for x in items:
        d, r = x.truth["dialog"], x.truth["round"]
        ranking = [f"other{i}" for i in range(20)]
        ranking.insert(int(ranks[r, d]), x.truth["target"])
        preds[x.id] = ranking
    p = tmp_path / "v.json"
    p.write_text(json.dumps(preds))
    m = score_file("visdial", bench_dir / "visdial", p)["metrics"]
    for k in (1, 5, 10):
        official = chatir_cumulative_hits(ranks, k)
        assert [m[f"hits@{k}/round_{r}"] for r in range(11)] == pytest.approx(official, abs=1e-9)


def test_report_states_the_methods_start_of_run_warnings(bench_dir, tmp_path):
    """A method's preflight warnings (TaCIR without tools, allow_missing_captions; ``Result.warnings`` in each
    record) reach report.md and metrics.json."""
    from imagent.eval.report import write_outputs

    bench = load_benchmark("circo", bench_dir / "circo")
    items = bench.queries("val")[:3]
    warning = "TaCIR: no search or edit tool is configured, so every query runs as the no-tool ablation"
    records = {it.id: {"qid": it.id, "ids": [str(100 + i) for i in range(50)], "extras": {}, "stages": {},
                       "error": None, "seconds": 0.1, "model_calls": 1, "warnings": [warning],
                       "trace": {"steps": [{"name": "checks", "notes": [warning]}, {"name": "tacir.select"}]}}
               for it in items}
    config = {"method": {"name": "tacir", "params": {}}, "top_k": 50, "settings": {}, "benchmark": "circo",
              "split": "val"}
    metrics, _ = write_outputs(tmp_path, bench, "val", items, records, config, 50, 220)
    assert metrics["run"]["warnings"] == {warning: 3}
    assert f"- **warning**: {warning} (3 queries)" in (tmp_path / "report.md").read_text()
