"""Faces that are faces (issue 47): the detection confidence floor and the landmark check leave out the false faces
the stamps and the astronaut's mission patch give, keep every real face, and the People list never puts a group of
unsure detections above a named person."""

from __future__ import annotations

import pytest
from PIL import Image

from imagent.core.config import FaceOptions
from imagent.index.people import Face, Person, people_order, unsure


def _face(i: int, score: float) -> Face:
    return Face(i, f"p{i}", (0.1, 0.1, 0.3, 0.3), score, 80, 1, False)


def test_unsure_groups_go_below_a_named_person():
    named = Person(1, "Barack", [_face(1, 1.7)])
    patchy = Person(2, None, [_face(2, 0.6), _face(3, 0.7), _face(4, 0.55)])  # three unsure detections
    sure = Person(3, None, [_face(5, 1.2), _face(6, 0.6)])
    assert unsure(patchy) and not unsure(sure) and not unsure(named)
    order = [p.name or p.id for p in sorted([patchy, sure, named], key=people_order)]
    assert order == [3, "Barack", 2]  # by size, the unsure three-face group below the one-face named person
    assert not unsure(Person(4, "Named by a person", [_face(7, 0.6)]))  # a person vouched for it
    assert FaceOptions().min_score < FaceOptions().sure_score == 1.0
    # the bar is faces.sure_score: at 0.5 the three-face group is sure and comes first
    assert [p.name or p.id for p in sorted([patchy, sure, named], key=lambda p: people_order(p, 0.5))] == [
        2, 3, "Barack"]


@pytest.mark.real_model
def test_people_lists_by_the_configured_sure_score(people_index, tmp_path):
    """``faces.sure_score`` reaches the People listing (``imagent people``, the web's /api/people): above every
    real face's score, each group no person named is unsure and the named one comes first."""
    import json
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    from imagent.cli.main import app

    index = shutil.copytree(people_index[1], tmp_path / "index")
    runner = CliRunner()

    def listed(*sets: str) -> list[tuple[int, str | None, set[str]]]:
        out = runner.invoke(app, ["people", "--index", str(index), "--json", "--set", "faces.min_group=1",
                                  *(a for s in sets for a in ("--set", s))])
        assert out.exit_code == 0, out.output
        return [(g["id"], g["name"], {Path(p["path"]).name for p in g["photos"]})
                for g in json.loads(out.stdout)["people"]]

    biden = next(g[0] for g in listed() if g[2] == {"biden.jpg"})
    assert runner.invoke(app, ["people", "name", str(biden), "Joe", "--index", str(index)]).exit_code == 0
    obama = {"obama.jpg", "obama2.jpg", "obama3.jpg"}
    assert listed()[0][2] == obama  # his detections score 1.5-1.9: sure at the default 1.0, the largest group first
    assert listed("faces.sure_score=2.5")[0] == (biden, "Joe", {"biden.jpg"})  # unnamed groups all unsure at 2.5


def test_nose_drop_of_a_face_and_of_a_flat_shape():
    from imagent.models.faces import nose_drop

    face = [(60, 40), (50, 40), (20, 40), (30, 40), (40, 64)]  # eyes 30 px apart, nose 24 px below: 0.8
    assert nose_drop(face) == pytest.approx(0.8)
    turned = [(y, x) for x, y in face]  # the same face lying on its side
    assert nose_drop(turned) == pytest.approx(0.8)
    assert nose_drop([(60, 40), (50, 40), (20, 40), (30, 40), (40, 41)]) < FaceOptions().nose_drop_min


@pytest.mark.real_model
def test_the_floor_and_the_check_keep_real_faces_and_drop_the_patch(tmp_path, faces_kit):
    """The astronaut holds one face (dlib without the floor also finds her mission patch); Obama's photo one."""
    from imagent.models.faces import FaceModel

    model = FaceModel(FaceOptions())
    astronaut = faces_kit.skimage_photo("astronaut", tmp_path / "astronaut.png")
    assert len(model.scan_file(str(astronaut)).faces) == 1
    assert len(FaceModel(FaceOptions(min_score=0.0, landmark_check=False)).scan_file(str(astronaut)).faces) == 2
    assert len(model.scan_file(str(faces_kit.FACES / "obama.jpg")).faces) == 1
    blank = tmp_path / "blank.png"
    Image.new("RGB", (400, 300), (200, 180, 160)).save(blank)
    assert model.scan_file(str(blank)).faces == []
    assert "score0.5" in model.model_id and "nose0.35-0.95" in model.model_id  # the settings are in each scan's id
