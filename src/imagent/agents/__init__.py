"""The agent runtime: typed state, typed tools, the native / text / JSON tool-call protocols, the loop.

Generic: no method's tools, memories or prompts live here (the album agents' are in :mod:`imagent.methods.album`;
``tests/test_layers.py`` keeps this layer from importing any method). Any method that plans or acts with tools
(PhotoCraft, ImageSeeker, OSCAR's planner) stands on this layer instead of writing its own loop::

    from imagent.agents import AgentRuntime, AgentHooks, Tool, Observation, ToolError

    runtime = AgentRuntime(ctx.roles["agent"], tools, SYSTEM_PROMPT, max_turns=30, hooks=[my_memory],
                           known_ids=ctx.gallery)
    run = runtime.run(query.text)        # -> AgentRun: answer ids, source, reason, turns, tokens, seconds

Its modules, lowest first (each imports only those above it):

- :mod:`imagent.agents.state`: the typed state of a run: :class:`ToolCall`, :class:`Observation`,
  :class:`TurnRecord`, :class:`ToolScope` (what a tool receives: saved subsets, the album scope),
  :class:`AgentState`, :class:`AgentRun` (the answer and how it was obtained);
- :mod:`imagent.agents.tools`: :class:`Tool` (name, description, its arguments' pydantic model ``Args``
  (a :class:`ToolArgs`) whose JSON Schema the model sees, ``run(args, scope) -> Observation``), :class:`ToolError`,
  :func:`validate_args` (a bad argument becomes a ToolError the model reads);
- :mod:`imagent.agents.wire`: the wire formats: :func:`parse_tool_calls` (the ``<tool_call>`` text
  protocol), :func:`parse_final_answer` (``The final answer is: [...]``), the JSON protocol's schema, prompts;
- :mod:`imagent.agents.guards`: the small-model guards (repeated calls, copied example dates, loops);
- :mod:`imagent.agents.protocols`: one class per protocol (:class:`NativeProtocol`, :class:`TextProtocol`,
  :class:`JsonProtocol`) behind :class:`TurnProtocol`;
- :mod:`imagent.agents.runtime`: :class:`AgentRuntime` (the loop) and :class:`AgentHooks` (the hook points a
  method's memories and scaffold use).
"""

from __future__ import annotations

from imagent.agents.protocols import ANSWER_FORMAT, JsonProtocol, NativeProtocol, TextProtocol, TurnProtocol
from imagent.agents.runtime import AgentHooks, AgentRuntime, ToolMode
from imagent.agents.state import (
    DEFAULT_MAX_TURNS,
    AgentRun,
    AgentState,
    CallResult,
    Observation,
    ToolCall,
    ToolScope,
    TurnRecord,
)
from imagent.agents.tools import NoArgs, Tool, ToolArgs, ToolError, args_schema, validate_args, with_fields
from imagent.agents.wire import (
    format_tool_call,
    format_tool_response,
    native_tool_calls,
    parse_final_answer,
    parse_tool_calls,
    strip_tool_calls,
    text_protocol_prompt,
    tools_as_openai,
)

__all__ = [
    "ANSWER_FORMAT",
    "DEFAULT_MAX_TURNS",
    "AgentHooks",
    "AgentRun",
    "AgentRuntime",
    "AgentState",
    "CallResult",
    "JsonProtocol",
    "NativeProtocol",
    "NoArgs",
    "Observation",
    "TextProtocol",
    "Tool",
    "ToolArgs",
    "ToolCall",
    "ToolError",
    "ToolMode",
    "ToolScope",
    "TurnProtocol",
    "TurnRecord",
    "args_schema",
    "format_tool_call",
    "format_tool_response",
    "native_tool_calls",
    "parse_final_answer",
    "parse_tool_calls",
    "strip_tool_calls",
    "text_protocol_prompt",
    "tools_as_openai",
    "validate_args",
    "with_fields",
]
