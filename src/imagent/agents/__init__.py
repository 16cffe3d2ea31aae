"""The agent runtime: typed tools, the native / text tool-call protocols, and the tool-calling loop.

Any method that plans or acts with tools (PhotoCraft, ImageSeeker, OSCAR's planner) stands on this
layer instead of writing its own loop::

    from imagent.agents import AgentRuntime, AgentHooks, Tool, Observation, ToolError

    runtime = AgentRuntime(ctx.roles["agent"], tools, SYSTEM_PROMPT, max_turns=30, hooks=[my_memory],
                           known_ids=ctx.gallery)
    run = runtime.run(query.text)        # -> AgentRun: answer ids, source, reason, turns, tokens, seconds

- :mod:`imagent.agents.tools`: :class:`Tool` (name, description, JSON-Schema ``parameters``,
  ``run(args, state) -> Observation``), :class:`Observation`, :class:`ToolError`, :func:`validate_args`;
- :mod:`imagent.agents.protocol`: :class:`ToolCall`, :func:`parse_tool_calls` (the ``<tool_call>`` text
  protocol), :func:`parse_final_answer` (``The final answer is: [...]``), :func:`tools_as_openai`,
  :func:`text_protocol_prompt`;
- :mod:`imagent.agents.runtime`: :class:`AgentRuntime`, :class:`AgentState`, :class:`AgentHooks`
  (memory hook points), :class:`AgentRun`, :class:`TurnRecord`;
- :mod:`imagent.agents.album_tools`: the album tools (ImageSearch, GetMetadata, FilterMetadata,
  ViewPhotos, WebSearch) as :class:`Tool` objects over :class:`imagent.tools.album.Album`.
"""

from __future__ import annotations

from imagent.agents.protocol import (
    ToolCall,
    format_tool_call,
    format_tool_response,
    native_tool_calls,
    parse_final_answer,
    parse_tool_calls,
    strip_tool_calls,
    text_protocol_prompt,
    tools_as_openai,
)
from imagent.agents.runtime import (
    ANSWER_FORMAT,
    DEFAULT_MAX_TURNS,
    AgentHooks,
    AgentRun,
    AgentRuntime,
    AgentState,
    ToolMode,
    TurnRecord,
)
from imagent.agents.tools import Observation, Tool, ToolError, validate_args

__all__ = [
    "ANSWER_FORMAT",
    "DEFAULT_MAX_TURNS",
    "AgentHooks",
    "AgentRun",
    "AgentRuntime",
    "AgentState",
    "Observation",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolMode",
    "TurnRecord",
    "format_tool_call",
    "format_tool_response",
    "native_tool_calls",
    "parse_final_answer",
    "parse_tool_calls",
    "strip_tool_calls",
    "text_protocol_prompt",
    "tools_as_openai",
    "validate_args",
]
