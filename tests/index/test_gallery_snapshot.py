"""Gallery storage: the dense snapshot is never used when it does not match SQLite (no models needed)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3

import numpy as np
import pytest

from imagent.core.types import ImageRecord
from imagent.index.embedding import PendingRecord, add_records, gallery_from_records
from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery, GalleryError


class HashEmbedder:
    """Deterministic unit vectors from a text's hash: a stand-in for a model in storage tests."""

    def __init__(self, model_id: str = "hash-8", dim: int = 8, salt: str = "") -> None:
        self.model_id, self.dim, self.salt = model_id, dim, salt

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256((self.salt + t).encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.array(out, dtype=np.float32).reshape(len(texts), self.dim)


def _records(n: int, start: int = 0) -> list[ImageRecord]:
    return [ImageRecord(id=f"r{i}", path=f"/x/{i}.jpg", captions=[f"caption {i}"]) for i in range(start, start + n)]


def test_snapshot_rebuilt_after_a_write(tmp_path):
    emb = HashEmbedder()
    g = gallery_from_records(str(tmp_path / "g"), _records(5), None, emb)
    assert g.snapshot_is_current()
    # A write with no snapshot after it (as a killed build leaves things).
    add_records(g, [PendingRecord(r, f"record:{r.id}", "fp") for r in _records(2, 5)], None, emb)
    g2 = Gallery(tmp_path / "g")
    assert len(g2) == 7 and not g2.snapshot_is_current()
    v = g2.vectors(SPACE_CAPTION_TEXT)
    assert v.shape == (7, 8) and g2.snapshot_is_current()
    assert np.allclose(v[6], emb.encode_texts(["caption 6"])[0])


def test_snapshot_of_another_database_is_not_trusted(tmp_path):
    """Same ids, same generation, other vectors: the uuid tells the snapshots apart."""
    root = tmp_path / "g"
    gallery_from_records(str(root), _records(4), None, HashEmbedder(salt="a"))
    saved = tmp_path / "vectors-a"
    shutil.copytree(root / "vectors", saved)
    shutil.rmtree(root)
    g = gallery_from_records(str(root), _records(4), None, HashEmbedder(salt="b"))
    shutil.rmtree(root / "vectors")
    shutil.copytree(saved, root / "vectors")  # the old database's snapshot, same generation and ids
    assert json.loads((root / "vectors" / "snapshot.json").read_text())["generation"] == g.generation()
    g = Gallery(root)
    assert not g.snapshot_is_current()
    assert np.allclose(g.vectors(SPACE_CAPTION_TEXT)[0], HashEmbedder(salt="b").encode_texts(["caption 0"])[0])


def test_corrupt_or_missing_snapshot_files(tmp_path):
    root = tmp_path / "g"
    gallery_from_records(str(root), _records(3), None, HashEmbedder())
    (root / "vectors" / "snapshot.json").write_text("{broken")
    assert Gallery(root).vectors(SPACE_CAPTION_TEXT).shape == (3, 8)
    (shard,) = (root / "vectors" / SPACE_CAPTION_TEXT).glob("*/shard-00000.npy")
    shard.write_bytes(b"garbage")
    assert Gallery(root).vectors(SPACE_CAPTION_TEXT).shape == (3, 8)
    (shard,) = (root / "vectors" / SPACE_CAPTION_TEXT).glob("*/shard-00000.npy")
    shard.unlink()
    g = Gallery(root)
    assert not g.snapshot_is_current() and g.vectors(SPACE_CAPTION_TEXT).shape == (3, 8)


def test_transaction_rolls_back_on_error(tmp_path):
    g = gallery_from_records(str(tmp_path / "g"), _records(2), None, HashEmbedder())
    gen = g.generation()
    with pytest.raises(RuntimeError), g.transaction() as c:
        g.remove(c, ["r0"])
        raise RuntimeError("boom")
    g.reload()
    assert g.ids == ["r0", "r1"] and g.generation() == gen
    with g.transaction() as c:  # the connection is still usable
        g.remove(c, ["r0"])
    g.reload()
    assert g.ids == ["r1"] and g.generation() == gen + 1


def test_other_model_refused_and_helpers(tmp_path):
    root = tmp_path / "g"
    g = gallery_from_records(str(root), _records(2), None, HashEmbedder())
    with pytest.raises(GalleryError, match="hash-9"):
        add_records(g, [PendingRecord(_records(1, 9)[0], "k", "f")], None, HashEmbedder("hash-9", 8))
    with pytest.raises(GalleryError, match="no gallery index"):
        Gallery(tmp_path / "none")
    rec = ImageRecord(id="h", path="/x/h.jpg", content_hash="ab" * 32, captions=["c"], caption_source="given")
    add_records(g, [PendingRecord(rec, "k:h", "f")], None, HashEmbedder())
    g.reload()
    assert g.record_by_hash("ab" * 32) == rec and g.record_by_hash("cd" * 32) is None
    with g.transaction() as c:
        g.mark_skipped(c, "k:bad", "/x/bad.jpg", "not an image")
    assert g.skipped() == [("/x/bad.jpg", "not an image")] and g.skipped_keys() == ["k:bad"]
    with g.transaction() as c:
        g.forget_skipped(c, ["k:bad"])
    assert g.skipped() == []
    with sqlite3.connect(root / "records.sqlite") as c:
        assert c.execute("SELECT value FROM meta WHERE key='uuid'").fetchone()[0] == g.uuid()


def test_stale_snapshot_in_a_read_only_folder(tmp_path, monkeypatch):
    root = tmp_path / "g"
    g = gallery_from_records(str(root), _records(3), None, HashEmbedder())
    add_records(g, [PendingRecord(_records(1, 3)[0], "record:r3", "fp")], None, HashEmbedder())

    def refuse(self):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(Gallery, "write_snapshot", refuse)
    g = Gallery(root)
    v = g.vectors(SPACE_CAPTION_TEXT)  # rebuilt in memory from SQLite
    assert v.shape == (4, 8) and np.allclose(v[3], HashEmbedder().encode_texts(["caption 3"])[0])
