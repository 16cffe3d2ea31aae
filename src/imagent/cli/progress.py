"""A live status line for a running search: step, model calls done / estimated, elapsed time.

:class:`SearchStatus` is a trace listener (``Trace(listeners=[status])``): the method's own
``step_start`` / ``step_end`` / ``call`` events feed it, from whatever thread made the call. On a
terminal a Rich ``Live`` line on stderr redraws it four times a second (so the clock moves between
events) and disappears when the search ends; elsewhere (pipes, CI logs) each finished step (an agent's turn
included) prints one plain line to stderr, so a long search whose output is piped still shows it is alive.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.text import Text

from imagent.core.text import plural


class SearchStatus:
    def __init__(self, console: Console, method: str, estimated: int) -> None:
        self.console = console
        self.method = method
        self.estimated = estimated
        self.step = "starting"
        self.calls = 0  # model calls that cost something (cache hits excluded)
        self.cached = 0
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._live: Any = None

    # ---------------------------------------------------------------- listener
    def __call__(self, event: str, payload: dict[str, Any]) -> None:
        with self._lock:
            if event == "step_start":
                self.step = str(payload.get("name", ""))
            elif event == "step_end" and not self.console.is_terminal:
                calls = f", {plural(self.calls, 'model call')}" if self.calls else ""
                self.console.print(f"{self.method}: {payload.get('name', '')} done "
                                   f"({time.perf_counter() - self.t0:.1f} s{calls})", highlight=False,
                                   markup=False, soft_wrap=True)
            elif event == "call" and payload.get("kind") == "chat":
                if payload.get("cached"):
                    self.cached += 1
                else:
                    self.calls += 1

    # ---------------------------------------------------------------- rendering
    def line(self) -> str:
        with self._lock:
            est = f"/~{self.estimated}" if self.estimated else ""
            cached = f" ({self.cached} cached)" if self.cached else ""
            return (f"{self.method}: {self.step} | model calls {self.calls}{est}{cached} | "
                    f"{time.perf_counter() - self.t0:.1f} s")

    def __rich__(self) -> Text:
        return Text(self.line(), style="dim")

    def __enter__(self) -> SearchStatus:
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None


__all__ = ["SearchStatus"]
