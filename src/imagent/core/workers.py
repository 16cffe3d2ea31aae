"""Worker processes that die with their parent, and a process pool that outlives a dead worker.

A ``spawn`` :class:`~concurrent.futures.ProcessPoolExecutor` has two weak spots: its workers wait forever for work
when the process that started them is killed (``kill -9``: no ``atexit``, no shutdown; each worker holds the write
end of its own task queue, so its read never ends), and one worker that dies (killed, out of memory, a crash in a
native library) breaks the whole pool (:class:`~concurrent.futures.process.BrokenProcessPool` for every pending
task). :class:`SpawnPool` answers both:

- every worker first runs :func:`die_with_parent`: a daemon thread that ends the worker (``os._exit``) once its
  parent is gone (``os.getppid()`` no longer the pid that started it, checked every ``PARENT_POLL_S``; a parent
  killed while the worker was still starting is seen at once). Linux's ``PR_SET_PDEATHSIG`` is not used: it fires
  when the *thread* that started the worker ends, and pools start workers from whichever thread submits first;
- :meth:`SpawnPool.map` keeps the results of tasks that finished, makes a new pool when a worker died and runs the
  unfinished tasks again, at most :data:`WORKER_RETRIES` times; a task still unfinished after that is
  :data:`WORKER_DIED` in the results (its caller says so: a note, not a crash).

A worker busy inside native code that holds the GIL ends when that call returns (a photo's face scan: about a
second).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

PARENT_POLL_S = 0.5  # how often a worker checks that its parent is alive
WORKER_RETRIES = 2  # new pools tried for a task whose worker died, after the first try (faces.worker_retries)


class _Died:
    """The result of a task whose worker died every time it was tried (:data:`WORKER_DIED`)."""

    def __repr__(self) -> str:
        return "WORKER_DIED"


WORKER_DIED: Any = _Died()


def die_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> None:
    """End this process (``os._exit(1)``) once ``parent`` is no longer its parent: at once when it is already gone,
    else from a daemon thread that checks every ``poll_s`` seconds."""
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="imagent-parent-watch", daemon=True).start()


def _start_worker(parent: int, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
    die_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


class SpawnPool:
    """``workers`` spawned processes, each started with ``initializer(*initargs)`` and ended with its parent (see
    the module doc). Made on the first :meth:`map`; :meth:`close` ends it."""

    def __init__(self, workers: int, initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = (),
                 retries: int = WORKER_RETRIES) -> None:
        self.workers = workers
        self.retries = retries
        self._initializer = initializer
        self._initargs = initargs
        self._pool: Any = None
        self.restarts = 0  # pools made again after a worker died

    def _executor(self) -> Any:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: a forked copy of a process that has torch's threads running can hang
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker,
                                             initargs=(os.getpid(), self._initializer, self._initargs))
        return self._pool

    def _discard(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` in the workers, in order; an exception raised by ``fn`` is raised here. A task
        whose worker died is run again in a new pool, up to ``retries`` times; after that its result is
        :data:`WORKER_DIED`."""
        from concurrent.futures.process import BrokenProcessPool

        results: list[Any] = [WORKER_DIED] * len(items)
        todo = list(range(len(items)))
        for attempt in range(self.retries + 1):
            if attempt:
                self._discard()
                self.restarts += 1
            futures: dict[int, Future[Any]] = {}
            try:
                pool = self._executor()
                for i in todo:
                    futures[i] = pool.submit(fn, items[i])
            except BrokenProcessPool:
                pass  # a worker died before every task was handed out: the rest are tried again
            failed = [i for i in todo if i not in futures]
            for i, future in futures.items():
                try:
                    results[i] = future.result()
                except BrokenProcessPool:
                    failed.append(i)
            todo = sorted(failed)
            if not todo:
                break
        if todo:
            self._discard()  # the next map starts a new pool
        return results

    def close(self) -> None:
        """End the workers (pending tasks are cancelled)."""
        self._discard()


__all__ = ["PARENT_POLL_S", "WORKER_DIED", "WORKER_RETRIES", "SpawnPool", "die_with_parent"]
