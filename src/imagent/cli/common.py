"""What every CLI command shares: consoles, the user-error wrapper, the progress bar, option types, and the one way a
command builds its :class:`~imagent.api.Workspace` (:func:`workspace`) and its library (:func:`library`).

Commands are declared one way: each module's ``typer.Typer`` (``app``) holds its commands, and
:mod:`imagent.cli.main` adds every module's app to the main one (a group under its name, or its commands at the top
level)."""

from __future__ import annotations

import difflib
import functools
import json
import os
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from imagent.cli.terminal import SafeConsole, terminal_safe
from imagent.core.config import ConfigError, Settings, parse_value
from imagent.core.redact import redact

# Safe consoles: a control character from a file name, caption or model answer is printed escaped.
console: Console = SafeConsole()
err_console: Console = SafeConsole(stderr=True)

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

if typing.TYPE_CHECKING:
    from imagent.api import Workspace
    from imagent.library import LibraryService


def expand_sets(sets: list[str] | None, method: str | None) -> list[str]:
    """``tau=0.2`` -> ``methods.<method>.tau=0.2``; ``imagescope.tau=0.2`` -> ``methods.imagescope.tau``."""
    if not sets:  # nothing to route: only the named method's module is imported (a cold search starts faster)
        if method:
            from imagent.methods.base import get_method

            get_method(method)  # names an unknown method clearly, before anything else
        return []
    return route_sets(sets, None, method)[1]


def route_sets(sets: list[str] | None, benchmark: str | None, method: str | None
               ) -> tuple[dict[str, Any], list[str]]:
    """Split ``--set`` items into loader options and fully-qualified settings keys."""
    from imagent.eval.datasets import canonical_name
    from imagent.methods.base import get_method, list_methods

    methods = list_methods()
    if method:
        get_method(method)  # names an unknown method clearly
    chosen = canonical_name(benchmark) if benchmark else None
    options: dict[str, Any] = {}
    settings_sets: list[str] = []
    fields = set(Settings.model_fields)
    for item in sets or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set takes dotted.key=value (e.g. --set methods.imagescope.k=10), got {item!r}")
        head, dot, rest = key.partition(".")
        if dot and canonical_name(head) is not None and head not in fields:
            if chosen is not None and canonical_name(head) != chosen:
                raise ConfigError(f"--set {key}: an option of {head}, but the benchmark is {benchmark}")
            options[rest] = parse_value(value.strip())
        elif head in fields:
            settings_sets.append(f"{key}={value}")
        elif dot and head in methods:
            settings_sets.append(f"methods.{key}={value}")
        elif dot:
            # A dotted key must start with a settings section, a method or a benchmark: blaming the
            # chosen method's class for an unknown section would send the user to the wrong place.
            from imagent.eval.datasets import BENCHMARKS

            choices = [*fields, *methods, *BENCHMARKS]
            raise ConfigError(
                f"--set {key}: {head!r} is not a settings section, a method or a benchmark"
                f"{did_you_mean(head, choices)}; sections: {', '.join(sorted(fields))}; "
                f"methods: {', '.join(methods)}"
            )
        elif method:
            settings_sets.append(f"methods.{method}.{key}={value}")
        elif benchmark:
            options[key] = parse_value(value.strip())
        else:
            raise ConfigError(f"--set {key}: not a setting; name a method or a benchmark option")
    return options, settings_sets


def workspace(config: Path | None, sets: list[str] | None = None, method: str | None = None,
              overrides: dict[str, Any] | None = None) -> Workspace:
    """The workspace of a command: defaults <- the config file <- environment <- ``overrides`` (a pack's settings)
    <- ``--set`` (routed: a bare key is ``method``'s field)."""
    from imagent.api import Workspace
    from imagent.core.config import load_settings

    return Workspace(load_settings(config, overrides, expand_sets(sets, method)))


def library(config: Path | None, sets: list[str] | None, index: Path | None) -> LibraryService:
    """The library service of the index at ``index`` (the configured one by default) for a command."""
    from imagent.library import LibraryService

    return LibraryService(workspace(config, sets), index)


def _user_error_types() -> tuple[type[BaseException], ...]:
    from imagent.api import user_error_types
    from imagent.eval.datasets import BenchmarkError
    from imagent.eval.runner import RunError

    return (*user_error_types(), BenchmarkError, RunError, HintedError)


class HintedError(ValueError):
    """A user error with a hint saying what to do (``error``/``hint`` in ``--json`` output)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'tau'?)`` when ``word`` is close to one of ``choices``, else ``""``."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_at(model: Any, loc: tuple[Any, ...]) -> Any:
    """The pydantic class that holds the last key of ``loc`` (walking fields, dict values, lists)."""
    from pydantic import BaseModel

    cls = model
    i = 0
    while i < len(loc) - 1:
        field = getattr(cls, "model_fields", {}).get(loc[i]) if isinstance(cls, type) else None
        if field is None:
            return None
        ann = field.annotation
        i += 1
        # unwrap dict[str, X] / list[X] / X | None until a model class is reached
        while ann is not None and not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            origin, args = typing.get_origin(ann), typing.get_args(ann)
            if origin is dict and len(args) == 2:
                ann = args[1]
                i += 1  # the dict key is part of loc
            elif args:
                ann = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
            else:
                ann = None
        cls = ann
        if cls is None:
            return None
    return cls


def format_validation_error(exc: Any, model: Any = None, prefix: str = "") -> str:
    """A pydantic ValidationError as one line per field: where, what is wrong, and for an unknown
    key the valid keys of that class with a did-you-mean (never the raw pydantic dump)."""
    model = model or getattr(exc, "title", None)
    lines = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        where = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(loc)) or "(top level)"
        if err.get("type") == "extra_forbidden" and loc:
            owner = _model_at(model, loc) if isinstance(model, type) else None
            valid = sorted(getattr(owner, "model_fields", {})) if owner is not None else []
            line = f"{where}: unknown key{did_you_mean(str(loc[-1]), valid)}"
            if valid:
                line += f"; valid keys of {owner.__name__}: {', '.join(valid)}"
        else:
            msg = err.get("msg", "invalid")
            given = err.get("input")
            shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
            line = f"{where}: {msg}{shown}"
        lines.append(line)
    return "\n".join(lines)


def explain(exc: BaseException) -> tuple[str, str]:
    """``(message, hint)`` for a user error: pydantic dumps become one line per field."""
    from pydantic import ValidationError

    hint = getattr(exc, "hint", "") or ""
    cause = exc.__cause__
    if isinstance(exc, ValidationError):
        from imagent.methods.base import list_methods

        # Method hyper-parameters are the usual source: name the method and its class's keys.
        owner = next(((n, c.Config) for n, c in list_methods().items() if c.Config.__name__ == exc.title),
                     (None, None))
        prefix = f"methods.{owner[0]}" if owner[0] else ""
        return "invalid parameters:\n" + format_validation_error(exc, owner[1], prefix), hint or \
            "see `imagent config methods` for every method's keys and defaults"
    if isinstance(cause, ValidationError) and str(exc).startswith("invalid configuration"):
        from imagent.core.config import Settings

        return "invalid configuration:\n" + format_validation_error(cause, Settings), hint or \
            "see `imagent config show` for the resolved configuration"
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if not hint:
        from imagent.models.presets import load_error_hint

        hint = load_error_hint(exc)
    return redact(str(msg)), hint  # an error may quote a server's reply, which may echo the API key


def print_error(exc: BaseException, json_out: bool = False) -> None:
    msg, hint = explain(exc)
    if json_out:
        sys.stdout.write(json.dumps({"error": msg, "hint": hint or None}, ensure_ascii=False) + "\n")
        return
    # Text, not markup: messages quote user input and lists like ['cir'] that markup would eat.
    err_console.print(Text.assemble(("error:", "bold red"), " ", terminal_safe(msg)), highlight=False, soft_wrap=True)
    if hint:
        err_console.print(Text.assemble(("hint:", "bold"), " ", hint), highlight=False, soft_wrap=True)


def user_errors(fn: F) -> F:
    """Errors a user can act on (bad config, missing index or file, unreachable server): one red line
    (and a hint line) and exit status 2; with ``--json``, ``{"error": ..., "hint": ...}`` on stdout.
    ``IMAGENT_DEBUG=1`` shows the full traceback instead."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _user_error_types() as exc:
            if os.environ.get("IMAGENT_DEBUG"):
                raise
            print_error(exc, json_out=bool(kwargs.get("json_out")))
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def progress_bar(rate: str | None = None) -> Progress:
    """The CLI's progress bar; ``rate`` (e.g. ``"images/s"``) adds the speed in that unit."""
    extra = [RateColumn(rate)] if rate else []
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), *extra, TimeElapsedColumn(),
        TimeRemainingColumn(), TextColumn("{task.fields[item]}"), console=err_console, transient=False,
    )


class RateColumn(ProgressColumn):
    """Items per second so far (``12.3 images/s``), blank until Rich has measured a speed."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.1f} {self.unit}" if task.speed else "", style="cyan")
