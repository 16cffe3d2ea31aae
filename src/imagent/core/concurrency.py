"""Bounded thread-pool map that keeps the trace context in worker threads."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_threads(fn: Callable[[T], R], items: Iterable[T], max_workers: int = 1) -> list[R]:
    """``[fn(x) for x in items]`` run on up to ``max_workers`` threads, results in input order.

    Each task runs in a copy of the caller's context, so model calls made inside are recorded
    into the trace step that was open when ``map_threads`` was called.
    """
    items = list(items)
    if max_workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [f.result() for f in futures]
