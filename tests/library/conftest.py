"""Fixtures for the library service's tests: a folder of real photos (Obama's three and Biden's, public domain, with
EXIF dates and GPS; a photo of the two of them side by side; a wide photo; a photo without a date or a face),
indexed with faces found by the real dlib models and MiniLM (caption mode), and ``build(folder, index, **indexing)``
to index another folder the same way."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from PIL import Image

from ..conftest import SAN_DIEGO, VIENNA, write_geo_photo

FACES = Path(__file__).resolve().parents[1] / "data" / "faces"
OBAMA = ("obama.jpg", "obama2.jpg", "obama3.jpg")


@pytest.fixture(scope="session")
def build(caption_dual, minilm):
    """``build(folder, index, progress=None, faces="auto", **indexing)``: ``folder`` indexed (real models) with
    ``faces.mode`` and these ``indexing`` options over the defaults; returns the build report."""
    from imagent.core.config import FaceOptions, IndexOptions
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    def run(folder: Path, index: Path, progress=None, faces: str = "auto", **options):
        parts = IndexParts.of(caption_dual, minilm, faces=FaceOptions(mode=faces))
        return build_index(folder, index, parts, IndexOptions(**options), progress=progress)

    return run


def pair_photo(dest: Path) -> Path:
    """Obama and Biden side by side in one photo (two faces)."""
    with Image.open(FACES / "obama.jpg") as a, Image.open(FACES / "biden.jpg") as b:
        h = 600
        a2 = a.convert("RGB").resize((a.width * h // a.height, h))
        b2 = b.convert("RGB").resize((b.width * h // b.height, h))
        canvas = Image.new("RGB", (a2.width + b2.width + 40, h), (90, 90, 90))
        canvas.paste(a2, (0, 0))
        canvas.paste(b2, (a2.width + 40, 0))
    canvas.save(dest, quality=92)
    return dest


@pytest.fixture(scope="module")
def library_folder(tmp_path_factory, build) -> Path:
    """``photos/`` and ``index/`` (read-only: copy the index before changing anything, :func:`copy_index`)."""
    import skimage.data

    root = tmp_path_factory.mktemp("library-service")
    photos = root / "photos"
    for i, name in enumerate((*OBAMA, "biden.jpg")):
        write_geo_photo(FACES / name, photos / name, datetime(2023, 5, 10 + i, 9 + i, 30), VIENNA)
    pair = pair_photo(root / "pair.jpg")
    write_geo_photo(pair, photos / "together.jpg", datetime(2023, 6, 1, 12, 0), SAN_DIEGO)
    wide = Image.new("RGB", (1200, 300), (200, 40, 40))
    wide.paste(Image.new("RGB", (300, 300), (20, 20, 220)), (450, 0))
    wide.save(photos / "banner.png")
    Image.fromarray(skimage.data.coffee()).save(photos / "coffee.png")
    build(photos, root / "index")
    return root


@pytest.fixture
def copy_index(library_folder, tmp_path):
    """A private copy of the index (its records still name the module's photos)."""
    dest = tmp_path / "index"
    shutil.copytree(library_folder / "index", dest)
    return dest
