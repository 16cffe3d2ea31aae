"""What every CLI command shares: consoles, the user-error wrapper, the progress bar, option types."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="config file (TOML or YAML)")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="key=value (repeatable): a dotted key is any setting (roles.default=vllm); "
                 "a bare key is the chosen method's field (tau=0.2 -> methods.<method>.tau); "
                 "<benchmark>.key is a benchmark loader option (imagent eval)"),
]
IndexOpt = Annotated[Path | None, typer.Option("--index", "-i", help="gallery index directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable JSON output")]

F = TypeVar("F", bound=Callable[..., Any])


def _user_error_types() -> tuple[type[BaseException], ...]:
    from imagent.api import user_error_types
    from imagent.eval.datasets import BenchmarkError
    from imagent.eval.runner import RunError

    return (*user_error_types(), BenchmarkError, RunError)


def user_errors(fn: F) -> F:
    """Errors a user can act on (bad config, missing index or file, unreachable server): one red line
    and exit status 2. ``IMAGENT_DEBUG=1`` shows the full traceback instead."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _user_error_types() as exc:
            if os.environ.get("IMAGENT_DEBUG"):
                raise
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), TextColumn("{task.fields[item]}"), console=err_console, transient=False,
    )
