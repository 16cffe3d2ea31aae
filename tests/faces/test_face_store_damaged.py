"""Issue 47: an empty or corrupt faces.sqlite is set aside with a clear message (never deleted, never a traceback)
and the next index pass starts a new store in its place."""

from __future__ import annotations

import pytest

from imagent.index.face_store import FaceDataMissing, FaceStore, faces_path


@pytest.mark.parametrize("content", [b"", b"this is not a database" * 100], ids=["empty", "garbage"])
def test_a_damaged_store_is_set_aside_and_a_new_one_made(tmp_path, content):
    faces_path(tmp_path).write_bytes(content)
    store = FaceStore(tmp_path)
    with pytest.raises(FaceDataMissing, match=r"damaged .*set aside as faces\.sqlite\.damaged-1.*imagent index"), \
            store.read():
        pass
    aside = tmp_path / "faces.sqlite.damaged-1"
    assert aside.exists() and not faces_path(tmp_path).exists()
    assert not content or aside.read_bytes() == content  # kept as it was (an empty file got sqlite's header)
    faces_path(tmp_path).write_bytes(content)  # damaged again: the index pass sets it aside and starts anew
    with store.write(create=True) as c:
        c.execute("INSERT INTO people(id, name, created) VALUES (1, 'Anna', '2026-11-28')")
    assert (tmp_path / "faces.sqlite.damaged-2").exists() == bool(content)  # an empty file simply becomes the store
    with store.read() as c:
        assert c.execute("SELECT name FROM people").fetchall() == [("Anna",)]
    assert store.version() == 1
