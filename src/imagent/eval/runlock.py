"""One writer per run folder: a lock file holding its owner's pid, so two evals never write one run.

Two ``imagent eval`` runs on the same folder would both run the queries still missing (twice the model
cost) and race on its files. :func:`run_lock` takes the folder's lock file (``.run.lock``) with an
exclusive, non-blocking ``flock`` and writes the owner into it (pid, host, start time, command). A second
eval finds the lock held and is refused at once with :class:`RunLocked`, naming the owner. The kernel
drops a ``flock`` when its process dies (even by SIGKILL), so a dead owner's lock is simply taken over;
the previous owner's details are returned so the caller can say so. The file is removed when the run ends
(after checking it is still the locked file, so a waiting process never holds a lock on a deleted file).

POSIX only (``fcntl``); where it is missing the run proceeds unlocked.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".run.lock"


class RunLocked(ValueError):
    """Another process is writing this run folder (the message names it and what to do); a user error."""


def _owner(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        owner = json.loads(data.decode("utf-8")) if data.strip() else {}
        return owner if isinstance(owner, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(owner: dict[str, Any]) -> str:
    if not owner:
        return "another process"
    started = owner.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, int | float) else "?"
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}, started {when}"


@contextmanager
def run_lock(folder: Path, name: str = LOCK_NAME) -> Iterator[dict[str, Any]]:
    """Hold ``folder``'s lock while the block runs; yields the previous owner's details when a dead
    owner's lock was taken over (else ``{}``). Raises :class:`RunLocked` when a live process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover
        yield {}
        return
    path = folder / name
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _owner(fd)
            os.close(fd)
            raise RunLocked(
                f"{folder} is being written by another imagent eval ({_describe(owner)}); two runs on one folder "
                "would run the same queries twice. Wait for it to finish (then run again to resume), stop it, or "
                "use another --run-dir") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the file was removed by its owner between our open and our lock: take the new one
    previous = _owner(fd)
    if previous:
        logging.getLogger(__name__).warning("%s: took over the lock of %s, which is no longer running", folder,
                                            _describe(previous))
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
          "command": " ".join(sys.argv)[:500]}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
    try:
        yield previous
    finally:
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()
        except FileNotFoundError:
            pass
        os.close(fd)  # releases the flock


__all__ = ["LOCK_NAME", "RunLocked", "run_lock"]
