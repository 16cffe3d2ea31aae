"""Index the 627 stamps from their manifest in caption mode (real MiniLM), then update incrementally."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import numpy as np
import pytest

from imagent.core.config import IndexOptions
from imagent.index.builder import build_index
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from imagent.index.parts import IndexParts

pytestmark = pytest.mark.real_model


def test_stamps_manifest_incremental(stamps_copy, tmp_path, caption_dual, minilm):
    manifest = stamps_copy / "captions.jsonl"
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    idx = tmp_path / "idx"
    calls: list[tuple[int, int, str]] = []

    t0 = time.perf_counter()
    report = build_index(manifest, idx,
                         IndexParts.of(caption_dual, minilm),
                         IndexOptions(), progress=lambda d, t, p: calls.append((d, t, p)))
    elapsed = time.perf_counter() - t0
    print(f"\nindexed 627 stamps (caption mode, MiniLM) in {elapsed:.2f} s")
    assert (report.added, report.updated, report.unchanged, report.removed) == (627, 0, 0, 0)
    assert report.skipped == [] and report.total == 627
    assert report.seconds > 0 and json.loads(json.dumps(report.to_dict()))["added"] == 627
    assert len(calls) == 627 and calls[-1][:2] == (627, 627) and calls[0][0] == 1

    g = Gallery(idx)
    assert len(g) == 627 and g.ids == [r["id"] for r in rows]  # manifest order
    rec = g.record("animals__amphibians__frog")
    assert rec.captions == ["A frog."] and rec.extra == {"category": "animals/amphibians"}
    assert rec.path == str(stamps_copy / "images" / "animals__amphibians__frog.jpg")
    assert len(rec.content_hash) == 64 and rec.width and rec.height
    assert set(g.spaces()) == {SPACE_IMAGE, SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT}
    assert g.snapshot_is_current()
    assert np.allclose(np.linalg.norm(g.vectors(SPACE_CAPTION_TEXT), axis=1), 1, atol=1e-4)

    q = minilm.encode_texts(["a penguin"])[0]
    top = g.search(q, SPACE_CAPTION_TEXT, 3)
    assert "penguin" in g.record(top.ids[0]).caption.lower()

    # Second run over the same source: nothing to do.
    again = build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (again.added, again.updated, again.unchanged, again.removed) == (0, 0, 627, 0)
    assert again.seconds < elapsed

    # One file's content and mtime change: only that one is re-embedded.
    target = stamps_copy / rows[10]["file"]
    before = Gallery(idx).record(rows[10]["id"])
    with open(target, "ab") as f:
        f.write(b"\x00trailing bytes after EOI")  # still a valid JPEG, new content hash
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    vec_before = Gallery(idx).vectors(SPACE_CAPTION_TEXT).copy()
    changed = build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (changed.added, changed.updated, changed.unchanged, changed.removed) == (0, 1, 626, 0)
    g = Gallery(idx)
    after = g.record(rows[10]["id"])
    assert after.content_hash != before.content_hash and g.row(after.id) == 10  # same row, same id
    assert np.allclose(g.vectors(SPACE_CAPTION_TEXT), vec_before, atol=1e-5)

    # A manifest row's caption changes: re-embedded too (the fingerprint covers the row's metadata).
    rows[20]["caption"] = "A purple elephant on a skateboard."
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    recap = build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (recap.added, recap.updated, recap.unchanged) == (0, 1, 626)
    g = Gallery(idx)
    q = minilm.encode_texts(["elephant riding a skateboard"])[0]
    assert g.search(q, SPACE_CAPTION_TEXT, 1).ids == [rows[20]["id"]]

    # A file disappears: its record is removed (and the row is reported as skipped).
    gone = rows[30]
    (stamps_copy / gone["file"]).unlink()
    removed = build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (removed.added, removed.updated, removed.removed) == (0, 0, 1)
    assert removed.skipped == [(str(stamps_copy / gone["file"]), "file not found")]
    g = Gallery(idx)
    assert gone["id"] not in g and len(g) == 626 and g.vectors(SPACE_IMAGE).shape == (626, minilm.dim)

    # A row leaves the manifest: its record is removed; the missing file's skip entry is forgotten.
    dropped = rows[40]
    keep = [r for r in rows if r["id"] not in (dropped["id"], gone["id"])]
    manifest.write_text("\n".join(json.dumps(r) for r in keep) + "\n")
    shrink = build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions())
    assert (shrink.removed, shrink.skipped, shrink.unchanged) == (1, [], 625)
    g = Gallery(idx)
    assert dropped["id"] not in g and len(g) == 625 and g.skipped() == []
    assert g.ids == [r["id"] for r in keep]
    with sqlite3.connect(idx / "records.sqlite") as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == 625 * 3
