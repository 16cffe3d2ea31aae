"""Approximate search (FAISS store) beside the exact scan: same answers when the store probes every list,
filters respected, a stale or half-written store never used; nprobe calibrated to a target recall on held-out
queries (also under filters), recorded in the sidecar, and old sidecars still read."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from imagent.core.config import AnnOptions, IndexOptions
from imagent.core.types import ImageRecord
from imagent.index.ann import AnnParams, AnnRecallWarning, AnnStore, exact_top_k, search_pool
from imagent.index.embedding import PendingRecord, add_records, gallery_from_records
from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery

pytest.importorskip("faiss")

DIM = 16


class TableEmbedder:
    """Clustered unit vectors looked up by caption text (a stand-in for a model; embeddings cluster)."""

    model_id, dim = "table-16", DIM

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((40, DIM)).astype(np.float32)
        pts = centres[rng.integers(0, 40, n)] + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32)
        self.table = {f"caption {i}": v / np.linalg.norm(v) for i, v in enumerate(pts)}

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return np.array([self.table[t] for t in texts], dtype=np.float32).reshape(len(texts), DIM)


def _gallery(tmp_path, n: int = 3000) -> tuple[Gallery, TableEmbedder]:
    emb = TableEmbedder(n)
    recs = [ImageRecord(id=f"r{i}", path=f"/x/{i}.jpg", captions=[f"caption {i}"]) for i in range(n)]
    g = gallery_from_records(str(tmp_path / "g"), recs, None, emb)
    return g, emb


def _exhaustive(g: Gallery) -> None:
    """Store settings under which the approximate search must equal the exact one: every list probed."""
    g.configure(IndexOptions(), AnnOptions(mode="on", nprobe=100_000, overfetch=2))


def _queries(emb: TableEmbedder, n: int = 20) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    out = []
    for i in rng.integers(0, len(emb.table), n):
        q = emb.table[f"caption {i}"] + 0.2 * rng.standard_normal(DIM).astype(np.float32)
        out.append(q / np.linalg.norm(q))
    return out


def test_store_with_every_list_probed_equals_the_exact_scan(tmp_path):
    g, emb = _gallery(tmp_path)
    exact = [g.search(q, SPACE_CAPTION_TEXT, 10) for q in _queries(emb)]
    _exhaustive(g)
    assert g.build_ann() == [SPACE_CAPTION_TEXT] and g.ann_current(SPACE_CAPTION_TEXT)
    for q, want in zip(_queries(emb), exact, strict=True):
        got = g.search(q, SPACE_CAPTION_TEXT, 10)
        assert got.ids == want.ids
        assert np.allclose(got.scores, want.scores, atol=1e-6)  # exact cosines after the re-rank


def test_default_probe_recall_on_clustered_vectors(tmp_path):
    g, emb = _gallery(tmp_path)
    exact = [set(g.search(q, SPACE_CAPTION_TEXT, 20).ids) for q in _queries(emb)]
    g.configure(IndexOptions(), AnnOptions(mode="on"))
    g.build_ann()
    hits = sum(len(set(g.search(q, SPACE_CAPTION_TEXT, 20).ids) & want) for q, want in
               zip(_queries(emb), exact, strict=True))
    assert hits / (20 * len(exact)) >= 0.9


def test_filters_are_applied_inside_the_store(tmp_path):
    g, emb = _gallery(tmp_path)
    _exhaustive(g)
    g.build_ann()
    subset = [f"r{i}" for i in range(0, 3000, 3)]
    exclude = ["r0", "r3", "r6"]
    for q in _queries(emb, 5):
        got = g.search(q, SPACE_CAPTION_TEXT, 15, subset=subset, exclude=exclude)
        assert set(got.ids) <= set(subset) - set(exclude)
        g.ann_mode = "off"
        want = g.search(q, SPACE_CAPTION_TEXT, 15, subset=subset, exclude=exclude)
        g.ann_mode = "on"
        assert got.ids == want.ids


def test_a_stale_store_is_never_used(tmp_path, monkeypatch):
    g, emb = _gallery(tmp_path)
    _exhaustive(g)
    g.build_ann()
    add_records(g, [PendingRecord(ImageRecord(id="new", path="/x/new.jpg", captions=["caption 1"]),
                                  "record:new", "fp")], None, emb)
    g2 = Gallery(tmp_path / "g")
    _exhaustive(g2)
    assert not g2.ann_current(SPACE_CAPTION_TEXT)

    def boom(*_a, **_k):
        raise AssertionError("a stale store was searched")

    monkeypatch.setattr(AnnStore, "candidates", boom)
    q = emb.table["caption 1"]
    assert set(g2.search(q, SPACE_CAPTION_TEXT, 2).ids) == {"r1", "new"}
    assert g2.build_ann() == [SPACE_CAPTION_TEXT]  # rebuilt when stale


def test_a_half_written_store_does_not_match(tmp_path):
    g, _emb = _gallery(tmp_path, 500)
    _exhaustive(g)
    g.build_ann()
    (tmp_path / "g" / "ann" / f"{SPACE_CAPTION_TEXT}.json").unlink()  # a kill before the sidecar was written
    assert not Gallery(tmp_path / "g").ann_current(SPACE_CAPTION_TEXT)


def test_auto_mode_leaves_small_galleries_to_the_exact_scan(tmp_path):
    g, _emb = _gallery(tmp_path, 500)
    g.configure(IndexOptions())  # auto, 200,000 rows minimum
    assert g.build_ann() == []
    assert not (tmp_path / "g" / "ann").exists()


# ---------------------------------------------------------------------------------------------------------------
# Calibration and the shared search decision (imagent.index.ann.search_pool), on stores built from arrays.

def _clusters(n: int, spread: float, seed: int = 0, d: int = 64, centres: int = 200):
    """``n`` unit vectors around random centres and a function drawing more from the same distribution (fresh
    queries: held out from the store and from its calibration). ``spread`` 1.5: a member's cosine to its
    centre ~0.55, its neighbours barely above the rest (an uncalibrated nprobe finds ~2/3 of them)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, d)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)

    def draw(m: int) -> np.ndarray:
        x = c[rng.integers(0, centres, m)] + spread / np.sqrt(d) * rng.standard_normal((m, d)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return draw(n), draw


def _recall(x, queries, store, params, rows=None, min_rows=None, k=50):
    hits, paths = 0, set()
    for q in queries:
        want = set(exact_top_k(x, q, k, rows)[0].tolist())
        got = search_pool(x, q, k, rows, store, {"rows": len(x)}, params, min_rows)
        hits += len(want & set(got.rows.tolist()))
        paths.add(got.path)
    return hits / (k * len(queries)), paths


# Held-out recall is measured on 300 fresh queries and calibrated on 256 others: sampling error ~0.01.
SLACK = 0.02


@pytest.fixture(scope="module")
def hard_store(tmp_path_factory):
    x, draw = _clusters(20_000, spread=1.5)
    params = AnnParams(nprobe=1, min_rows=1)  # floor 1: calibration alone decides
    store = AnnStore(tmp_path_factory.mktemp("hard"), "s")
    store.build(x, {"rows": len(x)}, params)
    return x, draw(300), store, params


@pytest.fixture(scope="module")
def easy_store(tmp_path_factory):
    x, draw = _clusters(20_000, spread=1.0, seed=1)
    params = AnnParams(nprobe=1, min_rows=5_000)  # filters down to a quarter of the rows reach the store
    store = AnnStore(tmp_path_factory.mktemp("easy"), "s")
    store.build(x, {"rows": len(x)}, params)
    return x, draw(300), store, params


def test_calibration_reaches_the_target_on_harder_data(hard_store):
    x, queries, store, params = hard_store
    meta = store.meta()
    assert not meta["capped"] and meta["recall"] >= params.target_recall
    assert 1 < meta["nprobe"] < meta["nlist"] and store.nprobe_for(params) == meta["nprobe"]
    calibrated, paths = _recall(x, queries, store, params)
    assert paths == {"ann"} and calibrated >= params.target_recall - SLACK
    uncalibrated, _ = _recall(x, queries, store, replace(params, target_recall=0))  # nprobe 1, as given
    assert uncalibrated < 0.8  # the data is hard: the probe count had to be found


def test_the_sidecar_records_the_calibration(easy_store):
    _x, _q, store, params = easy_store
    meta = json.loads(store.meta_path.read_text())
    assert meta["rows"] == 20_000 and meta["target_recall"] == params.target_recall
    assert meta["nprobe"] >= 1 and meta["recall"] >= params.target_recall and meta["recall_k"] == 50
    assert meta["calibration_queries"] == 256 and meta["capped"] is False
    assert str(meta["nprobe"]) in meta["curve"]
    fractions = [e["fraction"] for e in meta["filtered"]]
    assert fractions == [0.5, 0.25]  # down to the threshold, 5,000 of 20,000 rows
    assert [e["nprobe"] for e in meta["filtered"]] == sorted(e["nprobe"] for e in meta["filtered"])
    assert all(e["recall"] >= params.target_recall for e in meta["filtered"])


def test_filtered_search_is_exact_below_the_threshold_and_calibrated_above(easy_store):
    x, queries, store, params = easy_store
    rng = np.random.default_rng(5)
    small = np.sort(rng.choice(len(x), 4_000, replace=False))  # below min_rows (5,000): the exact scan
    for q in queries[:20]:
        got = search_pool(x, q, 50, small, store, {"rows": len(x)}, params)
        want = exact_top_k(x, q, 50, small)
        assert got.path == "exact" and np.array_equal(got.rows, want[0]) and np.array_equal(got.scores, want[1])
    for fraction in (0.5, 0.3):
        rows = np.sort(rng.choice(len(x), int(len(x) * fraction), replace=False))
        recall, paths = _recall(x, queries, store, params, rows)
        assert paths == {"ann"} and recall >= params.target_recall - SLACK
        got = search_pool(x, queries[0], 50, rows, store, {"rows": len(x)}, params)
        assert set(got.rows.tolist()) <= set(rows.tolist())
        assert np.allclose(got.scores, x[got.rows] @ queries[0], atol=1e-5)  # exact cosines after the re-rank


def test_filter_probes_interpolate_between_calibrated_fractions(tmp_path):
    store = AnnStore(tmp_path, "s")
    store._meta = {"nprobe": 4, "filtered": [{"fraction": 0.5, "nprobe": 20}, {"fraction": 0.25, "nprobe": 80}]}
    params = AnnParams(nprobe=2)
    assert store.nprobe_for(params) == 4
    assert store.nprobe_for(params, 0.5) == 20 and store.nprobe_for(params, 0.25) == 80
    assert store.nprobe_for(params, 0.35) == 56  # on the line between two measured fractions
    assert store.nprobe_for(params, 0.999) == 5  # one row excluded: about the unfiltered count
    assert store.nprobe_for(params, 0.05) == 400  # below the smallest: its count scaled, 80 * 0.25 / 0.05
    assert store.nprobe_for(replace(params, nprobe=10)) == 10  # the floor
    assert store.nprobe_for(replace(params, target_recall=0), 0.5) == 4  # no calibration: the floor, scaled


def test_a_store_of_another_identity_is_never_used(easy_store, monkeypatch):
    x, queries, store, params = easy_store

    def boom(*_a, **_k):
        raise AssertionError("a store that does not match was searched")

    monkeypatch.setattr(AnnStore, "candidates", boom)
    for identity in ({"rows": len(x) + 1}, {"rows": len(x), "generation": 7}, {"model_id": "other"}):
        got = search_pool(x, queries[0], 10, None, store, identity, params)
        assert got.path == "exact" and np.array_equal(got.rows, exact_top_k(x, queries[0], 10)[0])


def test_an_old_sidecar_without_calibration_still_loads(easy_store, tmp_path, monkeypatch):
    x, queries, store, _params = easy_store
    old = AnnStore(tmp_path, "s")
    old.dir.mkdir()
    shutil.copy(store.index_path, old.index_path)
    meta = {k: v for k, v in store.meta().items() if k in ("rows", "nlist", "factory")}
    old.meta_path.write_text(json.dumps(meta))  # as written before calibration
    fresh = AnnStore(tmp_path, "s")
    params = AnnParams(nprobe=24, min_rows=1)
    assert fresh.matches({"rows": len(x)}) and fresh.nprobe_for(params) == 24
    probes = []
    real = AnnStore.candidates

    def spy(self, query, k, nprobe, allowed=None):
        probes.append(nprobe)
        return real(self, query, k, nprobe, allowed)

    monkeypatch.setattr(AnnStore, "candidates", spy)
    got = search_pool(x, queries[0], 10, None, fresh, {"rows": len(x)}, params)
    assert got.path == "ann" and probes == [24]  # indexing.ann_nprobe, as before calibration existed
    assert not fresh.calibrated_for(params)  # the next `imagent index` calibrates it


def test_a_capped_calibration_warns_and_a_new_target_recalibrates(tmp_path, monkeypatch):
    g, _emb = _gallery(tmp_path)
    g.configure(IndexOptions(), AnnOptions(mode="on", nprobe=1, target_recall=1.0))
    g.ann_params = replace(g.ann_params, max_probe_fraction=0.02)  # at most 2 of 76 lists
    with pytest.warns(AnnRecallWarning, match="below the target recall"):
        assert g.build_ann() == [SPACE_CAPTION_TEXT]
    meta = json.loads((tmp_path / "g" / "ann" / f"{SPACE_CAPTION_TEXT}.json").read_text())
    assert meta["capped"] and meta["nprobe"] == meta["nprobe_cap"] == 2 and meta["recall"] < 1.0
    assert g.ann_notes and SPACE_CAPTION_TEXT in g.ann_notes[0]

    def boom(*_a, **_k):
        raise AssertionError("a current store was rebuilt")

    monkeypatch.setattr(AnnStore, "build", boom)
    g.configure(IndexOptions(), AnnOptions(mode="on", nprobe=1, target_recall=0.9))
    assert g.build_ann() == [SPACE_CAPTION_TEXT] and not g.ann_notes  # recalibrated, not rebuilt
    meta = json.loads((tmp_path / "g" / "ann" / f"{SPACE_CAPTION_TEXT}.json").read_text())
    assert meta["target_recall"] == 0.9 and meta["recall"] >= 0.9 and not meta["capped"]
    assert g.ann_current(SPACE_CAPTION_TEXT) and g.build_ann() == []  # calibrated for these settings


def test_a_filter_that_would_probe_every_list_is_scanned_exactly(hard_store, monkeypatch):
    """A narrow filter scales the probes up; once they reach every list the store would read all its rows for
    nothing saved, so the pool is scanned exactly (an exact answer, no slower). A wider filter still uses it."""
    x, queries, store, params = hard_store
    nlist = store.meta()["nlist"]
    base = store.nprobe_for(params)
    assert base < nlist
    rng = np.random.default_rng(11)
    narrow = np.sort(rng.choice(len(x), max(60, int(len(x) * base / nlist / 2)), replace=False))
    assert store.nprobe_for(params, len(narrow) / len(x)) >= nlist
    wide = np.sort(rng.choice(len(x), len(x) // 2, replace=False))
    assert store.nprobe_for(params, 0.5) < nlist
    probes: list[int] = []
    real = store.candidates
    monkeypatch.setattr(store, "candidates", lambda q, n, nprobe, allowed: probes.append(nprobe) or real(
        q, n, nprobe, allowed))
    got = search_pool(x, queries[0], 50, narrow, store, {"rows": len(x)}, params)
    want = exact_top_k(x, queries[0], 50, narrow)
    assert got.path == "exact-fallback" and probes == []
    assert np.array_equal(got.rows, want[0]) and np.array_equal(got.scores, want[1])
    assert search_pool(x, queries[0], 50, wide, store, {"rows": len(x)}, params).path == "ann" and len(probes) == 1
