"""An eval of OSCAR with no golden library builds one first from the benchmark's small training split (the
stamps mini benchmark's 33 queries), says so, and leaves every other case to the method's own refusal: another
method, demonstrations off, a library with entries, the training split evaluated, or a training split too large
to build unasked (CIRR's)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.eval import oscar_library
from imagent.eval.oscar_library import AUTO_BUILD_MAX, ensure_library
from imagent.methods.oscar.library import GoldenLibrary, LibraryEntry


class Bench:
    name = "minibench"

    def __init__(self, n_train: int, splits: tuple[str, ...] = ("cir", "train")) -> None:
        self.splits = splits
        self.n_train = n_train

    def queries(self, split: str) -> list[Any]:
        assert split == "train"
        return [SimpleNamespace(id=str(i), positives=["t"], query=SimpleNamespace(dialogue=None))
                for i in range(self.n_train)]


def workspace(library: Path, **oscar: Any) -> Workspace:
    return Workspace(Settings(methods={"oscar": {"library": str(library), **oscar}}))  # nothing loads


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake_build(ws, bench, split, path, items, cfg=None, **kw):
        assert cfg is not None and cfg.library_path() == path  # the configuration read once, passed along
        calls.append({"split": split, "path": path, "items": len(items), **kw})
        report = SimpleNamespace(added=len(items), no_target=0, errors=[], seconds=0.1)
        return oscar_library.LibraryBuild(path, path.with_name("index"), len(items), report, len(items))

    monkeypatch.setattr(oscar_library, "build_benchmark_library", fake_build)
    return calls


def test_a_missing_library_is_built_from_the_small_training_split_and_said(tmp_path, builds) -> None:
    said: list[str] = []
    lib = tmp_path / "lib.jsonl"
    built = ensure_library(workspace(lib), "oscar", Bench(33), "cir", tmp_path / "images", False, said.append)
    assert built is not None and builds == [{"split": "train", "path": lib, "items": 33,
                                             "images_root": tmp_path / "images", "allow_missing": False,
                                             "progress": None}]
    assert f"no golden library at {lib}: building one from minibench train (33 queries" in said[0]
    assert "33 added" in said[1] and "33 entries" in said[1]


@pytest.mark.parametrize("case", ["other method", "demonstrations off", "has entries", "train evaluated",
                                  "no train split", "too large", "nothing to learn from"])
def test_every_other_case_builds_nothing(tmp_path, builds, case: str) -> None:
    lib = tmp_path / "lib.jsonl"
    if case == "has entries":
        GoldenLibrary(lib).append(LibraryEntry(
            key="minibench/train/1", context="a toad instead. A frog.", embedding=[1.0], embedder="test",
            modification="a toad instead", reference_caption="A frog.", rewrites={"positive": ["a toad"]},
            calls=[{"name": "caption_search_text", "arguments": {"query": "a toad", "top_k": 10}, "polarity": "+"}],
            steps=[{"name": "final", "op": "UNION", "operands": [0]}], stage1={}, stage2={}, stats={}))
    ws = workspace(lib, demonstrations=case != "demonstrations off")
    bench = Bench(AUTO_BUILD_MAX + 1 if case == "too large" else 0 if case == "nothing to learn from" else 33,
                  ("cir",) if case == "no train split" else ("cir", "train"))
    method = "clip" if case == "other method" else "oscar"
    split = "train" if case == "train evaluated" else "cir"
    assert ensure_library(ws, method, bench, split, None, False, print) is None
    assert builds == []


def test_an_empty_library_file_is_built_into(tmp_path, builds) -> None:
    lib = tmp_path / "lib.jsonl"
    lib.write_text("")
    assert ensure_library(workspace(lib), "oscar", Bench(3), "cir", None, False, lambda _m: None) is not None
    assert builds[0]["items"] == 3
