"""PhotoCraft's memories (Sec. 3.2) as :class:`~imagent.agents.runtime.AgentHooks`, each switchable.

They read what the tools found from the calls' typed results (:mod:`imagent.methods.album.tools`), never from a
tool's name or its text.

- :class:`WorkingMemory` (``before_turn``): when the context nears its limit (or the agent called
  ``MemoryCondense``), the history after the task is compressed by one model call. PhotoCraft's form
  writes three summaries (Eq. 1): *digest* (step-level actions and outcomes), *session* (key decisions
  and reusable heuristics) and *working* (current subgoal and next plan); each can be switched off
  (Fig. 4b). The deterministic fidelity validator (:func:`fidelity`) then reads the photo ids, dates
  and places of every metadata-bearing tool message of that history and computes the loss rate
  ``L = 1 - preserved / |M_meta|`` (Eq. 2): a message counts as preserved only when *all* its facts
  appear in the summary. When ``L > tau`` (0.5) the most recent unpreserved metadata messages are kept
  verbatim beside the summary. ImageSeeker's form (``structured=False``) is the baseline's free-form
  compression: one summary, no validator.
- :class:`EpisodicMemory` (``before_answer``): the five-part audit (anchor, constraint, target,
  completeness, decision; A.3.1) of a proposed answer, one model call conditioned on the query, the
  (compressed) history and the proposed photos reloaded (Eq. 3). Each check is a note and a verdict
  (``{"note", "ok"}``); the decision (``pass`` or ``revise``) is derived from them (:func:`audit_decision`:
  pass exactly when every check is ok and no photo is to be removed), so a verdict and a decision that
  disagree cannot be written (the trace step records ``decided_by: checks``).
  A failed audit goes back to the agent as structured feedback asking for a new retrieval round with
  different keywords; the loop goes on until an audit passes or the turn budget ends (the runtime accepts
  the answer when no turn is left).
- :class:`SkillInjection` (``on_start``): the semantic memory's retrieval step: the skill whose source query
  is most similar to the query text is prepended to the user message when the similarity exceeds
  ``theta_retr``; skills distilled from the same query are left out.
  Distillation happens after the episode is scored (see :mod:`imagent.methods.album.skills`).

Deviations where the paper is silent: how many metadata messages are kept verbatim
(``keep_verbatim``, default 3, newest first), the context limit itself (``context_limit``: the
backend's window, default 32768 tokens, compressed at ``compress_at`` = 0.8 of it), and a cap on audits
per query (``max_audits``, default None: until one passes or the budget ends, as in the paper).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from string import Template
from typing import Any, ClassVar

from imagent.agents.runtime import AgentHooks
from imagent.agents.state import AgentState, Observation, ToolScope
from imagent.agents.tools import NoArgs, Tool
from imagent.methods.album.skills import SkillLibrary
from imagent.methods.album.tools import METADATA_RESULTS, SearchResult
from imagent.models.base import ImagePart, Message

# --------------------------------------------------------------------------- the memories' records
# Each memory keeps its records in the run's state (``state.records``, by type); ``agent_counts`` in
# :mod:`imagent.methods.album.photocraft` counts them.


@dataclass(frozen=True)
class Compression:
    """A working-memory compression: the turn it came before and what triggered it."""

    turn: int
    trigger: str


@dataclass(frozen=True)
class Audit:
    """An episodic-memory audit of a proposed answer: its turn, whether it passed, its four checks (``verdict``)
    and its decision ("pass" or "revise")."""

    turn: int
    passed: bool
    verdict: dict[str, str] = field(default_factory=dict)
    decision: str = ""


@dataclass(frozen=True)
class SkillUse:
    """The semantic-memory skill injected at the start (its id and similarity to the request)."""

    id: str
    similarity: float


SUMMARY_KINDS = ("digest", "session", "working")
SUMMARY_LIMITS = {"digest": 1500, "session": 800, "working": 600}
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_ID_TOKEN = re.compile(r"[A-Za-z0-9][\w./:@-]*[A-Za-z0-9]|[A-Za-z0-9]")
# ``address: X`` / ``address=X`` / ``"address": "X"`` and GetMetadata's own ``address X; device ...``.
_ADDRESS_FIELD = re.compile(r"[\"']?\baddress[\"']?(?:\s*[:=]\s*|\s+)[\"']?([^\"'\n;|}]+)", re.I)
# What follows ``address`` in a filter expression (handled by _ADDRESS_FILTER), not a place.
_NOT_A_PLACE = re.compile(r"^(?:~|=|!|<|>|contains\b|like\b|unknown$|none$|null$)", re.I)
_ADDRESS_FILTER = re.compile(r"address\s*(?:contains|~|==?|like)\s*[\"']([^\"']+)[\"']", re.I)
_NEAR = re.compile(r"near\(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)")


# --------------------------------------------------------------------------- fidelity validator


@dataclass(frozen=True)
class Facts:
    """The constraints one metadata-bearing message carries: photo ids, dates, places."""

    ids: frozenset[str] = frozenset()
    dates: frozenset[str] = frozenset()
    places: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.ids or self.dates or self.places)

    def missing_from(self, summary: str) -> list[str]:
        """The facts ``summary`` does not contain (case-insensitive substring match)."""
        low = summary.lower()
        return [f for f in sorted(self.ids) + sorted(self.dates) + sorted(self.places) if f.lower() not in low]


def _place_key(address: str) -> str:
    """The part of an address a summary must keep: its first component ("Melbourne Zoo")."""
    return address.split(",")[0].strip().strip(".")


def extract_facts(text: str, known_ids: Container[str] | None = None, arguments: Any = None) -> Facts:
    """Photo ids (album ids when ``known_ids`` is given, else digit runs of 6+), dates (YYYY-MM-DD)
    and places (``address`` values as GetMetadata prints them (``address Melbourne Zoo, Parkville; ...``) or as
    ``address: X`` / ``address=X``, address filters, ``near(lat, lon, ...)`` centres) in a tool message and the
    arguments of the call that produced it; an unknown address is no place. Deterministic: no model involved."""
    blob = text + ("\n" + json.dumps(arguments, ensure_ascii=False) if arguments else "")
    if known_ids is not None:
        ids = {t for t in _ID_TOKEN.findall(blob) if t in known_ids}
    else:
        ids = set(re.findall(r"\b\d{6,}\b", blob))
    dates = set(_DATE.findall(blob))
    places = {_place_key(m.group(1)) for m in _ADDRESS_FIELD.finditer(blob)
              if not _NOT_A_PLACE.match(m.group(1).strip())}
    places |= {m.group(1).strip() for m in _ADDRESS_FILTER.finditer(blob)}
    places |= {m.group(1) for m in _NEAR.finditer(blob)}
    return Facts(frozenset(ids), frozenset(dates), frozenset(p for p in places if p and p.lower() != "none"))


@dataclass
class FidelityReport:
    """The validator's verdict on one compression."""

    messages: int  # metadata-bearing messages in the compressed history (|M_meta|)
    preserved: int
    loss: float  # L of Eq. 2 (0 when there is no metadata message)
    missing: dict[int, list[str]] = field(default_factory=dict)  # message index -> facts not kept

    def to_dict(self) -> dict[str, Any]:
        return {"metadata_messages": self.messages, "preserved": self.preserved, "loss": round(self.loss, 4),
                "missing": {str(k): v[:10] for k, v in self.missing.items()}}


def fidelity(facts: Sequence[Facts], summary: str) -> FidelityReport:
    """Eq. 2: ``L = 1 - sum Preserved(m, S) / |M_meta|`` over the messages that carry facts."""
    meta = [(i, f) for i, f in enumerate(facts) if f]
    missing = {i: f.missing_from(summary) for i, f in meta}
    missing = {i: m for i, m in missing.items() if m}
    preserved = len(meta) - len(missing)
    loss = 1.0 - preserved / len(meta) if meta else 0.0
    return FidelityReport(len(meta), preserved, loss, missing)


# --------------------------------------------------------------------------- working memory


def render_history(messages: Sequence[Message], max_chars_per_message: int = 1500) -> str:
    """The conversation as plain text for the compressor (images as their text surrogate)."""
    lines = []
    for m in messages:
        parts = [p if isinstance(p, str) else f"[photo: {p.surrogate()}]" for p in m.parts]
        text = "".join(parts).strip()
        if m.tool_calls:
            calls = "; ".join(f"{c.get('name')}({c.get('arguments')})" for c in m.tool_calls)
            text = f"{text}\n[calls: {calls}]".strip()
        label = {"tool": "TOOL RESULT", "assistant": "AGENT", "user": "USER"}.get(m.role, m.role.upper())
        if len(text) > max_chars_per_message:
            text = text[:max_chars_per_message] + " …"
        lines.append(f"{label}: {text}")
    return "\n\n".join(lines)


def _schema(kinds: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": {k: {"type": "string", "maxLength": SUMMARY_LIMITS[k]} for k in kinds},
            "required": list(kinds)}


class WorkingMemory(AgentHooks):
    """Context compression before a turn (see the module doc).

    - ``role``: the model that writes the summaries (the paper used GPT-4o; any role works);
    - ``prompt``: template with ``$query``, ``$history`` and ``$sections`` (what to write);
    - ``context_limit`` / ``compress_at``: compress when the estimated prompt exceeds their product;
    - ``structured``: PhotoCraft's three summaries (``summaries`` picks which) or one free-form text;
    - ``fidelity_check`` / ``tau`` / ``keep_verbatim``: the validator and what it keeps;
    - ``metadata_results``: the typed tool results whose messages carry metadata (ids, dates, places);
    - ``known_ids``: the album's ids (what counts as a photo id in a message);
    - ``in_context``: the compressor is the agent's own model: it reads the history where it already is (the
      conversation, then the request as one more user message; ``$history`` names "the conversation above")
      instead of a fresh prompt with the history rendered as text. Same content, but a backend that keeps
      the previous prompt's KV cache (llama.cpp) evaluates only the request, and the agent's next prompt
      (system, task, summary) shares its prefix with it. Used only while prompt + reply fit the window.
    """

    # Phrased as a pointer, not as content: the 0.5B model echoed a descriptive placeholder as its "summary".
    IN_CONTEXT_HISTORY = "[above this message; summarise the tool calls there and what they returned]"
    # Room reserved for the request and the reply when compressing in context (llama.cpp bounds each summary at
    # 256 characters; a free-form summary stops at the window's end). The prompt is estimated conservatively.
    IN_CONTEXT_ROOM = 500

    SECTION_TEXT: ClassVar[dict[str, str]] = {
        "digest": "digest: the step-level log: each action taken (tool, arguments) and its outcome, with every "
                  "photo id, date and place it produced",
        "session": "session: key decisions so far and heuristics that worked or failed (e.g. which keywords "
                   "found nothing)",
        "working": "working: the current subgoal (anchor, constraint or target) and the next planned step",
    }

    def __init__(self, role: Any, prompt: str, *, context_limit: int = 32768, compress_at: float = 0.8,
                 structured: bool = True, summaries: Sequence[str] = SUMMARY_KINDS, fidelity_check: bool = True,
                 tau: float = 0.5, keep_verbatim: int = 3, metadata_results: tuple[type, ...] = METADATA_RESULTS,
                 known_ids: Container[str] | None = None, min_messages: int = 2, in_context: bool = False) -> None:
        bad = [s for s in summaries if s not in SUMMARY_KINDS]
        if bad or (structured and not summaries):
            raise ValueError(f"summaries must be a non-empty subset of {SUMMARY_KINDS}, not {list(summaries)}")
        self.role = role
        self.prompt = prompt
        self.context_limit = context_limit
        self.in_context = in_context
        self.limit = int(context_limit * compress_at)
        self.structured = structured
        self.summaries = [s for s in SUMMARY_KINDS if s in summaries]
        self.fidelity_check = fidelity_check and structured
        self.tau = tau
        self.keep_verbatim = keep_verbatim
        self.metadata_results = metadata_results
        self.known_ids = known_ids
        self.min_messages = min_messages
        self.requested = False
        self.compressions = 0
        self._turns_done = 0  # turns already folded into a summary
        # Metadata messages an earlier compression kept verbatim: still in the history, so validated again.
        self._carried: list[tuple[str, Observation, Facts]] = []
        self._count_at_call = 0  # history length when the last prompt was measured

    # ------------------------------------------------------------------ trigger
    def request(self) -> None:
        """Compress before the next turn whatever the size (the ``MemoryCondense`` tool)."""
        self.requested = True

    def estimate_tokens(self, state: AgentState, chars_per_token: int = 4) -> int:
        """The latest prompt's measured size plus ~4 characters per token for what came after it (2: an upper
        bound for text full of photo ids and dates, whose digits are one token each)."""
        new = state.messages[self._count_at_call:] if state.last_prompt_tokens else state.messages
        chars = sum(len(m.text) + sum(len(str(c)) for c in (m.tool_calls or [])) for m in new)
        return state.last_prompt_tokens + chars // chars_per_token

    def before_turn(self, state: AgentState) -> None:
        history = state.messages[2:]
        due = self.requested or self.estimate_tokens(state) > self.limit
        if due and len(history) >= self.min_messages:
            self.compress(state, "requested by the agent" if self.requested else "context limit")
        self.requested = False
        self._count_at_call = len(state.messages)

    # ------------------------------------------------------------------ compression
    def _metadata_facts(self, state: AgentState) -> list[tuple[str, Observation, Facts]]:
        """(tool name, observation, facts) of the metadata-bearing tool results in the history: those
        kept verbatim by the last compression, then the ones that came after it."""
        out = list(self._carried)
        for turn in state.turns[self._turns_done:]:
            for call, obs in turn.calls:
                if obs.error or not isinstance(obs.result, self.metadata_results):
                    continue
                out.append((call.name, obs, extract_facts(obs.text, self.known_ids, call.arguments)))
        return out

    def compress(self, state: AgentState, trigger: str) -> None:
        history = state.messages[2:]
        before = self.estimate_tokens(state)
        with state.trace.step("memory.condense", trigger=trigger, turn=state.turn) as step:
            sections = "\n".join(f"- {self.SECTION_TEXT[k]}" for k in self.summaries) if self.structured else (
                "- one free-form summary of the search so far")
            in_context = self.in_context and (self.estimate_tokens(state, 2) + self.IN_CONTEXT_ROOM
                                              <= self.context_limit)
            if in_context:
                rendered = self.IN_CONTEXT_HISTORY
            else:
                rendered = render_history(history)
                budget = int(self.limit * 2.5)  # ~2.5 characters a token: the compressor's prompt must fit its window
                if len(rendered) > budget:
                    rendered = "[... earlier messages cut to fit the window ...]\n" + rendered[-budget:]
                    step.note("the history was cut to fit the compressor's window; the validator checks what was lost")
            text = Template(self.prompt).safe_substitute(query=state.query, history=rendered, sections=sections)
            request = [*state.messages, Message.user(text)] if in_context else [Message.user(text)]
            step.inputs["in_context"] = in_context
            if self.structured:
                value, ok = self.role.json(request, _schema(self.summaries), fallback=lambda: None,
                                           retries=1, max_tokens=900)
                parts = {k: " ".join(str((value or {}).get(k, "")).split()) for k in self.summaries} if ok else {}
                summary = "\n".join(f"[{k.upper()}] {v}" for k, v in parts.items() if v)
            else:
                summary = self.role.text(request, max_tokens=600)
                parts = {"summary": summary}
            if not summary.strip():
                step.note("compression produced no usable summary; the history was left as it was")
                step.outputs = {"compressed": False}
                return
            metas = self._metadata_facts(state)
            kept: list[str] = []
            carried: list[tuple[str, Observation, Facts]] = []
            report = None
            if self.fidelity_check:
                report = fidelity([f for _, _, f in metas], summary)
                if report.loss > self.tau:
                    for i in sorted(report.missing, reverse=True)[: self.keep_verbatim]:
                        name, obs, _ = metas[i]
                        kept.insert(0, f"[{name} result, kept verbatim]\n{obs.text}")
                        carried.insert(0, metas[i])
            memory = ["[WORKING MEMORY: the earlier steps of this search, condensed]", summary]
            if kept:
                memory += ["", "Metadata the summary lost, in the tool's own words:", *kept]
            memory.append("\nContinue the search from here (the working summary says what comes next).")
            state.fold_history(Message.user("\n".join(memory)))  # the guards forget the folded calls
            self._turns_done = len(state.turns)
            self._carried = carried
            self.compressions += 1
            state.records.add(Compression(turn=state.turn, trigger=trigger))
            step.outputs = {
                "compressed": True,
                "messages_folded": len(history),
                "tokens_before": before,
                "summaries": parts,
                **({"fidelity": report.to_dict(), "kept_verbatim": len(kept)} if report is not None else {}),
            }
            if report is not None and report.loss > self.tau:
                step.note(f"fidelity: loss {report.loss:.2f} > tau {self.tau}: kept {len(kept)} metadata "
                          "message(s) verbatim")


class MemoryCondense(Tool[NoArgs]):
    """The agent's own handle on working memory (Table 4): compress the history before the next turn."""

    name = "MemoryCondense"
    description = ("Condense the conversation so far into working memory (a digest of steps, the session's key "
                   "decisions and your current plan), keeping photo ids, dates and places. Use it when the "
                   "history grows long. It does not search or load photos.")
    Args = NoArgs

    def __init__(self, memory: WorkingMemory) -> None:
        self.memory = memory

    def run(self, args: NoArgs, scope: ToolScope) -> Observation:
        self.memory.request()
        return Observation("The history will be condensed into working memory before your next turn.",
                           summary="memory condense requested")


# --------------------------------------------------------------------------- episodic memory

# Room for each of the audit's four checks: one sentence. Every character is generated (~4 a token) before the
# check's verdict, so this bounds the audit's cost (with 300 a 0.5B filled ~75 tokens per check).
AUDIT_CHECK_CHARS = 160
AUDIT_CHECKS = ("anchor", "constraint", "target", "completeness")


def _check() -> dict[str, Any]:
    # The note first, then the check's verdict: a grammar-constrained model reasons, then judges.
    return {"type": "object", "properties": {"note": {"type": "string", "maxLength": AUDIT_CHECK_CHARS},
                                             "ok": {"type": "boolean"}},
            "required": ["note", "ok"]}


AUDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{k: _check() for k in AUDIT_CHECKS},
        # Photos of the answer that do not show the TARGET; any entry fails the audit.
        "remove": {"type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 80}},
        "new_keywords": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 60}},
    },
    "required": list(AUDIT_CHECKS),
}
# There is no decision field to disagree with the checks: the decision (A.3.1's fifth part) is derived from them.


_WORD = re.compile(r"[a-z0-9]+")


def own_words(note: str, prompt: str) -> list[str]:
    """The words of an audit note that its prompt does not hold (lower-cased letters and digits): a note made only
    of the prompt's own words (a small model parroting the question) says nothing about the answer."""
    given = set(_WORD.findall(prompt.lower()))
    return [w for w in _WORD.findall(note.lower()) if w not in given]


def audit_decision(value: dict[str, Any], answer: Sequence[str], prompt: str | None = None,
                   min_own: int = 1) -> tuple[str, dict[str, bool], list[str]]:
    """The audit's decision, derived by construction: ``"pass"`` exactly when every check holds (``ok``) and no
    proposed photo is to be removed, else ``"revise"``. Returns ``(decision, ok per check, photos to remove)``;
    a check missing or not an object counts as failed (a backend without grammars may write anything). With
    ``prompt`` (the audit's prompt), a failed check whose note has fewer than ``min_own`` words of its own
    (:func:`own_words`) is not counted: a failure must say something the prompt did not (the 0.5B's parroted
    notes added one word at most: a "no", a stray token)."""
    oks = {k: isinstance(value.get(k), dict) and value[k].get("ok") is True for k in AUDIT_CHECKS}
    if prompt is not None and min_own > 0:
        for k, ok in oks.items():
            note = value[k].get("note") if isinstance(value.get(k), dict) else None
            if not ok and isinstance(note, str) and len(own_words(note, prompt)) < min_own:
                oks[k] = True
    remove = [str(r) for r in value.get("remove") or [] if str(r) in answer]
    return ("pass" if all(oks.values()) and not remove else "revise"), oks, remove


def audit_schema(answer: Sequence[str]) -> dict[str, Any]:
    """:data:`AUDIT_SCHEMA` with ``remove`` limited to the proposed photos' ids (a grammar cannot name others)."""
    schema = copy.deepcopy(AUDIT_SCHEMA)
    if answer:
        schema["properties"]["remove"]["items"] = {"type": "string", "enum": list(dict.fromkeys(answer))}
    return schema


def answer_spread(parts: Sequence[ImagePart]) -> str:
    """One line of facts about the proposed photos for the audit's CONSTRAINT check: the days and places they
    span, read from their records (``""`` when no photo carries a date or place). A query about one day or
    one visit rarely has an answer spread over several, and a small model overlooks that in a list."""
    days = sorted({p.record.taken_time.date().isoformat() for p in parts
                   if p.record is not None and p.record.taken_time is not None})
    places = list(dict.fromkeys(p.record.address.split(",")[0].strip() for p in parts
                                if p.record is not None and p.record.address))
    bits = []
    if days:
        bits.append(f"{len(days)} day(s): {', '.join(days)}")
    if places:
        bits.append(f"{len(places)} place(s): {'; '.join(places)}")
    return ("The proposed photos span " + " and ".join(bits) + ".") if bits else ""


class EpisodicMemory(AgentHooks):
    """The reflective audit before the final answer (see the module doc).

    - ``role``: the auditing model (usually the agent's own);
    - ``prompt``: template with ``$pred_ids`` and ``$extra_notes`` (A.3.1's checks, ending in a JSON request);
    - ``feedback``: template of the message a failed audit sends back (``$verdict``, ``$keywords``,
      ``$used``, ``$pred_ids``);
    - ``reload``: photo ids -> ``(id, ImagePart)`` pairs (the visual reload ``V(R)``);
    - ``max_reload``: how many proposed photos are reloaded; ``max_audits``: None = until one passes;
    - ``context_limit``: the model's window in tokens; an audit prompt that would not fit reloads fewer photos,
      then gets the history as text cut to fit (None: no check).
    """

    REPLY_TOKENS = 600  # the verdict's room (the audit's max_tokens)

    def __init__(self, role: Any, prompt: str, feedback: str,
                 reload: Callable[[list[str]], list[tuple[str, ImagePart]]], *, max_reload: int = 10,
                 max_audits: int | None = None, context_limit: int | None = None, own_words: int = 0) -> None:
        self.role = role
        self.own_words = own_words  # a failed check counts only when its note has this many words of its own
        self.prompt = prompt
        self.feedback = feedback
        self.reload = reload
        self.max_reload = max_reload
        self.max_audits = max_audits
        self.context_limit = context_limit
        self.audits = 0

    def used_keywords(self, state: AgentState) -> list[str]:
        """The search texts the agent already tried (so a new round can differ from them): the queries of the
        searches that ran (their typed results)."""
        out: list[str] = []
        for _, obs in state.calls():
            q = obs.result.query.strip() if isinstance(obs.result, SearchResult) else ""
            if q and q not in out:
                out.append(q)
        return out

    def _audit_message(self, answer: list[str], pred: str, shown: int) -> Message:
        photos = self.reload(answer[:shown])
        parts: list[str | ImagePart] = [Template(self.prompt).safe_substitute(
            pred_ids=pred, extra_notes="" if len(answer) <= shown else
            f" (only the first {shown} proposed photos are shown)")]
        if photos:
            parts.append("\nThe proposed photos, reloaded:")
            for pid, part in photos:
                parts += [f"\nPhoto ID {pid}: ", part]
            spread = answer_spread([part for _, part in photos])
            if spread:
                parts.append(f"\n{spread}")
        return Message("user", parts)

    def request(self, state: AgentState, answer: list[str], pred: str, step: Any) -> list[Message]:
        """The audit's messages: the history, then the audit request with the proposed photos reloaded. When
        ``context_limit`` is set and that would not fit with room for the verdict, fewer photos are reloaded
        (down to 3), then the history is given as text cut to fit (noted in the trace)."""
        shown = min(self.max_reload, len(answer))
        msg = self._audit_message(answer, pred, shown)
        if self.context_limit is None:
            return [*state.messages, msg]
        last = state.turns[-1].completion_tokens if state.turns else 0
        base = state.last_prompt_tokens + last

        def size(m: Message) -> int:
            # ~2 characters a token: photo ids and dates are digits, one token each for Qwen-style tokenizers
            return len(" ".join(p if isinstance(p, str) else p.surrogate() for p in m.parts)) // 2

        room = self.context_limit - self.REPLY_TOKENS
        while base + size(msg) > room and shown > 3:
            shown = max(3, shown // 2)
            msg = self._audit_message(answer, pred, shown)
        if base + size(msg) <= room:
            return [*state.messages, msg]
        budget = max(0, (room - size(msg) - len(state.messages[0].text) // 3 - len(state.messages[1].text) // 2) * 2)
        rendered = render_history(state.messages[2:])[-budget:] if budget else ""
        step.note(f"the audit's prompt would not fit the {self.context_limit}-token window: the history was given "
                  "as text, cut to fit")
        return [*state.messages[:2], Message.user("THE SEARCH SO FAR (cut to fit the window):\n" + rendered), msg]

    def before_answer(self, state: AgentState, answer: list[str]) -> str | Message | None:
        if self.max_audits is not None and self.audits >= self.max_audits:
            return None
        self.audits += 1
        pred = json.dumps(answer, ensure_ascii=False)
        with state.trace.step("memory.audit", audit=self.audits, proposed=list(answer)) as step:
            messages = self.request(state, answer, pred, step)
            value, ok = self.role.json(messages, audit_schema(answer), fallback=lambda: None, retries=1,
                                       max_tokens=self.REPLY_TOKENS)
            if not ok or not isinstance(value, dict):
                step.note("the audit gave no usable verdict; the answer was accepted as proposed")
                step.outputs = {"decision": "pass", "decided_by": "checks", "parsed": False}
                return None
            decision, oks, remove = audit_decision(value, answer, self.prompt, self.own_words)
            verdict = {k: " ".join(str(value[k].get("note", "") if isinstance(value.get(k), dict) else "").split())
                       for k in AUDIT_CHECKS}
            passed = decision == "pass"
            keywords = [str(k) for k in value.get("new_keywords") or [] if str(k).strip()]
            state.records.add(Audit(turn=state.turn, passed=passed, verdict=verdict, decision=decision))
            step.outputs = {"decision": decision, "decided_by": "checks", **verdict,
                            "checks_ok": oks, "remove": remove, "new_keywords": keywords}
            failed = [k for k, v in oks.items() if not v]
            step.note(f"audit decision: {decision} (derived: every check ok and nothing to remove; failed: "
                      f"{', '.join(failed + (['remove'] if remove else [])) or 'none'})")
            if passed:
                return None
            used = self.used_keywords(state)
            lines = "\n".join(f"- {k.upper()} ({'ok' if oks[k] else 'PROBLEM'}): {verdict[k] or '(no remark)'}"
                              for k in AUDIT_CHECKS)
            lines += "\n- DECISION: revise"
            if remove:
                lines += f"\n- photos that do not fit the target: {', '.join(remove)}"
            text = Template(self.feedback).safe_substitute(
                verdict=lines, pred_ids=pred, keywords=", ".join(f'"{k}"' for k in keywords) or "(none suggested)",
                used=", ".join(f'"{k}"' for k in used) or "(none yet)")
            return Message.user(text)


# --------------------------------------------------------------------------- semantic memory (retrieval)


class SkillInjection(AgentHooks):
    """Prepend the best skill of ``library`` to the user message when its similarity exceeds ``threshold``.

    ``query`` is the user's query text: what the similarity compares with each skill's source query (Sec. 3.2
    compares queries with queries; the task message around it, album size and date span, is not part of it).
    None uses the run's request (``state.query``). A skill distilled from this same query (one of its source
    queries equals ``query``, ignoring case and spacing: a shared library, a resumed run) is never injected:
    it would hand the query its own solved trajectory."""

    def __init__(self, library: SkillLibrary, threshold: float = 0.65, query: str | None = None) -> None:
        self.library = library
        self.threshold = threshold
        self.query = query

    def on_start(self, state: AgentState) -> None:
        query = self.query if self.query is not None else state.query
        with state.trace.step("memory.skill", library=str(self.library.path), query=query) as step:
            skill, sim, excluded = self.library.best_for(query, self.threshold)
            step.outputs = {"best_similarity": round(sim, 4), "threshold": self.threshold,
                            "injected": skill.id if skill else None, "excluded_same_query": excluded}
            if excluded:
                step.note(f"{len(excluded)} skill(s) distilled from this same query left out: {', '.join(excluded)}")
            if skill is None:
                return
            task = state.messages[1]
            state.set_task(Message("user", [skill.hint() + "\n\n", *task.parts]))
            state.records.add(SkillUse(id=skill.id, similarity=sim))


__all__ = [
    "AUDIT_CHECKS",
    "AUDIT_SCHEMA",
    "SUMMARY_KINDS",
    "Audit",
    "Compression",
    "EpisodicMemory",
    "Facts",
    "FidelityReport",
    "MemoryCondense",
    "SkillInjection",
    "SkillUse",
    "WorkingMemory",
    "audit_decision",
    "audit_schema",
    "extract_facts",
    "fidelity",
    "render_history",
]
