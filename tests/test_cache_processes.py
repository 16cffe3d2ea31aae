"""The call cache computes a key once across processes (Ray workers, parallel evals) sharing its file."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

from imagent.core.cache import DiskCache


def _worker(cache_path: str, log_path: str, out_path: str) -> None:
    cache = DiskCache(cache_path)

    def compute() -> dict:
        with open(log_path, "a") as f:
            f.write("computed\n")
        time.sleep(1.0)
        return {"answer": 42}

    value, cached = cache.get_or_compute("the-key", compute)
    Path(out_path).write_text(f"{value['answer']} {cached}")


def test_one_computation_per_key_across_processes(tmp_path):
    ctx = mp.get_context("spawn")
    log = tmp_path / "log.txt"
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "c.sqlite"), str(log), str(tmp_path / f"o{i}")))
             for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert log.read_text().count("computed") == 1
    outs = sorted((tmp_path / f"o{i}").read_text() for i in range(3))
    assert outs == ["42 False", "42 True", "42 True"]


def test_a_dead_owners_claim_expires(tmp_path):
    cache = DiskCache(tmp_path / "c.sqlite")
    c = cache._conn()
    c.execute("INSERT INTO claims (key, owner, expires) VALUES ('k', 'gone:1', ?)", (time.time() - 1,))
    value, cached = cache.get_or_compute("k", lambda: {"v": 1})
    assert value == {"v": 1} and not cached
    assert c.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_a_claim_of_a_process_that_no_longer_runs_is_taken_at_once(tmp_path):
    """A killed eval's claim (its process gone, the claim not yet expired) does not make the resumed run wait."""
    import subprocess
    import sys

    from imagent.core import cache as cache_mod

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: no process has this pid now
    cache = DiskCache(tmp_path / "c.sqlite")
    c = cache._conn()
    c.execute("INSERT INTO claims (key, owner, expires) VALUES ('k', ?, ?)",
              (f"{cache_mod._HOST}:{gone.pid}:1", time.time() + 600))
    t0 = time.perf_counter()
    value, cached = cache.get_or_compute("k", lambda: {"v": 2})
    assert value == {"v": 2} and not cached and time.perf_counter() - t0 < 5
    # A live owner's claim (this test's parent process) and another host's are still honoured.
    for owner in (f"{cache_mod._HOST}:{os.getppid()}:1", f"another-host:{gone.pid}:1"):
        assert not cache_mod._owner_gone(owner)
    assert not cache_mod._owner_gone(f"{gone.pid}:1")  # written before owners named their host: ttl only
