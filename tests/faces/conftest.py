"""Real faces for the people tests: public-domain photos of two people shipped in ``tests/data/faces`` (see its
SOURCE.md), scikit-image's astronaut (a third person, NASA, public domain) and its photos without a face, indexed
once per session with the real dlib models and MiniLM (caption mode)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

FACES = Path(__file__).resolve().parents[1] / "data" / "faces"
OBAMA = ("obama.jpg", "obama2.jpg", "obama3.jpg")  # Barack Obama, three different photos
BIDEN = "biden.jpg"  # Joe Biden
NO_FACE = ("coffee", "rocket")  # scikit-image photos without a face


def skimage_photo(name: str, dest: Path) -> Path:
    import skimage.data

    Image.fromarray(getattr(skimage.data, name)()).save(dest)
    return dest


def people_folder(dest: Path) -> Path:
    """Obama's three photos, Biden's, the astronaut and two photos without a face."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in (*OBAMA, BIDEN):
        shutil.copy(FACES / name, dest / name)
    skimage_photo("astronaut", dest / "astronaut.png")
    for name in NO_FACE:
        skimage_photo(name, dest / f"{name}.png")
    return dest


def groups_by_file(gallery) -> dict[int, set[str]]:
    """group id -> the file names of its photos."""
    from imagent.index.people import list_people

    return {p.id: {Path(gallery.record(i).path).name for i in p.photos} for p in list_people(gallery)}


@pytest.fixture(scope="session")
def people_index(tmp_path_factory, caption_dual, minilm):
    """``(folder, index, report)``: :func:`people_folder` indexed with faces found (real dlib models). Read-only:
    copy it (:func:`copy_index`) before changing anything."""
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("people")
    folder = people_folder(root / "photos")
    report = build_index(folder, root / "index", IndexParts.of(caption_dual, minilm))
    return folder, root / "index", report


@pytest.fixture
def build_people(caption_dual, minilm):
    """``build_people(folder, index, progress=None, faces=None, **indexing)`` indexes ``folder`` (real models) with
    these ``[faces]`` (a dict) and ``[indexing]`` options over the defaults; returns the build report."""
    from imagent.core.config import FaceOptions, IndexOptions
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    def build(folder: Path, index: Path, progress=None, faces=None, **options):
        parts = IndexParts.of(caption_dual, minilm, faces=FaceOptions(**(faces or {})))
        return build_index(folder, index, parts, IndexOptions(**options), progress=progress)

    return build


@pytest.fixture(scope="session")
def faces_kit():
    """The helpers above for test modules (conftest files are not importable): FACES, OBAMA, BIDEN, NO_FACE,
    people_folder, skimage_photo, groups_by_file."""
    return SimpleNamespace(FACES=FACES, OBAMA=OBAMA, BIDEN=BIDEN, NO_FACE=NO_FACE, people_folder=people_folder,
                           skimage_photo=skimage_photo, groups_by_file=groups_by_file)
