"""Per-photo stages (issue 44): a pass is one Stage class registered in the composition; it runs with each batch of
new records, catches up on stored photos it has not run on at its version (a changed version re-runs it, a stored
one is skipped), commits chunk by chunk (a killed run resumes at the first photo not committed); the composition is
one object built from the settings without loading a model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from imagent.core.config import FaceOptions, IndexOptions, Settings, load_settings
from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts, compose_index
from imagent.index.stages import Stage


class PathLength(Stage):
    """A toy pass: the length of each photo's path and the stage's version, in the space ``lengths``."""

    name = "lengths"
    needs = "records"
    stores = ("vectors: lengths",)

    def __init__(self, version: str = "1", stop_after: int | None = None) -> None:
        self._version = version
        self.seen: list[str] = []
        self.stop_after = stop_after

    @property
    def version(self) -> str:
        return self._version

    def compute(self, records, earlier, part=()) -> list[Any]:
        if self.stop_after is not None and len(self.seen) >= self.stop_after:
            raise KeyboardInterrupt  # killed between two chunks
        self.seen += [r.id for r in records]
        return [np.array([len(r.path), float(self._version)], dtype=np.float32) for r in records]

    def put(self, c, gallery, records, out, part=()) -> None:
        gallery.ensure_space(c, "lengths", "path-length", 2)
        for rec, vec in zip(records, out, strict=True):
            gallery.put_vectors(c, rec.id, {"lengths": vec})


@pytest.fixture
def folder(tmp_path, images) -> Path:
    d = tmp_path / "photos"
    for n in range(6):
        images.jpeg(d / f"IMG_{n:04d}.jpg", n)
    return d


def _parts(tiny, stage: Stage) -> IndexParts:
    parts = IndexParts.of(None, tiny, faces=FaceOptions(mode="off"))
    parts.stages.insert(0, stage)  # registered: runs before the embedding, inline
    return parts


def test_a_new_stage_runs_once_per_photo_and_again_when_its_version_changes(folder, tmp_path, tiny, images):
    idx = tmp_path / "idx"
    first = PathLength("1")
    report = build_index(folder, idx, _parts(tiny, first), IndexOptions(batch_size=4))
    g = Gallery(idx)
    assert sorted(first.seen) == sorted(g.ids) and len(g.ids) == 6
    assert report.stages["lengths"]["photos"] == 6 and report.stages["lengths"]["version"] == "1"
    assert np.all(g.vectors("lengths")[:, 1] == 1.0)

    same = PathLength("1")
    again = build_index(folder, idx, _parts(tiny, same), IndexOptions(batch_size=4))
    assert same.seen == [] and again.unchanged == 6  # its version is stored: skipped

    images.jpeg(folder / "IMG_0100.jpg", 7)
    grown = PathLength("1")
    build_index(folder, idx, _parts(tiny, grown), IndexOptions(batch_size=4))
    new_id = next(r.id for r in Gallery(idx).records() if r.path.endswith("IMG_0100.jpg"))
    assert grown.seen == [new_id]  # only the new photo, with its batch

    bumped = PathLength("2")
    build_index(folder, idx, _parts(tiny, bumped), IndexOptions(batch_size=4))
    g = Gallery(idx)
    assert sorted(bumped.seen) == sorted(g.ids)  # a new version re-runs on every stored photo
    assert np.all(g.vectors("lengths")[:, 1] == 2.0)


def test_a_killed_catch_up_keeps_its_chunks_and_the_next_run_does_the_rest(folder, tmp_path, tiny):
    idx = tmp_path / "idx"
    build_index(folder, idx, IndexParts.of(None, tiny, faces=FaceOptions(mode="off")))  # before the stage existed
    killed = PathLength("1", stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        build_index(folder, idx, _parts(tiny, killed), IndexOptions(batch_size=2))
    assert len(killed.seen) == 2  # one chunk committed, then the kill
    rest = PathLength("1")
    build_index(folder, idx, _parts(tiny, rest), IndexOptions(batch_size=2))
    assert len(rest.seen) == 4 and not set(rest.seen) & set(killed.seen)
    assert len(Gallery(idx).vectors("lengths")) == 6


def test_the_composition_is_built_from_the_settings_without_loading_a_model():
    s = Settings()
    parts = compose_index(s)
    assert [st.name for st in parts.stages] == ["pixels", "embed", "text", "faces"]
    assert [st.name for st in parts.inline] == ["pixels", "embed", "text"]
    assert [st.name for st in parts.after] == ["faces"]
    info = parts.describe()
    assert info["pixels"]["version"] == "effnet-lite0:features/labels10"
    assert info["text"]["version"].startswith("rapidocr/1.4.4-") and info["text"]["needs"] == "pixels"
    assert info["faces"]["version"].startswith("dlib:hog/up0/side2048/min50") and info["faces"]["needs"] == "pixels"
    assert not parts.dual.loaded and not parts.text.loaded  # model ids from the config
    off = compose_index(load_settings(None, {"pixels": {"model": "none"}, "faces": {"side": 1024}}))
    assert [st.name for st in off.stages] == ["embed", "text", "faces"] and "side1024" in off.stage("faces").version
    assert [st.name for st in compose_index(load_settings(None, {"ocr": {"enabled": False}})).stages] == [
        "pixels", "embed", "faces"]


def test_a_stage_is_registered_by_one_factory_in_stages_and_reads_its_own_section(folder, tmp_path, tiny,
                                                                                     monkeypatch):
    from imagent.index import parts as parts_module

    made: list[Any] = []

    def path_lengths(ctx: parts_module.StageContext) -> PathLength | None:
        made.append(ctx)
        return None if ctx.settings.faces.mode == "off" else PathLength("1")  # off by its section (here: faces')

    monkeypatch.setattr(parts_module, "STAGES", (path_lengths, *parts_module.STAGES))
    composed = compose_index(Settings())
    assert [st.name for st in composed.stages] == ["lengths", "pixels", "embed", "text", "faces"]
    assert made[-1].settings.faces.mode == "auto" and not made[-1].dual.loaded  # built from the settings, lazily
    assert [st.name for st in IndexParts.of(None, tiny, faces=FaceOptions(mode="off")).stages] == [
        "embed", "text", "faces"]

    parts = IndexParts.of(None, tiny, settings=Settings(faces={"mode": "off"}), faces=FaceOptions(mode="auto",
                                                                                               workers=1))
    lengths = parts.stage("lengths")
    assert isinstance(lengths, PathLength) and made[-1].settings.faces.mode == "auto"  # the named section wins
    parts.stages.remove(parts.stage("faces"))
    report = build_index(folder, tmp_path / "idx", parts, IndexOptions(batch_size=4))
    assert report.stages["lengths"]["photos"] == 6 and len(Gallery(tmp_path / "idx").vectors("lengths")) == 6


def test_old_indexing_keys_load_with_a_note_naming_the_new_one():
    import warnings

    from imagent.core.config import ConfigKeyMoved

    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        s = load_settings(None, {"indexing": {"face_side": 1024, "faces": "off", "ann_nprobe": 8,
                                              "place_names": False, "batch_size": 4}})
    assert sorted(str(n.message).split(";")[0] for n in notes if n.category is ConfigKeyMoved) == [
        "config key indexing.ann_nprobe is now ann.nprobe", "config key indexing.face_side is now faces.side",
        "config key indexing.faces is now faces.mode", "config key indexing.place_names is now places.names"]
    assert (s.faces.side, s.faces.mode, s.ann.nprobe, s.places.names, s.indexing.batch_size) == (1024, "off", 8, False,
                                                                                                 4)
    with pytest.warns(ConfigKeyMoved):  # the new key wins over the old one
        both = load_settings(None, {"indexing": {"face_side": 1024}, "faces": {"side": 512}})
    assert both.faces.side == 512
