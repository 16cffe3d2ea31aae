"""Face worker processes (``faces.workers`` > 1, issue 47 finding 8): they end when ``imagent index`` is killed
(kill -9 leaves no idle worker behind), and a worker killed mid-run is replaced: the run finishes with every face
found. Real dlib models on the real face photos of ``tests/data/faces``; the pool itself
(:class:`imagent.core.workers.SpawnPool`) gives up on a task whose worker always dies after its bounded retries."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from testkit import TESTS

BOOT = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(TESTS)!r})
    from testkit import TinyEmbedder
    from imagent.models import registry

    registry.register("text", "tiny", lambda cfg, **kw: TinyEmbedder(cfg.model))
    from imagent.cli.main import app
    if __name__ == "__main__":  # not in the spawned workers, which import this file again
        sys.argv = ["imagent", *sys.argv[1:]]
        app()
    """
)


def _workers_of(parent: int) -> list[int]:
    """The pool workers (multiprocessing's spawned children) of process ``parent``, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmdline:
            out.append(int(entry.name))
    return out


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit is reaped by whoever adopted it, maybe never in a container)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _scans(index: Path) -> int:
    try:  # read-only: an empty file made here would be a damaged face store to the build
        with sqlite3.connect(f"file:{index / 'faces.sqlite'}?mode=ro", uri=True, timeout=5) as c:
            return int(c.execute("SELECT COUNT(*) FROM scans").fetchone()[0])
    except sqlite3.Error:  # not there yet
        return 0


def test_pool_gives_up_on_a_task_whose_worker_always_dies():
    from imagent.core.workers import WORKER_DIED, SpawnPool

    pool = SpawnPool(1, retries=1)
    try:
        assert pool.map(abs, [-1, -2]) == [1, 2]
        assert pool.map(os._exit, [3]) == [WORKER_DIED]  # the worker dies on each of its two tries
        assert pool.restarts == 1
        assert pool.map(abs, [-3]) == [3]  # and the pool works again
    finally:
        pool.close()


@pytest.mark.real_model
def test_workers_end_when_imagent_index_is_killed(tmp_path, kit):
    folder = kit.people_folder(tmp_path / "photos")
    index = tmp_path / "index"
    boot = tmp_path / "boot.py"
    boot.write_text(BOOT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGENT")}
    env.update(IMAGENT_CACHE_DIR=str(tmp_path / "cache"), IMAGENT_DATA_DIR=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "no-config"), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, str(boot), "index", str(folder), "--index", str(index),
           "--set", "text_embedder.backend=tiny", "--set", "text_embedder.model=tiny-8",
           "--set", "dual_encoder.model=tiny-8", "--set", "pixels.model=none", "--set", "ocr.enabled=false",
           "--set", "indexing.batch_size=2", "--set", "faces.workers=2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and _scans(index) == 0 and time.monotonic() < deadline:
            workers = _workers_of(proc.pid) or workers
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # killed while its workers work
        workers = _workers_of(proc.pid)
        assert len(workers) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(map(_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [w for w in workers if _running(w)] == []
    finally:
        proc.kill()
        for w in workers:  # the test's own orphans, should the check above fail
            if _running(w):
                os.kill(w, signal.SIGKILL)
        proc.stderr.close()


@pytest.mark.real_model
def test_a_killed_worker_is_replaced_and_every_face_found(tmp_path, build_people, kit):
    from imagent.index.gallery import Gallery

    folder = kit.people_folder(tmp_path / "photos")
    killed: list[int] = []
    before = {p.pid for p in multiprocessing.active_children()}

    def kill_a_worker(done: int, total: int, label: str) -> None:
        if label.startswith("faces:") and not killed:  # after the first chunk: kill -9 of one worker
            pid = next(p.pid for p in multiprocessing.active_children() if p.pid not in before)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    report = build_people(folder, tmp_path / "index", progress=kill_a_worker, batch_size=2, faces={"workers": 2})
    assert killed and not _running(killed[0])
    faces = report.faces
    assert (faces.status, faces.scanned, faces.faces, faces.notes, faces.worker_restarts) == ("done", 7, 5, [], 1)
    assert "a worker process died, 1 restart" in faces.summary()
    groups = kit.groups_by_file(Gallery(tmp_path / "index")).values()
    assert set(kit.OBAMA) in groups and {kit.BIDEN} in groups and {"astronaut.png"} in groups


@pytest.fixture
def kit(faces_kit):
    return faces_kit
