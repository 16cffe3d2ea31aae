"""Typed agent tools: a name, a description, a pydantic model of the arguments and ``run(args, scope)``.

Subclass :class:`Tool`, set ``name``, ``description`` and ``Args`` (a :class:`ToolArgs` model: one field per
argument, with its description and bounds) and implement ``run``; ``run`` receives the validated arguments as an
``Args`` instance and a :class:`~imagent.agents.state.ToolScope` (the saved subsets, the search's scope), never the
loop, and returns an :class:`~imagent.agents.state.Observation`::

    class EchoArgs(ToolArgs):
        text: str = Field(description="what to repeat", min_length=1)
        times: int = Field(1, ge=1, le=3)

    class Echo(Tool[EchoArgs]):
        name, description, Args = "Echo", "Repeat the text.", EchoArgs

        def run(self, args, scope):
            return Observation(" ".join([args.text] * args.times))

The JSON Schema the model sees (:attr:`Tool.parameters`: the OpenAI ``tools`` entry, the text protocol's tool
list, the JSON protocol's grammar) is generated from ``Args`` by :func:`args_schema`: descriptions, defaults,
bounds (``minimum``, ``maximum``, ``minItems``, ``maxItems``, ``minLength``, ``maxLength``, ``pattern``) and
``Literal`` choices as ``enum``, in one fixed key order and without pydantic's titles, so the prompt is the same
whatever pydantic version writes it. A bound that depends on a tool's settings (the most results one call may
ask for) is a field redefined on a subclass (:func:`with_fields`).

A tool never raises out of the agent loop for something the model did wrong: bad arguments, an unknown photo
id or a filter that does not parse raise :class:`ToolError`, whose message the runtime hands back to the model
as the observation, so the model can correct itself and try again. :func:`validate_args` says what was wrong
and what the tool takes; before pydantic checks the arguments, :func:`imagent.models.json_output.coerce`
repairs what a small model gets almost right (``"20"`` for 20, one id where a list was asked, a choice in
another case), as it does for every JSON reply.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cache
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from imagent.agents.state import SUMMARY_CHARS, Observation, ToolScope
from imagent.models.json_output import JSONParseError, coerce
from imagent.tools.base import ToolError


class ToolArgs(BaseModel):
    """A tool's arguments: one field per argument (its description, default and bounds). Unknown arguments are
    refused and strings stripped (an argument of spaces is empty)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True)


class NoArgs(ToolArgs):
    """A tool that takes no argument."""


A = TypeVar("A", bound=ToolArgs)


class Tool(ABC, Generic[A]):
    """One tool an agent may call.

    Subclasses set ``name``, ``description`` and ``Args`` (their :class:`ToolArgs` model; an instance may set a
    subclass with bounds from its settings, :func:`with_fields`) and implement :meth:`run`. ``run`` receives the
    validated arguments (an ``Args`` instance, defaults filled in) and the run's
    :class:`~imagent.agents.state.ToolScope` (the named subsets, the search's scope); it returns an
    :class:`Observation` or raises :class:`ToolError`.
    """

    name: str
    description: str
    Args: type[A] = NoArgs  # type: ignore[assignment]
    # Parameters that take photo ids / names of saved subsets: the JSON protocol's grammar limits them to
    # the ids the tools have returned and the subsets saved so far (:meth:`grammar_parameters`).
    id_params: ClassVar[tuple[str, ...]] = ()
    subset_params: ClassVar[tuple[str, ...]] = ()
    # False: a photo this tool was already called on is not offered to it again by the grammar (its result is
    # still in the history; a tool that describes or shows a photo tells nothing new the second time).
    repeat_ids: ClassVar[bool] = True
    # An example call for the compact tool list a small model reads: ``{"query": "pink flamingo"}``.
    example: ClassVar[dict[str, Any] | None] = None

    @abstractmethod
    def run(self, args: A, scope: ToolScope) -> Observation:
        """Do the call. Raise :class:`ToolError` with a message the model can act on."""

    def __call__(self, arguments: Any, scope: ToolScope) -> Observation:
        """Validate the model's ``arguments`` (:func:`validate_args`), then :meth:`run`."""
        return self.run(validate_args(self.Args, arguments, tool=self.name), scope)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, generated from :attr:`Args` (:func:`args_schema`; a copy)."""
        return copy.deepcopy(args_schema(self.Args))

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def grammar_parameters(self, ids: Sequence[str], subsets: Sequence[str]) -> dict[str, Any] | None:
        """:attr:`parameters` as a schema a grammar can enforce (the JSON protocol, :mod:`imagent.agents.wire`):
        strings and lists bounded (a small model loops inside an unbounded one), photo-id parameters limited
        to ``ids`` (the ids the tools returned so far: a model cannot name a photo it has not seen), subset
        parameters to ``subsets`` (left out while none is saved); descriptions, defaults and numeric bounds
        dropped (:func:`validate_args` still checks the call). None when a required parameter can take no
        value yet (an id parameter before any photo was seen): the tool is not offered this turn."""
        schema = self.parameters
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required") or [] if k in props]
        out: dict[str, Any] = {}
        for k, sch in props.items():
            choices = list(ids) if k in self.id_params else list(subsets) if k in self.subset_params else None
            if choices is not None and not choices:
                if k in required:
                    return None
                continue
            out[k] = _grammar_property(sch, choices)
        return {"type": "object", "properties": out, "required": [k for k in required if k in out],
                "additionalProperties": False}

    def signature(self) -> str:
        """One line for a text prompt: ``Name(arg: type, opt?: type)``."""
        schema = self.parameters
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        args = []
        for k, sch in props.items():
            t = sch.get("type", "any")
            if t == "array":
                t = f"list[{(sch.get('items') or {}).get('type', 'any')}]"
            args.append(f"{k}{'' if k in required else '?'}: {t}")
        return f"{self.name}({', '.join(args)})"


# --------------------------------------------------------------------------- the schema from the model

# The order of a property's keys in the schema the model reads (then any other key, as pydantic wrote it).
_KEY_ORDER = ("type", "items", "enum", "minItems", "maxItems", "description", "default", "minimum", "maximum",
              "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern")


@cache
def args_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of an arguments model as a model reads it: ``{"type": "object", "properties",
    "required" (when any), "additionalProperties": false}``; each property with its type, choices (``enum``),
    description, default and bounds, without titles; an optional argument (``X | None = None``) as ``X``, not
    required; nested models inlined. One schema per model class (the result is shared: do not change it)."""
    raw = model.model_json_schema(mode="validation")
    return _object(raw, raw.get("$defs") or {})


def _object(sch: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object",
                           "properties": {k: _property(v, defs) for k, v in (sch.get("properties") or {}).items()}}
    if sch.get("required"):
        out["required"] = list(sch["required"])
    if sch.get("additionalProperties") is False:
        out["additionalProperties"] = False
    return out


def _property(sch: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One property: references inlined, ``X | None`` as ``X``, a union of plain types as a list of types."""
    sch = {k: v for k, v in sch.items() if k != "title"}
    if "$ref" in sch:
        sch = {**defs[sch.pop("$ref").rsplit("/", 1)[-1]], **sch}
    if "anyOf" in sch:
        alts = [a for a in sch.pop("anyOf") if a.get("type") != "null"]
        if len(alts) == 1:
            sch = {**_property(alts[0], defs), **sch}
        elif all(set(a) == {"type"} for a in alts):
            sch = {"type": [a["type"] for a in alts], **sch}
        else:
            sch["anyOf"] = [_property(a, defs) for a in alts]
    if "default" in sch and sch["default"] is None:
        del sch["default"]
    if sch.get("type") == "object" and "properties" in sch:
        return _object(sch, defs)
    if "items" in sch:
        sch["items"] = _property(sch["items"], defs)
    sch.pop("title", None)
    ordered = {k: sch[k] for k in _KEY_ORDER if k in sch}
    return ordered | {k: v for k, v in sch.items() if k not in ordered}


def with_fields(model: type[A], **fields: Any) -> type[A]:
    """``model`` with some fields redefined, each ``name=(type, Field(...))``: a default or bound a tool takes from
    its settings (``ImageSearch``'s ``top_k`` up to the configured most). The subclass keeps the model's name and
    field order; cache it where a tool is built often (it is a new class each call)."""
    return create_model(model.__name__, __base__=model, **fields)  # type: ignore[call-overload,no-any-return]


# --------------------------------------------------------------------------- the grammar's bounds

# Bounds the JSON protocol's grammar puts on a tool's strings and lists (see Tool.grammar_parameters).
GRAMMAR_STRING_CHARS = 160
GRAMMAR_LIST_ITEMS = 20


def _grammar_property(sch: dict[str, Any], choices: list[str] | None) -> dict[str, Any]:
    """One property for the grammar: ``choices`` (ids or subset names) as an enum, else the type, bounded."""
    kind = sch.get("type")
    if kind == "array":
        items = dict(sch.get("items") or {"type": "string"})
        item = {"enum": choices} if choices is not None else _grammar_property(items, None)
        return {"type": "array", "items": item, "minItems": 1,
                "maxItems": min(int(sch.get("maxItems", GRAMMAR_LIST_ITEMS)), GRAMMAR_LIST_ITEMS)}
    if choices is not None:
        return {"enum": choices}
    if "enum" in sch:
        return {"enum": list(sch["enum"])}
    if kind == "string" and "pattern" in sch:
        return {"type": "string", "pattern": sch["pattern"]}
    if kind == "string":
        return {"type": "string", "minLength": 1,
                "maxLength": min(int(sch.get("maxLength", GRAMMAR_STRING_CHARS)), GRAMMAR_STRING_CHARS)}
    return {"type": kind} if kind else {}


# --------------------------------------------------------------------------- validating a call


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def validate_args(model: type[A], args: Any, tool: str = "") -> A:
    """The model's ``args`` (a JSON object) as an instance of the arguments ``model``: repaired where the intent
    is unambiguous (:func:`~imagent.models.json_output.coerce`; an argument given as null counts as not given),
    then validated by pydantic. Raises :class:`ToolError` saying what was wrong and what the tool takes, so the
    model can retry."""
    who = f"{tool}: " if tool else ""
    schema = args_schema(model)
    props: dict[str, Any] = schema.get("properties") or {}
    usage = ", ".join(f"{k} ({_usage_type(v)})" for k, v in props.items()) or "no arguments"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError(f"{who}arguments must be a JSON object, not {_type_name(args)}; it takes {usage}")
    given: dict[str, Any] = {}
    for k, v in args.items():
        if v is None:
            continue
        if k in props:
            try:
                v = coerce(v, props[k], k)
            except JSONParseError as exc:
                raise ToolError(f"{who}bad argument {exc}") from None
        given[k] = v
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise ToolError(who + _explain(exc, usage)) from None


def _usage_type(sch: dict[str, Any]) -> str:
    t = sch.get("type", "any")
    return "/".join(t) if isinstance(t, list) else str(t)


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _explain(exc: ValidationError, usage: str) -> str:
    """What was wrong with a call's arguments, in words a model can act on (at most three problems)."""
    errors = exc.errors(include_url=False)
    unknown = [_loc(e["loc"]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return f"unknown argument(s) {', '.join(map(repr, unknown))}; it takes {usage}"
    missing = [_loc(e["loc"]) for e in errors if e["type"] == "missing"]
    if missing:
        return f"missing required argument(s) {', '.join(map(repr, missing))}; it takes {usage}"
    return "; ".join(_problem(e) for e in errors[:3])


# A numeric bound pydantic reports -> how the message writes it and its key in the error's context.
_BOUNDS = {"less_than_equal": ("<=", "le"), "less_than": ("<", "lt"), "greater_than_equal": (">=", "ge"),
           "greater_than": (">", "gt")}


def _problem(e: Any) -> str:
    key, kind, ctx, got = _loc(e["loc"]), e["type"], e.get("ctx") or {}, e.get("input")
    if kind in _BOUNDS:
        op, name = _BOUNDS[kind]
        return f"argument {key!r} must be {op} {ctx.get(name)}, not {got}"
    if kind == "too_short":
        return f"argument {key!r} needs at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length')}"
    if kind == "too_long":
        return f"argument {key!r} takes at most {ctx.get('max_length')} item(s), got {ctx.get('actual_length')}"
    if kind == "string_too_short":
        return f"argument {key!r} must not be empty" if ctx.get("min_length") == 1 else \
            f"argument {key!r} needs at least {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return f"argument {key!r} takes at most {ctx.get('max_length')} characters, got {len(str(got))}"
    if kind in ("literal_error", "enum"):
        return f"argument {key!r} must be one of {ctx.get('expected')}, not {got!r}"
    if kind == "string_pattern_mismatch":
        return f"argument {key!r} must match {ctx.get('pattern')}, not {got!r}"
    msg = str(e.get("msg") or kind)
    return f"bad argument {key}: {msg[:1].lower()}{msg[1:]}, got {got!r}"


__all__ = ["GRAMMAR_LIST_ITEMS", "GRAMMAR_STRING_CHARS", "SUMMARY_CHARS", "NoArgs", "Observation", "Tool",
           "ToolArgs", "ToolError", "ToolScope", "args_schema", "validate_args", "with_fields"]
