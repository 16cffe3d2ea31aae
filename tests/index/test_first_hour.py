"""Issue 15's "Done when", index side: a folder of uncaptioned images indexed with the default offline setup is
searchable by what its file names say, and `imagent index` says plainly what search relies on (real MiniLM)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app

pytestmark = pytest.mark.real_model


def test_stamps_folder_without_manifest_then_a_penguin(tmp_path, stamps_dir):
    files = sorted((stamps_dir / "images").glob("*.jpg"))
    # ~100 stamps: every 7th file plus every penguin, so the penguins compete with birds and much else.
    subset = sorted(set(files[::7]) | {f for f in files if "penguin" in f.name})
    src = tmp_path / "stamps"
    src.mkdir()
    for f in subset:
        shutil.copyfile(f, src / f.name)
    index = str(tmp_path / "idx")
    runner = CliRunner()
    # --caption-missing with the default (blind) captioner: refused with the reason, the build goes on.
    out = runner.invoke(app, ["index", str(src), "--index", index, "--caption-missing"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.stdout.split())
    n = len(subset)
    assert f"{n} new" in text
    assert "captioning refused" in text and "does not see images" in text
    # The offline default's pixel model sees them (issue 36); captions stay a step away.
    assert f"{n} images have no caption: search by content sees the pixels of {n} of them" in text
    assert "--caption-missing" in text and f"by pixels for {n}" in text

    found = runner.invoke(app, ["search", "a penguin", "--index", index, "--method", "caption", "--json", "-k", "5"])
    assert found.exit_code == 0, found.output
    top5 = [r["path"] for r in json.loads(found.stdout)["results"]]
    assert any("penguin" in p for p in top5[:5]), top5
    assert "penguin" in top5[0]

    again = runner.invoke(app, ["index", str(src), "--index", index, "--json"])
    report = json.loads(again.stdout)
    assert (report["unchanged"], report["without_caption"], report["with_caption"]) == (n, n, 0)
    assert report["caption_note"].startswith(f"{n} images have no caption")
