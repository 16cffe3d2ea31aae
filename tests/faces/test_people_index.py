"""Faces found at index time and grouped into people, with the real dlib models on real faces (issue 37).

Obama's three photos must form one group and nobody else's face may join it; mirrored, resized and cropped
copies added later must join his group, keep its id and name; photos without faces make no group; the filter
field ``person`` selects exactly his photos; ``forget`` leaves no descriptor in the index folder."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.real_model

FACES = Path(__file__).resolve().parents[1] / "data" / "faces"
OBAMA = ("obama.jpg", "obama2.jpg", "obama3.jpg")
BIDEN = "biden.jpg"


@pytest.fixture
def kit(faces_kit):
    return faces_kit


def test_one_person_one_group_and_others_apart(people_index, kit):
    from imagent.index.gallery import Gallery

    _folder, index, report = people_index
    faces = report.faces
    assert faces.status == "done" and faces.scanned == 7 and not faces.notes
    groups = kit.groups_by_file(Gallery(index))
    obama = [g for g in groups.values() if set(OBAMA) & g]
    assert obama == [set(OBAMA)], groups  # all three in one group, alone
    biden = [g for g in groups.values() if BIDEN in g]
    assert biden == [{BIDEN}]
    assert all(not ({"coffee.png", "rocket.png"} & g) for g in groups.values())  # no face, no group
    # every group holds one person's photos: the astronaut's groups never hold anyone else's
    assert all(g <= {"astronaut.png"} for g in groups.values() if "astronaut.png" in g)


def test_photos_without_faces_create_no_groups(tmp_path, build_people, kit):
    from imagent.index.gallery import Gallery
    from imagent.index.people import list_people, scan_summary

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("coffee", "rocket", "chelsea"):  # a cup, a rocket, a cat
        kit.skimage_photo(name, folder / f"{name}.png")
    report = build_people(folder, tmp_path / "index")
    assert (report.faces.status, report.faces.scanned, report.faces.faces) == ("done", 3, 0)
    g = Gallery(tmp_path / "index")
    assert list_people(g) == []
    assert scan_summary(g).photos_scanned == 3


def _copies(src: Path, dest: Path, geo_photo, kit) -> list[str]:
    """Obama again: obama.jpg mirrored, obama2.jpg at half size, a crop around his face in obama3.jpg, each with a
    date and place (Vienna, July 2019); and a new photo without a face."""
    vienna = (48.2085, 16.3721)
    with Image.open(src / "obama.jpg") as im:
        im.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(dest / "mirror.jpg")
    with Image.open(src / "obama2.jpg") as im:
        im.resize((im.width // 2, im.height // 2), Image.Resampling.LANCZOS).save(dest / "small.jpg")
    with Image.open(src / "obama3.jpg") as im:
        im.crop((90, 20, 400, 330)).save(dest / "crop.jpg")  # his head and shoulders
    names = []
    for n, name in enumerate(("mirror.jpg", "small.jpg", "crop.jpg")):
        geo_photo(dest / name, dest / f"vienna_{name}", datetime(2019, 7, 10 + n, 12), vienna)
        (dest / name).unlink()
        names.append(f"vienna_{name}")
    kit.skimage_photo("chelsea", dest / "cat.png")
    return names


def test_copies_join_his_group_and_the_name_survives_a_reindex(tmp_path, build_people, geo_photo, kit):
    from imagent.index.gallery import Gallery
    from imagent.index.people import get_person, list_people, name_person
    from imagent.tools.filter_lang import FilterError
    from imagent.tools.photo_search import where_rows

    folder = kit.people_folder(tmp_path / "photos")
    index = tmp_path / "index"
    build_people(folder, index)
    g = Gallery(index)
    obama_id = next(pid for pid, files in kit.groups_by_file(g).items() if files == set(OBAMA))
    name_person(g, obama_id, "Barack")

    added = _copies(folder, folder, geo_photo, kit)
    report = build_people(folder, index)
    assert report.added == 4 and report.faces.scanned == 4
    assert report.faces.joined == 3 and report.faces.new_people == 0  # no new group for him

    g = Gallery(index)
    barack = get_person(g, "barack")  # by name, any case
    assert barack.id == obama_id and barack.name == "Barack"
    assert {Path(g.record(i).path).name for i in barack.photos} == {*OBAMA, *added}
    assert sum(1 for p in list_people(g) if p.name) == 1

    def where(expr: str) -> set[str]:
        return {Path(g.record(i).path).name for i in g.id_array[where_rows(g, expr)]}

    assert where("person = 'Barack'") == {*OBAMA, *added}  # exactly his photos
    # GetMetadata's data: each photo's people by name (#id for a group not named yet)
    from imagent.tools.album import Album

    by_name = {Path(g.record(i).path).name: i for i in g.ids}
    rows = Album(g).metadata([by_name["vienna_crop.jpg"], by_name["cat.png"], by_name[BIDEN]])
    assert rows[0]["people"] == ["Barack"] and rows[0]["address"] and rows[1]["people"] == []
    biden_id = next(pid for pid, files in kit.groups_by_file(g).items() if BIDEN in files)
    assert rows[2]["people"] == [f"#{biden_id}"]
    assert Album(g).metadata([by_name["obama.jpg"]], ["people"]) == [{"id": by_name["obama.jpg"], "people": ["Barack"]}]
    # ... as the album agents read it: GetMetadata's line names the people; FilterMetadata offers the person field
    from imagent.agents.state import ToolScope
    from imagent.methods.album.tools import AlbumToolsConfig, FilterMetadataTool, GetMetadataTool

    seen = GetMetadataTool(Album(g), AlbumToolsConfig())({"photo_ids": [by_name["vienna_crop.jpg"]]}, ToolScope())
    assert "people Barack" in seen.text
    assert "person = 'Name'" in FilterMetadataTool(Album(g), AlbumToolsConfig()).description
    assert where("person = 'BARACK'") == where(f"person = {obama_id}") == where(f"person = '#{obama_id}'")
    assert where("person ~ 'arac'") == {*OBAMA, *added}
    assert where("person = 'Barack' and place ~ 'Vienna'") == set(added)  # with place and time
    assert where("person = 'Barack' and time = '2019-07-11'") == {"vienna_small.jpg"}
    assert where("person = 'Barack' and not near('Vienna', 50)") == set(OBAMA)
    others = where("person != 'Barack'")
    assert BIDEN in others and not others & {*OBAMA, *added, "cat.png", "coffee.png"}
    with pytest.raises(FilterError, match=r"no one is named 'barak'.*'Barack'"):
        where("person = 'Barak'")
    with pytest.raises(FilterError, match="no group 999"):
        where("person = 999")


def test_corrections_merge_split_remove(tmp_path, build_people, kit):
    from imagent.index.gallery import Gallery
    from imagent.index.people import (
        PeopleError,
        get_person,
        list_people,
        merge_people,
        name_person,
        remove_face,
        split_face,
    )

    folder = kit.people_folder(tmp_path / "photos")
    index = tmp_path / "index"
    build_people(folder, index)
    g = Gallery(index)
    obama = next(p for p in list_people(g) if {Path(g.record(i).path).name for i in p.photos} == set(OBAMA))
    face = obama.faces[0]
    moved = split_face(g, face.id)
    assert moved.new_group and moved.from_group == obama.id
    assert len(get_person(g, obama.id).faces) == 2 and get_person(g, moved.to).faces[0].pinned
    name_person(g, moved.to, "Anna")
    with pytest.raises(PeopleError, match=r"already named 'Anna'.*merge"):
        name_person(g, obama.id, "anna")
    with pytest.raises(PeopleError, match="reads as a group number"):
        name_person(g, obama.id, "12")
    merged = merge_people(g, obama.id, [moved.to])
    assert merged.name == "Anna" and merged.faces_moved == 1  # the unnamed group takes the other's name
    assert len(get_person(g, "Anna").faces) == 3
    with pytest.raises(PeopleError, match="no group"):
        get_person(g, moved.to)
    # a false detection is removed for good: re-indexing does not bring it back
    gone = remove_face(g, face.id)
    assert gone.face == face.id
    report = build_people(folder, index)
    assert report.faces.scanned == 0 and len(get_person(Gallery(index), "Anna").faces) == 2


def _descriptor_bytes(index: Path) -> list[bytes]:
    import sqlite3

    with sqlite3.connect(index / "faces.sqlite") as c:
        return [bytes(b) for (b,) in c.execute("SELECT descriptor FROM faces")]


def test_forget_leaves_no_descriptor_in_the_index(tmp_path, build_people, kit):
    from imagent.index.face_store import FaceDataMissing
    from imagent.index.gallery import Gallery
    from imagent.index.people import forget, list_people
    from imagent.tools.photo_search import where_rows

    folder = kit.people_folder(tmp_path / "photos")
    index = tmp_path / "index"
    build_people(folder, index)
    descriptors = _descriptor_bytes(index)
    assert len(descriptors) >= 5 and all(len(d) == 128 * 4 for d in descriptors)
    g = Gallery(index)
    done = forget(g)
    assert done.faces == len(descriptors) and done.people >= 3 and done.photos_scanned == 7
    assert not done.left and not (index / "faces.sqlite").exists()
    # no file anywhere in the index folder holds any part of any descriptor (16 bytes = 4 floats)
    blobs = [p.read_bytes() for p in index.rglob("*") if p.is_file()]
    for d in descriptors:
        for start in range(0, len(d), 128):
            assert not any(d[start : start + 16] in b for b in blobs)
    with pytest.raises(FaceDataMissing):
        list_people(g)
    assert len(where_rows(g, "time >= '1900'")) == 0 and len(g) == 7  # the photos stay indexed
    from imagent.tools.filter_lang import FilterError

    with pytest.raises(FilterError, match="no face data"):
        where_rows(g, "person = 'anyone'")


def test_bad_photos_get_a_note_and_indexing_goes_on(tmp_path, build_people, kit):
    from imagent.index.gallery import Gallery
    from imagent.index.people import list_people

    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(FACES / BIDEN, folder / BIDEN)
    Image.new("RGB", (1, 1), (200, 10, 10)).save(folder / "dot.png")  # a 1x1 image
    (folder / "broken.jpg").write_bytes((FACES / "obama.jpg").read_bytes()[:5000])  # a corrupt file
    # a crowd: one face tiled 12 x 17 = 204 times
    with Image.open(FACES / "obama.jpg") as im:
        head = im.crop((200, 36, 510, 346)).resize((96, 96))  # his head, with a margin
    crowd = Image.new("RGB", (96 * 12, 96 * 17), "white")
    for k in range(204):
        crowd.paste(head, ((k % 12) * 96, (k // 12) * 96))
    crowd.save(folder / "crowd.jpg", quality=92)
    report = build_people(folder, tmp_path / "index", faces={"max_per_photo": 20})
    assert [Path(p).name for p, _ in report.skipped] == ["broken.jpg"]  # the builder lists it with its reason
    notes = {Path(p).name: n for p, n in report.faces.notes}
    assert "too small to hold a face (1x1 px" in notes["dot.png"]
    found = int(notes["crowd.jpg"].split(" faces found")[0].split()[-1])
    assert found >= 150 and "the 20 largest kept (faces.max_per_photo)" in notes["crowd.jpg"]
    assert report.faces.scanned == 3 and report.faces.faces == 21  # Biden's face and the crowd's 20
    groups = kit.groups_by_file(Gallery(tmp_path / "index"))
    assert {BIDEN} in groups.values()
    assert any(files == {"crowd.jpg"} for files in groups.values())
    assert len(list_people(Gallery(tmp_path / "index"))) >= 2


def test_a_photo_unreadable_at_scan_time_is_noted_and_tried_again(tmp_path, build_people, minilm):
    from imagent.core.config import FaceOptions
    from imagent.index.gallery import Gallery
    from imagent.index.parts import IndexParts
    from imagent.index.stages import run_after

    def update_faces(g):  # the face pass alone, over the index as it is
        parts = IndexParts.of(None, minilm, faces=FaceOptions(mode="on"))
        assert run_after(g, parts.stage("faces"), parts.runner, 32, True)
        return parts.stage("faces").report

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in (BIDEN, "obama.jpg"):
        shutil.copy(FACES / name, folder / name)
    report = build_people(folder, tmp_path / "index", faces={"mode": "off"})
    assert report.faces.status == "off" and not (tmp_path / "index" / "faces.sqlite").exists()
    (folder / "obama.jpg").write_bytes(b"not a photo any more")
    g = Gallery(tmp_path / "index")
    faces = update_faces(g)
    assert faces.scanned == 1 and faces.faces == 1
    assert [(Path(p).name, n.split(":")[0]) for p, n in faces.notes] == [("obama.jpg", "cannot read the photo")]
    shutil.copy(FACES / "obama.jpg", folder / "obama.jpg")  # back: the next pass scans it
    again = update_faces(g)
    assert again.scanned == 1 and again.faces == 1 and again.new_people == 1


def test_incremental_resumable_and_auto_skips_manifests(tmp_path, build_people, monkeypatch, kit):
    from imagent.index.face_store import FaceStore
    from imagent.index.gallery import Gallery
    from imagent.models import faces as model_mod

    folder = kit.people_folder(tmp_path / "photos")
    index = tmp_path / "index"
    stopped = {"after": 0}

    def kill(done: int, total: int, label: str) -> None:
        if label.startswith("faces:"):
            stopped["after"] = done
            raise KeyboardInterrupt  # killed after the first batch of faces

    with pytest.raises(KeyboardInterrupt):
        build_people(folder, index, progress=kill, batch_size=3)
    assert stopped["after"] == 3
    assert len(FaceStore(index).scanned()) == 3  # the finished batch was kept
    report = build_people(folder, index, batch_size=3, faces={"workers": 2})  # the rest, in two worker processes
    assert report.added == 0 and report.faces.scanned == 4  # only the rest
    assert any(files == set(OBAMA) for files in kit.groups_by_file(Gallery(index)).values())

    # nothing new: no photo is looked at and no face model is loaded
    monkeypatch.setattr(model_mod, "FaceModel", lambda *a, **k: pytest.fail("a face model was loaded"))
    again = build_people(folder, index)
    assert again.faces.status == "done" and again.faces.scanned == 0

    # auto looks at folders only: a manifest's photos are not scanned; "on" scans them
    manifest = tmp_path / "rows.jsonl"
    manifest.write_text(f'{{"id": "b", "file": "{folder / BIDEN}"}}\n')
    skipped = build_people(manifest, tmp_path / "m-index")
    assert skipped.faces.status == "skipped" and "manifests" in skipped.faces.reason
    monkeypatch.undo()
    scanned = build_people(manifest, tmp_path / "m-index", faces={"mode": "on"})
    assert scanned.faces.scanned == 1 and scanned.faces.faces == 1


def test_descriptors_are_dlibs_and_distances_as_measured():
    """The model itself on the shipped photos: his faces within dlib's 0.6, Biden's and his apart."""
    from imagent.models.faces import FaceModel, face_distance

    model = FaceModel()
    found = {name: model.scan_file(str(FACES / name)) for name in (*OBAMA, BIDEN)}
    assert all(len(r.faces) == 1 for r in found.values()), {k: (len(r.faces), r.note) for k, r in found.items()}
    vecs = {k: r.faces[0].descriptor for k, r in found.items()}
    same = face_distance(np.stack([vecs[n] for n in OBAMA]), np.stack([vecs[n] for n in OBAMA]))
    assert same.max() < 0.6
    apart = face_distance(np.stack([vecs[n] for n in OBAMA]), vecs[BIDEN][None, :])
    assert apart.min() > 0.6
    box = found["obama.jpg"].faces[0].box
    assert 0 <= box[0] < box[2] <= 1 and 0 <= box[1] < box[3] <= 1
