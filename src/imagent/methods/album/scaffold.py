"""The scaffold of the album agents: ONE policy, applied identically to PhotoCraft and ImageSeeker (decision 10).

Code that decides a step of an album search (the next call, the answer cut, a send-back built from a list code
computed) is *scaffolding*, not memory. It is one profile (:class:`ScaffoldProfile`), chosen by the methods'
``scaffold`` field: ``none`` (the papers' protocol: the model decides every step) or ``small`` (imagent's aids for
small local models); ``auto`` takes ``small`` for the in-process llama.cpp JSON protocol and ``none`` otherwise
(:func:`resolve_scaffold`). Every run records the profile it ran (:func:`scaffold_from_settings` for the run's
identity) and every result the share of its answer that equals a list computed by code (:func:`answer_origin`).

The policy, one :class:`Scaffold` hook per search:

1. ``small`` only: before the first turn the agent's model splits the query into its anchor, what the answer shares
   with it and its target (:class:`QueryPlan`, one grammar-constrained call; :func:`split_query`). The split stands
   as the model wrote it.
2. After every turn a typed progress value (:class:`Progress`) is derived once from the typed results of the calls
   that ran (:func:`advance`: an ImageSearch result carries its query, subset, ids, scores, times and clear matches;
   a FilterMetadata result its subset): the anchor's clear matches, whether the album was narrowed, a subset not
   searched yet, the chain's last target search.
3. :func:`decide` turns the progress (and a proposed answer, or a turn that only repeated an earlier call) into one
   typed directive: :class:`Accept`, :class:`SendBack` (with the next call, which the JSON grammar then fixes) or
   :class:`AnswerOnly` (the next turn answers, without tools, told what the search found). Each directive the hook
   applies is kept as a typed :class:`ScaffoldEvent` (the method's behaviour counts read them).

With ``small``: an answer given before anything narrowed the album is sent back once naming the narrowing call, one
given before a search within the narrowed subset is sent back once naming that search, one that leaves out clear
matches of the chain's last search is sent back once for the answer again (the answer cut), and a turn that only
repeated a call is followed by the chain's next call, or, once the chain ran, by the request for the answer. The
small profile also shows one worked example, a clear-matches line under each described search, FilterMetadata in
its photo form only, ImageSearch without ``top_k``, and bounds PhotoCraft's audit (one a query; a failed check
counts only with two words of its own). What each aid is for: ``docs/faithfulness.md`` (PhotoCraft, small models).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from string import Template
from typing import Any, Literal

from imagent.agents.runtime import AgentHooks
from imagent.agents.state import AgentState, NextCall, OneOf, TurnRecord
from imagent.methods.album import load_prompt
from imagent.methods.album.tools import FilterResult, SearchResult
from imagent.models.base import Message
from imagent.models.roles import Role

ScaffoldName = Literal["none", "small"]
ScaffoldSetting = Literal["auto", "none", "small"]


@dataclass(frozen=True)
class ScaffoldProfile:
    """What a scaffold profile turns on (each aid is imagent's, none is a paper's)."""

    name: ScaffoldName
    query_split: bool  # the model splits the query (anchor, same, target) before the first turn
    send_back: bool  # unnarrowed and unsearched answers are sent back once, naming the chain's next call
    steer: bool  # a turn that only repeated a call is followed by the chain's next call; once it ran: answer only
    answer_cut: bool  # an answer leaving out clear matches of the chain's last search is sent back once
    clear_matches_line: bool  # a described ImageSearch result ends with its clear matches
    anchor_filters: bool  # FilterMetadata offered in its photo form only (JSON protocol)
    fixed_top_k: bool  # ImageSearch's grammar has no top_k: every search returns the paper's 20 (JSON protocol)
    worked_example: bool  # the compact prompt shows one worked example (written in the protocol's turns)
    compact_prompt: bool  # the short tool list instead of full JSON Schemas (the JSON protocol always has it)
    max_audits: int | None  # PhotoCraft's audits a query at most (None: the paper's, until one passes)
    audit_own_words: int  # a failed audit check counts only when its note has this many words of its own

    def audits(self, configured: int | None) -> int | None:
        """PhotoCraft's audit cap under this profile: the configured one, bounded by the profile's."""
        if self.max_audits is None:
            return configured
        return self.max_audits if configured is None else min(configured, self.max_audits)


NONE = ScaffoldProfile("none", query_split=False, send_back=False, steer=False, answer_cut=False,
                       clear_matches_line=False, anchor_filters=False, fixed_top_k=False, worked_example=False,
                       compact_prompt=False, max_audits=None, audit_own_words=0)
SMALL = ScaffoldProfile("small", query_split=True, send_back=True, steer=True, answer_cut=True,
                        clear_matches_line=True, anchor_filters=True, fixed_top_k=True, worked_example=True,
                        compact_prompt=True, max_audits=1, audit_own_words=2)
PROFILES: dict[str, ScaffoldProfile] = {"none": NONE, "small": SMALL}


def resolve_scaffold(setting: str, protocol: str) -> ScaffoldProfile:
    """The profile a search runs: ``none`` or ``small`` as set; ``auto``: ``small`` for the JSON protocol (the
    in-process llama.cpp backend's small local models), else ``none``."""
    if setting == "auto":
        return SMALL if protocol == "json" else NONE
    if setting not in PROFILES:
        raise ValueError(f"scaffold must be auto, none or small, not {setting!r}")
    return PROFILES[setting]


def scaffold_from_settings(params: dict[str, Any], settings: dict[str, Any]) -> str | None:
    """The profile a run of an album agent will use, from its method parameters and resolved settings (the run's
    identity records it before any model is loaded); None for a method without a scaffold. ``auto`` follows the
    agent's protocol as :func:`imagent.agents.runtime.resolve_tool_mode` chooses it: JSON for the in-process
    llama.cpp backend (``tool_mode`` auto) or when ``tool_mode`` is json."""
    setting = params.get("scaffold")
    if setting is None:
        return None
    if setting != "auto":
        return str(setting)
    mode = params.get("tool_mode", "auto")
    if mode != "auto":
        return resolve_scaffold("auto", str(mode)).name
    roles = settings.get("roles") or {}
    name = roles.get(params.get("agent_role", "agent")) or roles.get("default")
    backend = ((settings.get("models") or {}).get(name) or {}).get("backend")
    return resolve_scaffold("auto", "json" if backend == "llama.cpp" else "native").name


# --------------------------------------------------------------------------- the query split


@dataclass(frozen=True)
class QueryPlan:
    """A query split into its anchor, what the answer shares with the anchor (:data:`SAME`) and its target, as the
    agent's model wrote it before its first turn."""

    anchor: str
    same: str
    target: str


SAME = ("day", "place", "city", "device", "after", "before", "other visit", "none")
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"anchor": {"type": "string", "minLength": 1, "maxLength": 60},
                   "same": {"enum": list(SAME)},
                   "target": {"type": "string", "minLength": 1, "maxLength": 60}},
    "required": ["anchor", "same", "target"], "additionalProperties": False,
}
# The split's ``same`` as the FilterMetadata photo form's ``same`` list, and as the task message words it.
PLAN_SAME = {"other visit": ["place", "other_day"]}
PLAN_KEEP = {"after": "the photos taken after its day", "before": "the photos taken before its day",
             "other visit": "the photos of its place on other days"}


def split_query(role: Role, query: str) -> tuple[QueryPlan | None, dict[str, Any]]:
    """One grammar-constrained call of the agent's model: the split (None when the reply does not parse) and what
    the trace shows of it."""
    prompt = Template(load_prompt("scaffold/split.txt")).safe_substitute(query=query)
    value, ok = role.json([Message.user(prompt)], PLAN_SCHEMA, fallback=lambda: None, retries=1, max_tokens=80)
    if not ok or not isinstance(value, dict):
        return None, {"parsed": False}
    plan = QueryPlan(*(" ".join(str(value[k]).split()) for k in ("anchor", "same", "target")))
    return plan, {"parsed": True, "anchor": plan.anchor, "same": plan.same, "target": plan.target}


def plan_same(plan: QueryPlan) -> list[str]:
    """The FilterMetadata photo form's ``same`` for the split (``other visit``: the place, other days)."""
    return PLAN_SAME.get(plan.same, [plan.same])


def describe_plan(plan: QueryPlan) -> str:
    """The split as the task message states it."""
    if plan.same == "none":
        return f"Your plan: no anchor; search for the target '{plan.target}'."
    if plan.same in PLAN_KEEP:
        keep = f"{PLAN_KEEP[plan.same]} (FilterMetadata same_as_photo, same {json.dumps(plan_same(plan))})"
    else:
        keep = f"the photos of its same {plan.same} (FilterMetadata same_as_photo)"
    return (f"Your plan: find the anchor '{plan.anchor}'; keep {keep}; search for the target '{plan.target}' "
            "within them.")


# --------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class Progress:
    """How far the anchor -> constraint -> target chain got, derived from the typed results of the calls that ran.

    ``anchor``: the clear matches of the last search over the whole album for the split's anchor (the photos the
    anchor can be); ``narrowed``: a FilterMetadata result or a search within a subset came back; ``unsearched``: the
    subset of the last narrowing when no search ran within a subset since; ``target``: the chain's last search (for
    an anchored split a search within a subset, for a split without an anchor a search for its target)."""

    anchor: tuple[str, ...] = ()
    narrowed: bool = False
    unsearched: str | None = None
    target: SearchResult | None = None


def _anchor_words(plan: QueryPlan) -> set[str]:
    words = plan.anchor.lower().split()
    return {w for w in words if len(w) > 2} or set(words)


def advance(progress: Progress, plan: QueryPlan | None, results: Iterable[Any]) -> Progress:
    """The progress after one turn whose calls that ran returned ``results`` (their typed results, in order)."""
    for r in results:
        if isinstance(r, FilterResult):
            progress = replace(progress, narrowed=True, unsearched=r.subset or progress.unsearched)
        elif isinstance(r, SearchResult):
            if r.within is not None:
                progress = replace(progress, narrowed=True, unsearched=None)
            if plan is None:
                continue
            if r.within is None and _anchor_words(plan) & set(r.query.lower().split()):
                progress = replace(progress, anchor=r.matches)
            if (r.within is not None) if plan.same != "none" else plan.target.lower() in r.query.lower():
                progress = replace(progress, target=r)
    return progress


# --------------------------------------------------------------------------- directives


@dataclass(frozen=True)
class Accept:
    """Nothing to do: the answer stands, the search goes on as the model chooses."""


@dataclass(frozen=True)
class SendBack:
    """The answer goes back (or, after a turn, the next turn is fixed) with ``message`` and the call to make next."""

    reason: str
    message: str
    next_call: NextCall | None


@dataclass(frozen=True)
class AnswerOnly:
    """The next turn answers without tools, told ``message``; ``found``: the list code computed that it names."""

    reason: str
    message: str
    found: tuple[str, ...]


Directive = Accept | SendBack | AnswerOnly

# What an answer given before the album was narrowed is told.
SCOPE_FIRST = ("Not narrowed yet. Call FilterMetadata with the anchor photo as same_as_photo (same day, place or "
               "city, as the query says), then search for the TARGET within it. A query without an anchor, "
               "time or place: give your answer again.")
SCOPE_FIRST_PLAN = ("Not narrowed yet. Call FilterMetadata with same_as_photo = the photo of the {anchor}{found} and "
                    "same = {same}, then search for '{target}' within it.")
# What an answer given after the narrowing but before any search inside it is told.
TARGET_FIRST = ("Now find the TARGET inside {subset!r}: call ImageSearch with the target's keywords and "
                "search_within={subset!r}, then answer with the photos of that list that show the target.")
TARGET_FIRST_PLAN = ("Now call ImageSearch with {{\"query\": \"{target}\", \"search_within\": \"{subset}\"}}, then "
                     "answer with the photos of that list that show {target}.")
# What an answer that leaves out clear matches of the chain's last search is told (the answer cut).
COVER_MATCHES = ("{found} Your answer leaves out {missed}. Give your final answer again now: every photo of those "
                 "clear matches that shows {target}.")


def describe_found(search: SearchResult) -> str:
    """The chain's last search and its clear matches, in words."""
    within = f" within {search.within!r}" if search.within else ""
    return (f"Your search for {search.query!r}{within} found these clear matches, best first: "
            + (", ".join(search.matches) or "none") + ".")


def narrowing_call(plan: QueryPlan, photos: Sequence[str]) -> NextCall:
    """FilterMetadata with the split's ``same``, its photo one of ``photos`` (the anchor's clear matches) when the
    anchor was searched."""
    return NextCall("FilterMetadata", {"same": plan_same(plan)} | ({"same_as_photo": OneOf(tuple(photos))}
                                                                   if photos else {}))


def decide(profile: ScaffoldProfile, plan: QueryPlan | None, progress: Progress, *, answer: Sequence[str] | None = None,
           repeated: bool = False, sent: frozenset[str] = frozenset()) -> Directive:
    """The one scaffold policy: the directive for a proposed ``answer`` (None: after a turn, ``repeated`` when it only
    repeated an earlier call), given the split, the progress and the send-backs already made (``sent``: their
    reasons; each is made once)."""
    if answer is None:
        return _after_turn(profile, plan, progress) if repeated else Accept()
    if profile.send_back and "scope" not in sent and not progress.narrowed and (plan is None or plan.same != "none"):
        if plan is None:
            return SendBack("scope", SCOPE_FIRST, NextCall("FilterMetadata"))
        found = f" ({' or '.join(progress.anchor[:5])}, found by your search)" if progress.anchor else ""
        return SendBack("scope", SCOPE_FIRST_PLAN.format(anchor=plan.anchor, found=found,
                                                         same=json.dumps(plan_same(plan)), target=plan.target),
                        narrowing_call(plan, progress.anchor))
    if profile.send_back and "target" not in sent and progress.unsearched is not None:
        subset = progress.unsearched
        if plan is None:
            return SendBack("target", TARGET_FIRST.format(subset=subset), NextCall("ImageSearch",
                                                                                  {"search_within": subset}))
        return SendBack("target", TARGET_FIRST_PLAN.format(subset=subset, target=plan.target),
                        NextCall("ImageSearch", {"query": plan.target, "search_within": subset}))
    target = progress.target
    if profile.answer_cut and "cover" not in sent and plan is not None and target is not None and target.matches:
        missed = [i for i in target.matches if i not in answer]
        if missed:
            return AnswerOnly("cover", COVER_MATCHES.format(found=describe_found(target), missed=", ".join(missed),
                                                            target=plan.target), target.matches)
    return Accept()


def _after_turn(profile: ScaffoldProfile, plan: QueryPlan | None, progress: Progress) -> Directive:
    """A turn that only repeated an earlier call (a small model circling): the chain's next call, or, once the
    chain's last search ran, the request for the answer restating what it found."""
    if not profile.steer or plan is None:
        return Accept()
    if progress.target is not None:  # the chain ran once: done, even if the model narrowed to another anchor
        return AnswerOnly("done", describe_found(progress.target), progress.target.matches)
    if plan.same == "none":
        return SendBack("steer", "", NextCall("ImageSearch", {"query": plan.target})) if plan.target else Accept()
    if not progress.narrowed:
        return SendBack("steer", "", narrowing_call(plan, progress.anchor))
    if progress.unsearched is not None:
        return SendBack("steer", "", NextCall("ImageSearch", {"query": plan.target, "search_within":
                                                              progress.unsearched}))
    return Accept()


# --------------------------------------------------------------------------- the hook


@dataclass(frozen=True)
class ScaffoldEvent:
    """A directive the scaffold applied: its turn, kind (``send_back``, ``answer_only``), reason (``scope``,
    ``target``, ``cover``, ``steer``, ``done``) and the list code computed that it named (``found``)."""

    turn: int
    kind: str
    reason: str
    found: tuple[str, ...] = ()


@dataclass
class Scaffold(AgentHooks):
    """The scaffold of one search (see the module doc): the split, the progress and the directives applied.

    ``role`` and ``query``: the agent's model and the query text, for the split (profile ``small``)."""

    profile: ScaffoldProfile
    role: Role | None = None
    query: str = ""
    plan: QueryPlan | None = None
    split_parsed: bool | None = None  # None: no split was asked for
    progress: Progress = field(default_factory=Progress)
    events: list[ScaffoldEvent] = field(default_factory=list)

    def on_start(self, state: AgentState) -> None:
        if not self.profile.query_split or self.role is None:
            return
        with state.trace.step("plan", query=self.query) as step:
            self.plan, step.outputs = split_query(self.role, self.query)
            self.split_parsed = self.plan is not None
            if self.plan is None:
                step.note("the query split did not parse: the search goes on without it")
                return
            task = state.messages[1]
            state.set_task(Message("user", [*task.parts, "\n\n" + describe_plan(self.plan)]))

    def after_turn(self, state: AgentState, turn: TurnRecord) -> None:
        self.progress = advance(self.progress, self.plan,
                                [obs.result for call, obs in turn.calls if not (obs.error or call.error)])
        repeated = bool(turn.calls) and state.guards.repeats_in_a_row >= 1
        directive = decide(self.profile, self.plan, self.progress, repeated=repeated, sent=self.sent)
        if isinstance(directive, SendBack):
            state.next_call = directive.next_call
            self._record(state, directive)
        elif isinstance(directive, AnswerOnly):
            state.guards.answer_due = True
            state.guards.answer_reminder = directive.message
            self._record(state, directive)

    def before_answer(self, state: AgentState, answer: list[str]) -> str | None:
        directive = decide(self.profile, self.plan, self.progress, answer=answer, sent=self.sent)
        if isinstance(directive, Accept):
            return None
        if isinstance(directive, SendBack):
            state.next_call = directive.next_call
        else:
            state.answer_next = True
        self._record(state, directive)
        return directive.message

    @property
    def sent(self) -> frozenset[str]:
        """The reasons of the answers already sent back (each is sent back once)."""
        return frozenset(e.reason for e in self.events if e.reason in ("scope", "target", "cover"))

    def _record(self, state: AgentState, directive: SendBack | AnswerOnly) -> None:
        kind = "send_back" if isinstance(directive, SendBack) else "answer_only"
        found = directive.found if isinstance(directive, AnswerOnly) else ()
        self.events.append(ScaffoldEvent(state.turn, kind, directive.reason, found))

    def counts(self) -> dict[str, int]:
        """The scaffold's behaviour counts for one query: the split, and each directive by reason."""
        out: dict[str, int] = {}
        if self.split_parsed is not None:
            out["scaffold.query_split"] = int(self.split_parsed)
        for e in self.events:
            key = f"scaffold.{e.kind}.{e.reason}"
            out[key] = out.get(key, 0) + 1
        return out


# --------------------------------------------------------------------------- who chose the answer


def code_lists(state: AgentState, scaffold: Scaffold) -> list[tuple[str, ...]]:
    """The lists of photos code computed and put before the model as a selection during a search: the clear
    matches a described search's text named, and the lists a directive named."""
    out = [obs.result.matches for _, obs in state.calls()
           if isinstance(obs.result, SearchResult) and obs.result.shown and obs.result.matches]
    return out + [e.found for e in scaffold.events if e.found]


def answer_origin(answer: Sequence[str], lists: Sequence[Sequence[str]], fallback: bool = False
                  ) -> tuple[str, float]:
    """Who chose an answer set: ``(origin, code_selected_share)``. The share is the fraction of the answer's photos
    that the one list computed by code covering most of them holds (0 without such a list); the origin is ``code``
    when the answer equals such a list (or a fallback answered: best candidates seen, a plain search), ``model`` when
    no photo of it is on one, else ``mixed``."""
    picked = set(answer)
    if fallback:
        return "code", 1.0
    if not picked:
        return "model", 0.0
    best = max((set(x) for x in lists), key=lambda s: (len(s & picked), -len(s)), default=set())
    share = len(best & picked) / len(picked)
    if best == picked:
        return "code", 1.0
    return ("model" if share == 0 else "mixed"), share


# --------------------------------------------------------------------------- worked examples

# The one worked example a small model's compact prompt shows (written in the protocol's own turns by the runtime):
# invented ids, dates, objects and places, and a relation (the same camera) that no shipped or generated evaluation
# query uses (tests/methods/test_prompt_overlap.py).
WORKED_EXAMPLE: dict[str, Any] = {
    "query": "Every kite shot with the camera that took the red tractor.",
    "steps": [
        {"thought": "Anchor: the red tractor. Constraint: the camera of that photo. Target: kites. First find the "
                    "anchor.",
         "tool": "ImageSearch", "arguments": {"query": "red tractor"},
         "result": "Top 3 photos for 'red tractor', best first:\n1. k52 (score 0.644)\n2. m08 (score 0.297)\n"
                   "3. r31 (score 0.270)"},
        {"thought": "k52 is the red tractor. Keep the photos taken with its camera.", "tool": "FilterMetadata",
         "arguments": {"same_as_photo": "k52", "same": ["device"], "save_as": "that_camera"},
         "result": "9 photo(s) match \"device = 'Nikon D90'\" (the same device as k52), taken 2016-08-21 10:02:40 "
                   "to 2017-03-12 16:40:05.\nSaved as subset 'that_camera'."},
        {"thought": "Search for kites among them.", "tool": "ImageSearch",
         "arguments": {"query": "kite", "search_within": "that_camera"},
         "result": "Top 3 photos for 'kite' within subset 'that_camera' (9 photos), best first:\n1. k60 (score "
                   "0.571)\n2. p14 (score 0.548)\n3. k52 (score 0.131)"},
    ],
    "answer": {"thought": "k60 and p14 show kites and were taken with that camera; k52 scores too low.",
               "ids": ["k60", "p14"]},
}
# The same example when the tools describe each photo (``describe_results``), with the clear-matches line.
WORKED_EXAMPLE_DESCRIBED: dict[str, Any] = {
    "query": "Every kite shot with the camera that took the red tractor.",
    "steps": [
        {"thought": "Anchor: the red tractor. Constraint: the camera of that photo. Target: kites. First find the "
                    "anchor.",
         "tool": "ImageSearch", "arguments": {"query": "red tractor"},
         "result": "Top 3 photos for 'red tractor', grouped by day and place, best group first "
                   "(id | score | time | caption):\n"
                   "time = '2016-08-21' and place ~ 'Quinta do Lago, Almancil':\n"
                   "k52 | 0.64 | 10:02 | A red tractor in a wheat field.\n"
                   "r31 | 0.27 | 11:15 | A kite above a hedge.\n"
                   "time = '2017-01-08' and place ~ 'Rua Augusta, Lisboa':\n"
                   "m08 | 0.30 | 09:47 | A tram on a steep street.\n"
                   "Clear matches (above the largest score drop, 0.64 -> 0.30): k52"},
        {"thought": "k52 is the red tractor. Constraint: its camera. Keep the photos taken with the same device as "
                    "k52.",
         "tool": "FilterMetadata",
         "arguments": {"same_as_photo": "k52", "same": ["device"], "save_as": "that_camera"},
         "result": "4 photo(s) match \"device = 'Nikon D90'\" (the same device as k52), taken 2016-08-21 10:02:40 "
                   "to 2017-03-12 16:40:05.\nSaved as subset 'that_camera'.\nPhotos (oldest first, grouped by day "
                   "and place; id | time | caption):\ntime = '2016-08-21' and place ~ 'Quinta do Lago, Almancil':\n"
                   "k52 | 10:02 | A red tractor in a wheat field.\n"
                   "k60 | 12:30 | Two kites over a dune.\n"
                   "time = '2017-03-12' and place ~ 'Parque Eduardo VII, Lisboa':\n"
                   "p14 | 16:38 | A striped kite in the sky.\n"
                   "p15 | 16:40 | A man holding a kite string."},
        {"thought": "Target: kites. Search for kites within that_camera.", "tool": "ImageSearch",
         "arguments": {"query": "kite", "search_within": "that_camera"},
         "result": "Top 4 photos for 'kite' within subset 'that_camera' (4 photos), grouped by day and place, best "
                   "group first (id | score | time | caption):\n"
                   "time = '2016-08-21' and place ~ 'Quinta do Lago, Almancil':\n"
                   "k60 | 0.57 | 12:30 | Two kites over a dune.\n"
                   "k52 | 0.13 | 10:02 | A red tractor in a wheat field.\n"
                   "time = '2017-03-12' and place ~ 'Parque Eduardo VII, Lisboa':\n"
                   "p14 | 0.55 | 16:38 | A striped kite in the sky.\n"
                   "p15 | 0.24 | 16:40 | A man holding a kite string.\n"
                   "Clear matches (above the largest score drop, 0.55 -> 0.24): k60, p14"},
    ],
    "answer": {"thought": "k60 and p14 show kites taken with the tractor's camera; p15 and k52 do not.",
               "ids": ["k60", "p14"]},
}


__all__ = [
    "NONE",
    "PLAN_SCHEMA",
    "PROFILES",
    "SAME",
    "SMALL",
    "WORKED_EXAMPLE",
    "WORKED_EXAMPLE_DESCRIBED",
    "Accept",
    "AnswerOnly",
    "Directive",
    "Progress",
    "QueryPlan",
    "Scaffold",
    "ScaffoldEvent",
    "ScaffoldProfile",
    "SendBack",
    "advance",
    "answer_origin",
    "code_lists",
    "decide",
    "describe_plan",
    "resolve_scaffold",
    "scaffold_from_settings",
    "split_query",
]
