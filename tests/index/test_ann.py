"""Approximate search (FAISS store) beside the exact scan: same answers when the store probes every list,
filters respected, a stale or half-written store never used."""

from __future__ import annotations

import numpy as np
import pytest

from imagent.core.config import IndexOptions
from imagent.core.types import ImageRecord
from imagent.index.ann import AnnStore
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
    g.configure(IndexOptions(ann="on", ann_nprobe=100_000, ann_overfetch=2))


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
    g.configure(IndexOptions(ann="on"))
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
