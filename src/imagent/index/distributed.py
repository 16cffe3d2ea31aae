"""Distributed indexing on Ray: the same builder, with its encoders served by pools of Ray actors.

``imagent index SRC --ray local|auto|ADDRESS`` runs :func:`imagent.index.builder.build_index` exactly as a
single-process build does: the same scan of the source, fingerprints, conflict rules, SQLite transactions and
resume after a kill. Only the encoders differ: each is a :class:`RayEncoderPool` that splits every batch into
chunks and sends them to actors across the cluster, in order, so the vectors (and so the index) equal a
single-process build's. An actor loads the model once (one device per actor: ``gpus_per_actor=1`` on a GPU
cluster) and, for a pixel encoder, also reads and decodes the files of its chunk, so decoding is spread over
the cluster with the embedding. The driver keeps the database: every commit happens in one place, atomically,
as in a local build.

Faults: a worker process that dies is restarted and its chunk retried (``max_restarts``,
``max_task_retries``); a driver that dies leaves the database at its last committed batch, and the next run,
local or on Ray, resumes from there.

- ``local`` starts a Ray cluster on this machine for the run and stops it after;
- ``auto`` joins the cluster this machine is part of (``ray start --head`` / ``ray start --address=...``);
- any other value is a cluster address (``HOST:PORT`` of the head, or ``ray://HOST:10001`` for Ray Client).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from imagent.core.types import ImageRecord


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


class _EncoderActor:
    """Holds one encoder in one worker process (built there by the factory: models are not shipped)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.encoder = factory()

    def info(self) -> tuple[str, int, bool]:
        e = self.encoder
        return str(e.model_id), int(e.dim), bool(getattr(e, "sees_pixels", False))

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.encoder.encode_texts(texts), dtype=np.float32)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return np.asarray(self.encoder.encode_images(records), dtype=np.float32)


class RayEncoderPool:
    """An encoder whose calls are split into ``chunk_size`` pieces and mapped over ``actors`` Ray actors,
    results in input order. It has the encoder protocol's attributes (``model_id``, ``dim``,
    ``sees_pixels``), read from the first actor."""

    def __init__(self, factory: Callable[[], Any], actors: int = 2, chunk_size: int = 64,
                 cpus_per_actor: float = 0.0, gpus_per_actor: float = 0.0, max_restarts: int = 3,
                 start_timeout_s: float = 600.0) -> None:
        ray = _ray()
        if actors < 1 or chunk_size < 1:
            raise ValueError("a Ray encoder pool needs at least one actor and a chunk size of at least 1")
        # No CPU is reserved by default: a build runs two pools (dual and text encoders) and a reservation
        # of one CPU per actor would leave the second pool unplaced on a small machine. Actors are spread
        # over the nodes; on GPUs, gpus_per_actor=1 gives each actor its own device.
        remote = ray.remote(_EncoderActor).options(
            num_cpus=cpus_per_actor, num_gpus=gpus_per_actor, scheduling_strategy="SPREAD",
            max_restarts=max_restarts, max_task_retries=max_restarts,
        )
        self._ray = ray
        self.actors = [remote.remote(factory) for _ in range(actors)]
        self.chunk_size = chunk_size
        try:
            self.model_id, self.dim, self.sees_pixels = ray.get(self.actors[0].info.remote(), timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            raise RayUnavailable(f"the Ray cluster did not start an encoder actor within {start_timeout_s:.0f} s "
                                 f"({actors} actors, {gpus_per_actor} GPU each): not enough free resources?") from exc

    def _map(self, method: str, items: Sequence[Any]) -> np.ndarray:
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        from ray.util import ActorPool

        chunks = [list(items[i : i + self.chunk_size]) for i in range(0, len(items), self.chunk_size)]
        pool = ActorPool(self.actors)
        parts = list(pool.map(lambda actor, chunk: getattr(actor, method).remote(chunk), chunks))
        return np.vstack(parts).astype(np.float32, copy=False)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self._map("encode_texts", texts)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return self._map("encode_images", records)

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []
