"""Upper bounds on what a web request may ask: its own fields (:func:`check_request`) and the method
hyper-parameters it sets (:func:`check_params`).

A search request is :class:`imagent.api.SearchRequest`, the one request model of every interface; the web adds
ceilings to it here: :data:`REQUEST_CAPS` on its text fields and :data:`MAX_TOP_K` results.

A method's config class bounds what is *meaningful* (``tau`` in [0, 1]); many counts have no upper
bound because a researcher may want a big one from the CLI (``k_prime=100000`` made 11,213 model calls in
one request). Through the web API every number gets a ceiling, derived per field so new methods are
covered without editing them:

- the field's own ``le``/``lt`` when it has one (nothing to add);
- else a named cap from :data:`NAMED_CAPS` (counts whose cost is known: candidates verified, turns,
  tokens, threads);
- else ``max(FLOOR, FACTOR * |paper default|)``: ten times the paper's setting is room for any ablation.

Numbers whose default is >= 0 and that declare no lower bound may not go negative; floats must be
finite; strings, lists and mappings are capped in length. The per-search cap on model calls
(``server.max_calls_per_search``) bounds what these ceilings still allow.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel

from imagent.api import is_unicode

# Counts with a known cost per unit. Keys are field names of any method's config class.
NAMED_CAPS: dict[str, float] = {
    "k": 200,               # candidates each verified by a model call
    "k_prime": 1000,        # coarse pool re-ranked with model calls
    "alpha": 20,            # pairwise evaluations
    "top_k": 200,
    "max_tokens": 4096,
    "max_iterations": 16,
    "max_turns": 100,
    "turn_budget": 100,
    "num_questions": 20,
    "parse_retries": 5,
    "json_retries": 5,
    "retries": 5,
    "concurrency": 16,
    "max_calls": 5000,
}
FACTOR = 10
FLOOR = 100
MAX_TEXT = 2000
MAX_ITEMS = 64


MAX_TOP_K = 200
# The longest value each text field of a web search request may hold (characters).
REQUEST_CAPS: dict[str, int] = {"text": MAX_TEXT, "method": 100, "reference": 1000, "reference_upload": 100,
                                "where": MAX_TEXT, "like": 1000}


class RequestLimitError(ValueError):
    """A request field beyond the web's bounds: ``field`` names it, ``kind`` says how (pydantic's error types)."""

    def __init__(self, field: str, message: str, kind: str) -> None:
        super().__init__(message)
        self.field, self.kind = field, kind


def check_request(request: Any) -> None:
    """Raise :class:`RequestLimitError` when a search request (:class:`imagent.api.SearchRequest`) asks for more
    than the web API allows: a text field past :data:`REQUEST_CAPS`, more than :data:`MAX_TOP_K` results."""
    for name, cap in REQUEST_CAPS.items():
        value = getattr(request, name)
        if value is None:
            continue
        if len(str(value)) > cap:
            raise RequestLimitError(name, f"String should have at most {cap} characters", "string_too_long")
        if not is_unicode(str(value)):
            raise RequestLimitError(name, "Input should be a valid string, not one with a lone surrogate",
                                    "string_unicode")
    if request.top_k > MAX_TOP_K:
        raise RequestLimitError("top_k", f"Input should be less than or equal to {MAX_TOP_K}", "less_than_equal")


class ParamLimitError(ValueError):
    """A parameter beyond what the web API allows (the message names the field and the limit)."""


def check_params(config_cls: type[BaseModel], params: dict[str, Any]) -> None:
    """Raise :class:`ParamLimitError` when ``params`` (a method's overrides) exceed the web bounds.
    Unknown keys are left to the config class, which names the valid ones."""
    _check_model(config_cls, params, prefix="")


def _check_model(cls: type[BaseModel], values: dict[str, Any], prefix: str) -> None:
    if len(values) > MAX_ITEMS:
        raise ParamLimitError(f"{prefix or 'params'}: at most {MAX_ITEMS} keys")
    for name, value in values.items():
        field = cls.model_fields.get(name)
        if field is None:
            continue
        where = f"{prefix}{name}"
        default = field.get_default(call_default_factory=True)
        _check_value(where, name, value, field.annotation, field.metadata, default)


def _bounds(metadata: list[Any]) -> tuple[float | None, float | None]:
    lo = hi = None
    for m in metadata:
        if isinstance(m, annotated_types.Ge | annotated_types.Gt):
            lo = float(m.ge if isinstance(m, annotated_types.Ge) else m.gt)
        elif isinstance(m, annotated_types.Le | annotated_types.Lt):
            hi = float(m.le if isinstance(m, annotated_types.Le) else m.lt)
    return lo, hi


def _check_value(where: str, name: str, value: Any, annotation: Any, metadata: list[Any], default: Any) -> None:
    model = _model_class(annotation)
    if model is not None and isinstance(value, dict):
        _check_model(model, value, prefix=f"{where}.")
        return
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ParamLimitError(f"{where}: must be a finite number, not {value}")
        lo, hi = _bounds(metadata)
        if hi is None:
            base = abs(default) if isinstance(default, int | float) and not isinstance(default, bool) else 0
            hi = NAMED_CAPS.get(name, max(FLOOR, FACTOR * base))
            if value > hi:
                raise ParamLimitError(f"{where}: at most {hi:g} through the web API (got {value:g})")
        if lo is None and isinstance(default, int | float) and default >= 0 and value < 0:
            raise ParamLimitError(f"{where}: must not be negative (got {value:g})")
        return
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ParamLimitError(f"{where}: at most {MAX_TEXT} characters")
        return
    if isinstance(value, list | tuple | dict):
        if len(value) > MAX_ITEMS:
            raise ParamLimitError(f"{where}: at most {MAX_ITEMS} items")
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            _check_value(f"{where}[]", name, item, _item_type(annotation), [], None)


def _model_class(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_class(arg)
            if found is not None:
                return found
    return None


def _item_type(annotation: Any) -> Any:
    args = typing.get_args(annotation)
    return args[-1] if args else None
