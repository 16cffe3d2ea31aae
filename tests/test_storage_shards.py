"""Vectors as memory-mapped shards: searching many shards gives what one array gives, to the last bit (scores,
rankings and ties, filters, pools, several queries, the approximate store); a snapshot write killed between
shards leaves the old snapshot in use; an index written before shards keeps working and is migrated by the next
write. No models needed."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import AnnOptions, IndexOptions
from imagent.core.types import ImageRecord, MetadataConstraints
from imagent.index.embedding import PendingRecord, add_records, gallery_from_records
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from imagent.index.shards import SNAPSHOT_FILE, ShardedVectors, write_shards

N = 300
TINY = 64  # rows per shard in these tests: 5 shards for N rows, the last one short


class HashEncoder:
    """Unit vectors from a text's hash. Captions repeat every 37 records, so equal scores (ties) cross shards."""

    sees_pixels = False

    def __init__(self, model_id: str, dim: int) -> None:
        self.model_id, self.dim = model_id, dim

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(f"{self.model_id}|{t}".encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.array(out, dtype=np.float32).reshape(len(texts), self.dim)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return self.encode_texts([r.caption for r in records])


DUAL = HashEncoder("dual-24", 24)  # caption mode: `image` and `caption_dual` are identical (stored once)
TEXT = HashEncoder("text-16", 16)
T0 = datetime(2020, 1, 1)


def _records(n: int, start: int = 0) -> list[ImageRecord]:
    return [ImageRecord(id=f"r{i}", path=f"/x/{i}.jpg", captions=[f"caption {i % 37}"],
                        taken_time=T0 + timedelta(days=i)) for i in range(start, start + n)]


def _queries(dim: int, n: int = 6) -> np.ndarray:
    q = np.random.default_rng(dim).standard_normal((n, dim)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _answers(g: Gallery) -> dict[str, object]:
    """Every way the gallery is read, for comparing two layouts exactly."""
    out: dict[str, object] = {}
    window = MetadataConstraints(time_from=T0 + timedelta(days=50), time_to=T0 + timedelta(days=120))
    for space in (SPACE_IMAGE, SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT):
        qs = _queries(g.spaces()[space].dim)
        small = np.array([3, 70, 71, 140, 299])
        large = np.setdiff1d(np.arange(N), [5, 64, 200])
        for j, q in enumerate(qs):
            out[f"{space}/{j}/scores"] = g.scores(q, space).tobytes()
            out[f"{space}/{j}/small"] = g.scores(q, space, small).tobytes()
            out[f"{space}/{j}/large"] = g.scores(q, space, large).tobytes()
            out[f"{space}/{j}/shuffled"] = g.scores(q, space, np.random.default_rng(j).permutation(large)).tobytes()
            for name, kw in {"all": {}, "exclude": {"exclude": ["r0", "r64", "r65"]},
                             "subset": {"subset": [f"r{i}" for i in range(0, N, 7)]},
                             "window": {"constraints": window}}.items():
                for k in (1, 10, N):
                    r = g.search(q, space, k, **kw)
                    out[f"{space}/{j}/{name}/{k}"] = (r.ids, r.scores)
        out[f"{space}/multi"] = g.scores(qs[:3], space).tobytes()
        out[f"{space}/scan"] = g.scan(qs[:3], space, large).tobytes()
        out[f"{space}/vectors"] = np.asarray(g.vectors(space)).tobytes()
        out[f"{space}/vector"] = g.vector(space, "r130").tobytes()
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_many_shards_answer_exactly_as_one_array(tmp_path, monkeypatch, dtype):
    g = gallery_from_records(str(tmp_path / "g"), _records(N), DUAL, TEXT)
    g.configure(IndexOptions(vectors_dtype=dtype))
    g.write_snapshot()
    assert g.vector_shards(SPACE_CAPTION_TEXT).num_shards == 1
    one = _answers(g)
    g.configure(IndexOptions(vectors_dtype=dtype, shard_rows=TINY))
    g.write_snapshot()
    shards = g.vector_shards(SPACE_CAPTION_TEXT)
    assert shards.num_shards == 5 and shards.counts == [64, 64, 64, 64, 44]
    assert g.vector_shards(SPACE_IMAGE) is g.vector_shards(SPACE_CAPTION_DUAL)  # identical spaces stored once
    many = _answers(g)
    assert many.keys() == one.keys()
    for key in one:
        assert many[key] == one[key], key
    # Ties (captions repeat every 37 records): equal scores keep row order across shard boundaries.
    tied = g.search(DUAL.encode_texts(["caption 5"])[0], SPACE_IMAGE, 8)
    assert tied.ids == [f"r{5 + 37 * i}" for i in range(8)]

    # The same answers when shards are scanned in parallel threads (what scans of >= 16 M entries do).
    monkeypatch.setattr("imagent.index.shards.scan_threads", lambda elements: 3)
    parallel = _answers(g)
    for key in one:
        assert parallel[key] == one[key], key
    monkeypatch.undo()

    # The same answers with at most one shard mapped at a time (bounded memory).
    g.configure(IndexOptions(vectors_dtype=dtype, shard_rows=TINY, mapped_shards=1))
    bounded = _answers(g)
    for key in one:
        assert bounded[key] == one[key], key
    assert g.vector_shards(SPACE_CAPTION_TEXT).mapped() <= 1

    # The layout on disk: one directory per stored space, five shard files each, named by the manifest.
    meta = json.loads((tmp_path / "g" / "vectors" / SNAPSHOT_FILE).read_text())
    assert meta["aliases"] == {SPACE_CAPTION_DUAL: SPACE_IMAGE} and meta["dtype"] == dtype
    assert sorted(p.relative_to(tmp_path / "g" / "vectors").parts[0]
                  for p in (tmp_path / "g" / "vectors").rglob("shard-*.npy")) == [SPACE_CAPTION_TEXT] * 5 + [
        SPACE_IMAGE] * 5


def test_the_approximate_store_reads_shards(tmp_path):
    pytest.importorskip("faiss")
    g = gallery_from_records(str(tmp_path / "g"), _records(N), None, TEXT)
    every_list = AnnOptions(mode="on", nprobe=100_000, overfetch=2)
    qs = _queries(TEXT.dim)
    window = MetadataConstraints(time_from=T0 + timedelta(days=30), time_to=T0 + timedelta(days=250))
    answers = {}
    for rows in (None, TINY):
        g.configure(IndexOptions(**({"shard_rows": rows} if rows else {})), every_list)
        g.write_snapshot()
        assert g.vector_shards(SPACE_CAPTION_TEXT).num_shards == (5 if rows else 1)
        assert g.build_ann(force=True) == [SPACE_CAPTION_TEXT]
        answers[rows] = [(r.ids, r.scores) for q in qs
                         for r in (g.search(q, SPACE_CAPTION_TEXT, 10), g.search(q, SPACE_CAPTION_TEXT, 10,
                                                                                 constraints=window))]
    assert answers[None] == answers[TINY]
    g.configure(IndexOptions(shard_rows=TINY), AnnOptions(mode="off"))
    assert [(r.ids, r.scores) for q in qs for r in (g.search(q, SPACE_CAPTION_TEXT, 10),
                                                    g.search(q, SPACE_CAPTION_TEXT, 10, constraints=window))
            ] == answers[TINY]  # every list probed: the store finds what the exact scan finds


_KILL_AT_THIRD_SHARD = """
import os, signal, sys
import numpy as np
from imagent.core.config import IndexOptions
from imagent.index.gallery import Gallery

real = np.lib.format.write_array_header_1_0
seen = []

def header(f, d):
    seen.append(d)
    if len(seen) == 3:  # two shards written, the third about to be: the process dies here, no cleanup
        os.kill(os.getpid(), signal.SIGKILL)
    real(f, d)

np.lib.format.write_array_header_1_0 = header
g = Gallery(sys.argv[1])
g.configure(IndexOptions(shard_rows=64))
g.write_snapshot()
"""


def _kill_a_snapshot_write(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _KILL_AT_THIRD_SHARD, str(root)], env=env, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def test_a_snapshot_write_killed_between_shards_leaves_the_old_one(tmp_path):
    root = tmp_path / "g"
    g = gallery_from_records(str(root), _records(N), None, TEXT)
    q = _queries(TEXT.dim)[0]
    before = g.search(q, SPACE_CAPTION_TEXT, 20)
    manifest = (root / "vectors" / SNAPSHOT_FILE).read_bytes()

    _kill_a_snapshot_write(root)  # a rewrite at the same generation (new shard size), killed half-way
    assert (root / "vectors" / SNAPSHOT_FILE).read_bytes() == manifest
    assert len(list((root / "vectors" / SPACE_CAPTION_TEXT).iterdir())) == 2  # the old shards, the partial ones
    g2 = Gallery(root)
    assert g2.snapshot_is_current() and g2.vector_shards(SPACE_CAPTION_TEXT).num_shards == 1
    after = g2.search(q, SPACE_CAPTION_TEXT, 20)
    assert (after.ids, after.scores) == (before.ids, before.scores)

    # New records, then a write killed again: the stale snapshot is never used; the next reader rebuilds it.
    add_records(g2, [PendingRecord(r, f"record:{r.id}", "fp") for r in _records(40, N)], None, TEXT)
    _kill_a_snapshot_write(root)
    g3 = Gallery(root)
    assert len(g3) == N + 40 and not g3.snapshot_is_current()
    fresh = g3.search(q, SPACE_CAPTION_TEXT, N + 40)
    assert g3.snapshot_is_current()
    assert sorted(fresh.ids) == sorted(f"r{i}" for i in range(N + 40))
    expected = np.sort(TEXT.encode_texts([r.caption for r in _records(N + 40)]) @ q)[::-1]
    np.testing.assert_allclose(fresh.scores, expected, rtol=1e-6, atol=1e-6)
    # The write that succeeded removed the partial directories and the old shards.
    assert len(list((root / "vectors" / SPACE_CAPTION_TEXT).iterdir())) == 1


def test_an_index_written_before_shards_keeps_working_and_is_migrated(tmp_path):
    root = tmp_path / "g"
    g = gallery_from_records(str(root), _records(N), DUAL, TEXT)
    qs = _queries(DUAL.dim)
    expected = [(r.ids, r.scores) for r in (g.search(q, SPACE_IMAGE, 15) for q in qs)]
    # Rewrite the snapshot in the single-file layout of earlier versions: vectors/<space>.npy and ids.json.
    vec_dir = root / "vectors"
    meta = json.loads((vec_dir / SNAPSHOT_FILE).read_text())
    for space in meta["shards"]:
        np.save(vec_dir / f"{space}.npy", np.asarray(g.vectors(space)))
    (vec_dir / "ids.json").write_text(json.dumps({
        "generation": meta["generation"], "uuid": meta["uuid"], "spaces": meta["spaces"],
        "aliases": meta["aliases"], "ids": g.ids}))
    (vec_dir / SNAPSHOT_FILE).unlink()
    for space in meta["shards"]:
        for d in (vec_dir / space).iterdir():
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
        (vec_dir / space).rmdir()

    old = Gallery(root)
    assert old.snapshot_is_current()
    assert [(r.ids, r.scores) for r in (old.search(q, SPACE_IMAGE, 15) for q in qs)] == expected
    assert old.vector_shards(SPACE_IMAGE) is old.vector_shards(SPACE_CAPTION_DUAL)
    assert not (vec_dir / SNAPSHOT_FILE).exists()  # reading never rewrites

    old.write_snapshot()  # the next write migrates
    assert (vec_dir / SNAPSHOT_FILE).exists() and not (vec_dir / "ids.json").exists()
    assert not list(vec_dir.glob("*.npy"))
    new = Gallery(root)
    assert new.snapshot_is_current()
    assert [(r.ids, r.scores) for r in (new.search(q, SPACE_IMAGE, 15) for q in qs)] == expected


def test_write_shards_streams_and_checks_its_input(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((200, 8)).astype(np.float32)

    def batches(arr: np.ndarray, step: int = 30):
        for s in range(0, len(arr), step):
            yield arr[s : s + step]

    done = write_shards(tmp_path / "a", batches(data), 200, 8, np.dtype(np.float32), 64)
    assert done.counts == [64, 64, 64, 8] and done.alias is None
    sv = ShardedVectors.open(tmp_path / "a", done.counts, 8, np.dtype(np.float32))
    assert np.array_equal(sv.array(), data) and np.array_equal(sv[60:130], data[60:130])
    assert np.array_equal(sv[[199, 0, 64, 64]], data[[199, 0, 64, 64]]) and np.array_equal(sv[-1], data[-1])
    # The same rows again are not stored again; one changed row is.
    assert write_shards(tmp_path / "b", batches(data), 200, 8, np.dtype(np.float32), 64, {"a": sv}).alias == "a"
    assert not (tmp_path / "b").exists()
    changed = data.copy()
    changed[150, 3] += 1
    assert write_shards(tmp_path / "c", batches(changed), 200, 8, np.dtype(np.float32), 64, {"a": sv}).alias is None
    with pytest.raises(ValueError, match="rows arrived"):
        write_shards(tmp_path / "d", batches(data[:100]), 200, 8, np.dtype(np.float32), 64)
    with pytest.raises(ValueError, match="multiple of 64"):
        write_shards(tmp_path / "e", batches(data), 200, 8, np.dtype(np.float32), 100)
    with pytest.raises(ValueError):
        IndexOptions(shard_rows=100)
