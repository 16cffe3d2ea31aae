"""One writer per run folder (issue 25, item 6): a second eval on a folder being written is refused with a
clear message naming the owner; a dead owner's lock (SIGKILLed) is taken over; the lock file holds the pid.
The owner is a real second process (``imagent.eval.records.RunFolder.writer``, what ``run_eval`` holds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from imagent.eval.records import LOCK, RunFolder
from imagent.eval.runlock import RunLocked, run_lock

HOLD = """
import sys, time
from pathlib import Path
from imagent.eval.records import RunFolder
with RunFolder(Path(sys.argv[1])).writer():
    print("holding", flush=True)
    time.sleep(120)
"""


def hold(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def test_a_second_writer_is_refused_and_names_the_owner(tmp_path: Path) -> None:
    proc = hold(tmp_path / "run")
    try:
        owner = json.loads((tmp_path / "run" / LOCK).read_text())
        assert owner["pid"] == proc.pid
        with pytest.raises(RunLocked) as err, RunFolder(tmp_path / "run").writer():
            pass
        msg = str(err.value)
        assert f"pid {proc.pid}" in msg and "another imagent eval" in msg and "--run-dir" in msg, msg
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with RunFolder(tmp_path / "run").writer():  # the owner ended: free again
        assert json.loads((tmp_path / "run" / LOCK).read_text())["pid"] == os.getpid()
    assert not (tmp_path / "run" / LOCK).exists()  # removed when the run ends


def test_a_dead_owners_lock_is_taken_over(tmp_path: Path) -> None:
    proc = hold(tmp_path / "run")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert json.loads((tmp_path / "run" / LOCK).read_text())["pid"] == proc.pid  # left behind
    with run_lock(tmp_path / "run", LOCK) as previous:
        assert previous["pid"] == proc.pid
        assert json.loads((tmp_path / "run" / LOCK).read_text())["pid"] == os.getpid()


def test_a_second_eval_on_a_busy_folder_runs_nothing(tmp_path: Path, stamps_dir: Path) -> None:
    """``run_eval`` itself: refused before any query or file of the run is touched."""
    from imagent.api import Workspace
    from imagent.eval.runner import RunSpec, run_eval

    ann = Path(__file__).resolve().parents[2] / "src/imagent/eval/data/stamps_mini/queries.json"
    if not ann.is_file():
        pytest.skip("the stamps mini queries are not shipped in this checkout")
    run_dir = tmp_path / "run"
    spec = RunSpec(benchmark="stamps", method="caption", annotations=ann, images_root=stamps_dir,
                   index=tmp_path / "index", run_dir=run_dir, limit=2)
    proc = hold(run_dir)
    try:
        with pytest.raises(RunLocked, match=f"pid {proc.pid}"):
            run_eval(Workspace.from_config(), spec)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not (run_dir / "results.jsonl").exists() and not (tmp_path / "index").exists()
