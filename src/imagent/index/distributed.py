"""Distributed indexing on Ray: the same builder, with every per-photo stage computed on Ray actors.

``imagent index SRC --ray local|auto|ADDRESS`` runs :func:`imagent.index.builder.build_index` exactly as a
single-process build does: the same scan of the source, fingerprints, conflict rules, SQLite transactions and
resume after a kill. Only the runner differs (:mod:`imagent.index.stages`): a :class:`RayRunner` sends chunks of
photos to actors across the cluster, each holding its own composition of the index's parts
(:func:`imagent.index.parts.actor_parts`: models loaded once there, one device per actor with
``gpus_per_actor=1``), and every stage computes there: the pixel model and the encoders' embedding (with each
batch of new records), the embedding of spaces added since, and faces (after the records). Each actor reads and
decodes the files of its chunk, so decoding is spread over the cluster with the models. Results come back in
input order and the driver keeps the database: every commit happens in one place, atomically, as in a local build,
so the index (labels, vectors, face boxes and descriptors, and the people grouped from them here) equals a
single-process build's.

Faults: a worker process that dies is restarted and its chunk retried (``max_restarts``,
``max_task_retries``); a driver that dies leaves the database (and the face store) at its last committed chunk,
and the next run, local or on Ray, resumes from there.

- ``local`` starts a Ray cluster on this machine for the run and stops it after;
- ``auto`` joins the cluster this machine is part of (``ray start --head`` / ``ray start --address=...``);
- any other value is a cluster address (``HOST:PORT`` of the head, or ``ray://HOST:10001`` for Ray Client).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from imagent.core.types import ImageRecord
from imagent.index.stages import Outputs, RunStats, Stage, run_chain


class RayUnavailable(RuntimeError):
    """Ray is not installed (``pip install 'imagent[ray]'``) or the cluster cannot be reached."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("distributed indexing needs Ray: pip install 'imagent[ray]'") from exc
    return ray


@contextmanager
def ray_cluster(address: str, num_cpus: int | None = None) -> Iterator[Any]:
    """Connect to (or, for ``local``, start) a Ray cluster for the duration of the block."""
    ray = _ray()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        try:
            if address == "local":
                # A cluster of this machine only, with no ports opened beyond loopback. Its workers run at the
                # caller's priority: Ray's default (nice 15) starved an eval's query actors behind any other
                # process on the machine (measured: 6% of a core each beside one busy process on 2 cores).
                os.environ.setdefault("RAY_worker_niceness", "0")
                ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), **kwargs)
            else:
                # Workers elsewhere start from their node's environment, and Ray's worker loads numpy before any
                # imagent code runs: the thread waits imagent sets on import (imagent/__init__.py) go with the job.
                waits = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT") if k in os.environ}
                ray.init(address=address, **kwargs, **({"runtime_env": {"env_vars": waits}} if waits else {}))
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"cannot reach the Ray cluster {address!r}: {exc}") from exc
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


class _StageActor:
    """Holds one composition of the index's parts in one worker process (built there by ``make_parts``: models are
    loaded there, never shipped) and computes chunks through its stages."""

    def __init__(self, make_parts: Callable[[], Any]) -> None:
        self.parts = make_parts()

    def ready(self) -> int:
        return os.getpid()

    def run(self, names: list[str], records: list[ImageRecord], part: tuple[str, ...]
            ) -> tuple[Outputs, dict[str, float]]:
        seconds: dict[str, float] = {}
        out = run_chain([self.parts.stage(n) for n in names], records, part, seconds)
        return out, seconds


class RayRunner:
    """Computes stages on ``actors`` Ray actors: chunks go to the actors in turn (at most two queued per actor) and
    come back in input order, each stage's :meth:`~imagent.index.stages.Stage.apply` done here, so the driver commits
    them as a local build would. ``make_parts`` (picklable: :func:`imagent.index.parts.actor_parts` over the
    settings) composes each actor's parts; ``chunk_size`` photos a task. An actor reserves ``cpus_per_actor`` CPUs
    (its torch threads are bounded by them) and ``gpus_per_actor`` GPUs (1 on a GPU cluster: a device each)."""

    def __init__(self, make_parts: Callable[[], Any], actors: int = 2, chunk_size: int = 64,
                 cpus_per_actor: float = 1.0, gpus_per_actor: float = 0.0, max_restarts: int = 3,
                 start_timeout_s: float = 600.0) -> None:
        ray = _ray()
        if actors < 1 or chunk_size < 1:
            raise ValueError("a Ray runner needs at least one actor and a chunk size of at least 1")
        remote = ray.remote(_StageActor).options(
            num_cpus=cpus_per_actor, num_gpus=gpus_per_actor, scheduling_strategy="SPREAD",
            max_restarts=max_restarts, max_task_retries=max_restarts,
        )
        self._ray = ray
        self.actors = [remote.remote(make_parts) for _ in range(actors)]
        self.chunk_size = chunk_size
        self.stats = RunStats()
        self._turn = 0
        try:
            ray.get([a.ready.remote() for a in self.actors], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            raise RayUnavailable(f"the Ray cluster did not start {actors} index actors within {start_timeout_s:.0f} s "
                                 f"({cpus_per_actor} CPU, {gpus_per_actor} GPU each): not enough free resources?"
                                 ) from exc

    def map(self, stages: Sequence[Stage], chunks: Iterable[list[ImageRecord]], part: tuple[str, ...] = ()
            ) -> Iterator[tuple[list[ImageRecord], Outputs]]:
        names = [s.name for s in stages]
        todo = iter(chunks)
        pending: deque[tuple[list[ImageRecord], Any]] = deque()

        def submit() -> None:
            chunk = next(todo, None)
            if chunk is not None:
                actor = self.actors[self._turn % len(self.actors)]
                self._turn += 1
                pending.append((chunk, actor.run.remote(names, chunk, part)))

        for _ in range(2 * len(self.actors)):
            submit()
        while pending:
            chunk, ref = pending.popleft()
            out, seconds = self._ray.get(ref)
            submit()
            for stage in stages:
                stage.apply(chunk, out[stage.name])
            self.stats.add(names, len(chunk), seconds)
            yield chunk, out

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []


__all__ = ["RayRunner", "RayUnavailable", "ray_cluster"]
