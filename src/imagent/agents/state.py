"""The typed state of one agent run: what the loop, its protocols, guards, tools and memory hooks share.

Every part of :mod:`imagent.agents` reads and writes these types, never a string-keyed bag::

    state = AgentState(query="the dogs on the lighthouse day", trace=trace)
    state.start([system_message, task_message])   # the history begins
    state.add_message(Message.user("..."))        # the history changes only through methods
    run.state.turns[0].calls[0].observation.photos

- :class:`ToolCall`: one call the model asked for (name, arguments; ``error`` when it could not be read);
- :class:`Observation`: what a tool call returned (text for the model, photo ids, scores, images);
- :class:`CallResult`: a call and its observation (unpacks as ``call, observation``);
- :class:`TurnRecord`: one turn: the reasoning, the calls and their results, a proposed answer;
- :class:`ToolScope`: all a tool's ``run`` receives besides its arguments: the saved subsets (named id lists),
  the search's scope (the ids an answer may name) and a way to ask for a history rewrite after the turn;
- :class:`GuardState`: what the small-model guards (:mod:`imagent.agents.guards`) remember;
- :class:`HookRecords`: what hooks record (their own typed records, kept by type);
- :class:`AgentState`: the history (messages), turns, counters, candidates seen, the hooks' records;
- :class:`AgentRun`: the outcome: the answer and how it was obtained (``source``, ``forced``, ``reason``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, NamedTuple, TypeVar

from imagent.core.trace import Trace
from imagent.models.base import ImagePart, Message
from imagent.tools.base import ToolError

# The default turn budget, after which the agent must answer (a method passes its own).
DEFAULT_MAX_TURNS = 30
# How much of an observation the trace keeps as its summary (the model reads the whole text).
SUMMARY_CHARS = 400

R = TypeVar("R")
Mode = Literal["native", "text", "json"]
CallPath = Literal["native", "text", "json", "none"]
AnswerSource = Literal["model", "fallback"]


@dataclass
class ToolCall:
    """One call the model asked for. ``error`` is set when the call could not be read; ``raw`` is
    the text it was read from (for the trace)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    error: str | None = None
    raw: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.error:
            d["error"] = self.error
        return d

    def openai(self) -> dict[str, Any]:
        """The ``{"id", "name", "arguments"}`` form an assistant :class:`~imagent.models.base.Message` carries."""
        return {"id": self.id, "name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}


@dataclass
class Observation:
    """What a tool call returns.

    - ``text``: what the model reads (the ``tool`` message, or the text protocol's ``<tool_response>``);
    - ``photos``: the photo ids it returned, in order (traces and the web UI show them as thumbnails);
    - ``scores``: retrieval scores of returned photos, where the tool has them; the runtime keeps the
      best score seen per photo (the never-empty fall-back answers with the best of them);
    - ``images``: ``(photo id, image part)`` pairs to show the model: the runtime sends them in a user
      message after the tool messages, each id written beside its image (tool messages carry text only);
      a blind model gets each photo's text surrogate instead (the role's caption mode);
    - ``result``: the tool's own typed result, for code that reads what a call found (a frozen dataclass of the
      tool's module, e.g. a search's ids, scores and times); the trace shows it as ``data``;
    - ``summary``: one line for the trace; defaults to the start of ``text``;
    - ``error``: True when this observation reports a failed call (set by the runtime for ToolErrors).
    """

    text: str
    photos: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    images: list[tuple[str, ImagePart]] = field(default_factory=list)
    result: Any = None
    summary: str = ""
    error: bool = False

    def short(self) -> str:
        """The trace's summary of this observation."""
        s = self.summary or self.text
        s = " ".join(s.split())
        return s if len(s) <= SUMMARY_CHARS else s[: SUMMARY_CHARS - 1] + "…"


class CallResult(NamedTuple):
    """One call of a turn and what it returned."""

    call: ToolCall
    observation: Observation


@dataclass
class TurnRecord:
    """One turn: what the model said, which calls it made and what came back. ``final``: the last call,
    without tools, after the turn budget was spent; ``dropped``: proposed ids outside the search's scope;
    ``feedback``: what the loop told the model after it
    (a nudge, an answer sent back); ``rejected_by``: the hook that rejected the proposed answer."""

    n: int
    path: CallPath
    reasoning: str = ""
    calls: list[CallResult] = field(default_factory=list)
    answer: list[str] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    final: bool = False
    dropped: list[str] = field(default_factory=list)
    feedback: str | None = None
    rejected_by: str | None = None


class ToolScope:
    """What a tool's ``run`` receives besides its arguments (never the loop itself).

    - ``subsets``: named id lists a tool saved (e.g. a filter's result) so a later call names the subset
      instead of passing hundreds of ids through the context;
    - ``known_ids``: the ids an answer may name (the search's scope); None accepts any id;
    - :meth:`defer`: a tool that must rewrite the history (a condense tool) registers the rewrite here; the
      runtime applies it once the turn's messages are in."""

    def __init__(self, known_ids: Container[str] | None = None) -> None:
        self.subsets: dict[str, list[str]] = {}
        self.known_ids = known_ids
        self._rewrites: list[Callable[[list[Message]], list[Message]]] = []

    def save_subset(self, name: str, ids: Sequence[str]) -> None:
        self.subsets[name.strip()] = list(ids)

    def subset(self, name: str, how_to_save: str = "") -> list[str]:
        """A saved subset; :class:`ToolError` naming the saved ones when it does not exist (``how_to_save``: what
        the message says when none is saved yet, e.g. which tool saves one)."""
        key = name.strip()
        if key not in self.subsets:
            have = ", ".join(repr(k) for k in self.subsets) or "none yet" + (f" ({how_to_save})" if how_to_save else "")
            raise ToolError(f"no saved subset named {name!r}; saved subsets: {have}")
        return self.subsets[key]

    def defer(self, rewrite: Callable[[list[Message]], list[Message]]) -> None:
        """Rewrite the history at the end of this turn (after the turn's own messages are appended)."""
        self._rewrites.append(rewrite)

    def take_rewrites(self) -> list[Callable[[list[Message]], list[Message]]]:
        out, self._rewrites = self._rewrites, []
        return out


@dataclass
class GuardState:
    """What the small-model guards remember during a run (:mod:`imagent.agents.guards`).

    ``seen_dates``: dates the request and tool results held; ``example_dates``: the worked example's dates
    (empty when no example is shown); ``calls_made``: each distinct call (tool and arguments) -> its turn;
    ``ids_used``: tool name -> photo ids it was called on; ``blocked_tools``: tools left out of the next
    turn's grammar (a repeated call was refused); ``repeats_in_a_row``: turns in a row whose call repeated an
    earlier one (the runtime asks for the answer when it reaches ``Guards.stuck_after``); ``repeats_total``: refused
    repeated calls in the whole run (the runtime asks for the answer when it reaches ``Guards.repeat_limit``: a small
    model that alternates between a new call and a repeat is never stuck "in a row"); ``answer_due``: a hook
    judged the search done while the model kept repeating calls (the runtime asks for the answer now);
    ``answer_reminder``: what that hook restates in the request for the answer (the result the search came to)."""

    seen_dates: set[date] = field(default_factory=set)
    example_dates: set[date] = field(default_factory=set)
    calls_made: dict[str, int] = field(default_factory=dict)
    ids_used: dict[str, set[str]] = field(default_factory=dict)
    blocked_tools: set[str] = field(default_factory=set)
    repeats_in_a_row: int = 0
    repeats_total: int = 0
    answer_due: bool = False
    answer_reminder: str = ""

    def forget_calls(self) -> None:
        """The history's tool results were folded away: a repeated call may be needed again."""
        self.calls_made.clear()
        self.ids_used.clear()


@dataclass(frozen=True)
class OneOf:
    """A :class:`NextCall` argument that is one of these values (the grammar's ``enum``), not a fixed one."""

    values: tuple[Any, ...]


@dataclass
class NextCall:
    """The call a hook that sent an answer back wants next: its tool and the arguments it fixes (the JSON protocol's
    grammar then offers only that tool, those arguments set, an :class:`OneOf` argument to one of its values; other
    protocols read the hook's feedback only)."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


class HookRecords:
    """What hooks record during one run, kept by record type: a hook adds its own typed records and code reads
    them back by type; the runtime knows none of the types (a method's memories define them)::

        @dataclass
        class Checked:                    # a hook's own record type, in the hook's module
            turn: int
            passed: bool

        state.records.add(Checked(turn=state.turn, passed=True))
        state.records.of(Checked)         # -> list[Checked], in the order added
        state.records.last(Checked)       # -> the latest Checked, or None
    """

    def __init__(self) -> None:
        self._by_type: dict[type, list[Any]] = {}

    def add(self, record: object) -> None:
        """Keep ``record`` under its own type."""
        self._by_type.setdefault(type(record), []).append(record)

    def of(self, kind: type[R]) -> list[R]:
        """The records of type ``kind``, in the order added (a copy)."""
        return list(self._by_type.get(kind, ()))

    def last(self, kind: type[R]) -> R | None:
        """The latest record of type ``kind``, or None."""
        kept = self._by_type.get(kind)
        return kept[-1] if kept else None

    def __repr__(self) -> str:
        return f"HookRecords({ {k.__name__: len(v) for k, v in self._by_type.items()} })"


@dataclass
class AgentState:
    """Everything the loop, its protocols and its hooks share during one run.

    The history (:attr:`messages`) changes only through methods: :meth:`start`, :meth:`add_message`,
    :meth:`set_task` (a hook prefixing the task), :meth:`fold_history` (a compression) and the rewrites a
    tool deferred (:meth:`apply_rewrites`). ``candidates`` keeps the best retrieval score seen per photo
    (the never-empty fall-back). Hooks keep their own typed records in :attr:`records` (:class:`HookRecords`: by
    record type; the state knows none of the types)."""

    query: str
    trace: Trace
    scope: ToolScope = field(default_factory=ToolScope)
    protocol: Mode = "text"
    candidates: dict[str, float] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    viewed: list[str] = field(default_factory=list)
    turn: int = 0
    max_turns: int = DEFAULT_MAX_TURNS
    tool_calls: int = 0
    tool_uses: dict[str, int] = field(default_factory=dict)  # calls that ran (or failed in the tool), by tool name
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_prompt_tokens: int = 0  # the size of the latest prompt: what a context-compression hook watches
    turns: list[TurnRecord] = field(default_factory=list)
    guards: GuardState = field(default_factory=GuardState)
    records: HookRecords = field(default_factory=HookRecords)
    # A hook sent a proposed answer back for more retrieval (an audit that failed, an unnarrowed answer): the next
    # turn must call a tool (the JSON protocol's grammar offers no answer) until one runs.
    retrieval_round: bool = False
    # The call the next turn must make, when a hook named one (after sending an answer back, or when the model
    # circled); the JSON protocol's grammar offers only it. Cleared once a call ran.
    next_call: NextCall | None = None
    # A hook sent a proposed answer back to be revised from what the search already found (not for more
    # retrieval): the next turn answers, without tools (the JSON protocol's grammar offers only the answer).
    answer_next: bool = False
    _messages: list[Message] = field(default_factory=list, repr=False)

    # ------------------------------------------------------------------ the history
    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation so far (system, task, then the turns); read-only."""
        return tuple(self._messages)

    def start(self, messages: Sequence[Message]) -> None:
        self._messages = list(messages)

    def add_message(self, message: Message) -> None:
        self._messages.append(message)

    def set_system(self, message: Message) -> None:
        """Replace the system message (the protocol changed)."""
        self._messages[0] = message

    def set_task(self, message: Message) -> None:
        """Replace the task message (the second one), e.g. to prefix a skill's hint."""
        self._messages[1] = message

    def fold_history(self, *messages: Message) -> None:
        """Replace everything after the system and task messages (a compression); the guards forget the
        calls whose results were folded away."""
        self._messages = [*self._messages[:2], *messages]
        self.guards.forget_calls()

    def apply_rewrites(self) -> None:
        """Apply the history rewrites the turn's tools deferred (:meth:`ToolScope.defer`)."""
        for rewrite in self.scope.take_rewrites():
            self._messages = list(rewrite(list(self._messages)))

    # ------------------------------------------------------------------ what tools returned
    @property
    def subsets(self) -> dict[str, list[str]]:
        return self.scope.subsets

    def save_subset(self, name: str, ids: Sequence[str]) -> None:
        self.scope.save_subset(name, ids)

    def subset(self, name: str) -> list[str]:
        return self.scope.subset(name)

    def defer(self, rewrite: Callable[[list[Message]], list[Message]]) -> None:
        self.scope.defer(rewrite)

    @property
    def turns_left(self) -> int:
        return max(0, self.max_turns - self.turn)

    def calls(self) -> Iterator[CallResult]:
        """Every call of the run so far, in order."""
        for t in self.turns:
            yield from t.calls

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

    def count_tokens(self, prompt: int, completion: int) -> None:
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.last_prompt_tokens = prompt


@dataclass
class AgentRun:
    """The outcome of one run and how the answer was obtained.

    ``source``: "model" (the model's answer) or "fallback" (best candidates seen, or the method's fallback
    search); ``forced``: the answer came from the last call without tools after the turn budget was spent;
    ``reason`` says why in words; ``dropped`` lists proposed ids outside the search's scope."""

    answer: list[str]
    source: AnswerSource
    reason: str
    turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    paths: dict[str, int]
    dropped: list[str]
    state: AgentState
    forced: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {"answer": list(self.answer), "source": self.source, "reason": self.reason, "turns": self.turns,
                "tool_calls": self.tool_calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "seconds": round(self.seconds, 3),
                "paths": dict(self.paths), "dropped": list(self.dropped)}


__all__ = [
    "DEFAULT_MAX_TURNS",
    "SUMMARY_CHARS",
    "AgentRun",
    "AgentState",
    "AnswerSource",
    "CallPath",
    "CallResult",
    "GuardState",
    "HookRecords",
    "Mode",
    "NextCall",
    "Observation",
    "OneOf",
    "ToolCall",
    "ToolScope",
    "TurnRecord",
]
