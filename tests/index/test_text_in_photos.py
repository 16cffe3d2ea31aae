"""Text in photos through the index (issue 45, item 1): ``imagent index`` reads the text in every photo with the real
OCR model (RapidOCR's PP-OCRv4 from the rapidocr-onnxruntime wheel) as the ``text`` stage, and search, the filter,
the album tools and the descriptions find it.

The folder of the issue's "Done when": three photos of signs rendered with Pillow ("SINTRA", "Cafe Sol", "Platform
9", each on one of scikit-image's photos) among the first 50 shipped stamps (../shared/data/stamps), indexed once for
the module by ``imagent index`` with the default offline setup (the pixel model, MiniLM in caption mode, OCR, faces).
A small folder checks the per-file errors and ``ocr.enabled = false``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagent.index.text import line_texts
from testkit import sign_photo, signs_among_stamps

pytestmark = pytest.mark.real_model


def _cli(*args: str, ok: bool = True):
    from typer.testing import CliRunner

    from imagent.cli.main import app

    out = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert (out.exit_code == 0) == ok, out.output
    return out


@pytest.fixture(scope="module")
def signs(tmp_path_factory):
    """``(index, signs: file name -> photo id, the build's report as JSON, the folder)``."""
    root = tmp_path_factory.mktemp("signs")
    files = signs_among_stamps(root / "photos")
    report = json.loads(_cli("index", str(root / "photos"), "--index", str(root / "index"), "--json").stdout)
    from imagent.index.gallery import Gallery

    g = Gallery(root / "index")
    by_name = {Path(g.record(i).path).name: i for i in g.ids}
    return root / "index", {name: by_name[name] for name in files}, report, root / "photos"


def _search(index: Path, *args: str) -> list[dict]:
    return json.loads(_cli("search", *args, "--index", str(index), "--no-server", "--json").stdout)["results"]


def test_the_signs_are_read_and_photos_without_text_store_none(signs):
    from imagent.index.gallery import Gallery
    from imagent.index.text import photo_words

    index, ids, report, _ = signs
    g = Gallery(index)
    read = {name: [w for ws in photo_words(line_texts(g.record(i).text_lines)) for w in ws] for name, i in ids.items()}
    assert read == {"sign_sintra.jpg": ["sintra"], "sign_cafe.jpg": ["cafe", "sol"],
                    "sign_platform.jpg": ["platform", "9"]}
    line = g.record(ids["sign_cafe.jpg"]).text_lines[0]
    assert 0.5 <= line["confidence"] <= 1 and len(line["box"]) == 4
    assert all(0.1 <= x <= 0.9 and 0.2 <= y <= 0.7 for x, y in line["box"])  # on the plate (at 1/5, 1/3 of the photo)
    stamps = [i for i in g.ids if i not in ids.values()]
    assert sum(not g.record(i).text_lines for i in stamps) >= 40  # stamps mostly carry no text: they store none
    flamingo = next(i for i in stamps if g.record(i).path.endswith("animals__birds__adelaide-rosella.jpg"))
    assert g.record(flamingo).text_lines == [] and "text_lines" not in g.record(flamingo).to_dict()
    assert report["stages"]["text"]["photos"] == 53 and report["stages"]["text"]["version"].startswith("rapidocr/")
    assert report["with_text"] == sum(bool(g.record(i).text_lines) for i in g.ids) >= 3
    assert report["text_note"].startswith("text: 53 photo(s) read") and f"{report['with_text']} photo(s)" in \
        report["text_note"]


def test_quoted_search_ranks_the_sign_first_and_the_text_filter_finds_exactly_it(signs):
    index, ids, _, _ = signs
    rows = _search(index, '"Cafe Sol"')
    assert rows[0]["id"] == ids["sign_cafe.jpg"] and rows[0]["match"] == "strong"
    assert rows[0]["text"] == ["Cafe Sol"] and rows[0]["matched_by"].startswith("text")
    assert [r["id"] for r in _search(index, "--where", "text ~ 'sintra'")] == [ids["sign_sintra.jpg"]]
    assert [r["id"] for r in _search(index, "--where", "text = 'platform 9'")] == [ids["sign_platform.jpg"]]
    assert [r["id"] for r in _search(index, "--where", "text ~ 'SOL' and not text ~ 'platform'")] == \
        [ids["sign_cafe.jpg"]]
    # plain words: the text and the content together; the sign first, a strong match, said to be by its text
    rows = _search(index, "the restaurant called Sol")
    assert rows[0]["id"] == ids["sign_cafe.jpg"] and rows[0]["matched_by"].startswith("text")
    assert "needs something to look for" in _cli("search", "--where", "text ~ ''", "--index", str(index),
                                                 "--no-server", ok=False).output


def test_reindexing_an_unchanged_folder_runs_no_ocr(signs, monkeypatch):
    from imagent.api import Workspace
    from imagent.models.ocr import RapidOCRReader

    index, _, _, photos = signs
    calls: list[str] = []
    read = RapidOCRReader.read_file

    def counted(self, path):
        calls.append(Path(path).name)
        return read(self, path)

    monkeypatch.setattr(RapidOCRReader, "read_file", counted)
    ws = Workspace.from_config(sets=[f"index={index}"])
    report = ws.index(photos)
    assert calls == [] and report.added == 0 and report.stages["text"]["photos"] == 0
    new = sign_photo(photos / "sign_exit.jpg", ["EXIT"], "astronaut")
    try:
        report = ws.index(photos)
        assert calls == ["sign_exit.jpg"] and report.added == 1
        g = ws.gallery()
        exit_id = next(i for i in g.ids if g.record(i).path == str(new))
        assert line_texts(g.record(exit_id).text_lines) == ["EXIT"]
    finally:
        new.unlink()
        ws.index(photos)  # the module's folder as it was


def test_the_album_tools_and_the_descriptions_read_the_text(signs):
    from imagent.api import Workspace
    from imagent.tools.album import Album

    index, ids, _, _ = signs
    ws = Workspace.from_config(sets=[f"index={index}"])
    g = ws.gallery()
    album = Album(g, ws.dual_encoder, ws.text_embedder, text_clues=True)
    assert album.search("the day I photographed the sign for Sintra", top_k=1).ids == [ids["sign_sintra.jpg"]]
    assert album.filter("text ~ 'platform'") == [ids["sign_platform.jpg"]]
    assert album.metadata([ids["sign_cafe.jpg"]])[0]["text"] == ["Cafe Sol"]
    from imagent.methods.album.tools import AlbumToolsConfig, FilterMetadataTool, _metadata_line

    assert _metadata_line(album.metadata([ids["sign_cafe.jpg"]])[0]).endswith("text 'Cafe Sol'")  # GetMetadata
    assert "text ~ 'sintra'" in FilterMetadataTool(album, AlbumToolsConfig()).description  # offered when there is text
    assert 'text in the photo: "SINTRA"' in g.record(ids["sign_sintra.jpg"]).description


def test_corrupt_or_huge_files_get_a_per_file_error_and_ocr_can_be_off(tmp_path, images):
    from imagent.api import Workspace
    from imagent.core.config import OcrOptions
    from imagent.core.types import ImageRecord
    from imagent.index.ocr import TextStage
    from imagent.models.registry import build_text_reader

    folder = tmp_path / "photos"
    ok = sign_photo(folder / "ok.jpg", ["OPEN"])
    data = ok.read_bytes()
    (folder / "truncated.jpg").write_bytes(data[: len(data) // 3])
    images.huge_png(folder / "huge.png", 30_000, 30_000)
    ws = Workspace.from_config(sets=[f"index={tmp_path / 'index'}"])
    report = ws.index(folder)
    reasons = {Path(p).name: r for p, r in report.skipped}
    assert report.added == 1 and "truncated" in reasons["truncated.jpg"] and "pixels" in reasons["huge.png"]
    g = ws.gallery()
    assert line_texts(g.record(g.ids[0]).text_lines) == ["OPEN"]
    # a file that went bad after it was probed: no text, and the build's notes name it
    stage = TextStage(lambda: build_text_reader(OcrOptions(threads=1)), OcrOptions())
    rows = stage.compute([ImageRecord(id="t", path=str(folder / "truncated.jpg"))], {})
    assert rows[0].lines == [] and "truncated" in rows[0].failed
    stage.put(None, g, [], rows)
    assert stage.notes()[0].startswith("the OCR model could not read 1 file(s)") and "truncated.jpg" in \
        stage.notes()[0]

    class Failing:  # the engine failing on a photo: that photo keeps no text, said, and the others are read
        def read_file(self, path):
            if "ok" not in str(path):
                raise RuntimeError("engine failure")
            return build_text_reader(OcrOptions(threads=1)).read_file(path)

    rows = TextStage(Failing, OcrOptions()).compute([ImageRecord(id="x", path=str(folder / "huge.png")),
                                                     ImageRecord(id="o", path=str(ok))], {})
    assert "RuntimeError: engine failure" in rows[0].failed and [x["text"] for x in rows[1].lines] == ["OPEN"]
    # off: no text stage in the composition, no text stored
    off = Workspace.from_config(sets=[f"index={tmp_path / 'off'}", "ocr.enabled=false"])
    report = off.index(folder)
    assert "text" not in report.stages and off.gallery().record(off.gallery().ids[0]).text_lines == []
