"""The first hour's rough edges in the CLI (issue 47, item 4): ``--like`` takes a file name the index knows from any
folder (and an unknown one gets near names, never a path it did not resolve), results fit an 80-column terminal (a
path is never folded over lines), and every count is said in the right number ("1 result", "2 results").

Real parts: twelve geotagged JPEGs indexed in caption mode with the real MiniLM (the session fixture ``geo_photos``).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from imagent.cli.main import app

SRC = Path(__file__).resolve().parents[1] / "src" / "imagent"


def test_like_takes_a_file_name_the_index_knows_from_any_folder(geo_photos, tmp_path, monkeypatch):
    elsewhere = tmp_path / "somewhere else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the photo folder: IMG_1003.jpg is no file here
    index = str(geo_photos / "index")
    runner = CliRunner()
    out = runner.invoke(app, ["search", "--like", "IMG_1003.jpg", "--index", index, "--json", "--no-server"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["results"]
    assert rows and all(not r["path"].endswith("IMG_1003.jpg") for r in rows)  # like it, not it
    again = runner.invoke(app, ["search", "--like", "folder/img_1003.JPG", "--index", index, "--json", "--no-server"])
    assert again.exit_code == 0 and [r["id"] for r in json.loads(again.stdout)["results"]] == [r["id"] for r in rows]

    missing = runner.invoke(app, ["search", "--like", "IMG_1093.jpg", "--index", index, "--no-server"])
    assert missing.exit_code == 2
    said = " ".join(missing.output.split())
    assert "'IMG_1093.jpg' is neither an image id in the gallery nor a file" in said
    assert re.search(r"similar name: IMG_10\d\d\.jpg", said)
    assert str(elsewhere) not in said and "somewhere else" not in said  # no path it did not resolve


def test_a_name_several_photos_have_is_refused_with_their_ids(tmp_path, caption_dual, minilm):
    from PIL import Image

    from imagent.api import UnknownReference, Workspace
    from imagent.core.config import Settings
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts
    from imagent.tools.photo_search import records_named

    for n, trip in enumerate(("lisbon", "kyoto")):
        (tmp_path / "photos" / trip).mkdir(parents=True)
        Image.new("RGB", (40, 30), (40 * n, 90, 200)).save(tmp_path / "photos" / trip / "IMG_0001.jpg")
    build_index(tmp_path / "photos", tmp_path / "index", IndexParts.of(caption_dual, minilm))
    ws = Workspace(Settings(index=tmp_path / "index"))
    g = ws.gallery()
    assert [Path(r.path).parent.name for r in records_named(g, "kyoto/IMG_0001.jpg")] == ["kyoto"]
    assert ws.resolve_reference("kyoto/IMG_0001.jpg").id in g
    with pytest.raises(UnknownReference, match=r"'IMG_0001.jpg' names 2 photos in the gallery: .*lisbon.*kyoto|"
                                               r"'IMG_0001.jpg' names 2 photos in the gallery: .*kyoto.*lisbon"):
        ws.resolve_reference("IMG_0001.jpg")


def test_results_fit_an_80_column_terminal(geo_photos):
    """Stacked in a narrow terminal: each photo's path on one line, shortened to fit, nothing wider than 80."""
    from imagent.api import Workspace
    from imagent.cli.render import print_result
    from imagent.core.config import Settings

    ws = Workspace(Settings(index=geo_photos / "index"))
    result = ws.search("a bird on a branch", method="caption", top_k=4)
    buf = io.StringIO()
    print_result(Console(file=buf, width=80, color_system=None), result, ws.gallery(), title="caption: a bird")
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    for image_id in result.ranking.ids:
        name = Path(ws.gallery().record(image_id).path).name
        assert any(f"folder/{name}" in line for line in lines), name  # its folder and name whole on one line
        assert any(image_id in line for line in lines)
    wide = io.StringIO()
    print_result(Console(file=wide, width=200, color_system=None), result, ws.gallery())
    assert " photo " in lines[1 + bool("caption: a bird" in lines[0])]  # stacked: one column for the photo
    assert " path " in wide.getvalue().splitlines()[1]  # a wide terminal keeps the table


def test_counts_are_said_in_the_right_number():
    from imagent.core.text import plural

    assert [plural(1, "result"), plural(2, "result"), plural(0, "photo")] == ["1 result", "2 results", "0 photos"]
    assert plural(1, "match", "matches") == "1 match" and plural(3, "person", "people") == "3 people"
    # No count is followed by a noun in the plural (or "(s)") unless plural() chose it: the CLI, the server and the
    # library service in Python, and the web page's JavaScript.
    nouns = r"(?:results|photos|faces|groups|calls|model calls|tool calls|queries|matches|files|skills|captions|crops)"
    python = re.compile(r"\{[^{}]*\}\s+" + nouns + r"\b|\w\(s\)")
    script = re.compile(r"\$\{[^{}]*\}\s+" + nouns + r"\b|\w\(s\)")
    found = []
    for part in ("cli", "server", "library"):
        for path in sorted((SRC / part).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if "f\"" in line or "f'" in line:
                    found += [f"{path.relative_to(SRC)}:{n}: {m.group()}" for m in python.finditer(line)]
    for path in sorted((SRC / "server" / "static").glob("*.js")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.lstrip().startswith("//"):
                found += [f"{path.relative_to(SRC)}:{n}: {m.group()}" for m in script.finditer(line)]
    assert not found, "counts not said through plural():\n" + "\n".join(found)
