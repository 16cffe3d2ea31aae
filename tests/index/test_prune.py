"""Issue 47: an index whose source folder is suddenly empty (an unmounted disk) refuses to drop its photos, and with
them their faces, names and marks, unless the build is told to (`--prune`); a folder that lost some photos loses
only those."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from imagent.core.config import IndexOptions
from imagent.index.builder import SourceError, build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts


def test_an_emptied_folder_is_refused_unless_pruned(tmp_path, images, tiny):
    folder = tmp_path / "photos"
    for n in range(3):
        images.jpeg(folder / f"p{n}.jpg", n)
    idx = tmp_path / "idx"
    build_index(folder, idx, IndexParts.of(None, tiny))
    (folder / "p0.jpg").unlink()  # one photo deleted: only it goes
    assert build_index(folder, idx, IndexParts.of(None, tiny)).removed == 1
    for p in folder.iterdir():
        p.unlink()
    with pytest.raises(SourceError, match=r"holds none of the 2 photo\(s\).*--prune"):
        build_index(folder, idx, IndexParts.of(None, tiny))
    assert len(Gallery(idx)) == 2  # nothing lost
    report = build_index(folder, idx, IndexParts.of(None, tiny), IndexOptions(prune=True))
    assert report.removed == 2 and len(Gallery(idx)) == 0


def test_the_cli_prune_flag_removes_them(tmp_path, images):
    from imagent.cli.main import app

    folder = tmp_path / "photos"
    images.jpeg(folder / "a.jpg", 1)
    args = ["--index", str(tmp_path / "idx"), "--set", "pixels.model=none", "--set", "faces.mode=off", "--json"]
    assert CliRunner().invoke(app, ["index", str(folder), *args]).exit_code == 0
    (folder / "a.jpg").unlink()
    refused = CliRunner().invoke(app, ["index", str(folder), *args])
    assert refused.exit_code != 0 and "--prune" in refused.output
    pruned = CliRunner().invoke(app, ["index", str(folder), "--prune", *args])
    assert pruned.exit_code == 0, pruned.output
    assert json.loads(pruned.stdout)["removed"] == 1
