"""One truth while serving (issue 47, item 2): ``imagent serve`` notices a newer build of its index and serves it
without a restart, in a real browser and to the CLI; the CLI asks the running server only when both see the same
build generation; and the rows the server answers say what matched each photo (``matched_by``), as rows of a
search in the CLI's own process do.

Real parts: photos named for what they show (caption mode reads the file-name words) indexed with the real MiniLM,
by the real CLI (``imagent index``), a real uvicorn server with its discovery file, a real headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from PIL import Image
from typer.testing import CliRunner

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.cli.main import app as cli
from imagent.core.config import Settings
from imagent.server import create_app
from imagent.server.discovery import remove_discovery, write_discovery
from testkit import wait_until

pytestmark = pytest.mark.real_model
COLORS = {"red_apple": (200, 30, 30), "blue_sky": (60, 120, 230), "yellow_banana": (240, 220, 40)}


def _photos(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.new("RGB", (64, 48), COLORS.get(name, (30, 160, 60))).save(folder / f"{name}.png")


def _index(photos: Path, index: Path) -> None:
    out = CliRunner().invoke(cli, ["index", str(photos), "--index", str(index), "--set", "faces.mode=off"])
    assert out.exit_code == 0, out.output


def test_the_web_library_shows_a_new_build_without_a_restart(tmp_path, serve_app, page):
    photos, index = tmp_path / "photos", tmp_path / "index"
    _photos(photos, ["red_apple", "blue_sky"])
    _index(photos, index)
    url = serve_app(create_app(Workspace(Settings(index=index, cache_dir=tmp_path / "cache"))))
    page.goto(url)
    page.wait_for_selector("#library-grid a.tile img")
    assert page.inner_text("#library-count") == "2 photos"
    before = httpx.get(f"{url}/api/info").json()["gallery"]["generation"]

    _photos(photos, ["green_pear"])
    _index(photos, index)  # while the server runs
    assert httpx.get(f"{url}/api/info").json()["gallery"]["generation"] > before
    page.reload()
    wait_until(lambda: page.inner_text("#library-count") == "3 photos")
    files = page.locator("#library-grid a.tile img").evaluate_all("els => els.map(e => e.alt)")
    assert any("green_pear" in alt or "green pear" in alt for alt in files), files
    page.goto(f"{url}/search?q=green+pear&method=caption")  # the words of its file name
    page.wait_for_selector("#results .result")
    first = page.locator("#results .result").first
    assert "green_pear.png" in first.inner_text()


def _search(*args: str) -> tuple[list[dict], str]:
    out = CliRunner().invoke(cli, ["search", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["results"], out.stderr


def test_the_cli_asks_the_server_only_on_the_same_build(tmp_path, serve_app, monkeypatch):
    photos, index = tmp_path / "photos", tmp_path / "index"
    _photos(photos, ["red_apple", "blue_sky"])
    _index(photos, index)
    url = serve_app(create_app(Workspace(Settings(index=index, cache_dir=tmp_path / "cache")), index))
    write_discovery(index, "127.0.0.1", int(url.rsplit(":", 1)[1]), None)
    try:
        local, said = _search("red apple", "-m", "caption", "--index", str(index), "--no-server")
        served, said = _search("red apple", "-m", "caption", "--index", str(index))
        assert "answered by imagent serve" in said
        assert [(r["id"], r["matched_by"]) for r in served] == [(r["id"], r["matched_by"]) for r in local]
        assert served[0]["matched_by"] == "names"  # said by the server's rows too, never null

        _photos(photos, ["green_pear"])
        _index(photos, index)  # a new build while the server runs: it serves it at its next request
        served, said = _search("green pear", "-m", "caption", "--index", str(index))
        assert "answered by imagent serve" in said
        assert Path(served[0]["path"]).name == "green_pear.png"

        # A server that stays on an older build (one that does not reopen its index) is not asked.
        from imagent.index.gallery import Gallery

        monkeypatch.setattr(Gallery, "is_current", lambda self: True)
        httpx.get(f"{url}/api/info")
        _photos(photos, ["yellow_banana"])
        _index(photos, index)
        found, said = _search("yellow banana", "-m", "caption", "--index", str(index))
        assert "answered by imagent serve" not in said and "searching in this process" in said
        assert Path(found[0]["path"]).name == "yellow_banana.png"
    finally:
        remove_discovery(index)
