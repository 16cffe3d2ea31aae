"""The cache-first wrapper (TaCIR Algorithms 2-3), the registry and ``build_tools``."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from imagent.core.cache import DiskCache
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord
from imagent.models.base import ImagePart
from imagent.tools import CachedTool, Provenance, ToolError, ToolImage, ToolRejected, build_tools


class FakeSearch:
    kind = "search"
    backend = "fake"

    def __init__(self, data: bytes, delay: float = 0.0, fail: Exception | None = None) -> None:
        self.data, self.delay, self.fail = data, delay, fail
        self.calls: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def identity(self) -> str:
        return "fake-search"

    def search(self, query: str, n: int = 1) -> list[ToolImage]:
        with self._lock:
            self.calls.append((query, n))
        time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return [ToolImage(Provenance("fake", source=f"test://{query}"), data=self.data, title=f"About {query}")]


class FakeEdit:
    kind = "edit"
    backend = "fake-edit"

    def __init__(self, out: bytes) -> None:
        self.out = out
        self.calls: list[tuple[object, str]] = []

    def identity(self) -> str:
        return "fake-edit"

    def edit(self, image, instruction: str) -> ToolImage:
        self.calls.append((image, instruction))
        return ToolImage(Provenance("fake-edit", source="model"), data=self.out, description=f"edited: {instruction}")


def test_search_miss_then_hit_persists_and_records(tmp_path, img):
    inner = FakeSearch(img.png())
    tool = CachedTool(inner, DiskCache(tmp_path / "c.sqlite"), tmp_path / "files")
    trace = Trace()
    with trace.step("s") as step:
        first = tool.search("red   car", 1)[0]
        second = tool.search("red car", 1)[0]  # whitespace-normalised: the same key
    assert inner.calls == [("red car", 1)]
    assert not first.cached and second.cached
    sha = hashlib.sha256(img.png()).hexdigest()
    assert first.path == str(tmp_path / "files" / sha[:2] / f"{sha}.png") and Path(first.path).read_bytes() == img.png()
    assert first.sha256 == sha and first.mime == "image/png" and first.title == "About red car"
    assert [(c.kind, c.role, c.cached, c.error) for c in step.calls] == [
        ("tool", "search", False, None), ("tool", "search", True, None)]
    assert step.to_dict()["tool_calls"] == 1
    # Another query is another key.
    tool.search("blue car", 1)
    assert len(inner.calls) == 2


def test_failures_are_recorded_not_cached(tmp_path, img):
    inner = FakeSearch(img.png(), fail=RuntimeError("boom"))
    tool = CachedTool(inner, DiskCache(None), tmp_path)
    trace = Trace()
    with trace.step("s") as step:
        for _ in range(2):
            with pytest.raises(ToolError, match="RuntimeError: boom"):
                tool.search("q", 1)
        with pytest.raises(ToolRejected, match="empty search query"):
            tool.search("   ", 1)
    assert len(inner.calls) == 2  # never cached: the second query tried again
    assert [c.error is not None for c in step.calls] == [True, True, True]
    # A rejected artifact (not an image) is a failure too.
    bad = CachedTool(FakeSearch(b"<html>not an image</html>"), DiskCache(None), tmp_path)
    with pytest.raises(ToolRejected, match="no usable image"):
        bad.search("q", 1)


def test_edit_key_is_content_plus_instruction(tmp_path, img):
    a, b = tmp_path / "a.jpg", tmp_path / "copy-of-a.jpg"
    a.write_bytes(img.jpeg())
    b.write_bytes(img.jpeg())
    inner = FakeEdit(img.png())
    tool = CachedTool(inner, DiskCache(None), tmp_path / "files")
    r1 = tool.edit(ImageRecord(id="a", path=str(a)), "make it red")
    r2 = tool.edit(ImagePart(path=str(b)), "make it red")  # same bytes, other path: a hit
    r3 = tool.edit(ImageRecord(id="a", path=str(a)), "make it green")
    assert len(inner.calls) == 2 and r2.cached and not r3.cached
    assert r1.path == r2.path and r1.provenance.extra["instruction"] == "make it red"
    with pytest.raises(ToolError, match="cannot read"):
        tool.edit(ImageRecord(id="x", path=str(tmp_path / "missing.jpg")), "make it red")
    with pytest.raises(ToolError, match="not an edit tool"):
        CachedTool(FakeSearch(img.png()), None, tmp_path).edit(ImagePart(path=str(a)), "x")


def test_cache_survives_restart_and_repairs_missing_files(tmp_path, img):
    db = tmp_path / "c.sqlite"
    inner = FakeSearch(img.png())
    first = CachedTool(inner, DiskCache(db), tmp_path / "files").search("q", 1)[0]
    again = CachedTool(inner, DiskCache(db), tmp_path / "files").search("q", 1)[0]
    assert len(inner.calls) == 1 and again.cached
    Path(first.path).unlink()
    repaired = CachedTool(inner, DiskCache(db), tmp_path / "files").search("q", 1)[0]
    assert len(inner.calls) == 2 and not repaired.cached and Path(repaired.path).is_file()


def test_concurrent_identical_requests_make_one_call(tmp_path, img):
    inner = FakeSearch(img.png(), delay=0.3)
    tool = CachedTool(inner, DiskCache(tmp_path / "c.sqlite"), tmp_path / "files")
    out: list[ToolImage] = []
    threads = [threading.Thread(target=lambda: out.extend(tool.search("same", 1))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(inner.calls) == 1
    assert len({o.path for o in out}) == 1 and sum(not o.cached for o in out) == 1


def test_build_tools_from_settings(tmp_path, minilm, stamp_records):
    from imagent.core.config import ConfigError, Settings
    from imagent.index.embedding import gallery_from_records

    assert Settings().tools == {}
    assert build_tools(Settings(cache_dir=tmp_path), None) == {}
    gallery_from_records(str(tmp_path / "ex"), stamp_records[:5], None, minilm)
    settings = Settings.model_validate({"cache_dir": str(tmp_path), "tools": {
        "search": {"backend": "exemplar", "options": {"source": str(tmp_path / "ex")}},
        "edit": {"backend": "openai", "options": {"model": "gpt-image-1"}}}})
    tools = build_tools(settings, DiskCache(None), text_embedder=minilm)
    assert {k: (v.kind, v.backend) for k, v in tools.items()} == {"search": ("search", "exemplar"),
                                                                  "edit": ("edit", "openai")}
    assert tools["search"].files_dir == tmp_path / "tools"
    [hit] = tools["search"].search(stamp_records[2].caption, 1)
    assert hit.provenance.extra["id"] == stamp_records[2].id
    with pytest.raises(ConfigError, match=r"tools\.search: unknown tool backend 'nope'"):
        build_tools(Settings.model_validate({"tools": {"search": {"backend": "nope"}}}), None)
    with pytest.raises(ConfigError, match=r"tools\.edit"):
        build_tools(Settings.model_validate({"tools": {"edit": {"backend": "openai", "options": {"typo": 1}}}}),
                    None)
    with pytest.raises(Exception, match="backend"):
        Settings.model_validate({"tools": {"search": {"options": {}}}})
