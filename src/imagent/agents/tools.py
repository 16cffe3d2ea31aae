"""Typed agent tools: a name, a description, a JSON-Schema signature and ``run(args, scope)``.

Subclass :class:`Tool`, set ``name``, ``description`` and ``parameters`` and implement ``run``; ``run``
receives validated arguments and a :class:`~imagent.agents.state.ToolScope` (the saved subsets, the album
scope), never the loop, and returns an :class:`~imagent.agents.state.Observation`::

    class Echo(Tool):
        name, description = "Echo", "Repeat the text."
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

        def run(self, args, scope):
            return Observation(args["text"])

A tool never raises out of the agent loop for something the model did wrong: bad arguments, an
unknown photo id or a filter that does not parse raise :class:`ToolError`, whose message the runtime
hands back to the model as the observation, so the model can correct itself and try again.

Arguments are checked by :func:`validate_args` before ``run`` sees them: a small JSON-Schema subset
(``type``, ``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``, ``minimum``,
``maximum``, ``minItems``, ``maxItems``, ``maxLength``) through :func:`imagent.models.json_output.coerce`,
which also repairs what a small model gets almost right (``"20"`` for 20, one id where a list was
asked). No ``jsonschema`` dependency: the tools' schemas stay inside this subset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from imagent.agents.state import SUMMARY_CHARS, Observation, ToolScope
from imagent.models.json_output import JSONParseError, coerce
from imagent.tools.base import ToolError


class Tool(ABC):
    """One tool an agent may call.

    Subclasses set ``name``, ``description`` and ``parameters`` (a JSON Schema object; keep to the
    subset :func:`validate_args` checks) and implement :meth:`run`. ``run`` receives validated
    arguments (defaults filled in) and the run's :class:`~imagent.agents.state.ToolScope` (the named
    subsets, the album scope); it returns an :class:`Observation` or raises :class:`ToolError`.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    # Parameters that take photo ids / names of saved subsets: the JSON protocol's grammar limits them to
    # the ids the tools have returned and the subsets saved so far (:meth:`grammar_parameters`).
    id_params: ClassVar[tuple[str, ...]] = ()
    subset_params: ClassVar[tuple[str, ...]] = ()
    # False: a photo this tool was already called on is not offered to it again by the grammar (its result is
    # still in the history; GetMetadata and ViewPhotos tell nothing new the second time).
    repeat_ids: ClassVar[bool] = True
    # An example call for the compact tool list a small model reads: ``{"query": "pink flamingo"}``.
    example: ClassVar[dict[str, Any] | None] = None

    @abstractmethod
    def run(self, args: dict[str, Any], scope: ToolScope) -> Observation:
        """Do the call. Raise :class:`ToolError` with a message the model can act on."""

    def __call__(self, args: dict[str, Any], scope: ToolScope) -> Observation:
        """Validate ``args`` against :attr:`parameters`, then :meth:`run`."""
        return self.run(validate_args(self.parameters, args, tool=self.name), scope)

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
        props = self.parameters.get("properties") or {}
        required = [k for k in self.parameters.get("required") or [] if k in props]
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
        props = self.parameters.get("properties") or {}
        required = set(self.parameters.get("required") or [])
        args = []
        for k, sch in props.items():
            t = sch.get("type", "any")
            if t == "array":
                t = f"list[{(sch.get('items') or {}).get('type', 'any')}]"
            args.append(f"{k}{'' if k in required else '?'}: {t}")
        return f"{self.name}({', '.join(args)})"


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


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def validate_args(schema: dict[str, Any], args: Any, tool: str = "") -> dict[str, Any]:
    """``args`` checked against ``schema`` (an object schema), coerced where unambiguous, with the
    defaults of absent optional properties filled in. Raises :class:`ToolError` saying what was wrong
    and what the tool takes, so the model can retry."""
    who = f"{tool}: " if tool else ""
    props: dict[str, Any] = schema.get("properties") or {}
    usage = ", ".join(f"{k} ({(v or {}).get('type', 'any')})" for k, v in props.items()) or "no arguments"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError(f"{who}arguments must be a JSON object, not {_type_name(args)}; it takes {usage}")
    unknown = [k for k in args if k not in props]
    if unknown and schema.get("additionalProperties", False) is False:
        raise ToolError(f"{who}unknown argument(s) {', '.join(map(repr, unknown))}; it takes {usage}")
    missing = [k for k in schema.get("required") or [] if args.get(k) is None]
    if missing:
        raise ToolError(f"{who}missing required argument(s) {', '.join(map(repr, missing))}; it takes {usage}")
    out: dict[str, Any] = {}
    for k, sch in props.items():
        if args.get(k) is None:
            if "default" in sch:
                out[k] = sch["default"]
            continue
        try:
            v = coerce(args[k], sch, k)
        except JSONParseError as exc:
            raise ToolError(f"{who}bad argument {exc}") from None
        _check_bounds(who, k, v, sch)
        out[k] = v
    return out


def _check_bounds(who: str, key: str, v: Any, sch: dict[str, Any]) -> None:
    if isinstance(v, int | float) and not isinstance(v, bool):
        if "minimum" in sch and v < sch["minimum"]:
            raise ToolError(f"{who}argument {key!r} must be >= {sch['minimum']}, not {v}")
        if "maximum" in sch and v > sch["maximum"]:
            raise ToolError(f"{who}argument {key!r} must be <= {sch['maximum']}, not {v}")
    if isinstance(v, list):
        if "minItems" in sch and len(v) < sch["minItems"]:
            raise ToolError(f"{who}argument {key!r} needs at least {sch['minItems']} item(s), got {len(v)}")
        if "maxItems" in sch and len(v) > sch["maxItems"]:
            raise ToolError(f"{who}argument {key!r} takes at most {sch['maxItems']} item(s), got {len(v)}")
    if isinstance(v, str) and sch.get("minLength") and len(v.strip()) < sch["minLength"]:
        raise ToolError(f"{who}argument {key!r} must not be empty")


__all__ = ["SUMMARY_CHARS", "Observation", "Tool", "ToolError", "ToolScope", "validate_args"]
