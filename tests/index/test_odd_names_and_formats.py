"""File names and manifest text that are not valid UTF-8, and image formats outside the allow-list: indexed or
skipped with a reason naming the file, never fatal (issue 11, items 1 and 3)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from PIL import EpsImagePlugin, Image

from imagent.core import imageio
from imagent.index.builder import build_index
from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery
from imagent.index.parts import IndexParts

LATIN1 = b"caf\xe9.jpg"


def _name(raw: bytes) -> str:
    return os.fsdecode(raw)


def _by_path(g: Gallery) -> dict[str, object]:
    return {r.path: r for r in g.records()}


def test_latin1_file_names_are_indexed_and_still_open(tmp_path, images, tiny):
    d = tmp_path / "photos"
    d.mkdir()
    images.jpeg(d / _name(LATIN1), 1)
    images.jpeg(d / _name(b"\xff\xfe odd \x80.jpg"), 2)
    (d / _name(b"broken\xe9.png")).write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    images.jpeg(d / "plain.jpg", 3)
    idx = tmp_path / "idx"
    r = build_index(d, idx, IndexParts.of(None, tiny))
    assert (r.added, len(r.skipped)) == (3, 1)
    shown, reason = r.skipped[0]
    assert shown.endswith("broken\\xe9.png") and "corrupt PNG" in reason  # printable, names the file
    shown.encode("utf-8")
    g = Gallery(idx)
    paths = {os.fsencode(r.path) for r in g.records()}
    assert os.fsencode(d) + b"/" + LATIN1 in paths
    for rec in g.records():
        with open(rec.path, "rb") as f:  # the stored path opens the very file
            assert f.read(2) == b"\xff\xd8"
    cafe = next(r for r in g.records() if os.fsencode(r.path).endswith(LATIN1))
    assert cafe.derived_text == "café"  # Latin-1 bytes read as words for the caption spaces
    assert g.skipped()[0][0].endswith("broken\udce9.png")  # stored exactly, read back exactly
    again = build_index(d, idx, IndexParts.of(None, tiny))  # the same keys are found again: nothing re-read
    assert (again.unchanged, again.added, again.updated, len(again.skipped)) == (3, 0, 0, 1)
    os.remove(d / _name(LATIN1))
    gone = build_index(d, idx, IndexParts.of(None, tiny))
    assert gone.removed == 1 and len(Gallery(idx)) == 2


def test_manifest_rows_with_surrogates_and_latin1_bytes(tmp_path, images, tiny):
    d = tmp_path / "m"
    d.mkdir()
    images.jpeg(d / "a.jpg", 1)
    images.jpeg(d / "b.jpg", 2)
    images.jpeg(d / _name(LATIN1), 3)
    rows = [
        {"file": "a.jpg", "id": "a\ud800", "caption": "a lone \udfff surrogate", "note": "x\ud801"},
        {"file": "b.jpg", "captions": ["ok", "bad \ud83d"], "tags": ["t\udc80"]},
        {"file": "\ud800.jpg", "caption": "a name no file system can hold"},
        {"file": "nul\u0000.jpg", "caption": "a NUL in the name"},
    ]
    (d / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")  # ensure_ascii: \\ud800 escapes
    r = build_index(d / "m.jsonl", tmp_path / "i1", IndexParts.of(None, tiny))
    assert r.added == 2 and len(r.skipped) == 2
    assert all("unusable file name" in reason for _, reason in r.skipped)
    recs = {rec.id: rec for rec in Gallery(tmp_path / "i1").records()}
    assert recs["a\ufffd"].captions == ["a lone \ufffd surrogate"] and recs["a\ufffd"].extra["note"] == "x\ufffd"
    b = next(rec for rec in recs.values() if rec.path.endswith("b.jpg"))
    assert b.captions == ["ok", "bad \ufffd"] and b.tags == ["t\ufffd"] and b.caption_source == "given"

    # A CSV written in Latin-1: the file name's bytes still name the file; text gets U+FFFD and a warning.
    csv_bytes = b"file,caption\n" + LATIN1 + b",un caf\xe9 cr\xe8me\nmissing.jpg,x\n"
    (d / "latin1.csv").write_bytes(csv_bytes)
    r = build_index(d / "latin1.csv", tmp_path / "i2", IndexParts.of(None, tiny))
    assert r.added == 1 and len(r.skipped) == 1 and "file not found" in r.skipped[0][1]
    assert any("not valid UTF-8" in w for w in r.warnings)
    (rec,) = Gallery(tmp_path / "i2").records()
    assert os.fsencode(rec.path).endswith(LATIN1) and rec.captions == ["un caf\ufffd cr\ufffdme"]
    assert Gallery(tmp_path / "i2").vectors(SPACE_CAPTION_TEXT).shape == (1, 8)


def _eps_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, "EPS")
    return buf.getvalue()


def test_eps_and_other_formats_named_like_photos_never_reach_their_parsers(tmp_path, images, tiny, monkeypatch):
    ghostscript: list[object] = []
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: ghostscript.append(a) or b"")
    opened_with: list[object] = []
    real_open = Image.open

    def spy(fp, mode="r", formats=None):
        opened_with.append(formats)
        return real_open(fp, mode, formats)

    monkeypatch.setattr(imageio.Image, "open", spy)
    d = tmp_path / "p"
    d.mkdir()
    (d / "eps.jpg").write_bytes(_eps_bytes())
    psd = io.BytesIO()
    Image.new("RGB", (8, 8)).save(psd, "ICO")
    (d / "icon.png").write_bytes(psd.getvalue())
    (d / "doc.jpg").write_bytes(b"%PDF-1.4\n%...\n")
    images.jpeg(d / "real.jpg", 1)
    opened_with.clear()  # only what the build opens
    r = build_index(d, tmp_path / "idx", IndexParts.of(None, tiny))
    reasons = {Path(p).name: reason for p, reason in r.skipped}
    assert r.added == 1 and set(reasons) == {"eps.jpg", "icon.png", "doc.jpg"}
    assert "EPS/PostScript is not an accepted image format" in reasons["eps.jpg"]
    assert "ICO is not an accepted" in reasons["icon.png"] and "PDF is not an accepted" in reasons["doc.jpg"]
    assert ghostscript == []
    assert opened_with and all(f == imageio.ALLOWED_FORMATS for f in opened_with)
    assert "EPS" not in imageio.ALLOWED_FORMATS and "JPEG" in imageio.ALLOWED_FORMATS
    with pytest.raises(imageio.ImageLoadError, match="EPS"):
        imageio.image_from_bytes(_eps_bytes())


def test_camera_jpeg_with_a_second_picture_is_still_a_jpeg(tmp_path, images):
    """An MPO (what many cameras write) opens through the JPEG plugin: the allow-list must not refuse it."""
    im = images.stamp_image(1)
    path = tmp_path / "mpo.jpg"
    im.save(path, "MPO", save_all=True, append_images=[im.resize((40, 30))])
    assert imageio.probe_image(path).format == "MPO"
