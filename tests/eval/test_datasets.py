"""Loaders on small annotation files written here (formats whose files are not in ../shared)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from imagent.cli.common import route_sets
from imagent.core.config import ConfigError
from imagent.eval import metrics as M
from imagent.eval.datasets import BenchmarkError, Predictions, load_benchmark
from imagent.eval.datasets.genecis import dilated_box
from imagent.eval.identity import select_items
from imagent.eval.scoring import score_file


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# ----------------------------------------------------------------------------- TIR


def test_flickr_karpathy_format(tmp_path):
    data = {"images": [
        {"filename": "1.jpg", "split": "test", "sentences": [{"raw": "a dog", "sentid": 10}, {"raw": "a dog runs",
                                                                                             "sentid": 11}]},
        {"filename": "2.jpg", "split": "test", "sentences": [{"raw": "a cat", "sentid": 12}]},
        {"filename": "3.jpg", "split": "train", "sentences": [{"raw": "a cow", "sentid": 13}]},
    ]}
    ann = write(tmp_path / "dataset_flickr30k.json", data)
    bench = load_benchmark("flickr30k", ann)
    items = bench.queries("test")
    assert [(it.id, it.query.text, it.truth["target"]) for it in items] == [
        ("10", "a dog", "1"), ("11", "a dog runs", "1"), ("12", "a cat", "2")]
    root = tmp_path / "imgs" / "flickr30k-images"
    root.mkdir(parents=True)
    (root / "1.jpg").write_bytes(b"x")
    with pytest.raises(BenchmarkError, match="1 of 2"):
        bench.gallery_manifest("test", tmp_path / "imgs")
    (root / "2.jpg").write_bytes(b"x")
    assert [r["id"] for r in bench.gallery_manifest("test", tmp_path / "imgs")] == ["1", "2"]
    preds = write(tmp_path / "p.json", {"10": ["1", "2"], "11": ["2", "1"], "12": ["1", "3", "2"]})
    m = score_file("flickr30k", ann, preds, split="test")["metrics"]
    # NDCG@10 (one relevant image each): ranks 1, 2, 3 -> (1 + 1/log2(3) + 1/log2(4)) / 3
    assert m == {"recall@1": pytest.approx(100 / 3), "recall@5": 100.0, "recall@10": 100.0,
                 "ndcg@10": pytest.approx(100 * (1 + 1 / 1.5849625007211562 + 0.5) / 3)}


def test_coco_blip_format(tmp_path):
    data = [{"image": "val2014/COCO_val2014_000000000042.jpg", "caption": ["a", "b"]},
            {"image": "val2014/COCO_val2014_000000000043.jpg", "caption": ["c"]}]
    ann = write(tmp_path / "coco_karpathy_test.json", data)
    items = load_benchmark("coco", ann).queries("test")
    assert [it.id for it in items] == ["0_0", "0_1", "1_0"]
    assert items[2].truth["target"] == "COCO_val2014_000000000043"


# ----------------------------------------------------------------------------- DISBench


def disbench_files(root):
    write(root / "queries.jsonl", "\n".join(json.dumps(q) for q in [
        {"query_id": "q1", "user_id": "u1", "query": "photos of the lake trip", "answer": ["p1", "p2"],
         "event_type": "intra-event"},
        {"query_id": "q2", "user_id": "u2", "query": "the dinner after the concert", "answer": ["p9"],
         "event_type": "inter-event"},
    ]))
    meta = {"taken_time": "2012-05-01 10:00:00", "latitude": "46.1", "longitude": "7.2", "accuracy": 16,
            "address": "Lake X", "capturedevice": "Canon"}
    write(root / "metadata" / "u1.jsonl", "\n".join(json.dumps({"photo_id": p, "metadata": meta})
                                                    for p in ("p1", "p2", "p3")))
    write(root / "metadata" / "u2.jsonl", json.dumps({"photo_id": "p9", "metadata": {"taken_time": ""}}))
    for user, pid in (("u1", "p1"), ("u1", "p2"), ("u1", "p3"), ("u2", "p9")):
        (root / "images" / user).mkdir(parents=True, exist_ok=True)
        (root / "images" / user / f"{pid}.jpg").write_bytes(b"x")


def test_disbench_per_user_galleries_and_set_metrics(tmp_path):
    disbench_files(tmp_path)
    bench = load_benchmark("disbench", tmp_path)
    items = bench.queries()
    assert items[0].query.candidates == ["u1/p1", "u1/p2", "u1/p3"]
    assert items[1].query.candidates == ["u2/p9"]
    assert [it.id for it in bench.queries("inter")] == ["q2"]
    rows = bench.gallery_manifest("all", tmp_path)
    assert len(rows) == 4
    r1 = rows[0]
    assert r1["id"] == "u1/p1" and r1["taken_time"] == "2012-05-01T10:00:00" and r1["latitude"] == 46.1
    assert rows[3]["taken_time"] is None
    # Predictions may name bare photo ids; the whole list is the answer set.
    preds = write(tmp_path / "p.json", {"q1": ["p1", "u1/p2", "p1"], "q2": ["p8", "p9"]})
    m = score_file("disbench", tmp_path / "queries.jsonl", preds)["metrics"]
    assert m["intra/em"] == 100.0 and m["inter/em"] == 0.0
    assert m["inter/f1"] == pytest.approx(100 * 2 / 3)
    assert m["overall/f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    capped = load_benchmark("disbench", tmp_path, answer_top_k=1)
    assert capped.answer_set(items[1], ["p9", "p8"]) == ["u2/p9"]
    assert "wording/f1_worst" not in m  # no question asked twice


def test_disbench_questions_in_several_wordings(tmp_path):
    disbench_files(tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "queries.jsonl").read_text().splitlines()]
    again = {**rows[0], "query_id": "q1b", "query": "another wording"}
    rows = [{**rows[0], "question": "g1"}, {**again, "question": "g1"}, {**rows[1], "question": "g2"}]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_benchmark("disbench", tmp_path).queries()
    assert [it.query.extra["question"] for it in items] == ["g1", "g1", "g2"]
    # --limit counts questions: a question's wordings are kept or dropped together
    assert [it.group for it in items] == ["g1", "g1", "g2"]
    assert [it.id for it in select_items(items, 1, "first")] == ["q1", "q1b"]
    preds = write(tmp_path / "p.json", {"q1": rows[0]["answer"], "q1b": ["p3"], "q2": ["p9"]})
    m = score_file("disbench", tmp_path / "queries.jsonl", preds)["metrics"]
    assert m["wording/questions"] == 2 and m["wording/f1_best"] == 100.0
    assert m["wording/f1_worst"] == pytest.approx(100 * (M.set_f1(["u1/p3"], items[1].truth["answer"]) + 1) / 2)


# ----------------------------------------------------------------------------- GeneCIS attributes


def test_genecis_attribute_crops(tmp_path):
    vg = tmp_path / "imgs" / "VG_100K"
    vg.mkdir(parents=True)
    Image.new("RGB", (100, 80), (200, 10, 10)).save(vg / "7.jpg")
    box = lambda x: {"image_id": 7, "instance_bbox": [x, 10, 20, 30], "object_name": "car"}  # noqa: E731
    entries = [{"reference": box(0), "target": box(40), "condition": "red", "gallery": [box(10), box(20)]}]
    ann = write(tmp_path / "change_attribute.json", entries)
    bench = load_benchmark("genecis", ann)
    items = bench.queries("change_attribute")
    assert items[0].query.candidates[0] == "vg7_40_10_20_30" and len(items[0].query.candidates) == 3
    rows = bench.gallery_manifest("change_attribute", tmp_path / "imgs", work_dir=tmp_path / "run")
    assert len(rows) == 4
    with Image.open(rows[0]["file"]) as im:
        assert im.width == im.height  # padded to a square, as the official loader does
    # x=0: left clipped at 0, right = 0 + 1.7*20 = 34; y: top = max(0, 10-21) = 0, bottom = 0 + 1.7*30 = 51
    assert dilated_box([0, 10, 20, 30], 100, 80) == (0.0, 0.0, 34.0, 51.0)


def test_genecis_drops_non_modal_gallery_lengths(tmp_path):
    e = lambda n: {"reference": {"val_image_id": 1}, "target": {"val_image_id": 2}, "condition": "c",  # noqa: E731
                   "gallery": [{"val_image_id": 10 + i} for i in range(n)]}
    ann = write(tmp_path / "focus_object.json", [e(3), e(3), e(2)])
    assert len(load_benchmark("genecis", ann).queries("focus_object")) == 2


# ----------------------------------------------------------------------------- stamps


STAMPS_QUERIES = [
    {"pairid": 0, "task": "tir", "reference": None, "caption": "a frog", "target_hard": "f1",
     "target_soft": {"f1": 1.0, "f2": 1.0}},
    {"pairid": 1, "task": "cir", "reference": "f1", "caption": "make it a bird", "target_hard": "b1",
     "target_soft": {"b1": 1.0}},
]


def test_stamps_loader_and_metrics(tmp_path):
    ann = write(tmp_path / "queries.json", STAMPS_QUERIES)
    bench = load_benchmark("stamps", ann)
    items = bench.queries()
    assert [it.query.task for it in items] == ["tir", "cir"]
    assert items[1].query.exclude == ["f1"] and items[0].positives == ["f1", "f2"]
    assert [it.id for it in bench.queries("cir")] == ["1"]
    # tir: f2 at rank 2 (a soft target counts); cir: the reference at rank 1 is removed, b1 becomes rank 1.
    m = bench.metrics(Predictions({"0": ["x", "f2", "f1"], "1": ["f1", "b1"]}), items)
    assert m["tir/recall@1"] == 0.0 and m["tir/recall@5"] == 100.0
    assert m["cir/recall@1"] == 100.0
    assert m["overall/recall@1"] == 50.0
    assert m["tir/map@5"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)
    assert m["cir/map@5"] == 100.0


def test_stamps_shipped_queries_are_valid():
    bench = load_benchmark("stamps")
    try:
        items = bench.queries()
    except BenchmarkError as exc:  # the data file is written by another task
        pytest.skip(str(exc))
    assert items and {it.query.task for it in items} <= {"tir", "cir"}
    assert all(it.positives for it in items)


def test_stamps_gallery_from_captions(stamps_root):
    rows = load_benchmark("stamps").gallery_manifest("all", stamps_root)
    assert len(rows) == 627 and rows[0]["caption"] and rows[0]["tags"]


# ----------------------------------------------------------------------------- options and --set routing


def test_route_sets():
    opts, sets = route_sets(["circo.shared_concept=true", "tau=0.2", "clip.text_weight=0.3",
                             "roles.default=x"], "circo", "caption")
    assert opts == {"shared_concept": True}
    assert sets == ["methods.caption.tau=0.2", "methods.clip.text_weight=0.3", "roles.default=x"]
    with pytest.raises(ConfigError, match="benchmark is circo"):
        route_sets(["cirr.version=rc1"], "circo", "clip")
    with pytest.raises(BenchmarkError, match="invalid fashioniq option"):
        load_benchmark("fashioniq", None, caption_join="bogus")
    with pytest.raises(BenchmarkError, match="unknown benchmark"):
        load_benchmark("imagenet")


# ----------------------------------------------------------------------------- CIRR subset mode


def tiny_cirr(tmp_path, stamps_root, n_images=16, n_queries=3):
    """A CIRR-format val split over real stamps: query q has reference image q, members q..q+5, target q+3."""
    rows = [json.loads(x) for x in (stamps_root / "captions.jsonl").read_text().splitlines()[:n_images]]
    names = [f"dev-{i}" for i in range(n_images)]
    write(tmp_path / "split.rc2.val.json", {n: f"./{r['file']}" for n, r in zip(names, rows, strict=True)})
    entries = [{"pairid": 100 + q, "reference": names[q], "caption": rows[q + 3]["caption"],
                "target_hard": names[q + 3], "target_soft": {names[q + 3]: 1.0},
                "img_set": {"id": q, "members": names[q:q + 6], "reference_rank": 0, "target_rank": 3}}
               for q in range(n_queries)]
    write(tmp_path / "cap.rc2.val.json", entries)
    return tmp_path / "cap.rc2.val.json", names


def test_cirr_subset_mode_items_metrics_and_server_file(tmp_path, stamps_root):
    ann, names = tiny_cirr(tmp_path, stamps_root)
    bench = load_benchmark("cirr", ann)
    items = bench.queries("val")
    subset = bench.subset_items(items)
    assert [s.id for s in subset] == ["100:subset", "101:subset", "102:subset"]
    first = subset[0].query
    assert first.candidates == names[1:6] and first.exclude == [names[0]] and first.reference.id == names[0]
    assert "subset mode" in bench.describe_run()["recall_subset"]
    assert load_benchmark("cirr", ann, subset_mode=False).subset_items(items) == []
    # A top-k run ranks the target outside its top 2; the subset pass put it first: R_subset comes from the pass.
    full = {it.id: ["x1", "x2", it.truth["target_hard"]] for it in items}
    passes = {f"{it.id}:subset": [it.truth["target_hard"], *[m for m in it.truth["members"][1:]
                                                             if m != it.truth["target_hard"]]] for it in items}
    m = bench.metrics(Predictions({**full, **passes}), items)
    assert m["recall_subset@1"] == 100.0 and m["recall@1"] == 0.0
    assert bench.metrics(Predictions(full), items)["recall_subset@1"] == 100.0  # restricted: only member left
    files = bench.submissions("val", Predictions({**full, **passes}), items)
    assert files["cirr_val_recall_subset.json"]["100"] == passes["100:subset"][:3]


def test_cirr_score_warns_on_truncated_rankings(tmp_path, stamps_root):
    ann, names = tiny_cirr(tmp_path, stamps_root)
    preds = write(tmp_path / "p.json", {"100": [names[3], names[1]], "101": names[1:8], "102": names[2:9]})
    result = score_file("cirr", ann, preds)
    assert any("1 of 3 rankings order fewer than 3 of the query's members" in w for w in result["warnings"])
    full = write(tmp_path / "full.json", {str(100 + q): names[q + 1:q + 6] for q in range(3)})
    assert not any("recall_subset" in w for w in score_file("cirr", ann, full)["warnings"])


@pytest.mark.slow
def test_imagent_eval_cirr_runs_subset_mode_and_says_so(tmp_path, stamps_root):
    from typer.testing import CliRunner

    from testkit import eval_app

    app = eval_app()
    ann, names = tiny_cirr(tmp_path, stamps_root)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "cirr", "--method", "clip", "--annotations", str(ann),
                                          "--images-root", str(stamps_root), "--run-dir", str(run)])
    assert res.exit_code == 0, res.output
    assert "recall_subset: subset mode" in " ".join(res.output.split())
    records = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    passes = {r["qid"]: r for r in records if r["qid"].endswith(":subset")}
    assert sorted(passes) == ["100:subset", "101:subset", "102:subset"]
    for q in range(3):  # each pass ranked exactly the 5 members other than the reference
        assert sorted(passes[f"{100 + q}:subset"]["ids"]) == sorted(names[q + 1:q + 6])
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["queries"] == 3 and metrics["subset_pass"]["completed"] == 3
    assert "subset mode" in metrics["benchmark_info"]["recall_subset"]
    expected = [100.0 * sum(passes[f"{100 + q}:subset"]["ids"][:k].count(names[q + 3]) for q in range(3)) / 3
                for k in (1, 2, 3)]
    assert [metrics["metrics"][f"recall_subset@{k}"] for k in (1, 2, 3)] == pytest.approx(expected)
    assert "subset mode" in (run / "report.md").read_text()
