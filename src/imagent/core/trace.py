"""The trace: what a method did for one query, step by step.

Every method opens named steps (``with trace.step("stage1.describe") as step: ...``). Model and tool
calls made while a step is open are recorded into it automatically (a context variable carries the
current step, also into worker threads started through :func:`imagent.core.concurrency.map_threads`),
so methods never pass the trace around by hand. The CLI's ``--json``, the eval reports and the web UI
all render this same structure.

The trace is the explanation, not an interface: step names are for people. Code that needs something from a
run reads typed fields (``Result.counts``, ``Result.warnings``, typed agent events); only this module reads a
step's name (:func:`stage_of`, which the reports group timings by). ``tests/test_step_names.py`` checks it.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from imagent.core.redact import redact

_CURRENT_STEP: contextvars.ContextVar[TraceStep | None] = contextvars.ContextVar(
    "imagent_current_step", default=None
)
_CURRENT_TRACE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("imagent_current_trace", default=None)

# A listener receives ``(event, payload)``: ``("step_start", {"index", "name", "inputs"})``,
# ``("step_end", step.to_dict() + {"index"})``, ``("call", call.to_dict() + {"step"})``. It runs in the
# thread that made the event and must be quick (the web UI puts events on a queue; the CLI redraws a line).
Listener = Callable[[str, dict[str, Any]], None]


class SearchCancelled(RuntimeError):
    """The caller cancelled the search (the web page's cancel button, a closed connection)."""


@dataclass
class CallRecord:
    """One model or tool call."""

    kind: str  # "chat", "embed", "tool"
    role: str  # role or tool name
    model: str
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    caption_mode: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class TraceStep:
    name: str
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _trace: Trace | None = field(default=None, repr=False, compare=False)
    _noted: set[str] = field(default_factory=set, repr=False, compare=False)

    def add_call(self, call: CallRecord) -> None:
        if call.error:
            call.error = redact(call.error)  # servers echo request headers into error bodies
        with self._lock:
            self.calls.append(call)
        if self._trace is not None and self._trace.listeners:
            self._trace.emit("call", {"step": self.name, **call.to_dict()})

    def note(self, text: str) -> None:
        """A remark a user should see (a fall-back taken, caption mode used, a parse failure); a remark
        already made in this step is not repeated (nor redacted again: a verifier notes per call)."""
        if text in self._noted:
            return
        clean = redact(text)
        with self._lock:
            self._noted.add(text)
            if clean not in self.notes:
                self.notes.append(clean)

    @property
    def model_calls(self) -> int:
        """Calls that cost something: cache hits excluded."""
        return sum(1 for c in self.calls if c.kind == "chat" and not c.cached)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "notes": list(self.notes),
            "seconds": round(self.seconds, 4),
            "model_calls": self.model_calls,
            "cached_calls": sum(1 for c in self.calls if c.cached),
            "tool_calls": sum(1 for c in self.calls if c.kind == "tool" and not c.cached),
            "prompt_tokens": sum(c.prompt_tokens for c in self.calls),
            "completion_tokens": sum(c.completion_tokens for c in self.calls),
            "calls": [c.to_dict() for c in self.calls],
        }


@dataclass
class Trace:
    method: str = ""
    query: dict[str, Any] = field(default_factory=dict)
    steps: list[TraceStep] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    # Cap on model calls (cache hits excluded) for this query; None = no cap. Roles enforce it.
    max_calls: int | None = field(default=None, compare=False)
    # Live observers (CLI status line, web UI stream) and a cancel flag checked at every step and call.
    listeners: list[Listener] = field(default_factory=list, repr=False, compare=False)
    cancel_event: threading.Event | None = field(default=None, repr=False, compare=False)
    # Uncached model calls claimed against max_calls (counted when a call starts, under a lock, so concurrent
    # verifier calls never overshoot the cap; failed calls count: they were attempted).
    _claimed: int = field(default=0, repr=False, compare=False)
    _claim_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _noted_once: set[str] = field(default_factory=set, repr=False, compare=False)  # see note_once

    def claim_call(self) -> bool:
        """Claim one uncached model call; False when ``max_calls`` is reached (the caller must not call)."""
        with self._claim_lock:
            if self.max_calls is not None and self._claimed >= self.max_calls:
                return False
            self._claimed += 1
            return True

    def emit(self, event: str, payload: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # an observer never breaks a search
                listener(event, payload)

    def check_cancelled(self) -> None:
        if self.cancel_event is not None and self.cancel_event.is_set():
            raise SearchCancelled("search cancelled")

    @contextmanager
    def activate(self) -> Iterator[Trace]:
        """Make this the current trace of this context (what roles read the call cap and cancel flag from)."""
        token = _CURRENT_TRACE.set(self)
        try:
            yield self
        finally:
            _CURRENT_TRACE.reset(token)

    @contextmanager
    def step(self, name: str, **inputs: Any) -> Iterator[TraceStep]:
        self.check_cancelled()
        s = TraceStep(name=name, inputs=inputs)
        s._trace = self
        self.steps.append(s)
        index = len(self.steps) - 1
        self.emit("step_start", {"index": index, "name": name, "inputs": inputs})
        token = _CURRENT_STEP.set(s)
        trace_token = _CURRENT_TRACE.set(self)
        t0 = time.perf_counter()
        try:
            yield s
        finally:
            s.seconds = time.perf_counter() - t0
            _CURRENT_STEP.reset(token)
            _CURRENT_TRACE.reset(trace_token)
            if self.listeners:
                self.emit("step_end", {"index": index, **s.to_dict()})

    def count(self, key: str, n: int = 1) -> None:
        """Count an event (parse fall-backs, unanswered questions...) across the whole query."""
        self.counters[key] = self.counters.get(key, 0) + n

    @property
    def model_calls(self) -> int:
        return sum(s.model_calls for s in self.steps)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "query": self.query,
            "model_calls": self.model_calls,
            "seconds": round(self.seconds, 4),
            "counters": dict(self.counters),
            "steps": [s.to_dict() for s in self.steps],
        }


def stage_of(step_name: str) -> str:
    """The stage a trace step belongs to: numbered repeats (an agent's ``turn.3``, a loop's ``round.2.verify``)
    count as one stage (``turn``, ``round.verify``)."""
    return re.sub(r"\.\d+(?=\.|$)", "", step_name) or step_name


def current_step() -> TraceStep | None:
    return _CURRENT_STEP.get()


def current_trace() -> Trace | None:
    """The trace of the search running in this context (set by ``Trace.step`` / ``Trace.activate``)."""
    return _CURRENT_TRACE.get()


def record_call(call: CallRecord) -> None:
    """Attach a call to the step that is open in this context, if any."""
    step = _CURRENT_STEP.get()
    if step is not None:
        step.add_call(call)


def note(text: str) -> None:
    step = _CURRENT_STEP.get()
    if step is not None:
        step.note(text)


def note_once(text: str) -> None:
    """:func:`note`, but once per search: a remark about a setting that holds for every step (a backend's
    limit) goes to the first step it concerns, not to each agent turn again."""
    trace = _CURRENT_TRACE.get()
    if trace is not None:
        with trace._claim_lock:
            if text in trace._noted_once:
                return
            trace._noted_once.add(text)
    note(text)
