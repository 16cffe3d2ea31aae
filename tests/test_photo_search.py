"""Photo search people expect (issue 23): place names in search, ``--where`` filters and ``--sort time`` on the
CLI, the Python API and the JSON API, with the exact store and the approximate (FAISS) store, and every filter
error message.

Real parts: a folder of real JPEGs (stamps images) carrying EXIF dates and GPS for Vienna and San Diego written
here, indexed by the real builder with the real MiniLM in caption mode (what the offline setup uses)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.api import Workspace
from imagent.cli.main import app
from imagent.core.config import AnnOptions, Settings
from imagent.index.gallery import Gallery
from imagent.tools.filter_lang import FilterError

VIENNA = (48.2085, 16.3721)
SAN_DIEGO = (32.7353, -117.1490)


@pytest.fixture(scope="module")
def photos(geo_photos) -> Path:
    return geo_photos / "index"


def _own_copy(index: Path, tmp_path: Path) -> Path:
    """A private copy of the shared index (an approximate store is written into it)."""
    import shutil

    return Path(shutil.copytree(index, tmp_path / "index"))


def _where_ok(rows: list[dict], place: str, since: str) -> bool:
    return all(place in (r["place"] or "") and r["taken"] >= since for r in rows)


def test_cli_place_search_where_and_time_order(photos, monkeypatch):
    runner = CliRunner()
    monkeypatch.setenv("IMAGENT_NO_SERVER", "1")
    out = runner.invoke(app, ["search", "photos from Vienna", "--method", "caption", "-k", "6", "--json",
                              "--index", str(photos)])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["results"]
    assert [r["place"] for r in rows] == ["Vienna, Austria"] * 6  # the six Vienna photos first
    assert Path(rows[0]["path"]).name.startswith("IMG_")
    table = runner.invoke(app, ["search", "photos from Vienna", "--method", "caption", "-k", "3", "--index",
                                str(photos)], env={"COLUMNS": "200"})
    assert "Vienna, Austria" in table.output

    where = "place ~ 'San Diego' and time >= '2019-07-14'"
    out = runner.invoke(app, ["search", "animals", "--where", where, "--sort", "time", "--json",
                              "--index", str(photos)])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["results"]
    assert len(rows) == 4 and _where_ok(rows, "San Diego", "2019-07-14")
    assert [r["taken"] for r in rows] == sorted(r["taken"] for r in rows)
    # a filter with no text: every match, in time order, no model
    out = runner.invoke(app, ["search", "--where", "near('Vienna', 10) and time < '2019-07-15'", "--json",
                              "--index", str(photos)])
    rows = json.loads(out.stdout)["results"]
    assert [r["taken"][:10] for r in rows] == ["2019-07-10", "2019-07-12", "2019-07-14"]
    assert json.loads(out.stdout)["trace"]["method"] == "filter"


@pytest.mark.parametrize(("args", "words"), [
    (["x", "--where", "plac ~ 'x'"], "unknown field 'plac'"),
    (["x", "--where", "place ~ 'Vienna"], "is never closed"),
    (["x", "--where", "near('Nowhereville Xyz', 5)"], "no place called 'Nowhereville Xyz'"),
    (["x", "--where", "time >= 'last week'"], "'last week' is not a date"),
    (["x", "--where", "  "], "empty"),
    (["x", "--sort", "size"], "unknown --sort 'size'"),
    ([], "needs a query text, a --ref image, --like or a --where filter"),
    (["x", "--like", "nope"], "--like ranks by the photo alone"),
    (["--like", "nope"], "reference 'nope' is neither an image id in the gallery nor a file"),
])
def test_cli_filter_errors_are_one_clear_line(photos, args, words):
    out = CliRunner().invoke(app, ["search", *args, "--index", str(photos)])
    assert out.exit_code == 2 and words in out.output and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("ann", ["off", "on"])
def test_python_api_where_with_the_exact_and_the_ann_store(photos, tmp_path, ann, caption_dual, minilm):
    if ann == "on":
        pytest.importorskip("faiss")
    ws = Workspace(Settings(index=_own_copy(photos, tmp_path), cache_dir=tmp_path / "cache",
                            ann=AnnOptions(mode=ann, target_recall=0.0, nprobe=4)))
    g = ws.gallery()
    if ann == "on":
        assert g.build_ann(force=True) and g.ann_current("image")
    res = ws.search("animals", method="clip", top_k=10, where="place ~ 'vienna' and time >= '2019-07-13'",
                    sort="time")
    recs = [g.record(i) for i in res.ranking.ids]
    assert len(recs) == 4 and all(r.place == "Vienna, Austria" and r.taken_time >= datetime(2019, 7, 13)
                                  for r in recs)
    assert [r.taken_time for r in recs] == sorted(r.taken_time for r in recs)
    by_score = ws.search("animals", method="clip", top_k=10, where="place ~ 'vienna' and time >= '2019-07-13'")
    assert sorted(by_score.ranking.ids) == sorted(res.ranking.ids)
    assert by_score.ranking.scores == sorted(by_score.ranking.scores, reverse=True)
    with pytest.raises(FilterError, match="unknown field 'colour'"):
        ws.search("animals", where="colour = 'red'")


@pytest.mark.parametrize("ann", ["off", "on"])
def test_json_api_where_sort_and_errors(photos, tmp_path, ann):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from imagent.server import create_app

    if ann == "on":
        pytest.importorskip("faiss")
    ws = Workspace(Settings(index=_own_copy(photos, tmp_path), cache_dir=tmp_path / "cache",
                            ann=AnnOptions(mode=ann, target_recall=0.0, nprobe=4)))
    if ann == "on":  # the approximate store's filtered search
        assert ws.gallery().build_ann(force=True) and ws.gallery().ann_current("caption_text")
    client = TestClient(create_app(ws), base_url="http://127.0.0.1:8765")
    res = client.post("/api/search", json={"text": "animals", "method": "caption", "where": "place ~ 'San Diego'",
                                           "sort": "time", "top_k": 20})
    assert res.status_code == 200, res.text
    body = res.json()
    assert len(body["results"]) == 6 and _where_ok(body["results"], "San Diego", "2019")
    assert [r["taken"] for r in body["results"]] == sorted(r["taken"] for r in body["results"])
    assert body["filter"] == {"where": "place ~ 'San Diego'", "sort": "time", "matches": 6}
    only = client.post("/api/search", json={"where": "time = '2019-07-12'"}).json()
    assert [r["taken"][:10] for r in only["results"]] == ["2019-07-12"]
    bad = client.post("/api/search", json={"text": "x", "where": "time >"})
    assert bad.status_code == 400 and "expected a value for time" in bad.json()["detail"]
    assert client.post("/api/search", json={"text": "x", "sort": "size"}).status_code == 422
    assert client.post("/api/search", json={"text": " "}).status_code == 422
    info = Gallery(photos)
    assert len(info) == 12


def test_like_with_an_id_and_with_a_file(photos, tmp_path, monkeypatch, geo_photo):
    monkeypatch.setenv("IMAGENT_NO_SERVER", "1")
    runner = CliRunner()
    g = Gallery(photos)
    vienna = next(r for r in g.records() if r.path.endswith("IMG_1000.jpg"))
    out = runner.invoke(app, ["search", "--like", vienna.id, "-k", "5", "--json", "--index", str(photos)])
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    ids = [r["id"] for r in body["results"]]
    assert len(ids) == 5 and vienna.id not in ids and body["trace"]["method"] == "like"
    assert body["results"][0]["place"] == "Vienna, Austria"  # caption mode: its words (date, place) decide
    # with a filter and in time order
    out = runner.invoke(app, ["search", "--like", vienna.id, "--where", "place ~ 'San Diego'", "--sort", "time",
                              "--json", "--index", str(photos)])
    rows = json.loads(out.stdout)["results"]
    assert rows and all("San Diego" in r["place"] for r in rows)
    assert [r["taken"] for r in rows] == sorted(r["taken"] for r in rows)
    # a file: the same bytes are the gallery photo (left out of its own results) ...
    copy = tmp_path / "copy.jpg"
    copy.write_bytes(Path(vienna.path).read_bytes())
    ids = [r["id"] for r in json.loads(runner.invoke(app, ["search", "--like", str(copy), "--json", "--index",
                                                             str(photos)]).stdout)["results"]]
    assert vienna.id not in ids and len(ids) == 10
    # ... and a photo from elsewhere is embedded by what its file says (EXIF place and date in caption mode)
    other = geo_photo(Path(vienna.path), tmp_path / "elsewhere" / "IMG_9.jpg", datetime(2019, 7, 21, 10, 15),
                        SAN_DIEGO, quality=60)
    out = runner.invoke(app, ["search", "--like", str(other), "-k", "3", "--json", "--index", str(photos)])
    assert out.exit_code == 0, out.output
    assert [r["place"] for r in json.loads(out.stdout)["results"]] == ["San Diego, California, United States"] * 3


def test_first_hour_small_things(photos, geo_photos, tmp_path, monkeypatch):
    """The header names the indexed folder; an upload keeps its file name (and its words) and its errors never
    show the server's temporary paths; a piped search prints one line per step to stderr."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from imagent.server import create_app
    from imagent.server.search import _no_server_paths, _uploaded_record

    client = TestClient(create_app(Workspace(Settings(index=photos, cache_dir=tmp_path / "cache"))),
                        base_url="http://127.0.0.1:8765")
    assert client.get("/api/info").json()["gallery"]["sources"] == [str(geo_photos / "folder")]
    broken = client.post("/api/uploads?name=holiday%20beach.jpg", content=b"\xff\xd8\xff\xe0 not a jpeg",
                         headers={"Content-Type": "image/jpeg"})
    assert broken.status_code == 415 and "imagent-uploads" not in broken.text and "/tmp" not in broken.text
    assert _no_server_paths("cannot use /tmp/imagent-uploads-x1/Ab_c.img as an image: truncated",
                            "beach.jpg") == "cannot use beach.jpg as an image: truncated"
    g = Gallery(photos)
    rec = _uploaded_record(g.records()[0], "Holiday Beach_Sunset.jpg")
    assert rec.derived_text.startswith("holiday beach sunset; 10 July 2019; at Vienna")
    assert rec.extra["file_name"] == "Holiday Beach_Sunset.jpg"

    monkeypatch.setenv("IMAGENT_NO_SERVER", "1")
    out = CliRunner().invoke(app, ["search", "animals", "--method", "caption", "--index", str(photos), "--json"])
    assert out.exit_code == 0 and "caption: retrieve done" in out.stderr


def test_an_exact_place_that_no_photo_has_suggests_contains(photos, monkeypatch):
    """``place = 'Vienna'`` where places are stored as "Vienna, Austria" (issue 47): the empty result says so and
    suggests ``~`` with the values that contain it, in the CLI's table, its JSON and the Python API."""
    monkeypatch.setenv("IMAGENT_NO_SERVER", "1")
    runner = CliRunner()
    hint = ("no photo's place is exactly 'Vienna'; places containing it: 'Vienna, Austria' (6 photos): "
            "use place ~ 'Vienna'")
    out = runner.invoke(app, ["search", "--where", "place = 'vienna'", "--index", str(photos)],
                        env={"COLUMNS": "200"})
    assert out.exit_code == 0 and hint in out.output, out.output
    body = json.loads(runner.invoke(app, ["search", "animals", "--method", "caption", "--where",
                                          "place = 'Vienna' and time >= '2019'", "--json", "--index",
                                          str(photos)]).stdout)
    assert body["results"] == [] and body["warnings"][-1] == hint
    ws = Workspace(Settings(index=photos))
    assert ws.search(where="place = 'Vienna, Austria'").warnings == []  # an exact match: nothing to say
    assert ws.search(where="place = 'Kyoto'").warnings == []  # nothing contains it either: no hint
    assert "use device ~" not in " ".join(ws.search(where="place = 'Austria'").warnings)
    assert ws.search(where="place = 'Austria'").warnings[0].startswith("no photo's place is exactly 'Austria'")
