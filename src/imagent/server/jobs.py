"""Searches that run in the background while the page watches: a worker thread per search, its trace's
events kept in order, streamed to the page as server-sent events, and a cancel flag.

``POST /api/searches`` starts a :class:`SearchJob` and returns its id at once; ``GET
/api/searches/{id}/events`` streams what the trace's listeners saw (``step_start``, ``step_end``,
``call``), then one ``result``, ``error`` or ``cancelled``. Events are kept for the job's life, so a
reconnecting ``EventSource`` (it sends ``Last-Event-ID``) or a late subscriber misses nothing. ``POST
/api/searches/{id}/cancel`` sets the trace's ``cancel_event``: the method stops at its next step or
model call with :class:`~imagent.core.trace.SearchCancelled`.

**One admission limit.** ``POST /api/search`` (answered when done) and ``POST /api/searches`` (in the
background) take their slot from the same count (:meth:`SearchJobs.admit`, :meth:`SearchJobs.start`):
at most ``server.max_running_searches`` run at once, the next is refused (429).

**Abandoned searches stop.** Each open event stream counts as a listener (:meth:`SearchJob.listening`).
A background search nobody listens to (none connected, or the last one left and none came back) is
cancelled after ``server.abandoned_search_grace_s``: a closed tab does not keep calling models and
holding a slot.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from imagent.core.trace import SearchCancelled, Trace

# How many finished jobs are kept for late subscribers, and for how long.
KEEP_FINISHED = 16
KEEP_SECONDS = 600.0


class TooManySearches(RuntimeError):
    """More searches are running than ``server.max_running_searches`` allows."""


@dataclass
class SearchJob:
    id: str
    trace: Trace
    method: str
    estimate: int | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    # (event, JSON text): serialised when it happens, in the worker's thread, so a step's outputs are
    # never read while the method is still filling them.
    events: list[tuple[str, str]] = field(default_factory=list)
    listeners: int = 0  # open event streams
    idle_since: float = field(default_factory=time.monotonic)  # when the last listener left (or the start)
    abandoned: bool = False  # cancelled because nobody listened
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _grace_s: float | None = field(default=None, repr=False)

    @contextmanager
    def listening(self) -> Iterator[None]:
        """While an event stream is open: the search counts as watched."""
        with self._lock:
            self.listeners += 1
        try:
            yield
        finally:
            with self._lock:
                self.listeners -= 1
                if self.listeners == 0:
                    self.idle_since = time.monotonic()
            self._watch()

    async def watched(self, stream: AsyncIterator[str]) -> AsyncIterator[str]:
        """``stream`` (an event stream of this job), counted as a listener while it is open."""
        with self.listening():
            async for chunk in stream:
                yield chunk

    def _watch(self) -> None:
        """Check again once the grace period has passed (a daemon timer; nothing to stop at exit)."""
        if self._grace_s is not None and not self.done:
            timer = threading.Timer(self._grace_s + 0.05, self._reap)
            timer.daemon = True
            timer.start()

    def _reap(self) -> None:
        with self._lock:
            unwatched = self.listeners == 0 and self.finished is None
            due = self._grace_s is not None and time.monotonic() - self.idle_since >= self._grace_s
        if unwatched and due:
            self.abandoned = True
            self.cancel()

    def push(self, event: str, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, default=str)  # ASCII: lone surrogates cannot break the stream
        with self._lock:
            if self.finished is None:  # nothing after the final event
                self.events.append((event, data))

    def finish(self, event: str, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, default=str)  # ASCII: lone surrogates cannot break the stream
        with self._lock:
            if self.finished is None:
                self.events.append((event, data))
                self.finished = time.monotonic()

    def since(self, n: int) -> list[tuple[int, str, str]]:
        """Events from index ``n`` on, with their indexes (the SSE ids)."""
        with self._lock:
            return [(i, e, p) for i, (e, p) in enumerate(self.events[n:], start=n)]

    @property
    def done(self) -> bool:
        return self.finished is not None

    def cancel(self) -> None:
        assert self.trace.cancel_event is not None
        self.trace.cancel_event.set()


class SearchJobs:
    """The server's running and recently finished searches."""

    def __init__(self, max_running: int, abandon_after_s: float | None = None) -> None:
        self.max_running = max_running
        self.abandon_after_s = abandon_after_s
        self._jobs: dict[str, SearchJob] = {}
        self._lock = threading.Lock()
        self._direct = 0  # searches answered in the request (POST /api/search) running now

    def _full(self) -> bool:
        return sum(not j.done for j in self._jobs.values()) + self._direct >= self.max_running

    def _refuse(self) -> TooManySearches:
        return TooManySearches(f"{self.max_running} searches are running (server.max_running_searches); wait for "
                               "one to finish or cancel it")

    @contextmanager
    def admit(self) -> Iterator[None]:
        """A slot for a search answered in the request; :class:`TooManySearches` when none is free."""
        with self._lock:
            self._prune()
            if self._full():
                raise self._refuse()
            self._direct += 1
        try:
            yield
        finally:
            with self._lock:
                self._direct -= 1

    def get(self, job_id: str) -> SearchJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def start(self, trace: Trace, method: str, estimate: int | None,
              work: Callable[[Trace], dict[str, Any]], describe_error: Callable[[Exception], tuple[int, str] | None]
              ) -> SearchJob:
        """Run ``work(trace)`` in a worker thread; its return value is the ``result`` event's payload.
        ``describe_error`` maps a user error to ``(status, message)``; others become a generic error."""
        with self._lock:
            self._prune()
            if self._full():
                raise self._refuse()
            trace.cancel_event = trace.cancel_event or threading.Event()
            job = SearchJob(secrets.token_urlsafe(12), trace, method, estimate)
            job._grace_s = self.abandon_after_s
            self._jobs[job.id] = job
        job._watch()  # nobody may ever connect to its events
        trace.listeners.append(job.push)
        job.push("started", {"id": job.id, "method": method, "estimate": estimate, "max_calls": trace.max_calls})
        threading.Thread(target=self._run, args=(job, work, describe_error), name=f"search-{job.id}",
                         daemon=True).start()
        return job

    @staticmethod
    def _run(job: SearchJob, work: Callable[[Trace], dict[str, Any]],
             describe_error: Callable[[Exception], tuple[int, str] | None]) -> None:
        try:
            payload = work(job.trace)
        except SearchCancelled:
            detail = "search cancelled: nobody was watching it any more" if job.abandoned else "search cancelled"
            job.finish("cancelled", {"detail": detail, "trace": job.trace.to_dict()})
        except Exception as exc:  # every failure reaches the page as one event, never a dead stream
            described = describe_error(exc)
            status, detail = described if described else (500, f"the search failed: {type(exc).__name__}")
            job.finish("error", {"status": status, "detail": detail, "trace": job.trace.to_dict()})
        else:
            job.finish("result", payload)

    def _prune(self) -> None:
        now = time.monotonic()
        finished = sorted((j for j in self._jobs.values() if j.done), key=lambda j: j.finished or 0)
        for j in finished[:-KEEP_FINISHED] if len(finished) > KEEP_FINISHED else []:
            self._jobs.pop(j.id, None)
        for j in finished:
            if j.finished is not None and now - j.finished > KEEP_SECONDS:
                self._jobs.pop(j.id, None)

    def cancel_all(self) -> None:
        with self._lock:
            for j in self._jobs.values():
                if not j.done:
                    j.cancel()
