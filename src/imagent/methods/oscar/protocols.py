"""OSCAR's planner on the agents runtime's protocols (:mod:`imagent.agents.protocols`): how the plan is asked
for and read back.

The planner writes a whole plan in one reply, so it uses the runtime's protocol classes for one turn:

- ``native``: :class:`~imagent.agents.NativeProtocol` offers the retrieval tools and ``set_operation`` as
  OpenAI tools (:class:`RetrievalTool`, :class:`SetOperationTool`; several calls per reply allowed) and reads
  the backend's ``tool_calls``;
- ``text``: :class:`~imagent.agents.TextProtocol` reads the paper's ``<tool_call>`` blocks;
- ``json``: :class:`JsonPlanProtocol`, a :class:`~imagent.agents.TurnProtocol` whose one reply is the whole plan
  ``{"thought", "calls": [{"tool", "query", "top_k"}], "steps": [{"name", "op", "operands"}]}`` decoded under
  :func:`plan_schema`'s grammar (llama.cpp in-process and server), read back as the same
  :class:`~imagent.agents.ToolCall` list the other two give (:func:`json_plan_calls`).

So a plan parses the same from all three (:func:`imagent.methods.oscar.planner.read_plan` reads the calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field

from imagent.agents import NativeProtocol, Observation, TextProtocol, Tool, ToolArgs, ToolCall, ToolError, TurnProtocol
from imagent.agents.protocols import ProtocolSettings, Reply
from imagent.agents.state import AgentState, ToolScope
from imagent.agents.tools import with_fields
from imagent.methods.oscar.config import OscarConfig, RetrieverSpec
from imagent.models.base import ChatParams, Message
from imagent.models.json_output import JSONParseError, extract_json

Protocol = Literal["json", "native", "text"]
OPS = ("UNION", "INTERSECT", "DIFFERENCE")
SET_OPERATION = "set_operation"
THOUGHT_CHARS = 300  # the plan's analysis (bounded: a grammar needs a bound)
QUERY_CHARS = 160  # one call's query in the JSON grammar
STEP_NAMES = {1: ("final",), 2: ("positive", "final"), 3: ("positive", "negative", "final")}


def allowed_ops(cfg: OscarConfig) -> tuple[str, ...]:
    return {"full": OPS, "no_difference": ("UNION", "INTERSECT"), "union_only": ("UNION",)}[cfg.set_operations]


class RetrievalArgs(ToolArgs):
    """A retrieval call of the plan: its query, how many results (up to the configured ``k_max``) and, for an
    embedding tool, the reference image."""

    query: str
    top_k: int = Field(ge=1, le=100)
    reference_image: str | None = None


class PlanStep(ToolArgs):
    """One named step of ``set_operation``: an operation over earlier calls (by number) and steps (by name)."""

    name: str
    op: str
    operands: list[int | str]


class SetOperationArgs(ToolArgs):
    steps: list[PlanStep]


@lru_cache(maxsize=16)
def retrieval_args(k_max: int) -> type[RetrievalArgs]:
    return with_fields(RetrievalArgs, top_k=(int, Field(ge=1, le=k_max)))


@lru_cache(maxsize=16)
def set_operation_args(ops: tuple[str, ...]) -> type[SetOperationArgs]:
    """``set_operation``'s arguments with ``op`` one of the ablation's operations."""
    step = with_fields(PlanStep, op=(Literal[ops], ...))  # type: ignore[valid-type]
    return with_fields(SetOperationArgs, steps=(list[step], ...))  # type: ignore[valid-type]


class _PlannedTool(Tool[Any]):
    """A tool the planner names in its plan; OSCAR runs the plan's calls together afterwards (one scan per
    stored matrix), never one by one through an agent loop."""

    def run(self, args: Any, scope: ToolScope) -> Observation:
        raise ToolError(f"{self.name} is run by OSCAR's plan executor, not by an agent loop")


class RetrievalTool(_PlannedTool):
    """One retrieval tool (a vector space of the index) as the runtime's :class:`~imagent.agents.Tool`."""

    def __init__(self, name: str, spec: RetrieverSpec, k_max: int) -> None:
        self.name = name
        self.description = f"{spec.kind} search: {spec.description or spec.space}"
        self.Args = retrieval_args(k_max)


class SetOperationTool(_PlannedTool):
    """``set_operation``: the plan's named steps over the retrieval calls' results."""

    def __init__(self, ops: Sequence[str]) -> None:
        self.name = SET_OPERATION
        self.description = "combine the results of the retrieval calls; the last call"
        self.Args = set_operation_args(tuple(ops))


def planner_tools(cfg: OscarConfig, tools: dict[str, RetrieverSpec]) -> list[Tool]:
    return [*(RetrievalTool(n, s, cfg.k_max) for n, s in tools.items()), SetOperationTool(allowed_ops(cfg))]


def native_tools(cfg: OscarConfig, tools: dict[str, RetrieverSpec]) -> list[dict[str, Any]]:
    """The same tools as OpenAI function specs (for backends with native tool calling)."""
    return [t.spec() for t in planner_tools(cfg, tools)]


def grammar_max_calls(cfg: OscarConfig) -> int:
    """The most retrieval calls the JSON grammar offers (the grammar grows with it; plans are small)."""
    return min(cfg.max_calls_per_plan, cfg.grammar_max_calls)


def plan_schema(cfg: OscarConfig, tools: dict[str, RetrieverSpec]) -> dict[str, Any]:
    """The JSON schema of a whole plan (the JSON protocol's one reply), built so that every plan it admits can
    be run: the calls name only offered ``tools`` with a ``top_k`` among the truncation levels, the steps use
    only the ablation's operations, and every operand names an existing call or an earlier step.

    One alternative per number of calls ``n`` (1..:func:`grammar_max_calls`) and per step pattern (``final``;
    ``positive, final``; ``positive, negative, final``): step ``j``'s operands are drawn from the call numbers
    ``0..n-1`` and the names of the steps before it."""
    ops = list(allowed_ops(cfg))
    call = {"type": "object", "properties": {
        "tool": {"enum": list(tools)}, "query": {"type": "string", "minLength": 1, "maxLength": QUERY_CHARS},
        "top_k": {"enum": list(cfg.truncations)}}, "required": ["tool", "query", "top_k"],
        "additionalProperties": False}
    thought = {"type": "string", "maxLength": THOUGHT_CHARS}
    alternatives = []
    for n in range(1, grammar_max_calls(cfg) + 1):
        patterns = []
        for names in STEP_NAMES.values():
            steps = []
            for j, name in enumerate(names):
                refs: list[Any] = [*range(n), *names[:j]]
                steps.append({"type": "object", "properties": {
                    "name": {"const": name}, "op": {"enum": ops},
                    "operands": {"type": "array", "items": {"enum": refs}, "minItems": 1, "maxItems": len(refs)}},
                    "required": ["name", "op", "operands"], "additionalProperties": False})
            patterns.append({"type": "array", "prefixItems": steps, "items": False, "minItems": len(steps),
                             "maxItems": len(steps)})
        alternatives.append({"type": "object", "properties": {
            "thought": thought,
            "calls": {"type": "array", "items": call, "minItems": n, "maxItems": n},
            "steps": {"oneOf": patterns}},
            "required": ["thought", "calls", "steps"], "additionalProperties": False})
    return alternatives[0] if len(alternatives) == 1 else {"oneOf": alternatives}


def json_plan_calls(text: str) -> list[ToolCall]:
    """A JSON-protocol reply as the tool calls it stands for (its retrieval calls, then one ``set_operation``),
    so that the plan is read exactly as ``<tool_call>`` blocks or native calls are. A reply that is not such an
    object gives one unreadable call (its error says why)."""
    try:
        value = extract_json(text or "")
    except JSONParseError as exc:
        return [ToolCall("", id="call_0", raw=text, error=f"the reply is not a JSON plan ({exc})")]
    if not isinstance(value, dict) or not isinstance(value.get("calls"), list):
        return [ToolCall("", id="call_0", raw=text, error='the reply is not a JSON plan with a "calls" list')]
    out: list[ToolCall] = []
    for n, c in enumerate(value["calls"]):
        if not isinstance(c, dict):
            out.append(ToolCall("", id=f"call_{n}", error="a call is not a JSON object"))
            continue
        args = {k: v for k, v in c.items() if k not in ("tool", "name")}
        out.append(ToolCall(str(c.get("tool") or c.get("name") or ""), args, id=f"call_{n}"))
    if value.get("steps") is not None:
        out.append(ToolCall(SET_OPERATION, {"steps": value["steps"]}, id=f"call_{len(out)}"))
    return out


class JsonPlanProtocol(TurnProtocol):
    """The whole plan as one JSON object decoded under :func:`plan_schema` (a grammar on llama.cpp)."""

    mode = "json"
    call_form = 'one JSON plan: {"thought", "calls": [...], "steps": [...]}'

    def __init__(self, tools: Sequence[Tool], settings: ProtocolSettings, schema: dict[str, Any]) -> None:
        super().__init__(tools, "", settings)
        self.schema = schema

    def params(self, state: AgentState | None = None, final: bool = False) -> ChatParams:
        p = super().params(state, final)
        p.json_schema = self.schema
        return p

    def read_text(self, text: str) -> Reply:
        return Reply(str((extract_json_or_none(text) or {}).get("thought") or ""), json_plan_calls(text), None,
                     "json", Message.assistant(text))


def extract_json_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = extract_json(text or "")
    except JSONParseError:
        return None
    return value if isinstance(value, dict) else None


def plan_protocol(protocol: Protocol, cfg: OscarConfig, tools: dict[str, RetrieverSpec]) -> TurnProtocol:
    """The runtime protocol the planner speaks: its chat parameters and how its reply is read. Several calls
    per reply are the point of a plan, so native calls are not limited to one per step."""
    settings = ProtocolSettings(max_tokens=cfg.planner_max_tokens, one_tool_per_step=False)
    agent_tools = planner_tools(cfg, tools)
    if protocol == "json":
        return JsonPlanProtocol(agent_tools, settings, plan_schema(cfg, tools))
    return NativeProtocol(agent_tools, "", settings) if protocol == "native" else TextProtocol(agent_tools, "",
                                                                                              settings)


__all__ = [
    "OPS",
    "SET_OPERATION",
    "JsonPlanProtocol",
    "Protocol",
    "RetrievalTool",
    "SetOperationTool",
    "allowed_ops",
    "grammar_max_calls",
    "json_plan_calls",
    "native_tools",
    "plan_protocol",
    "plan_schema",
    "planner_tools",
]
