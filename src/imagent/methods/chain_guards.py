"""The small-model chain guards of the album agents (PhotoCraft and ImageSeeker, JSON protocol): the query split
before the first turn (:class:`ChainPlan`), the answers sent back once when the album was not narrowed
(:class:`ScopeFirst`) or nothing was searched within the narrowed subset (:class:`TargetFirst`), the steering of
a model that circles (:class:`ChainSteer`), and PhotoCraft's completeness fact (:class:`CoverMatches`). Each is an
agent runtime hook; they name the chain's next call (``AgentState.next_call``) so the JSON grammar of that turn
offers only it. imagent's, not the papers': see ``docs/faithfulness.md`` (small-model protocol, item 10)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from string import Template
from typing import Any, NamedTuple

from imagent.agents.album_tools import clear_matches
from imagent.agents.runtime import AgentHooks
from imagent.agents.state import AgentState, NextCall, OneOf, QueryPlan, TurnRecord
from imagent.models.base import Message
from imagent.models.roles import Role

# What an answer given before the album was narrowed is told (``scope_first``).
SCOPE_FIRST = ("Not narrowed yet. Call FilterMetadata with the anchor photo as same_as_photo (same day, place or "
               "city, as the query says), then search for the TARGET within it. A query without an anchor, "
               "time or place: give your answer again.")
SCOPE_FIRST_PLAN = ("Not narrowed yet. Call FilterMetadata with same_as_photo = the photo of the {anchor}{found} and "
                    "same = {same}, then search for '{target}' within it.")
# What an answer given after the narrowing but before any search inside it is told (``target_first``).
TARGET_FIRST = ("Now find the TARGET inside {subset!r}: call ImageSearch with the target's keywords and "
                "search_within={subset!r}, then answer with the photos of that list that show the target.")
TARGET_FIRST_PLAN = ("Now call ImageSearch with {{\"query\": \"{target}\", \"search_within\": \"{subset}\"}}, then "
                     "answer with the photos of that list that show {target}.")

# What an answer that leaves out clear matches of the chain's last search is told (``audit_matches``).
COVER_MATCHES = ("AUDIT, COMPLETENESS: {found} Your answer leaves out {missed}. Give your final answer again now: "
                 "every photo of those clear matches that shows {target}.")
# What an answer holding clear matches of another trip than the one a time relation names is told.
COVER_TRIP = ("AUDIT, CONSTRAINT: the query asks for the {which} trip {relation} the anchor's day; your answer holds "
              "{outside}, from another trip. {found} Give your final answer again now: the photos of that trip "
              "that show {target}.")


# The query split a small model makes before its first turn (``chain_plan``): the decomposition the papers' prompts ask
# for in the agent's reasoning, as one grammar-constrained call. The example is the worked example's query.
PLAN_PROMPT = Template("""Split a photo-album search into three parts:
- anchor: the thing or moment that identifies the event, found first (short keywords);
- same: what the wanted photos share with the anchor's photo: "day" (taken on that same day), "place" or "city";
  or when they were taken: "after" (a later trip or time: "the first trip after the day I saw ..."), "before" (an
  earlier one), "other visit" (another visit to the anchor's place); or "none" (no anchor);
- target: what the wanted photos show (short keywords).
Examples: "The dogs I photographed on the day I saw the lighthouse." -> {"anchor": "lighthouse", "same": "day", \
"target": "dog"}
"The boats from my next holiday after the day I photographed the volcano." -> {"anchor": "volcano", "same": \
"after", "target": "boat"}
Search: "$query"
Answer with the JSON object only.""")
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"anchor": {"type": "string", "minLength": 1, "maxLength": 60},
                   "same": {"enum": ["day", "place", "city", "after", "before", "other visit", "none"]},
                   "target": {"type": "string", "minLength": 1, "maxLength": 60}},
    "required": ["anchor", "same", "target"], "additionalProperties": False,
}


class ChainPlan(AgentHooks):
    """Before the first turn the agent's model splits the query into its anchor, what the answer shares with it and
    its target (one call under :data:`PLAN_SCHEMA`, kept as ``AgentState.plan``); the split is added to the task
    message, and :class:`ScopeFirst` and :class:`TargetFirst` name the concrete next call from it. A split that does
    not parse leaves the search as it was (noted in the trace)."""

    def __init__(self, role: Role, query: str) -> None:
        self.role = role
        self.query = query

    def on_start(self, state: AgentState) -> None:
        with state.trace.step("plan", query=self.query) as step:
            value, ok = self.role.json([Message.user(PLAN_PROMPT.substitute(query=self.query))], PLAN_SCHEMA,
                                       fallback=lambda: None, retries=1, max_tokens=80)
            if not ok or not isinstance(value, dict):
                step.note("the query split did not parse: the search goes on without it")
                step.outputs = {"parsed": False}
                return
            plan = QueryPlan(*(" ".join(str(value[k]).split()) for k in ("anchor", "same", "target")))
            if plan.same in RELATION and not TIME_ORDER.search(self.query):
                step.note(f"the split's {plan.same!r} has no word of time order in the query: read as 'day'")
                plan = QueryPlan(plan.anchor, "day", plan.target)
            state.plan = plan
            step.outputs = {"parsed": True, "anchor": plan.anchor, "same": plan.same, "target": plan.target}
            task = state.messages[1]
            state.set_task(Message("user", [*task.parts, "\n\n" + describe_plan(plan)]))


# The split's ``same`` as the FilterMetadata photo form's ``same`` list, and as the task message words it.
PLAN_SAME = {"other visit": ["place", "other_day"]}
PLAN_KEEP = {"after": "the photos taken after its day", "before": "the photos taken before its day",
             "other visit": "the photos of its place on other days"}
# The time relations whose answer is one trip: the first after the anchor's day, the last before it.
RELATION = {"after": ("first", "after"), "before": ("last", "before")}
# A relation in time is one the query states: a split's "after" or "before" for a query without one of these words
# is read as "day" (the 0.5B gave "after" to "the concert where I saw the fireworks in September").
TIME_ORDER = re.compile(r"\b(after|before|next|previous|following|later|earlier|last|prior|since|until|then)\b",
                        re.IGNORECASE)


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


def calls_that_ran(state: AgentState) -> Any:
    """The (call, observation) pairs of the run that neither the guards nor the tool refused, oldest first."""
    return ((call, obs) for turn in state.turns for call, obs in turn.calls if not (obs.error or call.error))


def searches_within(state: AgentState) -> list[Any]:
    """The (call, observation) pairs of the ImageSearch calls that ran within a saved subset, oldest first."""
    return [(c, o) for c, o in calls_that_ran(state) if c.name == "ImageSearch" and c.arguments.get("search_within")]


def target_searches(state: AgentState, plan: QueryPlan) -> list[Any]:
    """The (call, observation) pairs of the searches that ran the last link of the split's chain, oldest first:
    for an anchored split an ImageSearch within a saved subset (:func:`searches_within`); for a split without an
    anchor (``same`` "none") an ImageSearch whose query names the split's target."""
    if plan.same != "none":
        return searches_within(state)
    target = plan.target.lower()
    return [(c, o) for c, o in calls_that_ran(state)
            if c.name == "ImageSearch" and target in str(c.arguments.get("query", "")).lower()]


def scored_photos(obs: Any) -> list[str]:
    """A search's scored photos, best first."""
    return [i for i in obs.photos if i in obs.scores]


def search_matches(ranked: list[str], obs: Any) -> list[str]:
    """The photos of ``ranked`` (:func:`scored_photos`) above the search's largest score drop: its clear matches."""
    return ranked[:clear_matches([obs.scores[i] for i in ranked])]


def anchor_photos(state: AgentState, plan: QueryPlan) -> list[str]:
    """The clear matches, best first, of the last search for the split's anchor (an ImageSearch over the whole album
    whose query shares a word with the anchor): the photos the anchor can be. Empty before such a search ran. The
    0.5B, sent to FilterMetadata, named the top photo of its latest search instead, a target's (held-out h06, h07)."""
    words = {w for w in plan.anchor.lower().split() if len(w) > 2} or set(plan.anchor.lower().split())
    for call, obs in reversed(list(calls_that_ran(state))):
        query = str(call.arguments.get("query", "")).lower().split()
        if call.name == "ImageSearch" and not call.arguments.get("search_within") and words & set(query):
            return search_matches(scored_photos(obs), obs)
    return []


def narrowing_call(plan: QueryPlan, photos: list[str]) -> NextCall:
    """FilterMetadata with the split's ``same``, its photo one of ``photos`` (:func:`anchor_photos`) when the
    anchor was searched."""
    return NextCall("FilterMetadata", {"same": plan_same(plan)} | ({"same_as_photo": OneOf(tuple(photos))}
                                                                   if photos else {}))


class ChainMatches(NamedTuple):
    """The chain's last search (its call), the photos it found that show the target, best first (its clear
    matches; with a time relation those scoring in the upper half of its range), and those the split asks for."""

    call: Any
    matches: list[str]
    wanted: list[str]
    # With a time relation: every photo of the search's results on another trip than the wanted one.
    elsewhere: frozenset[str] = frozenset()


def chain_matches(state: AgentState, plan: QueryPlan, gap_days: float = 1.0) -> ChainMatches | None:
    """The chain's last search (:func:`target_searches`), the photos it found that show the target and those the
    split asks for: without a time relation its clear matches (the photos above its largest score drop, the line
    its described result ended with), all of them; with one (``after``, ``before``: :data:`RELATION`) the trip it
    names (:func:`relation_trip`). None before that search ran or when it scored nothing."""
    searches = target_searches(state, plan)
    if not searches:
        return None
    call, obs = searches[-1]
    ranked = scored_photos(obs)
    if not ranked:
        return None
    if plan.same not in RELATION:
        matches = search_matches(ranked, obs)
        return ChainMatches(call, matches, matches)
    likely, wanted, trip = relation_trip(ranked, obs.scores, obs.data.get("times") or {}, plan.same, gap_days)
    return ChainMatches(call, likely, wanted, frozenset(i for i in ranked if i not in trip))


def describe_found(found: ChainMatches, plan: QueryPlan) -> str:
    """The chain's result in words: its last search and the photos the split asks for (with a time relation, the
    clear matches of the trip it names)."""
    within = found.call.arguments.get("search_within")
    text = (f"Your search for {str(found.call.arguments.get('query', ''))!r}"
            + (f" within {str(within)!r}" if within else ""))
    if plan.same in RELATION:
        which, relation = RELATION[plan.same]
        return (text + f" found its clear matches on the {which} trip {relation} the anchor's day, best first: "
                + (", ".join(found.wanted) or "none") + ".")
    return text + " found these clear matches, best first: " + ", ".join(found.matches) + "."


def trips(photos: list[str], times: dict[str, str], gap_days: float) -> list[list[str]]:
    """``photos`` with a time as trips, oldest first: runs of photos whose days are at most ``gap_days`` apart."""
    timed = sorted((datetime.fromisoformat(times[i]), i) for i in photos if times.get(i))
    out: list[list[str]] = []
    last = None
    for when, photo in timed:
        if last is None or (when.date() - last.date()).days > gap_days:
            out.append([])
        out[-1].append(photo)
        last = when
    return out


def relation_trip(ranked: list[str], scores: dict[str, float], times: dict[str, str], relation: str,
                  gap_days: float) -> tuple[list[str], list[str], list[str]]:
    """The trip a time relation names among a target search's results (all within the days after, or before, the
    anchor's day): the results are grouped into trips (:func:`trips`); the photos that show the target are those
    scoring in the upper half of the results' range (a search over many trips has several clear levels, one a
    trip, and its largest drop can leave one trip alone above it); the trip named is the first with such a photo
    (``after``; ``before``: the last), and the photos wanted are that trip's results above their own largest score
    drop, and at least those in that upper half. Returns (the photos that show the target, those wanted, the
    trip's results), each best first."""
    if not ranked:
        return [], [], []
    top, low = scores[ranked[0]], min(scores[i] for i in ranked)
    likely = [i for i in ranked if scores[i] >= (top + low) / 2]
    groups = trips(ranked, times, gap_days)
    if relation == "before":
        groups.reverse()
    for trip in groups:
        if any(i in likely for i in trip):
            own = [i for i in ranked if i in trip]
            cut = max(clear_matches([scores[i] for i in own]), sum(1 for i in own if i in likely))
            return likely, own[:cut], own
    return likely, [], []


class ScopeFirst(AgentHooks):
    """Sends a proposed answer back once when nothing has narrowed the album yet (no successful FilterMetadata
    call, no ImageSearch ``search_within``): the anchor -> constraint -> target chain a small model skips, answering
    from the anchor's own search. The second answer stands (a query without an anchor loses one turn)."""

    def __init__(self) -> None:
        self.sent = False

    @staticmethod
    def narrowed(state: AgentState) -> bool:
        return any(call.name == "FilterMetadata" or call.arguments.get("search_within")
                   for call, _ in calls_that_ran(state))

    def before_answer(self, state: AgentState, answer: list[str]) -> str | None:
        plan = state.plan
        if self.sent or self.narrowed(state) or (plan is not None and plan.same == "none"):
            return None
        self.sent = True
        if plan is None:
            state.next_call = NextCall("FilterMetadata")
            return SCOPE_FIRST
        photos = anchor_photos(state, plan)
        state.next_call = narrowing_call(plan, photos)
        found = f" ({' or '.join(photos[:5])}, found by your search)" if photos else ""
        return SCOPE_FIRST_PLAN.format(anchor=plan.anchor, found=found, same=json.dumps(plan_same(plan)),
                                       target=plan.target)


class TargetFirst(AgentHooks):
    """Sends a proposed answer back once when the album was narrowed (a FilterMetadata result, saved as a subset)
    but no ImageSearch has looked for the target inside a saved subset since: the last link of the anchor ->
    constraint -> target chain, which a small model skips by answering with the anchor or one listed photo. The
    second answer stands."""

    def __init__(self) -> None:
        self.sent = False

    @staticmethod
    def unsearched_subset(state: AgentState) -> str | None:
        """The subset of the last narrowing when no ImageSearch ran within a subset after it, else None."""
        subset: str | None = None
        for call, obs in calls_that_ran(state):
            if call.name == "FilterMetadata" and obs.data.get("subset"):
                subset = str(obs.data["subset"])
            elif call.name == "ImageSearch" and call.arguments.get("search_within"):
                subset = None
        return subset

    def before_answer(self, state: AgentState, answer: list[str]) -> str | None:
        if self.sent:
            return None
        subset = self.unsearched_subset(state)
        if subset is None:
            return None
        self.sent = True
        if state.plan is not None:
            state.next_call = NextCall("ImageSearch", {"query": state.plan.target, "search_within": subset})
            return TARGET_FIRST_PLAN.format(subset=subset, target=state.plan.target)
        state.next_call = NextCall("ImageSearch", {"search_within": subset})
        return TARGET_FIRST.format(subset=subset)


class ChainSteer(AgentHooks):
    """After a turn whose call only repeated an earlier one (refused by the runtime's guard: a small model circling,
    e.g. a refused ImageSearch, then a new GetMetadata, then the refused ImageSearch again), the next turn must make
    the chain's next call from the query split (``AgentState.plan``): FilterMetadata with the split's ``same`` while
    nothing narrowed the album (the model names the anchor photo), then ImageSearch for the split's target within
    the saved subset. A split without an anchor (``same`` "none") has a one-link chain, the ImageSearch for its
    target, as the task message states it (the 0.5B searched the query's other noun instead and circled for 32
    calls, q20 of the mini album). Once the chain is done, such a turn ends the search with the request for the
    answer (the stuck guard's, ``GuardState.answer_due``): the 0.5B otherwise kept repeating calls until the stuck
    guard's three repeats in a row, or re-narrowed to another anchor (q07 of the mini album), which does not reopen
    the chain: once its last search ran, the chain is done."""

    def __init__(self, gap_days: float = 1.0) -> None:
        self.gap_days = gap_days

    @staticmethod
    def reminder(state: AgentState, plan: QueryPlan, gap_days: float = 1.0) -> str:
        """The chain's result restated for the request for the answer: the chain's last search (within a subset,
        or for the target of a split without an anchor) and its clear matches (:func:`chain_matches`), with a
        time relation those of the trip it names. The 0.5B otherwise answered from a thought about another photo,
        turns after the search that held the answer (q07 of the mini album)."""
        found = chain_matches(state, plan, gap_days)
        return describe_found(found, plan) if found is not None else ""

    def after_turn(self, state: AgentState, turn: TurnRecord) -> None:
        plan = state.plan
        if plan is None or not turn.calls or state.guards.repeats_in_a_row < 1:
            return
        if target_searches(state, plan):  # the chain ran once: done, even if the model narrowed to another anchor
            state.guards.answer_due = True
            state.guards.answer_reminder = self.reminder(state, plan, self.gap_days)
            return
        if plan.same == "none":
            if plan.target:
                state.next_call = NextCall("ImageSearch", {"query": plan.target})
                state.trace.count("agent.chain_steered")
            return
        if not ScopeFirst.narrowed(state):
            state.next_call = narrowing_call(plan, anchor_photos(state, plan))
            state.trace.count("agent.chain_steered")
            return
        subset = TargetFirst.unsearched_subset(state)
        if subset is not None:
            state.next_call = NextCall("ImageSearch", {"query": plan.target, "search_within": subset})
            state.trace.count("agent.chain_steered")


class CoverMatches(AgentHooks):
    """PhotoCraft's completeness check (A.3.1: were all the photos that match found?) as a fact a small model can
    use: an answer that leaves out clear matches of the chain's last search (:func:`target_searches`; the photos
    above its largest score drop, the line its described result ended with) is sent back once, naming them, and the
    next turn is the revised answer (``AgentState.answer_next``: no tools). The second answer stands, and the
    model may still leave a photo out that does not show the target. The 0.5B answered one photo of a search whose
    clear matches were two or nine (the answer the search had found, left unread).

    With a time relation in the split (``after``: the first trip after the anchor's day; ``before``: the last
    before it) the check is also the audit's constraint check: the clear matches of the trip the relation names are
    the ones to cover (:func:`chain_matches`), and an answer holding clear matches of another trip is sent back,
    naming them (counted ``agent.matches_outside``)."""

    def __init__(self, gap_days: float = 1.0) -> None:
        self.sent = False
        self.gap_days = gap_days

    def before_answer(self, state: AgentState, answer: list[str]) -> str | None:
        plan = state.plan
        if self.sent or plan is None:
            return None
        found = chain_matches(state, plan, self.gap_days)
        if found is None:
            return None
        missed = [i for i in found.wanted if i not in answer]
        outside = [i for i in answer if i in found.elsewhere] if found.wanted else []
        if not missed and not outside:
            return None
        self.sent = True
        state.answer_next = True
        reminder = describe_found(found, plan)
        if outside:
            state.trace.count("agent.matches_outside", len(outside))
            which, relation = RELATION[plan.same]
            return COVER_TRIP.format(which=which, relation=relation, outside=", ".join(outside), found=reminder,
                                     target=plan.target)
        state.trace.count("agent.matches_missed", len(missed))
        return COVER_MATCHES.format(found=reminder, missed=", ".join(missed), target=plan.target)
