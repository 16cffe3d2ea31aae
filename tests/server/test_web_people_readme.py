"""Issue 47's "done when", in a real headless Chromium: the README's people example (``imagent index FOLDER``,
``imagent people``, ``imagent people name ID NAME``, then the web app) on a folder of the stamps plus real face
photos shows only real people on the People page, the named person first.

Real parts: two dozen of the shipped stamps (no human face; among them the three on which dlib's own detector
threshold finds a false face: a cartoon penguin, a spider and a gorilla, docs/people.md), Barack Obama's three
photos and Joe Biden's (``tests/data/faces``, public domain) and scikit-image's astronaut (her mission patch is
the classic false face); indexed through the CLI with its default models (dlib faces, the pixel model, MiniLM).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.server import create_app
from testkit import wait_until

pytestmark = pytest.mark.real_model

FACES = Path(__file__).resolve().parents[1] / "data" / "faces"
REAL = {"obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg", "astronaut.png"}  # the photos with a real face
FACE_CROP = re.compile(r"/api/faces/(\d+)/thumbnail\b")
FALSE_FACE_STAMPS = ("penguin_with_spider", "spider_football", "apes__gorilla")


def _folder(dest: Path, stamps_dir: Path) -> Path:
    import skimage.data
    from PIL import Image

    (dest / "stamps").mkdir(parents=True)
    for name in REAL - {"astronaut.png"}:
        shutil.copy(FACES / name, dest / name)
    Image.fromarray(skimage.data.astronaut()).save(dest / "astronaut.png")
    files = [json.loads(line)["file"] for line in (stamps_dir / "captions.jsonl").read_text().splitlines()]
    chosen = list(dict.fromkeys([f for f in files if any(k in f for k in FALSE_FACE_STAMPS)] + files[::30]))
    assert len(chosen) >= 20 and all(any(k in f for f in chosen) for k in FALSE_FACE_STAMPS)
    for f in chosen:
        shutil.copy(stamps_dir / f, dest / "stamps" / Path(f).name)
    return dest


def test_readme_people_example_shows_only_real_people(stamps_dir, tmp_path, serve_app, page):
    from typer.testing import CliRunner

    from imagent.cli.main import app as cli

    photos, index = _folder(tmp_path / "photos", stamps_dir), str(tmp_path / "index")
    runner = CliRunner()
    built = runner.invoke(cli, ["index", str(photos), "--index", index, "--json"])
    assert built.exit_code == 0, built.output
    assert json.loads(built.stdout)["faces"]["scanned"] == len(list(photos.rglob("*.*")))
    listed = runner.invoke(cli, ["people", "--index", index, "--json"])
    assert listed.exit_code == 0, listed.output
    first = json.loads(listed.stdout)["people"][0]  # the README names the group `imagent people` lists first
    assert {Path(p["path"]).name for p in first["photos"]} == {"obama.jpg", "obama2.jpg", "obama3.jpg"}
    named = runner.invoke(cli, ["people", "name", str(first["id"]), "Barack", "--index", index])
    assert named.exit_code == 0, named.output

    base = serve_app(create_app(Workspace(Settings(index=index, cache_dir=tmp_path / "cache", cache_calls=False))))
    groups = {g["id"]: g for g in httpx.get(f"{base}/api/people").json()["people"]}
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/people")
    page.wait_for_selector("#people-view li.person img.face")
    wait_until(lambda: page.locator("#people-view li.person img.face").evaluate_all(
        "els => els.length > 0 && els.every(i => i.complete && i.naturalWidth > 0)"))
    shown = [int(v) for v in page.locator("#people-view li.person").evaluate_all(
        "els => els.map(e => e.dataset.person)")]
    assert sorted(shown) == sorted(groups)
    # every group shown is made of faces of the real face photos: no stamp, no mission patch
    for gid in shown:
        files = {Path(httpx.get(f"{base}/api/photos/{i}").json()["file"]).name for i in groups[gid]["photo_ids"]}
        assert files <= REAL, f"group {gid} holds {files - REAL}"
        srcs = page.locator(f"#people-view li.person[data-person='{gid}'] img.face").evaluate_all(
            "els => els.map(e => e.getAttribute('src'))")
        crops = {int(m.group(1)) for m in map(FACE_CROP.match, srcs) if m}  # the faces whose crops are shown
        assert len(crops) == len(srcs) > 0 and crops <= set(groups[gid]["face_ids"])
    assert page.locator("#people-view li.person img.face").count() == len(REAL)  # one face in each real photo
    # the named person comes first, above every group no one named
    assert shown[0] == first["id"]
    assert page.input_value(f"#people-grid li.person[data-person='{first['id']}'] input.name-input") == "Barack"
