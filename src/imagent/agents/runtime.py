"""The tool-calling loop every agentic method stands on (PhotoCraft, ImageSeeker, OSCAR's planner)::

    runtime = AgentRuntime(role, tools, system_prompt, max_turns=30, hooks=[memory], known_ids=album)
    run = runtime.run("the dogs on the day I saw the lighthouse")   # AgentRun: answer, source, reason, state

One turn is one model call: the model reasons and either calls tools or answers. The turn is offered and read
by one protocol object (:mod:`imagent.agents.protocols`: native ``tool_calls``, the ``<tool_call>`` text
protocol, or grammar-constrained JSON replies, the default for the in-process llama.cpp backend); the
small-model guards (:mod:`imagent.agents.guards`) may refuse a call before it runs; everything the loop, the
tools and the hooks share is the typed :class:`~imagent.agents.state.AgentState`. A tool's error goes back to
the model as the observation; it never ends the loop. After ``max_turns`` turns the model is asked to answer
in one last call without tools; with ``search_first`` an answer given before any tool returned a photo is sent
back once; with ``one_tool_per_step`` a reply's calls after its first are not run.

The answer is parsed from ``The final answer is: ["id", ...]``, kept to the known ids (``known_ids``), and never
empty: when the model gives no usable answer (budget spent, unknown ids twice, a failed model call), the
best candidates the tools returned stand in (highest retrieval score first); the :class:`AgentRun` says how
the answer was obtained (``source``, ``forced``, ``reason``).

Memories plug in as :class:`AgentHooks`: ``on_start`` (inject a skill), ``before_turn`` (compress the
context), ``after_turn``, ``before_answer`` (an audit: feedback rejects the answer and the loop goes on) and
``on_finish`` (distil a skill); a hook keeps its own typed records in ``state.records``
(:class:`~imagent.agents.state.HookRecords`, by record type: the runtime knows none of them). Every turn is a trace
step ``turn.<n>`` with outputs ``reasoning, tool, arguments, observation, photos, path, protocol`` (and ``calls``
with each call in full); the role records its model call (tokens, seconds) into the open step, the runtime each tool
call. Where this differs from the papers' agent is in ``docs/faithfulness.md`` (PhotoCraft).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Container, Sequence
from typing import Any, Literal

from imagent.agents.guards import Guards
from imagent.agents.protocols import ANSWER_FORMAT, ProtocolSettings, Reply, TurnProtocol, make_protocol
from imagent.agents.state import (
    DEFAULT_MAX_TURNS,
    AgentRun,
    AgentState,
    AnswerSource,
    CallResult,
    Mode,
    Observation,
    ToolCall,
    ToolScope,
    TurnRecord,
)
from imagent.agents.tools import Tool, ToolError
from imagent.core.trace import CallRecord, SearchCancelled, Trace, current_trace, note, record_call
from imagent.models.base import ChatError, ChatResponse, Message
from imagent.models.roles import MODEL_CALL_FAILED, CallBudgetExceeded, Role

ToolMode = Literal["auto", "native", "text", "json"]

NUDGE = ("You neither called a tool nor gave a final answer. Call a tool, or give your final answer "
         f"exactly as: {ANSWER_FORMAT}")
SEARCH_FIRST = ("Do not answer yet: photo ids come only from tool results. Call a tool first (start with a "
                "search of a few keywords), then answer from what it returns.")
ONE_TOOL_PER_STEP = ("Not run: one tool per step. Only the first call of a reply runs ({first}); this {tool} call was "
                    "not made. Read the result above, then call the next tool in your next reply if you still need it.")
NOT_IN_ALBUM = ("Your final answer must list photo ids from the album and must not be empty. {detail}Use the "
                f"ids your tools returned, exactly as: {ANSWER_FORMAT}")


# --------------------------------------------------------------------------- hooks


class AgentHooks:
    """Hook points of the loop; memories subclass this and override what they need (all no-ops here)."""

    def on_start(self, state: AgentState) -> None:
        """After the system and user messages are in, before the first turn (e.g. inject a skill)."""

    def before_turn(self, state: AgentState) -> None:
        """Before each model call (e.g. compress the context when ``state.last_prompt_tokens`` nears a limit)."""

    def after_turn(self, state: AgentState, turn: TurnRecord) -> None:
        """After a turn's messages are in the history."""

    def before_answer(self, state: AgentState, answer: list[str]) -> str | Message | None:
        """The model proposes ``answer`` (known ids). Return None to accept it, or feedback (text or a
        whole user message, e.g. with the proposed photos reloaded) to reject it and go on."""
        return None

    def on_finish(self, state: AgentState, run: AgentRun) -> None:
        """After the answer is settled (e.g. distil a skill from the trajectory)."""


# --------------------------------------------------------------------------- the loop


def _norm_name(name: str) -> str:
    """Tool names as models write them: ``ImageSearchTool``, ``image_search``, ``imagesearch``."""
    n = "".join(ch for ch in name.lower() if ch.isalnum())
    return n.removesuffix("tool") or n


def resolve_tool_mode(tool_mode: ToolMode, role: Role, has_tools: bool = True) -> Mode:
    """``auto``: native tool calls when the role's backend has them; the JSON protocol for the in-process
    llama.cpp backend (small local models; its grammars make every reply a well-formed call or answer); else text.
    A method that builds small-model hooks asks this before it builds the runtime."""
    if tool_mode != "auto":
        return tool_mode
    model = role.model
    if getattr(model, "supports_tools", False):
        return "native"
    return "json" if getattr(model, "backend", "") == "llama.cpp" and has_tools else "text"


class AgentRuntime:
    """Run a tool-using agent over a role.

    - ``tools``: the tools offered (names must be unique);
    - ``system_prompt``: the method's prompt; in text mode the tool section is appended to it;
    - ``tool_mode``: ``auto`` (native when the backend's ``supports_tools``, JSON for the in-process llama.cpp
      backend, else text), ``native``, ``text``, ``json`` (:mod:`imagent.agents.protocols`);
    - ``known_ids``: the ids an answer may contain (e.g. an album's); None accepts any id;
    - ``fallback_k``: how many best candidates stand in for a missing answer;
    - ``fallback``: called when no candidate was seen at all (e.g. a plain search for the query);
    - ``answer_retries``: how often an empty or unknown-ids answer is sent back before falling back;
    - ``search_first``: an answer before any tool returned a photo is sent back once (text and native paths);
    - ``loop_guard``: in the JSON protocol, a tool called in each of the last ``loop_guard`` turns is left out
      of the next turn's grammar (0: never), as is a tool whose last call repeated an earlier one exactly
      (:mod:`imagent.agents.guards`);
    - ``stuck_after``: after that many turns in a row that each only repeated an earlier call, the agent is
      asked for its answer in one turn with no tools (0: never);
    - ``repeat_limit``: so is it once that many of its calls in the run were refused as repeats, in a row or not
      (0: no limit);
    - ``compact_prompt``: the short tool list (signatures, one example call each) instead of full JSON
      Schemas; None: compact for the JSON protocol and for in-process llama.cpp models;
    - ``one_tool_per_step``: the paper's ReAct step, one tool call per turn: native calls ask the backend for
      ``parallel_tool_calls=false``, and on every protocol a reply's calls after its first are not run, each
      answered with an observation saying so (:data:`ONE_TOOL_PER_STEP`, counted ``agent.extra_calls_refused``);
    - ``worked_example``: one worked example for the compact prompt, written in the protocol's own turns
      (:func:`~imagent.agents.wire.render_worked_example`); where it is shown, the guards refuse a call
      that copies one of its dates.
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
        stuck_after: int = 3,
        repeat_limit: int = 0,
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
        self.guards = Guards(loop_guard, stuck_after, repeat_limit)
        self.compact_prompt = compact_prompt
        self.worked_example = worked_example
        self.one_tool_per_step = one_tool_per_step

    @property
    def loop_guard(self) -> int:
        return self.guards.loop_guard

    # ------------------------------------------------------------------ set-up
    def resolve_mode(self) -> Mode:
        """The protocol this runtime speaks (:func:`resolve_tool_mode`)."""
        return resolve_tool_mode(self.tool_mode, self.role, bool(self.tools))

    def _compact(self, mode: str) -> bool:
        if self.compact_prompt is not None:
            return self.compact_prompt
        return mode == "json" or getattr(self.role.model, "backend", "") == "llama.cpp"

    def protocol(self, mode: Mode) -> TurnProtocol:
        """The protocol object for ``mode`` with this runtime's tools and settings."""
        settings = ProtocolSettings(max_tokens=self.max_tokens, temperature=self.temperature,
                                    compact=self._compact(mode), worked_example=self.worked_example,
                                    known_ids=self.known_ids, one_tool_per_step=self.one_tool_per_step)
        return make_protocol(mode, self.tools, self.system_prompt, settings, self.guards)

    def system_message(self, mode: Mode) -> Message:
        return self.protocol(mode).system_message()

    def find_tool(self, name: str) -> Tool | None:
        return self._by_name.get(name) or self._by_norm.get(_norm_name(name))

    # ------------------------------------------------------------------ run
    def run(self, user_message: str | Message, *, state: AgentState | None = None) -> AgentRun:
        """Run the loop on one request and settle an answer (never raises for a model's mistakes;
        :class:`~imagent.core.trace.SearchCancelled` propagates)."""
        trace = current_trace() or Trace()
        msg = Message.user(user_message) if isinstance(user_message, str) else user_message
        if state is None:
            state = AgentState(query=msg.text, trace=trace, scope=ToolScope(self.known_ids))
        state.max_turns = self.max_turns
        proto = self.protocol(self.resolve_mode())
        state.start([proto.system_message(), msg])
        state.protocol = proto.mode
        self.guards.start(state, msg.text, self.worked_example if proto.shows_example else None)
        paths: dict[str, int] = {}
        t0 = time.perf_counter()
        for h in self.hooks:
            h.on_start(state)

        answer: list[str] | None = None
        reason = ""
        forced = False
        dropped: list[str] = []
        retries = self.answer_retries
        search_nudged = not self.search_first
        try:
            while state.turn < self.max_turns and answer is None and not self.guards.stuck(state):
                for h in self.hooks:
                    h.before_turn(state)
                state.turn += 1
                with trace.step(f"turn.{state.turn}", turn=state.turn, protocol=proto.mode) as step:
                    t_turn = time.perf_counter()
                    resp, proto = self._call(state, proto)
                    state.answer_next = False  # the one answer-only turn a hook asked for was just taken
                    turn = self._turn(state, resp, proto)
                    if turn.calls:
                        state.retrieval_round = False
                        state.next_call = None
                    paths[turn.path] = paths.get(turn.path, 0) + 1
                    if turn.answer is not None and not turn.calls and not state.seen and not search_nudged:
                        search_nudged = True
                        self._feedback(state, turn, SEARCH_FIRST)
                    elif turn.answer is not None and not turn.calls:
                        answer, reason, retries = self._consider_answer(state, turn, dropped, retries)
                    elif turn.answer is None and not turn.calls:
                        self._feedback(state, turn, NUDGE)
                    turn.seconds = time.perf_counter() - t_turn
                    step.outputs = self._turn_outputs(turn, proto.mode)
                state.apply_rewrites()
                for h in self.hooks:
                    h.after_turn(state, turn)
            if answer is None:
                stuck = self.guards.stuck(state)
                if stuck:
                    trace.count("agent.stuck")
                answer, reason = self._final_call(state, proto, paths, dropped, stuck)
                forced = answer is not None
        except ChatError as exc:
            reason = f"the model call failed ({exc})"
            answer = None
            if not isinstance(exc, CallBudgetExceeded):  # the cap counts its refusals itself
                trace.count(MODEL_CALL_FAILED)  # the fall-back below stands in: the search is an error
        source: AnswerSource = "model"
        if not answer:
            forced = False
            answer = self._fallback_answer(state)
            why = reason or "no answer"
            what = (f"the {len(answer)} best candidate(s) seen" if state.seen
                    else f"{len(answer)} photo(s) of the method's fallback search (no candidate was seen)")
            reason = (f"fallback: {why}; answered with {what}"
                      if answer else f"fallback: {why}; no candidate was seen, so the answer is empty")
            source = "fallback"
            with trace.step("answer.fallback", reason=why) as step:
                step.outputs = {"answer": answer, "reason": reason}
                step.note(reason)
        run = AgentRun(answer=answer, source=source, reason=reason, turns=state.turn, tool_calls=state.tool_calls,
                       prompt_tokens=state.prompt_tokens, completion_tokens=state.completion_tokens,
                       seconds=time.perf_counter() - t0, paths=paths, dropped=dropped, state=state, forced=forced)
        for h in self.hooks:
            h.on_finish(state, run)
        return run

    # ------------------------------------------------------------------ pieces
    @staticmethod
    def _feedback(state: AgentState, turn: TurnRecord, feedback: str | Message) -> None:
        fb = feedback if isinstance(feedback, Message) else Message.user(feedback)
        state.add_message(fb)
        turn.feedback = fb.text

    def _consider_answer(self, state: AgentState, turn: TurnRecord, dropped: list[str],
                         retries: int) -> tuple[list[str] | None, str, int]:
        """A proposed answer: ``(answer, reason, retries left)``; answer None means the loop goes on (the
        model was told why), ``[]`` that no usable answer can come (the fallback answers)."""
        valid, bad = self._keep_known(turn.answer or [])
        dropped += bad
        turn.dropped = bad
        feedback: str | Message | None = None
        if not valid and retries > 0:
            retries -= 1
            detail = f"These ids are not in the album: {', '.join(bad)}. " if bad else "The list was empty. "
            feedback = NOT_IN_ALBUM.format(detail=detail)
        elif valid and state.turns_left > 0:  # with no turn left, feedback could not be acted on: accept
            for h in self.hooks:
                feedback = h.before_answer(state, valid)
                if feedback is not None:
                    turn.rejected_by = type(h).__name__
                    break
        if feedback is not None:
            # a hook asked for more retrieval, unless it asked for the answer revised from what was found
            state.retrieval_round = turn.rejected_by is not None and not state.answer_next
            if not state.retrieval_round:
                state.next_call = None
            self._feedback(state, turn, feedback)
            return None, "", retries
        if valid:
            return valid, "the model's final answer", retries
        turn.feedback = "no usable answer; falling back"
        return [], "the model's answer named no photo in the album", retries

    def _call(self, state: AgentState, proto: TurnProtocol) -> tuple[ChatResponse, TurnProtocol]:
        """One model call. In auto mode a backend that refuses ``tools`` on the first call is asked again
        in the text protocol, which the rest of the run then uses."""
        try:
            resp = self.role.chat(list(state.messages), proto.params(state))
        except ChatError as exc:
            if isinstance(exc, CallBudgetExceeded) or not (self.tool_mode == "auto" and proto.mode == "native"
                                                           and state.turn == 1):
                raise
            note(f"the backend refused native tool calls ({exc}); using the <tool_call> text protocol")
            proto = self.protocol("text")
            state.protocol = proto.mode
            state.set_system(proto.system_message())
            resp = self.role.chat(list(state.messages), proto.params(state))
        state.count_tokens(resp.prompt_tokens, resp.completion_tokens)
        return resp, proto

    def _turn(self, state: AgentState, resp: ChatResponse, proto: TurnProtocol) -> TurnRecord:
        """Read the reply, run its tool calls and append the messages they produce."""
        reply: Reply = proto.read(resp)
        turn = TurnRecord(n=state.turn, path=reply.path, reasoning=reply.reasoning, answer=reply.answer,
                          prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens)
        state.turns.append(turn)
        state.add_message(reply.message)
        if reply.calls:
            for n, c in enumerate(reply.calls):
                turn.calls.append(CallResult(c, self._run_call(c, n, reply.calls[0], state, proto)))
            for m in proto.result_messages(reply, turn.calls):
                state.add_message(m)
        return turn

    def _run_call(self, call: ToolCall, n: int, first: ToolCall, state: AgentState, proto: TurnProtocol) -> Observation:
        """Call ``n`` (0-based) of one reply: run it, or refuse it when it is not the first (one tool per step)."""
        if n == 0 or not self.one_tool_per_step:
            return self._execute(call, state, proto)
        return self._refuse(call, first, state)

    @staticmethod
    def _refuse(call: ToolCall, first: ToolCall, state: AgentState) -> Observation:
        """A call after the first of one reply: not run (one tool per step), the model is told so."""
        state.trace.count("agent.extra_calls_refused")
        name = call.name or "unreadable call"
        return Observation(ONE_TOOL_PER_STEP.format(tool=name, first=first.name or "the first call"), error=True,
                           summary=f"{name} not run: one tool per step")

    def _execute(self, call: ToolCall, state: AgentState, proto: TurnProtocol) -> Observation:
        """Run one call; every failure becomes an error observation for the model."""
        t0 = time.perf_counter()
        error: str | None = None
        tool = self.find_tool(call.name) if call.name else None
        if call.error:
            obs = Observation(f"Error: your tool call could not be read: {call.error}. Write it as {proto.call_form}",
                              error=True)
            error = call.error
        elif tool is None:
            names = ", ".join(t.name for t in self.tools) or "none"
            obs = Observation(f"Error: there is no tool named {call.name!r}. Available tools: {names}.", error=True)
            error = f"unknown tool {call.name!r}"
        elif (refusal := self.guards.refuse(call, tool, state)) is not None:
            obs, error = refusal
        else:
            call.name = tool.name
            self.guards.record_use(call, tool, state)
            state.tool_uses[tool.name] = state.tool_uses.get(tool.name, 0) + 1  # the call runs (or fails in the tool)
            try:
                obs = tool(call.arguments, state.scope)
            except SearchCancelled:
                raise
            except ToolError as exc:
                error = str(exc)
                obs = Observation(f"Error: {exc}", error=True)
            except Exception as exc:  # a tool's bug must not end the search: the model hears of it, the trace too
                error = f"{type(exc).__name__}: {exc}"
                obs = Observation(f"Error: the tool {tool.name} failed ({error}).", error=True)
        state.tool_calls += 1
        self.guards.observed(obs, state)
        record_call(CallRecord("tool", call.name or "?", "agent", time.perf_counter() - t0, error=error))
        state.add_candidates(obs.photos, obs.scores)
        state.viewed += [i for i, _ in obs.images if i not in state.viewed]
        return obs

    def _known(self, image_id: str) -> bool:
        return self.known_ids is None or image_id in self.known_ids

    def _keep_known(self, ids: list[str]) -> tuple[list[str], list[str]]:
        return [i for i in ids if self._known(i)], [i for i in ids if not self._known(i)]

    def _final_call(self, state: AgentState, proto: TurnProtocol, paths: dict[str, int],
                    dropped: list[str], stuck: bool = False) -> tuple[list[str] | None, str]:
        """The budget is spent (``stuck``: the model only repeated calls): one last call, without tools, for the
        answer."""
        n = state.turn = state.turn + 1
        params = proto.params(state, final=True)
        due = stuck and state.guards.answer_due
        in_a_row = stuck and not due and self.guards.in_a_row(state)
        often = stuck and not due and not in_a_row
        state.add_message(proto.budget_spent(
            params, self.max_turns, stuck=self.guards.stuck_after if in_a_row else 0, done=due,
            often=state.guards.repeats_total if often else 0,
            reminder=state.guards.answer_reminder if due or often else ""))
        with state.trace.step(f"turn.{n}", turn=n, final=True, protocol=proto.mode) as step:
            resp = self.role.chat(list(state.messages), params)
            state.prompt_tokens += resp.prompt_tokens
            state.completion_tokens += resp.completion_tokens
            state.add_message(Message.assistant(resp.text))
            reasoning, ids = proto.read_final(params, resp.text)
            turn = TurnRecord(n=n, path="none", reasoning=reasoning, answer=ids, final=True,
                              prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens)
            state.turns.append(turn)
            paths["none"] = paths.get("none", 0) + 1
            valid, bad = self._keep_known(ids or [])
            dropped += bad
            turn.dropped = bad
            step.outputs = self._turn_outputs(turn, None)
        if stuck:
            why = ("a repeated call once the search was done" if due
                   else f"{self.guards.stuck_after} repeated calls in a row" if in_a_row
                   else f"{state.guards.repeats_total} repeated calls")
            return (valid, f"the model's final answer after {why}") if valid else \
                (None, f"{why} ended the search without a usable answer")
        if valid:
            return valid, f"the model's final answer after the {self.max_turns}-turn budget"
        return None, f"the {self.max_turns}-turn budget was spent without a usable answer"

    def _fallback_answer(self, state: AgentState) -> list[str]:
        best = [i for i in state.best_candidates(len(state.seen)) if self._known(i)][: self.fallback_k]
        if not best and self.fallback is not None:
            best = self._keep_known(self.fallback(state))[0][: self.fallback_k]
        return best

    def _turn_outputs(self, turn: TurnRecord, protocol: Mode | None) -> dict[str, Any]:
        """The trace step's outputs: flat fields for one call, ``calls`` for all of them, then what the loop
        made of the turn (``protocol``, the proposed ``answer``, ids ``dropped``, ``feedback``...)."""
        calls = [{"tool": c.name, "arguments": c.arguments, "observation": o.short(), "photos": list(o.photos),
                  "error": o.error, **({"data": _as_data(o.result)} if o.result is not None else {})}
                 for c, o in turn.calls]
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
        if turn.final:
            out["final"] = True
        elif protocol is not None:
            out["protocol"] = protocol
        if turn.final or (turn.answer is not None and not turn.calls):
            out["answer"] = turn.answer
        if turn.dropped:
            out["dropped"] = turn.dropped
        if turn.rejected_by is not None:
            out["rejected_by"] = turn.rejected_by
        if turn.feedback is not None:
            out["feedback"] = turn.feedback
        return out


def _as_data(result: Any) -> Any:
    """A tool's typed result as the trace shows it (a dataclass as a dict; anything else as it is)."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return result


__all__ = [
    "ANSWER_FORMAT",
    "DEFAULT_MAX_TURNS",
    "NOT_IN_ALBUM",
    "NUDGE",
    "ONE_TOOL_PER_STEP",
    "SEARCH_FIRST",
    "AgentHooks",
    "AgentRun",
    "AgentRuntime",
    "AgentState",
    "ToolMode",
    "TurnRecord",
    "resolve_tool_mode",
]
