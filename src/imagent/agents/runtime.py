"""The tool-calling loop every agentic method stands on (PhotoCraft, ImageSeeker, OSCAR's planner).

One turn is one model call: the model reasons and either calls tools or answers. Tools are offered as
OpenAI ``tools`` and called through native ``tool_calls`` where the backend returns them, else through
the ``<tool_call>`` text protocol, or (``tool_mode="json"``, the default for the in-process llama.cpp
backend, whose small local models never managed the free-text protocol) through grammar-constrained JSON
replies (:mod:`imagent.agents.protocol`); each turn's trace step says which protocol was offered
(``protocol``) and which path a call took (``path``). With ``search_first`` an answer given before any
tool returned a photo is sent back once with the request to search first (the papers' agent always
searches before it answers; the JSON protocol enforces it by its grammar). A tool's error goes back to
the model as the observation (it may correct the call); it never ends the loop. After ``max_turns``
turns (30, the paper's budget, A.2.2) the model is told to answer now, in one last call without tools.

Photos a tool shows (``ViewPhotos``) reach the model as a user message with each photo's id written
beside its image: OpenAI tool messages carry text only. A blind model gets each photo's text surrogate
instead (captions, date, place): the role converts image parts in caption mode.

The answer is parsed from ``The final answer is: ["id", ...]``, kept to ids the album knows, and never
empty: when the model gives no usable answer (budget spent, unknown ids twice, a failed model call), the
best candidates the tools returned stand in (highest retrieval score first), and the run records why.

Memories plug in as :class:`AgentHooks`: ``on_start`` (inject a skill), ``before_turn`` (compress the
context), ``after_turn``, ``before_answer`` (an audit: feedback text rejects the answer and the loop
goes on) and ``on_finish`` (distil a skill). Every turn is a trace step ``turn.<n>`` with outputs
``reasoning, tool, arguments, observation, photos, path`` (and ``calls`` with each call in full); the
role records its model call (tokens, seconds) into the open step, the runtime each tool call.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from imagent.agents.protocol import (
    ToolCall,
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
from imagent.agents.tools import Observation, Tool, ToolError
from imagent.core.trace import CallRecord, SearchCancelled, Trace, current_trace, record_call
from imagent.models.base import ChatError, ChatParams, ChatResponse, ImagePart, Message
from imagent.models.roles import MODEL_CALL_FAILED, CallBudgetExceeded, Role

ToolMode = Literal["auto", "native", "text", "json"]
Mode = Literal["native", "text", "json"]
CallPath = Literal["native", "text", "json", "none"]

# Paper defaults (A.2.2): 30 interaction turns, then the agent must answer.
DEFAULT_MAX_TURNS = 30

ANSWER_FORMAT = 'The final answer is: ["<photo id>", "<photo id>", ...]'
NUDGE = ("You neither called a tool nor gave a final answer. Call a tool, or give your final answer "
         f"exactly as: {ANSWER_FORMAT}")
BUDGET_SPENT = ("You have used all {n} turns. Do not call any more tools. Based on what you found, give your "
                f"final answer now, exactly as: {ANSWER_FORMAT}")
BUDGET_SPENT_JSON = ("You have used all {n} turns. Do not call any more tools. Based on what you found, give your "
                     'final answer now: {{"thought": "...", "final_answer": ["<photo id>", ...]}}')
REPEATED = "Error: the same {tool} call as in turn {turn}; its result is above. Use that result now."
COPIED = ("Error: {values} {verb} from the worked example in the instructions, not from this album. Read the date "
          "from this album's photos (find the photo the question refers to, then read its metadata) and use that.")
# Dates as tools print and take them.
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
SEARCH_FIRST = ("Do not answer yet: photo ids come only from tool results. Call a tool first (start with "
                "ImageSearch and a few keywords), then answer from what it returns.")
# The JSON protocol offers at most this many photo ids (the best seen) to its grammar.
MAX_GRAMMAR_IDS = 200
ONE_TOOL_PER_STEP = ("Not run: one tool per step. Only the first call of a reply runs ({first}); this {tool} call was "
                    "not made. Read the result above, then call the next tool in your next reply if you still need it.")
NOT_IN_ALBUM = ("Your final answer must list photo ids from the album and must not be empty. {detail}Use the "
                f"ids your tools returned, exactly as: {ANSWER_FORMAT}")


# --------------------------------------------------------------------------- state


@dataclass
class TurnRecord:
    """One turn: what the model said, which calls it made and what came back."""

    n: int
    path: CallPath
    reasoning: str = ""
    calls: list[tuple[ToolCall, Observation]] = field(default_factory=list)
    answer: list[str] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class AgentState:
    """Everything the loop, its tools and its hooks share during one run.

    ``subsets`` holds named id lists (``FilterMetadata(save_as=...)``, used by ``search_within``) so
    hundreds of ids need not pass through the context. ``candidates`` keeps the best retrieval score
    seen per photo (the never-empty fall-back). ``extra`` is free space for hooks and tools (a memory's
    own state). Hooks may edit ``messages`` in ``before_turn``; a tool that must rewrite the history
    (a condense tool) registers the rewrite with :meth:`defer`, applied once the turn's messages are in."""

    query: str
    trace: Trace
    messages: list[Message] = field(default_factory=list)
    subsets: dict[str, list[str]] = field(default_factory=dict)
    candidates: dict[str, float] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    viewed: list[str] = field(default_factory=list)
    turn: int = 0
    max_turns: int = DEFAULT_MAX_TURNS
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_prompt_tokens: int = 0  # the size of the latest prompt: what a context-compression hook watches
    turns: list[TurnRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    _deferred: list[Callable[[list[Message]], list[Message]]] = field(default_factory=list, repr=False)

    @property
    def turns_left(self) -> int:
        return max(0, self.max_turns - self.turn)

    def add_candidates(self, ids: Sequence[str], scores: dict[str, float] | None = None) -> None:
        """Remember photos a tool returned; a photo keeps the best score it was given."""
        scores = scores or {}
        for i in ids:
            if i not in self.candidates:
                self.seen.append(i)
                self.candidates[i] = float("-inf")
            if i in scores:
                self.candidates[i] = max(self.candidates[i], float(scores[i]))

    def best_candidates(self, k: int) -> list[str]:
        """The ``k`` best photos seen: by best score, then by when first seen."""
        order = {i: n for n, i in enumerate(self.seen)}
        return sorted(self.seen, key=lambda i: (-self.candidates[i], order[i]))[:k]

    def save_subset(self, name: str, ids: Sequence[str]) -> None:
        self.subsets[name.strip()] = list(ids)

    def subset(self, name: str) -> list[str]:
        """A saved subset; :class:`ToolError` naming the saved ones when it does not exist."""
        key = name.strip()
        if key not in self.subsets:
            have = ", ".join(repr(k) for k in self.subsets) or "none yet (FilterMetadata with save_as makes one)"
            raise ToolError(f"no saved subset named {name!r}; saved subsets: {have}")
        return self.subsets[key]

    def defer(self, rewrite: Callable[[list[Message]], list[Message]]) -> None:
        """Rewrite the history at the end of this turn (after the turn's own messages are appended)."""
        self._deferred.append(rewrite)


class AgentHooks:
    """Hook points of the loop; memories subclass this and override what they need (all no-ops here)."""

    def on_start(self, state: AgentState) -> None:
        """After the system and user messages are in, before the first turn (e.g. inject a skill)."""

    def before_turn(self, state: AgentState) -> None:
        """Before each model call (e.g. compress the context when ``state.last_prompt_tokens`` nears a limit)."""

    def after_turn(self, state: AgentState, turn: TurnRecord) -> None:
        """After a turn's messages are in the history."""

    def before_answer(self, state: AgentState, answer: list[str]) -> str | Message | None:
        """The model proposes ``answer`` (album ids). Return None to accept it, or feedback (text or a
        whole user message, e.g. with the proposed photos reloaded) to reject it and go on."""
        return None

    def on_finish(self, state: AgentState, run: AgentRun) -> None:
        """After the answer is settled (e.g. distil a skill from the trajectory)."""


@dataclass
class AgentRun:
    """The outcome of one run. ``source``: "model" (the model's answer) or "fallback" (best candidates
    seen); ``reason`` says why in words; ``dropped`` lists proposed ids the album does not have."""

    answer: list[str]
    source: Literal["model", "fallback"]
    reason: str
    turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    paths: dict[str, int]
    dropped: list[str]
    state: AgentState

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {"answer": list(self.answer), "source": self.source, "reason": self.reason, "turns": self.turns,
                "tool_calls": self.tool_calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "seconds": round(self.seconds, 3),
                "paths": dict(self.paths), "dropped": list(self.dropped)}


# --------------------------------------------------------------------------- the loop


def _norm_name(name: str) -> str:
    """Tool names as models write them: ``ImageSearchTool``, ``image_search``, ``imagesearch``."""
    n = "".join(ch for ch in name.lower() if ch.isalnum())
    return n.removesuffix("tool") or n


class AgentRuntime:
    """Run a tool-using agent over a role.

    - ``tools``: the tools offered (names must be unique);
    - ``system_prompt``: the method's prompt; in text mode the tool section is appended to it;
    - ``tool_mode``: ``auto`` (native when the backend's ``supports_tools``, else text), ``native``, ``text``;
    - ``known_ids``: the ids an answer may contain (the album); None accepts any id;
    - ``fallback_k``: how many best candidates stand in for a missing answer;
    - ``fallback``: called when no candidate was seen at all (e.g. a plain search for the query);
    - ``answer_retries``: how often an empty or unknown-ids answer is sent back before falling back;
    - ``search_first``: an answer before any tool returned a photo is sent back once (text and native paths);
    - ``loop_guard``: in the JSON protocol, a tool called in each of the last ``loop_guard`` turns is left out
      of the next turn's grammar (0: never), as is a tool whose last call repeated an earlier one exactly;
    - ``compact_prompt``: the short tool list (signatures, one example call each) instead of full JSON
      Schemas; None: compact for the JSON protocol and for in-process llama.cpp models;
    - ``one_tool_per_step``: the paper's ReAct step, one tool call per turn: native calls ask the backend for
      ``parallel_tool_calls=false``, and on every protocol a reply's calls after its first are not run, each
      answered with an observation saying so (:data:`ONE_TOOL_PER_STEP`, counted ``agent.extra_calls_refused``);
    - ``worked_example``: one worked example for the compact prompt, written in the protocol's own turns
      (:func:`~imagent.agents.protocol.render_worked_example`). Where it is shown, a tool call with one of the
      example's dates that neither the request nor any tool result so far holds (nor a day beside one they
      hold) is refused with an error that says so: small models copy the example's date instead of reading
      the anchor photo's (Qwen 0.5B on the album benchmark: 5 of 73 filter calls); counted, not run.
    """

    def __init__(
        self,
        role: Role,
        tools: Sequence[Tool],
        system_prompt: str,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        hooks: Sequence[AgentHooks] = (),
        tool_mode: ToolMode = "auto",
        known_ids: Container[str] | None = None,
        fallback_k: int = 5,
        fallback: Callable[[AgentState], list[str]] | None = None,
        answer_retries: int = 1,
        max_tokens: int = 1024,
        temperature: float | None = None,
        search_first: bool = False,
        loop_guard: int = 3,
        compact_prompt: bool | None = None,
        worked_example: dict[str, Any] | None = None,
        one_tool_per_step: bool = True,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if tool_mode not in ("auto", "native", "text", "json"):
            raise ValueError(f"tool_mode must be auto, native, text or json, not {tool_mode!r}")
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique: {names}")
        self.role = role
        self.tools = list(tools)
        self._by_name = {t.name: t for t in tools}
        self._by_norm = {_norm_name(t.name): t for t in tools}
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.hooks = list(hooks)
        self.tool_mode = tool_mode
        self.known_ids = known_ids
        self.fallback_k = fallback_k
        self.fallback = fallback
        self.answer_retries = answer_retries
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.search_first = search_first
        self.loop_guard = loop_guard
        self.compact_prompt = compact_prompt
        self.worked_example = worked_example
        self.one_tool_per_step = one_tool_per_step

    # ------------------------------------------------------------------ set-up
    def resolve_mode(self) -> Mode:
        """``auto``: native tool calls when the backend has them; the JSON protocol for the in-process llama.cpp
        backend (small local models; its grammars make every reply a well-formed call or answer); else text."""
        if self.tool_mode != "auto":
            return self.tool_mode
        model = self.role.model
        if getattr(model, "supports_tools", False):
            return "native"
        return "json" if getattr(model, "backend", "") == "llama.cpp" and self.tools else "text"

    def _compact(self, mode: str) -> bool:
        if self.compact_prompt is not None:
            return self.compact_prompt
        return mode == "json" or getattr(self.role.model, "backend", "") == "llama.cpp"

    def system_message(self, mode: str) -> Message:
        if not self.tools or mode == "native":
            return Message.system(self.system_prompt)
        example = render_worked_example(self.worked_example, mode) if self.worked_example else ""
        if mode == "json":
            section = json_protocol_prompt(self.tools, example)
        elif self._compact(mode):
            section = text_protocol_prompt_compact(self.tools, example)
        else:
            section = text_protocol_prompt(self.tools)
        return Message.system(f"{self.system_prompt.rstrip()}\n\n{section}")

    def _params(self, mode: str, state: AgentState | None = None, final: bool = False) -> ChatParams:
        p = ChatParams(max_tokens=self.max_tokens, temperature=self.temperature)
        if mode == "native" and self.tools:
            p.tools = tools_as_openai(self.tools)
            p.tool_choice = "none" if final else "auto"
            if self.one_tool_per_step and not final:
                p.parallel_tool_calls = False
        if mode == "json" and state is not None:
            ids = [i for i in state.best_candidates(MAX_GRAMMAR_IDS) if self._known(i)]
            # Loop breakers for small models: a tool whose call was just refused as a repeat, or that the model
            # called in each of the last ``loop_guard`` turns, is left out of the next turn's grammar.
            blocked = set(state.extra.pop("blocked_tools", set()))
            last = [t.calls[0][0].name if len(t.calls) == 1 else None for t in state.turns[-self.loop_guard:]]
            if self.loop_guard and len(last) == self.loop_guard and last[0] and len(set(last)) == 1:
                blocked.add(last[0])
            tools = [t for t in self.tools if t.name not in blocked] or ([] if ids else self.tools)
            try:
                p.json_schema = json_turn_schema(tools, ids, list(state.subsets), tools_allowed=not final,
                                                 answer_allowed=True, used=state.extra.get("ids_used"))
            except ValueError:  # the budget is spent and nothing was seen: a plain reply (the fall-back answers)
                return p
            p.repeat_penalty = 1.1  # with bounded strings: what keeps a small model out of loops (models README)
        return p

    def find_tool(self, name: str) -> Tool | None:
        return self._by_name.get(name) or self._by_norm.get(_norm_name(name))

    # ------------------------------------------------------------------ run
    def run(self, user_message: str | Message, *, state: AgentState | None = None) -> AgentRun:
        """Run the loop on one request and settle an answer (never raises for a model's mistakes;
        :class:`~imagent.core.trace.SearchCancelled` propagates)."""
        trace = current_trace() or Trace()
        msg = Message.user(user_message) if isinstance(user_message, str) else user_message
        if state is None:
            state = AgentState(query=msg.text, trace=trace)
        state.max_turns = self.max_turns
        mode = self.resolve_mode()
        state.messages = [self.system_message(mode), msg]
        state.extra["protocol"] = mode
        shown = bool(self.worked_example) and mode != "native" and (mode == "json" or self._compact(mode))
        state.extra["example_dates"] = _dates(json.dumps(self.worked_example)) if shown else set()
        state.extra["seen_dates"] = _dates(msg.text)
        paths: dict[str, int] = {}
        t0 = time.perf_counter()
        for h in self.hooks:
            h.on_start(state)

        answer: list[str] | None = None
        reason = ""
        dropped: list[str] = []
        retries = self.answer_retries
        search_nudged = not self.search_first
        try:
            while state.turn < self.max_turns and answer is None:
                for h in self.hooks:
                    h.before_turn(state)
                state.turn += 1
                with trace.step(f"turn.{state.turn}", turn=state.turn, protocol=mode) as step:
                    t_turn = time.perf_counter()
                    resp, mode = self._call(state, mode)
                    turn = self._turn(state, resp, mode)
                    paths[turn.path] = paths.get(turn.path, 0) + 1
                    outputs = self._turn_outputs(turn)
                    outputs["protocol"] = mode
                    if turn.answer is not None and not turn.calls and not state.seen and not search_nudged:
                        search_nudged = True
                        outputs["answer"] = turn.answer
                        state.messages.append(Message.user(SEARCH_FIRST))
                        outputs["feedback"] = SEARCH_FIRST
                    elif turn.answer is not None and not turn.calls:
                        answer, reason, retries = self._consider_answer(state, turn.answer, outputs, dropped, retries)
                    elif turn.answer is None and not turn.calls:
                        state.messages.append(Message.user(NUDGE))
                        outputs["feedback"] = NUDGE
                    turn.seconds = time.perf_counter() - t_turn
                    step.outputs = outputs
                self._apply_deferred(state)
                for h in self.hooks:
                    h.after_turn(state, turn)
            if answer is None:
                answer, reason = self._final_call(state, mode, paths, dropped)
        except ChatError as exc:
            reason = f"the model call failed ({exc})"
            answer = None
            if not isinstance(exc, CallBudgetExceeded):  # the cap counts its refusals itself
                trace.count(MODEL_CALL_FAILED)  # the fall-back below stands in: the search is an error
        source: Literal["model", "fallback"] = "model"
        if not answer:
            answer = self._fallback_answer(state)
            why = reason or "no answer"
            reason = (f"fallback: {why}; answered with the {len(answer)} best candidate(s) seen"
                      if answer else f"fallback: {why}; no candidate was seen, so the answer is empty")
            source = "fallback"
            with trace.step("answer.fallback", reason=why) as step:
                step.outputs = {"answer": answer, "reason": reason}
                step.note(reason)
        run = AgentRun(answer=answer, source=source, reason=reason, turns=state.turn, tool_calls=state.tool_calls,
                       prompt_tokens=state.prompt_tokens, completion_tokens=state.completion_tokens,
                       seconds=time.perf_counter() - t0, paths=paths, dropped=dropped, state=state)
        for h in self.hooks:
            h.on_finish(state, run)
        return run

    # ------------------------------------------------------------------ pieces
    def _consider_answer(self, state: AgentState, proposed: list[str], outputs: dict[str, Any], dropped: list[str],
                         retries: int) -> tuple[list[str] | None, str, int]:
        """A proposed answer: ``(answer, reason, retries left)``; answer None means the loop goes on (the
        model was told why), ``[]`` that no usable answer can come (the fallback answers)."""
        valid, bad = self._keep_known(proposed)
        dropped += bad
        outputs["answer"] = proposed
        if bad:
            outputs["dropped"] = bad
        feedback: str | Message | None = None
        if not valid and retries > 0:
            retries -= 1
            detail = f"These ids are not in the album: {', '.join(bad)}. " if bad else "The list was empty. "
            feedback = NOT_IN_ALBUM.format(detail=detail)
        elif valid and state.turns_left > 0:  # with no turn left, feedback could not be acted on: accept
            for h in self.hooks:
                feedback = h.before_answer(state, valid)
                if feedback is not None:
                    outputs["rejected_by"] = type(h).__name__
                    break
        if feedback is not None:
            fb = feedback if isinstance(feedback, Message) else Message.user(feedback)
            state.messages.append(fb)
            outputs["feedback"] = fb.text
            return None, "", retries
        if valid:
            return valid, "the model's final answer", retries
        outputs["feedback"] = "no usable answer; falling back"
        return [], "the model's answer named no photo in the album", retries

    def _call(self, state: AgentState, mode: Mode) -> tuple[ChatResponse, Mode]:
        """One model call. In auto mode a backend that refuses ``tools`` on the first call is asked again
        in the text protocol, which the rest of the run then uses."""
        try:
            resp = self.role.chat(state.messages, self._params(mode, state))
        except ChatError as exc:
            if isinstance(exc, CallBudgetExceeded) or not (self.tool_mode == "auto" and mode == "native"
                                                           and state.turn == 1):
                raise
            from imagent.core.trace import note

            note(f"the backend refused native tool calls ({exc}); using the <tool_call> text protocol")
            mode = "text"
            state.messages[0] = self.system_message(mode)
            resp = self.role.chat(state.messages, self._params(mode, state))
        state.prompt_tokens += resp.prompt_tokens
        state.completion_tokens += resp.completion_tokens
        state.last_prompt_tokens = resp.prompt_tokens
        return resp, mode

    def _turn(self, state: AgentState, resp: ChatResponse, mode: str) -> TurnRecord:
        """Read the reply, run its tool calls and append the messages they produce."""
        turn = TurnRecord(n=state.turn, path="none", reasoning=strip_tool_calls(resp.text),
                          prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens)
        state.turns.append(turn)
        if resp.tool_calls:
            turn.path = "native"
            calls = native_tool_calls(resp.tool_calls)
            raw = [{"id": c.id, "name": c.name, "arguments": str(r.get("arguments") or "{}")}
                   for c, r in zip(calls, resp.tool_calls, strict=True)]
            state.messages.append(Message.assistant(resp.text, tool_calls=raw))
            images: list[tuple[str, ImagePart]] = []
            for n, c in enumerate(calls):
                obs = self._run_call(c, n, calls[0], state)
                turn.calls.append((c, obs))
                state.messages.append(Message.tool(c.id, obs.text))
                images += obs.images
            if images:
                state.messages.append(self._images_message(images))
            return turn
        if mode == "json":
            thought, calls, answer = parse_json_turn(resp.text)
            turn.reasoning = thought
            if not calls:
                state.messages.append(Message.assistant(resp.text))
                turn.answer = answer
                return turn
        else:
            calls = parse_tool_calls(resp.text, tool_names=list(self._by_name))
        state.messages.append(Message.assistant(resp.text))
        if calls:
            turn.path = "json" if mode == "json" else "text"
            parts: list[str | ImagePart] = []
            images = []
            for n, c in enumerate(calls):
                obs = self._run_call(c, n, calls[0], state)
                turn.calls.append((c, obs))
                parts.append(format_tool_response(c.name or "unreadable call", obs.text) + "\n")
                images += obs.images
            if images:
                parts += self._image_parts(images)
            state.messages.append(Message("user", parts))
            return turn
        turn.answer = parse_final_answer(resp.text)
        return turn

    def _run_call(self, call: ToolCall, n: int, first: ToolCall, state: AgentState) -> Observation:
        """Call ``n`` (0-based) of one reply: run it, or refuse it when it is not the first (one tool per step)."""
        return self._execute(call, state) if n == 0 or not self.one_tool_per_step else self._refuse(call, first, state)

    @staticmethod
    def _refuse(call: ToolCall, first: ToolCall, state: AgentState) -> Observation:
        """A call after the first of one reply: not run (one tool per step), the model is told so."""
        state.trace.count("agent.extra_calls_refused")
        name = call.name or "unreadable call"
        return Observation(ONE_TOOL_PER_STEP.format(tool=name, first=first.name or "the first call"), error=True,
                           summary=f"{name} not run: one tool per step")

    def _execute(self, call: ToolCall, state: AgentState) -> Observation:
        """Run one call; every failure becomes an error observation for the model."""
        t0 = time.perf_counter()
        error: str | None = None
        tool = self.find_tool(call.name) if call.name else None
        if call.error:
            form = ('one JSON object: {"thought": "...", "tool": "<tool name>", "arguments": {...}}'
                    if state.extra.get("protocol") == "json"
                    else '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>')
            obs = Observation(f"Error: your tool call could not be read: {call.error}. Write it as {form}", error=True)
            error = call.error
        elif tool is None:
            names = ", ".join(t.name for t in self.tools) or "none"
            obs = Observation(f"Error: there is no tool named {call.name!r}. Available tools: {names}.", error=True)
            error = f"unknown tool {call.name!r}"
        elif copied := self._copied_dates(call, state):
            obs = Observation(COPIED.format(values=" and ".join(f"'{d}'" for d in copied),
                                            verb="is" if len(copied) == 1 else "are"), error=True)
            error = "date copied from the worked example"
            state.trace.count("agent.example_date_refused")
        elif (earlier := self._repeat_of(call, tool, state)) is not None:
            obs = Observation(REPEATED.format(tool=tool.name, turn=earlier), error=True)
            error = "repeated call"
            state.extra.setdefault("blocked_tools", set()).add(tool.name)
        else:
            call.name = tool.name
            used = state.extra.setdefault("ids_used", {}).setdefault(tool.name, set())
            for k in tool.id_params:
                v = call.arguments.get(k)
                used.update(str(i) for i in (v if isinstance(v, list) else [v] if v else []))
            try:
                obs = tool(call.arguments, state)
            except SearchCancelled:
                raise
            except ToolError as exc:
                error = str(exc)
                obs = Observation(f"Error: {exc}", error=True)
            except Exception as exc:  # a tool's bug must not end the search: the model hears of it, the trace too
                error = f"{type(exc).__name__}: {exc}"
                obs = Observation(f"Error: the tool {tool.name} failed ({error}).", error=True)
        state.tool_calls += 1
        if not obs.error:
            state.extra.setdefault("seen_dates", set()).update(_dates(obs.text))
        record_call(CallRecord("tool", call.name or "?", "agent", time.perf_counter() - t0, error=error))
        state.add_candidates(obs.photos, obs.scores)
        state.viewed += [i for i, _ in obs.images if i not in state.viewed]
        return obs

    @staticmethod
    def _copied_dates(call: ToolCall, state: AgentState) -> list[str]:
        """The worked example's dates in this call's arguments that nothing this run read holds: not the
        request, no tool result, and no day next to one of theirs (a day's end is written as the next day)."""
        example: set[date] = state.extra.get("example_dates") or set()
        if not example:
            return []
        seen: set[date] = state.extra.get("seen_dates") or set()
        used = _dates(json.dumps(call.arguments, ensure_ascii=False, default=str)) & example
        return sorted(d.isoformat() for d in used if not any(abs((d - s).days) <= 1 for s in seen))

    @staticmethod
    def _repeat_of(call: ToolCall, tool: Tool, state: AgentState) -> int | None:
        """The turn of an identical earlier call still in the history (None if there is none), and remember
        this one. A small model at temperature 0 tends to copy its last turn forever; the repeat is answered
        with an error instead of the same result (the history is append-only, so the result is still there).
        A context compression forgets the calls (their results may be gone)."""
        made: dict[str, int] = state.extra.setdefault("calls_made", {})
        key = json.dumps([tool.name, call.arguments], sort_keys=True, ensure_ascii=False, default=str)
        if key in made:
            return made[key]
        made[key] = state.turn
        return None

    @staticmethod
    def _image_parts(images: list[tuple[str, ImagePart]]) -> list[str | ImagePart]:
        parts: list[str | ImagePart] = []
        for pid, part in images:
            parts += [f"\nPhoto ID {pid}: ", part]
        return parts

    def _images_message(self, images: list[tuple[str, ImagePart]]) -> Message:
        return Message("user", ["The photos you asked to view, each with its id:", *self._image_parts(images)])

    def _known(self, image_id: str) -> bool:
        return self.known_ids is None or image_id in self.known_ids

    def _keep_known(self, ids: list[str]) -> tuple[list[str], list[str]]:
        return [i for i in ids if self._known(i)], [i for i in ids if not self._known(i)]

    def _final_call(self, state: AgentState, mode: Mode, paths: dict[str, int],
                    dropped: list[str]) -> tuple[list[str] | None, str]:
        """The budget is spent: one last call, without tools, for the answer."""
        n = state.turn = state.turn + 1
        params = self._params(mode, state, final=True)
        spent = BUDGET_SPENT_JSON if params.json_schema is not None else BUDGET_SPENT
        state.messages.append(Message.user(spent.format(n=self.max_turns)))
        with state.trace.step(f"turn.{n}", turn=n, final=True, protocol=mode) as step:
            resp = self.role.chat(state.messages, params)
            state.prompt_tokens += resp.prompt_tokens
            state.completion_tokens += resp.completion_tokens
            state.messages.append(Message.assistant(resp.text))
            if params.json_schema is not None:
                reasoning, _, ids = parse_json_turn(resp.text)
            else:
                reasoning, ids = strip_tool_calls(resp.text), parse_final_answer(resp.text)
            turn = TurnRecord(n=n, path="none", reasoning=reasoning, answer=ids,
                              prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens)
            state.turns.append(turn)
            paths["none"] = paths.get("none", 0) + 1
            outputs = self._turn_outputs(turn)
            outputs["final"] = True
            valid, bad = self._keep_known(ids or [])
            dropped += bad
            outputs["answer"] = ids
            if bad:
                outputs["dropped"] = bad
            step.outputs = outputs
        if valid:
            return valid, f"the model's final answer after the {self.max_turns}-turn budget"
        return None, f"the {self.max_turns}-turn budget was spent without a usable answer"

    def _fallback_answer(self, state: AgentState) -> list[str]:
        best = [i for i in state.best_candidates(len(state.seen)) if self._known(i)][: self.fallback_k]
        if not best and self.fallback is not None:
            best = self._keep_known(self.fallback(state))[0][: self.fallback_k]
        return best

    @staticmethod
    def _apply_deferred(state: AgentState) -> None:
        while state._deferred:
            state.messages = state._deferred.pop(0)(state.messages)

    @staticmethod
    def _turn_outputs(turn: TurnRecord) -> dict[str, Any]:
        """The trace step's outputs: flat fields for one call, ``calls`` for all of them."""
        calls = [{"tool": c.name, "arguments": c.arguments, "observation": o.short(), "photos": list(o.photos),
                  "error": o.error, **({"data": o.data} if o.data else {})} for c, o in turn.calls]
        photos: list[str] = []
        for c in calls:
            photos += [p for p in c["photos"] if p not in photos]
        out: dict[str, Any] = {
            "reasoning": turn.reasoning,
            "path": turn.path,
            "tool": ", ".join(c["tool"] for c in calls) if calls else None,
            "arguments": (calls[0]["arguments"] if len(calls) == 1 else [c["arguments"] for c in calls])
            if calls else None,
            "observation": "\n".join(c["observation"] for c in calls) if calls else None,
            "photos": photos,
        }
        if calls:
            out["calls"] = calls
        return out


__all__ = [
    "ANSWER_FORMAT",
    "DEFAULT_MAX_TURNS",
    "AgentHooks",
    "AgentRun",
    "AgentRuntime",
    "AgentState",
    "ToolMode",
    "TurnRecord",
]


def _dates(text: str) -> set[date]:
    """The calendar dates (YYYY-MM-DD) written in ``text``."""
    out = set()
    for y, m, d in _DATE.findall(text):
        try:
            out.add(date(int(y), int(m), int(d)))
        except ValueError:
            continue
    return out
