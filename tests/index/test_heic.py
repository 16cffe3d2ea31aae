"""HEIC/HEIF photos (issue 23 item 5): a HEIC written here with EXIF time and GPS is indexed with both (and its
place name), and the web API shows it as a JPEG a browser can display."""

from __future__ import annotations

from datetime import datetime

import pytest

from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts

pillow_heif = pytest.importorskip("pillow_heif")


def test_a_heic_photo_is_indexed_with_its_exif_and_displayed(tmp_path, images, tiny):
    from PIL import Image

    pillow_heif.register_heif_opener()
    folder = tmp_path / "phone"
    folder.mkdir()
    exif = images.exif(datetime(2019, 7, 14, 10, 30), (48.2085, 16.3721))
    images.stamp_image(3).save(folder / "IMG_0001.HEIC", format="HEIF", exif=exif.tobytes())
    assert (folder / "IMG_0001.HEIC").read_bytes()[4:12] == b"ftypheic"
    r = build_index(folder, tmp_path / "idx", IndexParts.of(None, tiny))
    assert (r.added, r.skipped) == (1, [])
    (rec,) = Gallery(tmp_path / "idx").records()
    assert rec.taken_time == datetime(2019, 7, 14, 10, 30)
    assert rec.latitude == pytest.approx(48.2085, abs=1e-4) and rec.place == "Vienna, Austria"
    assert (rec.width, rec.height) == images.stamp_image(3).size

    fastapi = pytest.importorskip("fastapi")  # noqa: F841
    from fastapi.testclient import TestClient

    from imagent.api import Workspace
    from imagent.core.config import Settings
    from imagent.server import create_app

    client = TestClient(create_app(Workspace(Settings(index=tmp_path / "idx", cache_dir=tmp_path / "c"))),
                        base_url="http://127.0.0.1:8765")
    img = client.get(f"/api/images/{rec.id}")
    assert img.status_code == 200 and img.headers["content-type"] == "image/jpeg"
    import io

    with Image.open(io.BytesIO(img.content)) as shown:
        assert shown.format == "JPEG" and shown.size == (rec.width, rec.height)
