"""The people JSON API on a real uvicorn server (real faces, real models): groups with face thumbnails, naming,
merging, the person filter in a search, people on result rows and cards, and the same trust rules as
``/api/images`` (Host check, only faces the index holds, a changed file refused)."""

from __future__ import annotations

import io
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.real_model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path, build_people, faces_kit):
    """``(base_url, folder, gallery)``: a real server on a freshly indexed people folder."""
    import uvicorn

    from imagent.api import Workspace
    from imagent.core.config import Settings
    from imagent.server.app import create_app

    folder = faces_kit.people_folder(tmp_path / "photos")
    build_people(folder, tmp_path / "index")
    ws = Workspace(Settings(index=tmp_path / "index", cache_dir=tmp_path / "cache", cache_calls=False))
    app = create_app(ws)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", folder, ws.gallery()
    server.should_exit = True
    thread.join(timeout=10)


def test_people_api_lists_names_merges_and_filters(served, faces_kit):
    from imagent.models.faces import FaceModel

    base, _folder, gallery = served
    with httpx.Client(base_url=base, timeout=60) as client:
        listed = client.get("/api/people").json()
        assert listed["faces"]["photos_scanned"] == 7
        groups = listed["people"]
        names = {g["id"]: {Path(gallery.record(i).path).name for i in g["photo_ids"]} for g in groups}
        obama = next(g for g in groups if names[g["id"]] == set(faces_kit.OBAMA))
        assert obama is groups[0] and obama["faces"] == 3 and obama["photos"] == 3 and not obama["tiny"]
        assert len(obama["thumbnails"]) == 3 and obama["thumbnails"][0].startswith("/api/faces/")

        # a thumbnail is a JPEG crop that holds his face (the real detector finds it again)
        thumb = client.get(obama["thumbnails"][0], params={"size": 200})
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
        with Image.open(io.BytesIO(thumb.content)) as im:
            assert max(im.size) <= 200
            crop = np.asarray(im.convert("RGB"))
        faces, _, _ = FaceModel().faces(np.ascontiguousarray(np.asarray(Image.fromarray(crop).resize((400, 400)))))
        assert len(faces) == 1
        # kept in the index folder and served from there (the same bytes, no second decode)
        crops_dir = Path(gallery.root) / "face-thumbnails"
        kept = list((crops_dir / "200").rglob("*.jpg"))
        assert len(kept) == 1 and kept[0].read_bytes() == thumb.content
        assert client.get(obama["thumbnails"][0], params={"size": 200}).content == thumb.content

        named = client.post(f"/api/people/{obama['id']}/name", json={"name": "Barack"})
        assert named.status_code == 200 and named.json()["name"] == "Barack" and named.json()["previous"] is None
        other = next(g for g in groups if g["id"] != obama["id"])
        taken = client.post(f"/api/people/{other['id']}/name", json={"name": "barack"})
        assert taken.status_code == 400 and "merge" in taken.json()["detail"]
        assert client.post("/api/people/999/name", json={"name": "X"}).status_code == 404
        assert client.post(f"/api/people/{other['id']}/name", json={"name": "x" * 300}).status_code == 422

        found = client.post("/api/search", json={"where": "person = 'Barack'", "top_k": 50})
        assert found.status_code == 200, found.text
        rows = found.json()["results"]
        assert {Path(r["path"]).name for r in rows} == set(faces_kit.OBAMA)
        assert all(r["people"] == [{"id": obama["id"], "name": "Barack"}] for r in rows)
        bad = client.post("/api/search", json={"where": "person = 'Nobody'"})
        assert bad.status_code == 400 and "no one is named" in bad.json()["detail"]

        detail = client.get(f"/api/people/{obama['id']}").json()
        assert [f["id"] for f in detail["face_list"]] == detail["face_ids"] and len(detail["face_list"]) == 3

        merged = client.post("/api/people/merge", json={"into": obama["id"], "ids": [other["id"]]})
        assert merged.status_code == 200 and merged.json()["faces"] == 3 + other["faces"]
        assert merged.json()["name"] == "Barack"
        after = client.get("/api/people").json()["people"]
        assert other["id"] not in {g["id"] for g in after}

        face = detail["face_list"][0]["id"]
        assert client.get(f"/api/faces/{face}/thumbnail").status_code == 200
        assert list(crops_dir.rglob(f"f{face}-*.jpg"))
        assert client.post(f"/api/faces/{face}/split", json={}).json()["new_group"] is True
        assert client.post(f"/api/faces/{face}/remove").json()["face"] == face
        assert client.get(f"/api/faces/{face}/thumbnail").status_code == 404  # deleted
        assert not list(crops_dir.rglob(f"f{face}-*.jpg"))  # and its kept crops with it
        assert client.get("/api/faces/123456/thumbnail").status_code == 404
    # forget deletes the kept crops with the rest of the face data
    from imagent.index.people import forget

    assert list(crops_dir.rglob("*.jpg"))
    done = forget(gallery)
    assert done.face_crops_removed >= 1 and not crops_dir.exists()


def test_face_thumbnails_follow_the_image_rules(served):
    from imagent.library import photo_card

    base, folder, gallery = served
    with httpx.Client(base_url=base, timeout=60) as client:
        groups = client.get("/api/people").json()["people"]
        face_of = {Path(gallery.record(g["photo_ids"][0]).path).name: g["thumbnails"][0] for g in groups}
        url = face_of["biden.jpg"]
        assert client.get(url).status_code == 200
        # another Host (a DNS-rebinding page) is refused before any route runs
        assert client.get(url, headers={"Host": "evil.example"}).status_code in (400, 403, 421)
        # the file changed since it was indexed: refused, as /api/images refuses it
        with Image.open(folder / "biden.jpg") as im:
            im.rotate(180).save(folder / "biden.jpg")
        changed = client.get(url)
        assert changed.status_code == 409 and "changed since it was indexed" in changed.json()["detail"]
        (folder / "biden.jpg").unlink()
        assert client.get(url).status_code == 404
    rid = next(i for i in gallery.ids if Path(gallery.record(i).path).name == "obama.jpg")
    card = photo_card(gallery.record(rid), gallery).to_dict()
    assert card["people"] and set(card["people"][0]) == {"id", "name"}


def test_an_index_without_face_data_has_no_people(tmp_path, build_people, faces_kit):
    from fastapi.testclient import TestClient

    from imagent.api import Workspace
    from imagent.core.config import Settings
    from imagent.server.app import create_app

    folder = tmp_path / "photos"
    folder.mkdir()
    faces_kit.skimage_photo("coffee", folder / "coffee.png")
    build_people(folder, tmp_path / "index", faces={"mode": "off"})
    app = create_app(Workspace(Settings(index=tmp_path / "index", cache_dir=tmp_path / "cache")))
    client = TestClient(app, base_url="http://127.0.0.1")
    assert client.get("/api/people").json() == {"people": [], "faces": None}
    assert client.get("/api/people/1").status_code == 404
    assert client.post("/api/people/1/name", json={"name": "Anna"}).status_code == 404
    assert client.get("/api/faces/1/thumbnail").status_code == 404


def test_ids_beyond_any_integer_are_404s(served):
    """Issue 47, finding 6: ids past SQLite's integers were an OverflowError and a 500."""
    base, _folder, _gallery = served
    big = 99999999999999999999999
    with httpx.Client(base_url=base, timeout=60) as client:
        some = client.get("/api/people").json()["people"][0]
        face = some["face_ids"][0]
        answers = [client.post(f"/api/people/{big}/name", json={"name": "Anna"}),
                   client.get(f"/api/people/{big}"),
                   client.post("/api/people/merge", json={"into": big, "ids": [some["id"]]}),
                   client.post("/api/people/merge", json={"into": some["id"], "ids": [big]}),
                   client.post(f"/api/faces/{big}/split", json={}),
                   client.post(f"/api/faces/{face}/split", json={"to": big}),
                   client.post(f"/api/faces/{big}/remove"),
                   client.get(f"/api/faces/{big}/thumbnail")]
        for res in answers:
            assert res.status_code == 404, (res.request.url, res.status_code, res.text)
            assert res.json()["detail"].startswith(("no group", "no face")), res.text
        assert client.get("/api/people").json()["people"][0]["faces"] == some["faces"]  # nothing changed
