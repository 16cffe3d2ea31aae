"""The library service (imagent.library.LibraryService) called directly, each operation once, over real photos with
faces found by the real dlib models: cards, one photo, the library's pages, a record, a photo's bytes checked against
the index, thumbnails that keep the photo's shape, people (list, one, name, merge, split, remove, forget), face crops
from one reduced decode per photo, duplicates, and a newer build served without reopening anything by hand. The web
routes and CLI commands over it are tested in tests/server and tests/faces."""

from __future__ import annotations

import io
import os
import shutil
import threading
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.index.people import FaceRemoved, Forgotten, Merged, Moved, PeopleError, Renamed, UnknownPeople
from imagent.library import CannotShow, LibraryService, PhotoChanged, PhotoGone, UnknownPhoto
from imagent.library import service as service_module
from imagent.library import thumbs as thumbs_module
from imagent.library.types import LibraryPage, PhotoCard, PhotoDetail

from ..conftest import VIENNA, write_geo_photo

pytestmark = pytest.mark.real_model
BIG = 99999999999999999999999  # beyond SQLite's integers (issue 47, finding 6)


def _service(index: Path, tmp_path: Path) -> LibraryService:
    return LibraryService(Workspace(Settings(index=index, cache_dir=tmp_path / "cache", cache_calls=False)))


def _by_file(lib: LibraryService) -> dict[str, str]:
    g = lib.gallery
    return {Path(g.record(i).path).name: i for i in g.ids}


def test_cards_one_photo_and_the_library_by_day(library_folder, tmp_path):
    lib = _service(library_folder / "index", tmp_path)
    ids = _by_file(lib)
    card = lib.card(ids["obama.jpg"])
    assert isinstance(card, PhotoCard) and card.file == "obama.jpg" and card.taken == "2023-05-10T09:30:00"
    assert card.place and card.people and card.people[0].name is None
    page = lib.page(per_page="3")
    assert isinstance(page, LibraryPage) and (page.total, page.pages, page.library.undated) == (7, 3, 2)
    assert [p.file for p in page.photos] == ["together.jpg", "biden.jpg", "obama3.jpg"]  # newest first
    assert page.days == {"2023-06-01": 1, "2023-05-13": 1, "2023-05-12": 1}
    assert [(m.month, m.count, m.page) for m in page.months] == [("2023-06", 1, 0), ("2023-05", 4, 0)]
    vienna = lib.page(where="place ~ 'Vienna'", per_page="50")
    assert vienna.order == "oldest first" and vienna.months is None and vienna.total == 4
    assert "months" not in vienna.to_dict()
    detail = lib.photo(ids["biden.jpg"])
    assert isinstance(detail, PhotoDetail) and detail.folder == "photos" and detail.latitude
    assert (detail.previous, detail.next, detail.position) == (ids["together.jpg"], ids["obama3.jpg"], 1)
    assert lib.record_data(ids["coffee.png"])["path"].endswith("coffee.png")
    with pytest.raises(UnknownPhoto):
        lib.photo("no-such-photo")


def test_photo_bytes_only_while_the_file_is_the_one_indexed(tmp_path, build):
    photos = tmp_path / "photos"
    write_geo_photo(Path(__file__).resolve().parents[1] / "data" / "faces" / "biden.jpg", photos / "a.jpg",
                    datetime(2023, 1, 1), VIENNA)
    Image.new("RGB", (64, 48), (10, 200, 10)).save(photos / "b.png")
    build(photos, tmp_path / "index", faces="off")
    lib = _service(tmp_path / "index", tmp_path)
    ids = _by_file(lib)
    data = lib.photo_bytes(ids["a.jpg"])
    assert data == (photos / "a.jpg").read_bytes()
    shown = lib.photo_file(ids["b.png"])
    assert shown.media_type == "image/png" and shown.data[:4] == b"\x89PNG"
    Image.new("RGB", (64, 48), (200, 10, 10)).save(photos / "b.png")  # replaced since indexing
    with pytest.raises(PhotoChanged):
        lib.photo_bytes(ids["b.png"])
    os.unlink(photos / "a.jpg")
    with pytest.raises(PhotoGone):
        lib.photo_bytes(ids["a.jpg"])


def test_thumbnails_keep_the_photos_shape_and_are_kept(copy_index, tmp_path, monkeypatch):
    lib = _service(copy_index, tmp_path)
    banner = _by_file(lib)["banner.png"]
    made = []
    real = service_module.render_thumbnail
    monkeypatch.setattr(service_module, "render_thumbnail", lambda *a: made.append(a[1]) or real(*a))
    jpeg = lib.thumbnail(banner, 320)
    with Image.open(io.BytesIO(jpeg)) as im:
        assert im.size == (320, 80)  # 4:1, as the photo: never a square crop
    assert lib.thumbnail(banner, 320) == jpeg and made == [320]  # kept: not decoded again
    with pytest.raises(ValueError, match="must be one of"):
        lib.thumbnail(banner, 321)


def test_people_operations(copy_index, tmp_path):
    lib = _service(copy_index, tmp_path)
    ids = _by_file(lib)
    groups, summary = lib.people()
    assert summary.photos_scanned == 7 and summary.faces >= 6 and groups[0].faces
    obama = next(p for p in groups if ids["obama.jpg"] in p.photos)
    biden = next(p for p in groups if ids["biden.jpg"] in p.photos)
    assert obama.id != biden.id and lib.person(obama.id).id == obama.id

    named = lib.name(obama.id, "Barack")
    assert isinstance(named, Renamed) and (named.name, named.previous) == ("Barack", None)
    assert lib.person("barack").id == obama.id
    with pytest.raises(PeopleError, match="already named"):
        lib.name(biden.id, "BARACK")
    face = lib.person(biden.id).faces[0]
    moved = lib.split(face.id)
    assert isinstance(moved, Moved) and moved.new_group and moved.from_group == biden.id
    merged = lib.merge(biden.id, [moved.to])
    assert isinstance(merged, Merged) and merged.faces_moved == 1
    removed = lib.remove_face(face.id)
    assert isinstance(removed, FaceRemoved) and removed.photo == face.photo
    with pytest.raises(UnknownPeople):
        lib.split(face.id)
    gone = lib.forget()
    assert isinstance(gone, Forgotten) and gone.faces == summary.faces - 1 and not gone.left


def test_ids_beyond_any_integer_name_nobody(copy_index, tmp_path):
    lib = _service(copy_index, tmp_path)
    some = lib.people()[0][0].id
    for call in (lambda: lib.name(BIG, "Anna"), lambda: lib.merge(BIG, [some]), lambda: lib.merge(some, [BIG]),
                 lambda: lib.split(BIG), lambda: lib.split(lib.person(some).faces[0].id, BIG),
                 lambda: lib.remove_face(BIG), lambda: lib.face_crop(BIG), lambda: lib.person(BIG),
                 lambda: lib.person("9" * 5000)):
        with pytest.raises(UnknownPeople, match=r"no (group|face)"):
            call()


def test_face_crops_come_from_one_decode_per_photo(copy_index, tmp_path, monkeypatch):
    from imagent.models.faces import FaceModel

    lib = _service(copy_index, tmp_path)
    pair = _by_file(lib)["together.jpg"]
    faces = [f for p in lib.people()[0] for f in p.faces if f.photo == pair]
    assert len(faces) == 2
    decodes = []
    real = thumbs_module.decode_reduced
    monkeypatch.setattr(thumbs_module, "decode_reduced", lambda *a: decodes.append(a[1]) or real(*a))
    crops = [lib.face_crop(f.id, 160) for f in faces]
    assert len(decodes) == 1 and decodes[0] <= 1  # both faces from one decode (reduced when the faces allow it)
    for jpeg in crops:
        with Image.open(io.BytesIO(jpeg)) as im:
            assert max(im.size) <= 160
            big = np.asarray(im.convert("RGB").resize((400, 400)))
        assert len(FaceModel().faces(np.ascontiguousarray(big))[0]) == 1  # the real detector finds a face in it
    assert lib.face_crop(faces[0].id, 160) == crops[0] and len(decodes) == 1  # kept


def test_a_big_group_photo_is_decoded_once_and_bounded(tmp_path, build, monkeypatch):
    """A 24-MP photo with 50 face boxes (written into the face store as a scan would): every crop comes from one
    decode that holds a fraction of its pixels (the numbers at 100 MP: benchmarks/face_crops.py)."""
    from imagent.index.face_store import FaceStore, put_scan

    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (6000, 4000), (120, 130, 140)).save(photos / "group.jpg", quality=85)
    build(photos, tmp_path / "index", faces="off")
    lib = _service(tmp_path / "index", tmp_path)
    photo = lib.gallery.ids[0]
    boxes = [(0.02 + 0.095 * (i % 10), 0.05 + 0.18 * (i // 10), 0.06 + 0.095 * (i % 10), 0.11 + 0.18 * (i // 10))
             for i in range(50)]
    scan = SimpleNamespace(faces=[SimpleNamespace(box=b, score=1.0, size=240, descriptor=np.zeros(128)) for b in boxes],
                           found=50, width=6000, height=4000, note="")
    with FaceStore(tmp_path / "index").write(create=True) as c:
        put_scan(c, photo, "x", "test", scan)
        c.execute("INSERT INTO people(name, name_key, created) VALUES (NULL, NULL, 'now')")
        c.execute("UPDATE faces SET person = 1")
    decoded = []
    real = thumbs_module.decode_reduced

    def spy(*a):
        im = real(*a)
        decoded.append(im.size)
        return im

    monkeypatch.setattr(thumbs_module, "decode_reduced", spy)
    ids = [f.id for f in lib.person(1).faces]
    for fid in ids:
        assert lib.face_crop(fid, 160)
    assert len(decoded) == 1 and decoded[0][0] * decoded[0][1] <= 6000 * 4000 // 4  # 1/2 scale or less
    assert len(list((tmp_path / "index" / "face-thumbnails").rglob("*.jpg"))) == 50


@pytest.mark.parametrize("delete", ["forget", "remove"])
def test_no_crop_outlives_its_face(copy_index, tmp_path, monkeypatch, delete):
    """A crop being cut while its face is forgotten (or removed) is deleted again once written (issue 47,
    finding 3): the render waits until the face is gone, then finishes."""
    lib = _service(copy_index, tmp_path)
    face = lib.people()[0][0].faces[0]
    started, release = threading.Event(), threading.Event()
    real = service_module.crop_faces

    def slow(*a):
        started.set()
        assert release.wait(30)
        return real(*a)

    monkeypatch.setattr(service_module, "crop_faces", slow)
    errors = []
    worker = threading.Thread(target=lambda: _catch(errors, lambda: lib.face_crop(face.id, 96)))
    worker.start()
    assert started.wait(60)
    lib.forget() if delete == "forget" else lib.remove_face(face.id)
    release.set()
    worker.join(60)
    crops = copy_index / "face-thumbnails"
    left = [p.name for p in crops.rglob("*.jpg")] if crops.exists() else []
    assert not [n for n in left if n.startswith(f"f{face.id}-")], left  # none of the face that went
    if delete == "forget":
        assert not left
    assert errors and isinstance(errors[0], UnknownPeople)  # said: the face is gone


def _catch(errors: list, call) -> None:
    try:
        call()
    except Exception as exc:
        errors.append(exc)


def test_duplicates(tmp_path, build):
    photos = tmp_path / "photos"
    photos.mkdir()
    faces = Path(__file__).resolve().parents[1] / "data" / "faces"
    shutil.copy(faces / "obama.jpg", photos / "a.jpg")
    shutil.copy(faces / "obama.jpg", photos / "a_copy.jpg")  # the same bytes
    shutil.copy(faces / "biden.jpg", photos / "b.jpg")
    build(photos, tmp_path / "index", faces="off")
    groups = _service(tmp_path / "index", tmp_path).duplicates()
    assert len(groups) == 1 and {Path(m.path).name for m in groups[0].members} == {"a.jpg", "a_copy.jpg"}


def test_a_newer_build_is_served_without_reopening(tmp_path, build):
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (64, 48), (10, 200, 10)).save(photos / "a.png")
    build(photos, tmp_path / "index", faces="off")
    lib = _service(tmp_path / "index", tmp_path)
    before = lib.generation
    assert lib.page().total == 1
    Image.new("RGB", (64, 48), (200, 10, 200)).save(photos / "b.png")
    build(photos, tmp_path / "index", faces="off")  # another process would do the same: a new build generation
    assert lib.generation > before and lib.page().total == 2
    assert {p.file for p in lib.page().photos} == {"a.png", "b.png"}


def test_an_undecodable_photo_is_said(tmp_path, build, monkeypatch):
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (64, 48), (10, 200, 10)).save(photos / "a.png")
    build(photos, tmp_path / "index", faces="off")
    lib = _service(tmp_path / "index", tmp_path)
    from imagent.core.imageio import ImageLoadError

    def broken(*_a):
        raise ImageLoadError("corrupt image data")

    monkeypatch.setattr(service_module, "render_thumbnail", broken)
    with pytest.raises(CannotShow, match="cannot be decoded"):
        lib.thumbnail(lib.gallery.ids[0], 320)


def test_a_crop_decode_stays_within_its_pixel_bound_even_for_tiny_faces(tmp_path, monkeypatch):
    """Tiny faces would want the photo whole; the decode still holds at most CROP_DECODE_PIXELS (a JPEG is decoded
    at the largest DCT scale within it)."""
    monkeypatch.setattr(thumbs_module, "CROP_DECODE_PIXELS", 1_000_000)
    buf = io.BytesIO()
    Image.new("RGB", (2000, 2000), (90, 120, 150)).save(buf, "JPEG")
    tiny = (0.5, 0.5, 0.505, 0.505)  # a 10-px face
    assert thumbs_module.crop_scale([tiny], 2000, 2000, 160) == (1.0, 0.5)
    sizes = []
    real = thumbs_module.decode_reduced
    monkeypatch.setattr(thumbs_module, "decode_reduced", lambda *a: sizes.append(real(*a).size) or real(*a))
    (crop,) = thumbs_module.crop_faces(buf.getvalue(), [tiny], 160, 10**8)
    assert sizes == [(1000, 1000)]
    with Image.open(io.BytesIO(crop)) as im:
        assert im.format == "JPEG" and max(im.size) <= 160
