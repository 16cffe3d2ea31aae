"""Text in photos, the model part (issue 45): RapidOCR's real PP-OCRv4 models from the rapidocr-onnxruntime wheel.

A sign rendered with Pillow (a font matplotlib ships) on a real photo (scikit-image's cat) is read; a photo without
text gives no lines and runs no recogniser; a corrupt or huge file gets the index's ImageLoadError; damaged model
files are refused; threads and input size are bounded."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

STAMPS = Path(os.environ.get("IMAGENT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "data" / "stamps"


@pytest.fixture(scope="module")
def reader():
    from imagent.core.config import OcrOptions
    from imagent.models.registry import build_text_reader

    return build_text_reader(OcrOptions(threads=2))


def sign_photo(path: Path, lines: list[str], size=(1200, 900), angle: float = 8.0) -> Path:
    """A sign (dark letters on a pale plate, turned ``angle`` degrees) on scikit-image's cat photo, as a JPEG."""
    import matplotlib
    import skimage.data as sd
    from PIL import Image, ImageDraw, ImageFont, ImageOps

    font = ImageFont.truetype(str(Path(matplotlib.__file__).parent / "mpl-data/fonts/ttf/DejaVuSans-Bold.ttf"), 64)
    plate = Image.new("RGBA", (620, 90 * len(lines) + 40), (235, 230, 210, 255))
    d = ImageDraw.Draw(plate)
    for n, line in enumerate(lines):
        d.text((30, 20 + 90 * n), line, font=font, fill=(30, 30, 80, 255))
    plate = plate.rotate(angle, expand=True, resample=Image.Resampling.BICUBIC)
    photo = ImageOps.fit(Image.fromarray(sd.chelsea()).convert("RGB"), size)
    photo.paste(plate, (size[0] // 4, size[1] // 3), plate)
    photo.save(path, "JPEG", quality=85)
    return path


def words(lines) -> list[str]:
    return re.findall(r"[0-9a-z]+", " ".join(x.text for x in lines).casefold())


def test_a_rendered_sign_is_read_with_boxes_on_the_sign(reader, tmp_path):
    from imagent.models.ocr import TextLine, TextReader, text_of

    assert isinstance(reader, TextReader) and reader.model_id == "rapidocr:pp-ocrv4" and reader.version
    before = reader.stats.with_text
    lines = reader.read_file(sign_photo(tmp_path / "sign.jpg", ["BAKERY OPEN", "Platform 12"]))
    assert {"bakery", "open", "platform", "12"} <= set(words(lines)), text_of(lines)
    assert reader.stats.with_text == before + 1
    for line in lines:
        assert isinstance(line, TextLine) and 0.5 <= line.confidence <= 1
        assert len(line.box) == 4 and all(0 <= x <= 1 and 0 <= y <= 1 for x, y in line.box)
        cx, cy = np.mean([x for x, _ in line.box]), np.mean([y for _, y in line.box])
        assert 0.25 <= cx <= 0.85 and 0.33 <= cy <= 0.85, line  # on the plate, not on the cat
        assert TextLine.from_dict(line.to_dict()).text == line.text


def test_a_photo_without_text_gives_no_lines_and_runs_no_recogniser(reader):
    from PIL import Image

    stats = reader.stats
    before = (stats.photos, stats.with_text, stats.read_seconds)
    for name in ("animals__birds__pink_flamingo", "animals__mammals__equines__zebra"):
        assert reader.read_file(STAMPS / "images" / f"{name}.jpg") == []
    import skimage.data as sd

    assert reader.read(Image.fromarray(sd.chelsea())) == []
    assert (stats.photos, stats.with_text, stats.read_seconds) == (before[0] + 3, before[1], before[2])


def test_an_array_an_upside_down_sign_and_a_grey_image_are_read(reader, tmp_path):
    from PIL import Image

    path = sign_photo(tmp_path / "flipped.jpg", ["PHARMACY"], angle=180)
    with Image.open(path) as im:
        assert "pharmacy" in words(reader.read(np.asarray(im)))  # the direction classifier turns it
        assert "pharmacy" in words(reader.read(im.convert("L")))


def test_a_corrupt_truncated_or_huge_file_gets_the_image_load_error(reader, tmp_path, images):
    from imagent.core.imageio import ImageLoadError

    data = sign_photo(tmp_path / "ok.jpg", ["EXIT"]).read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 3])
    (tmp_path / "junk.jpg").write_bytes(b"this is not an image" * 20)
    images.huge_png(tmp_path / "huge.png", 30_000, 30_000)
    for name, why in (("truncated.jpg", "truncated"), ("junk.jpg", "not an image|cannot identify|unsupported"),
                      ("huge.png", "pixels")):
        with pytest.raises(ImageLoadError, match=why):
            reader.read_file(tmp_path / name)
    assert words(reader.read_file(tmp_path / "ok.jpg")) == ["exit"]  # the reader still works


def test_slivers_and_tiny_images_are_read_without_an_engine_error(reader):
    from PIL import Image

    # RapidOCR rounds sides to multiples of 32: a 78 x 14 stamp (enlarged to 156 x 28) would round to 0 and fail
    for size in ((78, 14), (14, 78), (300, 12), (2000, 10), (1, 1)):
        assert reader.read(Image.new("RGB", size, (200, 120, 40))) == []


def test_input_size_and_threads_are_bounded(reader):
    from imagent.core.config import OcrOptions
    from imagent.models.ocr import scale_for

    o = OcrOptions()
    assert scale_for(4000, 3000, o) == pytest.approx(o.max_side / 4000)
    assert scale_for(3000, 4000, o) == pytest.approx(o.max_side / 4000)
    assert scale_for(o.max_side, 100, o) == 1.0
    assert scale_for(200, 150, o) == 2.0  # a small photo is enlarged, at most twice
    assert scale_for(500, 400, o) == pytest.approx(o.min_side / 500)
    e = reader._engine
    sessions = [e.text_det.infer.session, e.text_rec.session.session, e.text_cls.infer.session]
    assert reader.threads == 2
    assert all(s.get_session_options().intra_op_num_threads == 2 for s in sessions)


def test_damaged_model_files_are_refused(tmp_path):
    from imagent.models.ocr import MODEL_FILES, OcrModelError, model_paths

    good = Path(model_paths()["det"]).parent
    for role, (name, _, _) in MODEL_FILES.items():
        target = tmp_path / name
        if role == "rec":
            data = bytearray((good / name).read_bytes())
            data[1000] ^= 0xFF  # same size, other bytes
            target.write_bytes(bytes(data))
        else:
            target.symlink_to(good / name)
    with pytest.raises(OcrModelError, match=r"ch_PP-OCRv4_rec_infer\.onnx is not the one imagent was made for"):
        model_paths(tmp_path)
    (tmp_path / MODEL_FILES["rec"][0]).write_bytes((good / MODEL_FILES["rec"][0]).read_bytes())
    assert set(model_paths(tmp_path)) == {"det", "rec", "cls"}
    (tmp_path / MODEL_FILES["cls"][0]).unlink()
    with pytest.raises(OcrModelError, match="missing"):
        model_paths(tmp_path)


def test_the_ocr_section_is_configurable():
    from imagent.core.config import load_settings

    s = load_settings(None, None, ["ocr.enabled=false", "ocr.max_side=960", "ocr.min_confidence=0.7"])
    assert (s.ocr.enabled, s.ocr.max_side, s.ocr.min_confidence, s.ocr.model) == (False, 960, 0.7, "rapidocr")


def test_words_the_recogniser_ran_together_are_cut_apart_for_search():
    from imagent.models.ocr import split_words

    # PP-OCRv4 often drops the space between English words; search should still find each word.
    assert split_words("GARAGESALE") == ["garage", "sale"]
    assert split_words("9:30 GATEPARKING") == ["9", "30", "gate", "parking"]
    assert split_words("Boston RepairPlatform") == ["boston", "repair", "platform"]
    assert split_words("2019Hotel") == ["2019", "hotel"]
    # Words are never cut when they are words, nor short runs, nor other scripts.
    assert split_words("Departures Information carpet SINTRA Cafe Sol") == [
        "departures", "information", "carpet", "sintra", "cafe", "sol"]
    assert split_words("出口 EXIT") == ["出口", "exit"]
    assert split_words("") == []
