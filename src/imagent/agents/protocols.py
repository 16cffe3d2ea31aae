"""The three tool-call protocols of the agent runtime, one class each behind one interface.

A protocol says how a turn is offered to the model (the system message's tool section, the chat parameters)
and how the reply is read back (calls, an answer, the reasoning) and answered (the tool results' messages).
The wire formats themselves (parsing, prompt sections) are :mod:`imagent.agents.wire`'s functions::

    proto = make_protocol("json", tools, system_prompt, settings)
    state.start([proto.system_message(), task])
    resp = role.chat(list(state.messages), proto.params(state))
    reply = proto.read(resp)                      # Reply: reasoning, calls, answer, path, message
    state.add_message(reply.message); ...; for m in proto.result_messages(reply, results): state.add_message(m)

- :class:`NativeProtocol`: OpenAI ``tools``; the backend returns ``tool_calls``;
- :class:`TextProtocol`: the tools described in the system prompt; ``<tool_call>`` blocks in the reply;
- :class:`JsonProtocol`: every reply one JSON object under a grammar rebuilt each turn from the state (photo ids
  limited to those the tools returned, subset names to saved subsets, tools the guards block left out).

A reply carrying native ``tool_calls`` is read as native calls whatever the protocol (a backend may use them
unasked); a native backend that answers in text is read as the text protocol.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any

from imagent.agents.guards import Guards
from imagent.agents.state import AgentState, CallPath, CallResult, Mode, ToolCall
from imagent.agents.tools import Tool
from imagent.agents.wire import (
    format_tool_response,
    json_protocol_prompt,
    json_turn_schema,
    native_tool_calls,
    parse_final_answer,
    parse_json_turn,
    parse_tool_calls,
    render_worked_example,
    strip_tool_calls,
    text_protocol_prompt,
    text_protocol_prompt_compact,
    tools_as_openai,
)
from imagent.models.base import ChatParams, ChatResponse, ImagePart, Message

ANSWER_FORMAT = 'The final answer is: ["<photo id>", "<photo id>", ...]'
BUDGET_SPENT = ("{why} Do not call any more tools. Based on what you found, give your "
                f"final answer now, exactly as: {ANSWER_FORMAT}")
BUDGET_SPENT_JSON = ("{why} Do not call any more tools. Based on what you found, give your "
                     'final answer now: {{"thought": "...", "final_answer": ["<photo id>", ...]}}')
SPENT = "You have used all {n} turns."
STUCK = "Your last {k} tool calls repeated earlier ones, so the search is over."
OFTEN = "{k} of your tool calls repeated earlier ones, so the search is over."
DONE = "Your last tool call repeated an earlier one after your search was done, so the search is over."
# The JSON protocol offers at most this many photo ids (the best seen) to its grammar.
MAX_GRAMMAR_IDS = 200
CALL_FORM_TEXT = '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
CALL_FORM_JSON = 'one JSON object: {"thought": "...", "tool": "<tool name>", "arguments": {...}}'


@dataclass
class ProtocolSettings:
    """What every protocol needs from the runtime's settings."""

    max_tokens: int = 1024
    temperature: float | None = None
    compact: bool = False  # the short tool list (signatures, one example call each) instead of full schemas
    worked_example: dict[str, Any] | None = None
    known_ids: Container[str] | None = None  # the ids an answer may name (the album); None: any
    one_tool_per_step: bool = True  # native calls ask for parallel_tool_calls=false (the runtime runs the first)


@dataclass
class Reply:
    """A model reply as read by a protocol: the reasoning, the calls (or an answer: None when none was
    given), the path the calls took and the assistant message that goes into the history."""

    reasoning: str
    calls: list[ToolCall]
    answer: list[str] | None
    path: CallPath
    message: Message


class TurnProtocol(ABC):
    """One way of offering tools and reading replies (see the module doc)."""

    mode: Mode
    # How a tool call must be written (the error for an unreadable call says so).
    call_form: str = CALL_FORM_TEXT

    def __init__(self, tools: Sequence[Tool], system_prompt: str, settings: ProtocolSettings,
                 guards: Guards | None = None) -> None:
        self.tools = list(tools)
        self.system_prompt = system_prompt
        self.settings = settings
        self.guards = guards or Guards()
        self.tool_names = [t.name for t in self.tools]

    # ------------------------------------------------------------------ offering a turn
    @property
    def shows_example(self) -> bool:
        """Whether the system message shows the worked example (the guards then watch its dates)."""
        return False

    def system_message(self) -> Message:
        return Message.system(self.system_prompt)

    def params(self, state: AgentState | None = None, final: bool = False) -> ChatParams:
        """The chat parameters of the next call (``final``: the last call, without tools)."""
        return ChatParams(max_tokens=self.settings.max_tokens, temperature=self.settings.temperature)

    # ------------------------------------------------------------------ reading a reply
    def read(self, resp: ChatResponse) -> Reply:
        """The reply's calls or answer; native ``tool_calls`` count whatever the protocol."""
        if resp.tool_calls:
            calls = native_tool_calls(resp.tool_calls)
            raw = [{"id": c.id, "name": c.name, "arguments": str(r.get("arguments") or "{}")}
                   for c, r in zip(calls, resp.tool_calls, strict=True)]
            return Reply(strip_tool_calls(resp.text), calls, None, "native",
                         Message.assistant(resp.text, tool_calls=raw))
        return self.read_text(resp.text)

    def read_text(self, text: str) -> Reply:
        """A reply without native calls: ``<tool_call>`` blocks, else the final answer."""
        calls = parse_tool_calls(text, tool_names=self.tool_names)
        if calls:
            return Reply(strip_tool_calls(text), calls, None, "text", Message.assistant(text))
        return Reply(strip_tool_calls(text), [], parse_final_answer(text), "none", Message.assistant(text))

    def result_messages(self, reply: Reply, results: Sequence[CallResult]) -> list[Message]:
        """The messages that bring the calls' results (and any photos shown) back to the model: tool messages
        for native calls, one ``<tool_response>`` user message otherwise."""
        images: list[tuple[str, ImagePart]] = []
        if reply.path == "native":
            out = [Message.tool(c.id, obs.text) for c, obs in results]
            for _, obs in results:
                images += obs.images
            if images:
                out.append(Message("user", ["The photos you asked to view, each with its id:",
                                            *image_parts(images)]))
            return out
        parts: list[str | ImagePart] = []
        for c, obs in results:
            parts.append(format_tool_response(c.name or "unreadable call", obs.text) + "\n")
            images += obs.images
        if images:
            parts += image_parts(images)
        return [Message("user", parts)]

    # ------------------------------------------------------------------ the last call
    def budget_spent(self, params: ChatParams, n: int, stuck: int = 0, done: bool = False,
                     reminder: str = "", often: int = 0) -> Message:
        """The request for an answer now, without tools, after ``n`` turns (``stuck``: after that many turns in
        a row that only repeated earlier calls; ``often``: after that many repeated calls in the run; ``done``:
        after a repeated call once a hook judged the search done), with a hook's ``reminder`` of what the search
        came to."""
        spent = BUDGET_SPENT_JSON if params.json_schema is not None else BUDGET_SPENT
        why = (DONE if done else STUCK.format(k=stuck) if stuck else OFTEN.format(k=often) if often
               else SPENT.format(n=n))
        return Message.user(spent.format(why=f"{why} {reminder}" if reminder else why))

    @staticmethod
    def read_final(params: ChatParams, text: str) -> tuple[str, list[str] | None]:
        """The last call's reasoning and answer ids."""
        if params.json_schema is not None:
            reasoning, _, ids = parse_json_turn(text)
            return reasoning, ids
        return strip_tool_calls(text), parse_final_answer(text)

    def known(self, image_id: str) -> bool:
        known = self.settings.known_ids
        return known is None or image_id in known


class NativeProtocol(TurnProtocol):
    """The tools as OpenAI ``tools``; the backend returns ``tool_calls`` (vLLM, llama.cpp server, OpenAI)."""

    mode: Mode = "native"

    def params(self, state: AgentState | None = None, final: bool = False) -> ChatParams:
        p = super().params(state, final)
        if self.tools:
            p.tools = tools_as_openai(self.tools)
            p.tool_choice = "none" if final else "auto"
            if self.settings.one_tool_per_step and not final:
                p.parallel_tool_calls = False
        return p


class TextProtocol(TurnProtocol):
    """The tools described in the system prompt; the model writes ``<tool_call>`` blocks."""

    mode: Mode = "text"

    @property
    def shows_example(self) -> bool:
        return bool(self.settings.worked_example) and self.settings.compact

    def system_message(self) -> Message:
        if not self.tools:
            return super().system_message()
        if self.settings.compact:
            example = render_worked_example(self.settings.worked_example, "text") if self.settings.worked_example \
                else ""
            section = text_protocol_prompt_compact(self.tools, example)
        else:
            section = text_protocol_prompt(self.tools)
        return Message.system(f"{self.system_prompt.rstrip()}\n\n{section}")


class JsonProtocol(TurnProtocol):
    """Every reply one JSON object decoded under a grammar built from the state each turn."""

    mode: Mode = "json"
    call_form = CALL_FORM_JSON

    @property
    def shows_example(self) -> bool:
        return bool(self.settings.worked_example)

    def system_message(self) -> Message:
        if not self.tools:
            return super().system_message()
        example = render_worked_example(self.settings.worked_example, "json") if self.settings.worked_example else ""
        return Message.system(f"{self.system_prompt.rstrip()}\n\n{json_protocol_prompt(self.tools, example)}")

    def params(self, state: AgentState | None = None, final: bool = False) -> ChatParams:
        p = super().params(state, final)
        if state is None:
            return p
        ids = [i for i in state.best_candidates(MAX_GRAMMAR_IDS) if self.known(i)]
        blocked = self.guards.blocked_tools(state)
        free = [t for t in self.tools if t.name not in blocked] or ([] if ids else self.tools)
        tools = free
        nxt = state.next_call if not final else None
        named = [t for t in self.tools if nxt is not None and t.name == nxt.tool]
        if named:  # a hook named the call to make (an answer sent back, a model circling): offer only it
            tools = named
        # After an answer was sent back for more retrieval, the next reply must be a call (a new round); after one
        # sent back to be revised from what was found (``answer_next``), an answer.
        answer_allowed = final or state.answer_next or not ((state.retrieval_round or named) and tools)
        try:
            p.json_schema = json_turn_schema(tools, ids, list(state.subsets),
                                             tools_allowed=not (final or state.answer_next),
                                             answer_allowed=answer_allowed, used=state.guards.ids_used,
                                             fixed=nxt.arguments if named and nxt is not None else None)
        except ValueError:
            try:  # the named call cannot be made (e.g. no photo to name yet): any call, as without it
                p.json_schema = json_turn_schema(free, ids, list(state.subsets), tools_allowed=not final,
                                                 answer_allowed=answer_allowed, used=state.guards.ids_used)
            except ValueError:  # the budget is spent and nothing was seen: a plain reply (the fall-back answers)
                return p
        p.repeat_penalty = 1.1  # with bounded strings: what keeps a small model out of loops (models README)
        return p

    def read_text(self, text: str) -> Reply:
        thought, calls, answer = parse_json_turn(text)
        if not calls:
            return Reply(thought, [], answer, "none", Message.assistant(text))
        return Reply(thought, calls, None, "json", Message.assistant(text))


PROTOCOLS: dict[str, type[TurnProtocol]] = {"native": NativeProtocol, "text": TextProtocol, "json": JsonProtocol}


def make_protocol(mode: Mode, tools: Sequence[Tool], system_prompt: str, settings: ProtocolSettings,
                  guards: Guards | None = None) -> TurnProtocol:
    """The protocol class for ``mode`` ("native", "text" or "json")."""
    return PROTOCOLS[mode](tools, system_prompt, settings, guards)


def image_parts(images: Sequence[tuple[str, ImagePart]]) -> list[str | ImagePart]:
    """Photos as message parts, each preceded by its id."""
    parts: list[str | ImagePart] = []
    for pid, part in images:
        parts += [f"\nPhoto ID {pid}: ", part]
    return parts


__all__ = [
    "ANSWER_FORMAT",
    "BUDGET_SPENT",
    "BUDGET_SPENT_JSON",
    "DONE",
    "MAX_GRAMMAR_IDS",
    "OFTEN",
    "PROTOCOLS",
    "SPENT",
    "STUCK",
    "JsonProtocol",
    "NativeProtocol",
    "ProtocolSettings",
    "Reply",
    "TextProtocol",
    "TurnProtocol",
    "image_parts",
    "make_protocol",
]
