"""The ``album`` method's readings of a plan against its search's own words (code, no model; each a note in the
trace's ``album.assemble`` step): what the model left out and where it belongs (the target a wh-question asks for,
an anchor written as the target, a place written as the anchor of a time, a day within a trip, the thing the search
rules out, a visit the words do not count, the command as the target, a place of only place words), and which
words of the search a plan left unused (the check's trigger). :mod:`imagent.methods.album.method` applies them in
order before each execution; ``docs/album.md`` ("More readings of what the model left out") describes each."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from imagent.methods.album.plan import (
    GENERIC_TARGETS,
    NEGATIONS,
    NUMBER_WORDS,
    ORDINALS,
    OTHER_WORDS,
    RELATIONS,
    SEASON_NAMES,
    SPAN_EDGE_STOP,
    UNIT_WORDS,
    Hop,
    Plan,
    query_tokens,
    spans,
    stem,
)
from imagent.tools.query_reader import COMMAND_WORDS
from imagent.tools.timeline import Timeline

# Words of the search that a plan needs not use: the words of the relations (the table's names and units, and the
# words people use for them). Only for "which words did the plan leave unused" (the check's trigger): they never
# narrow what a plan may say.
RELATION_WORDS = frozenset(stem(w) for w in (
    *(w for r in RELATIONS.values() for w in (*r.name.split(), *r.unit.split())),
    "trip", "trips", "journey", "holiday", "vacation", "getaway", "outing", "excursion", "tour", "travel", "stay",
    "visit", "visits", "time", "times", "occasion", "day", "days", "week", "weeks", "weekend", "fortnight", "month",
    "months", "season", "year", "years", "spot", "location", "site", "town", "city", "place", "later", "earlier",
    "following", "followed", "preceding", "prior", "ahead", "previous", "next", "last", "first", "then", "once",
    "another", "different", "other", "again", "same", "whole", "entire", "ago", "since", "until", "came", "went",
    "been", "back", "away", "anywhere", "ones", "everything", "album", "ever", "own", "remember", "too", "which",
    "lot", "kind", "sort", "anything", "something", "out", "ones", *SEASON_NAMES, "fall", *NUMBER_WORDS, *ORDINALS,
    *NEGATIONS, *GENERIC_TARGETS))

def find_words(text: str, part: str, start: int = 0) -> tuple[int, int] | None:
    """Where ``part`` (words, any case) stands in ``text``, as character offsets."""
    if not part:
        return None
    m = re.compile(r"(?<![\w])" + r"\W+".join(re.escape(w) for w in part.split()) + r"(?![\w])",
                   re.I).search(text, start)
    return (m.start(), m.end()) if m else None


def unused_thing(unused: list[str], query: str) -> str:
    """The longest run of the search's words that are all among ``unused`` (one thing the plan left out: "big eared
    rabbit"); "" when there is none."""
    left = {w.lower() for w in unused}
    runs = [r for r in spans([t.lower() for t in query_tokens(query)])
            if all(w in left or w in JOINERS for w in r.split())]
    return max(runs, key=lambda r: len(r.split())) if runs else ""


# Words inside the name of one thing the plan left out ("pair of pliers", "head of lettuce").
JOINERS = frozenset({"of"})


WH_WORDS = frozenset({"which", "what", "whichever", "whatever"})


def asked_thing(query: str) -> str:
    """The thing a wh-question asks for: the run of words right after "which" or "what" ("which fish did I
    photograph ...": "fish"; "what musical instruments ...": "musical instruments"); "" when the word after it is
    no thing ("what did I photograph", "which day", "what kind of")."""
    tokens = [t.lower() for t in query_tokens(query)]
    for i, t in enumerate(tokens[:-1]):
        if t not in WH_WORDS:
            continue
        run = []
        for w in tokens[i + 1:]:
            if w in SPAN_EDGE_STOP or stem(w) in RELATION_WORDS or w.isdigit():
                break
            run.append(w)
        if run:
            return " ".join(run)
    return ""


def same_words(a: str, b: str) -> bool:
    return [stem(w.lower()) for w in query_tokens(a)] == [stem(w.lower()) for w in query_tokens(b)]


def target_asked(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan whose target is not the thing a wh-question asks for, that thing left unused: it is the target
    ("the shrimp trip: which mammals did I take the day I saw the tent" planned with target "shrimp"); the model's
    target is then left unused, for the check to place."""
    asked = asked_thing(query)
    left = {stem(w.lower()) for w in unused}
    if not asked or same_words(asked, plan.target) or not all(stem(w) in left for w in asked.split()):
        return plan
    return replace(plan, target=asked, notes=[*plan.notes, f"the search asks {asked!r} (which / what {asked}), left "
                                              f"unused: the target is {asked!r}, not {plan.target!r}"])


def said_first(target: str, unused: list[str], query: str) -> bool:
    """Whether the words of ``target`` come, in a row, before every word of ``unused`` in the search (by stem:
    "fruit" is said in "the fruits from ...")."""
    tokens = [stem(t.lower()) for t in query_tokens(query)]
    where = _span_at(tokens, target) if target else None
    if where is None or not unused:
        return False
    left = {stem(w.lower()) for w in unused}
    return all(where[0] < i for i, t in enumerate(tokens) if t in left)


def target_from_unused(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan whose anchor the model also wrote as its target (:attr:`Plan.circular`), when the search names one
    other thing the plan left out: that thing is the target, and the dropped hop is given back ("the fruit I took
    the day I saw the red apple" planned as target and anchor "red apple": the fruit on the red apple's day; "pics
    of fruit on red apple day", read as every photo of that day, likewise)."""
    if plan.circular is None or (plan.hops and not plan.every_photo):
        return plan
    thing = unused_thing(unused, query)
    if not thing:
        return plan
    asked = asked_thing(query)
    if asked and same_words(asked, plan.target) and not plan.hops:  # "which vehicles ... where I saw the lionfish"
        return replace(plan, hops=[replace(plan.circular, anchor=thing, content=thing, clues="")], circular=None,
                       notes=[*plan.notes, f"the plan wrote the asked {asked!r} as its anchor too and left {thing!r} "
                              f"unused: {thing!r} is the anchor, in {plan.circular.relation!r}"])
    return replace(plan, target=thing, hops=plan.hops or [plan.circular], circular=None,
                   notes=[*plan.notes, f"the plan wrote its anchor {plan.circular.anchor!r} as its target and left "
                          f"{thing!r} unused: {thing!r} is the target, in {plan.circular.relation!r} to the anchor"])


# The units of relations of time: their anchor is a moment (a thing photographed), not where the photos were taken.
TIME_UNITS = frozenset({"day", "trip", "trip day", "week", "month", "season", "year", "occasion"})


def place_from_anchor(plan: Plan, unused: list[str], query: str, tl: Timeline, reading: Any = None) -> Plan:
    """The plan whose one hop of time is anchored on a place while a thing of the search is left unused: the place
    is where the wanted photos were taken and the thing is the anchor ("the houses at the castle the autumn after
    the round tower" planned as the autumn after the castle, the tower unused). The anchor is a place when it is
    only a place the reader linked ("in Bergen": the link then filters the target, :func:`assemble`) or its words
    all name a place of the album by stem (the plan's place). Not when the place is said right after the thing
    (at most two words between): "the birds the year after I saw the crane in Kyoto" says where the crane was; "on
    the trip with the deer, what mammals did I photograph at the beach?" where the mammals were."""
    if len(plan.hops) != 1 or plan.hops[0].rel.unit not in TIME_UNITS:
        return plan
    hop = plan.hops[0]
    thing = unused_thing(unused, query)
    tokens = [stem(t.lower()) for t in query_tokens(query)]
    at, of = (_span_at(tokens, hop.anchor), _span_at(tokens, thing)) if thing else (None, None)
    if at is None or of is None or 0 <= at[0] - of[1] <= 2:
        return plan
    linked = _only_linked_place(hop.anchor, reading, query)
    if not linked and (plan.place or not tl.named_place_mask(hop.anchor).any()):
        return plan
    note = (f"anchor {hop.anchor!r} is a place and {thing!r} was left unused: the wanted photos were taken at "
            f"{hop.anchor!r}, the anchor is {thing!r}")
    return replace(plan, place=plan.place if linked else hop.anchor,
                   hops=[Hop(thing, hop.relation, hop.count, hop.season, link=hop.link)], notes=[*plan.notes, note])


def _span_at(tokens: list[str], run: str) -> tuple[int, int] | None:
    """Where the words of ``run`` (by stem) stand in the search's stemmed ``tokens``: (first, last + 1)."""
    ws = " ".join(stem(w.lower()) for w in query_tokens(run))
    start = _position(tokens, ws) if ws else None
    return None if start is None else (start, start + len(ws.split()))


def _only_linked_place(anchor: str, reading: Any, query: str) -> bool:
    """Whether ``anchor``'s words in the search are places the reader linked and framing words only."""
    where = find_words(query, anchor)
    if reading is None or where is None:
        return False
    rest = query[where[0]: where[1]]
    places = [s for s in reading.spans if s.kind == "place" and where[0] <= s.start and s.end <= where[1]]
    for s in sorted(places, key=lambda s: -s.start):
        rest = rest[: s.start - where[0]] + " " + rest[s.end - where[0]:]
    return bool(places) and all(w.lower() in SPAN_EDGE_STOP for w in query_tokens(rest))


def place_from_unused(plan: Plan, unused: list[str], tl: Timeline) -> Plan:
    """The plan with a place its words name: when it has none and one of the search's words it left unused names a
    place of the album (by stem: "the gardens" ~ "Botanical Garden"), the wanted photos were taken there ("the
    birds at the gardens on my kite trip" planned without the gardens)."""
    if plan.place or not unused:
        return plan
    named = [w for w in unused if tl.named_place_mask(w).any()]
    if not named:
        return plan
    return replace(plan, place=named[0], notes=[*plan.notes, f"{named[0]!r} names a place of the album the plan left "
                                                "unused: the wanted photos' place"])


DAY_WORDS = frozenset({"day", "days"})
TRIP_WORDS = frozenset({"trip", "journey", "holiday", "vacation", "getaway", "outing", "tour", "excursion", "stay"})


def day_within_trip(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan with the day the search names inside a trip it names, when the model wrote one hop of the two:
    "the fruit from the day of the tamarin during my koala trip" planned as the koala's trip (the tamarin unused)
    is the tamarin's day (hop 1, ``same day``) on the koala's trip (hop 2, ``same trip``). Only when the search
    says both a day and a trip (no visit: "my shrimp trip" is not a visit), the one hop is of a day, a trip or a
    visit, the words the plan left unused are one thing (a run of the search), and the words tie that thing and the
    anchor to different ones of the two (:func:`_unit_of`); otherwise the plan as is."""
    if len(plan.hops) != 1 or plan.hops[0].rel.unit not in ("day", "trip", "trip day", "visit") or not unused:
        return plan
    tokens = [t.lower() for t in query_tokens(query)]
    days = [i for i, t in enumerate(tokens) if t in DAY_WORDS]
    trips = [i for i, t in enumerate(tokens) if t in TRIP_WORDS]
    if not days or not trips:
        return plan
    thing = unused_thing(unused, query)
    if not thing:
        return plan
    anchor = " ".join(w for w in plan.hops[0].anchor.split() if w.lower() not in DAY_WORDS | TRIP_WORDS)
    if not anchor:
        return plan
    kinds = {name: _unit_of(tokens, name, days, trips) for name in (thing, anchor)}
    if None in kinds.values() or kinds[thing] == kinds[anchor]:
        return plan  # which thing names the day and which the trip is not clear from the words
    on_day, on_trip = (thing, anchor) if kinds[thing] == "day" else (anchor, thing)
    hops = [Hop(on_day, "same day", link=plan.hops[0].link), Hop(on_trip, "same trip")]
    return replace(plan, hops=hops, notes=[*plan.notes, f"the search names a day ({on_day!r}) on a trip ({on_trip!r}) "
                                           "and the plan had one of them: the day of the one on the trip of the other"])


def _unit_of(tokens: list[str], run: str, days: list[int], trips: list[int]) -> str | None:
    """Whether the thing ``run`` names a day or a trip in the search's words: the unit word right after it ("the
    hammer day", "my koala trip"), else the nearest one before it ("the day I saw the wrench", "the trip where I
    photographed the rabbit", "the day of the tamarin"); None when neither."""
    start = _position(tokens, run)
    if start is None:
        return None
    end = start + len(run.split())
    if end in days or end in trips:
        return "day" if end in days else "trip"
    before = [i for i in (*days, *trips) if i < start]
    if not before:
        return None
    return "day" if max(before) in days else "trip"


def _position(tokens: list[str], run: str) -> int | None:
    """Where the words of ``run`` begin in ``tokens`` (lower case), None when they are not there in a row."""
    ws = run.lower().split()
    return next((i for i in range(len(tokens) - len(ws) + 1) if tokens[i: i + len(ws)] == ws), None)


# Words after which a search names what it rules out ("except the beach", "did not take at the castle", "minus the
# garden ones", "apart from the zoo"); "but" and "than" only after "anywhere" / "other" ("anywhere but the hill").
EXCLUSION_MARKERS = frozenset({"except", "excluding", "exclude", "excepting", "minus", "besides", "without",
                               "barring", "not", "apart", "aside", "ignoring", "omitting", "skipping"})
_EXCLUSION_AFTER = {"but": frozenset({"anywhere", "everywhere", "all", "everything", "nothing"}),
                    "than": frozenset({"other", "rather"}), "out": frozenset({"leave", "leaving", "left"})}
# Words between the marker and the thing it rules out ("not counting the ones from the garden").
_EXCLUSION_SKIP = frozenset({"counting", "including", "include", "showing", "show", "shows", "those", "ones", "out",
                             "from", "anything", "any"})


# Words for a place that end a place's name ("the old town", "the market square"): inside a thing ruled out.
PLACE_NOUNS = UNIT_WORDS["city"] | UNIT_WORDS["place"]


def excluded_thing(query: str) -> str:
    """The thing the search rules out: the first run of words naming a thing after a word of exclusion
    (:data:`EXCLUSION_MARKERS`; "n't"), at most four words, "of" inside ("except the head of lettuce"); "" when the
    search rules nothing out."""
    tokens = [t.lower() for t in query_tokens(query)]
    for i, t in enumerate(tokens):
        marker = t in EXCLUSION_MARKERS or re.search(r"n['’]t$", t) or (
            t in _EXCLUSION_AFTER and i > 0 and tokens[i - 1] in _EXCLUSION_AFTER[t]) or (
            t == "away" and tokens[i + 1: i + 2] == ["from"])
        if not marker:
            continue
        j = i + 1
        while j < len(tokens) and (tokens[j] in SPAN_EDGE_STOP or tokens[j] in _EXCLUSION_SKIP
                                   or tokens[j] in EXCLUSION_MARKERS):
            j += 1
        run: list[str] = []
        while j < len(tokens) and len(run) < 4:
            w = tokens[j]
            if w in JOINERS and run and j + 1 < len(tokens) and tokens[j + 1] not in SPAN_EDGE_STOP:
                run.append(w)
            elif w in SPAN_EDGE_STOP or w in _EXCLUSION_SKIP or w.isdigit() or (
                    stem(w) in RELATION_WORDS and not (run and w in PLACE_NOUNS)):  # "the old town", not "day"
                break
            else:
                run.append(w)
            j += 1
        if run:
            return " ".join(run)
    return ""


def _stems(text: str) -> set[str]:
    return {stem(w.lower()) for w in query_tokens(text) if w.lower() not in SPAN_EDGE_STOP}


def exclusion_from_words(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan with the thing the search rules out (:func:`excluded_thing`) as its exclusion, when it has none:
    "the houses on my circus tent trip but not at the lighthouse point" planned with the lighthouse point as the
    anchor (or the target, or the place) and the circus tent unused is the circus tent's trip without the
    lighthouse point. The thing left out takes the anchor's (or the target's) place; an anchor with no such thing
    is dropped, a target with none stays as is."""
    said = excluded_thing(query)
    if not said:
        return plan
    ruled = _stems(said)
    hit = [k for k, h in enumerate(plan.hops) if _stems(h.anchor) & ruled]
    on_target = bool(_stems(plan.target) & ruled) and not plan.every_photo
    on_place = bool(plan.place) and bool(_stems(plan.place) & ruled)
    used = set().union(*(_stems(t) for t in (plan.target, plan.place, *(h.anchor for h in plan.hops))))
    other = plan.exclude and not _stems(plan.exclude) & ruled  # the model ruled out another thing of the search
    if (not hit and not on_target and not on_place and (ruled & used or plan.exclude)) or (
            other and not hit and not on_target):
        return plan
    # the thing that takes the place of the one ruled out: the model's own exclusion when it named another thing
    # ("flowers on the trip with the brown potato, away from the harbour" planned as the harbour's trip without
    # the potato), else the thing the plan left out
    thing = plan.exclude if other else unused_thing(unused, query)
    if on_target and not thing:
        return plan
    hops = list(plan.hops)
    for k in hit:
        hops[k] = replace(hops[k], anchor=thing, content=thing, clues="") if thing else None
    hops = [h for h in hops if h is not None]
    note = f"the search rules out {said!r}: the plan's exclusion"
    if hit or on_target:
        note += f"; {thing!r}, left unused, takes its place" if thing else "; its hop is dropped"
    return replace(plan, target=thing if on_target else plan.target, hops=hops, exclude=said,
                   place="" if on_place else plan.place, notes=[*plan.notes, note])


def _ranked_words(query: str) -> bool:
    tokens = [t.lower() for t in query_tokens(query)]
    return any(t in ORDINALS or re.fullmatch(r"\d+(st|nd|rd|th)", t) for t in tokens)


def trip_from_visit(plan: Plan, query: str, tl: Timeline, reading: Any = None) -> Plan:
    """The plan with a ``visit`` hop whose rank the search does not say ("my hippopotamus trip", "the holiday
    where I saw the crane": no "first", "second", "last"), or an ``other visit`` hop where it says no "other",
    "another" or "different", read as the anchor's trip: a visit is counted only when the words count it. Not for
    an anchor that is a place ("my trip to Kyoto": its visits are the place's)."""
    tokens = {t.lower() for t in query_tokens(query)}
    uncounted = set() if _ranked_words(query) else {"visit"}
    uncounted |= set() if tokens & OTHER_WORDS else {"other visit"}
    if not any(h.relation in uncounted for h in plan.hops):
        return plan
    hops, changed = [], []
    for h in plan.hops:
        place = _only_linked_place(h.anchor, reading, query) or tl.named_place_mask(h.anchor).any()
        if h.relation in uncounted and not place:
            h = replace(h, relation="same trip", count=0)
            changed.append(h.anchor)
        hops.append(h)
    if not changed:
        return plan
    return replace(plan, hops=hops, notes=[*plan.notes, "the search counts no visit: the visit of "
                                           + ", ".join(repr(a) for a in changed) + " read as 'same trip'"])


def target_not_command(plan: Plan, unused: list[str], query: str, reading: Any = None) -> Plan:
    """The plan whose target is the search's command ("Show me everything from ..." planned with target "show"; the
    query reader marks a command as framing): the thing left out is the target, else every photo."""
    t = [w.lower() for w in query_tokens(plan.target)]
    if reading is None or len(t) != 1 or t[0] not in COMMAND_WORDS or not any(
            s.kind == "frame" and s.text.lower() == t[0] for s in reading.spans):
        return plan
    thing = unused_thing(unused, query) or "photos"
    return replace(plan, target=thing, notes=[*plan.notes, f"target {plan.target!r} is the search's command: the "
                                              f"target is {thing!r}"])


def place_not_unit(plan: Plan) -> Plan:
    """The plan whose place is only a word for a place or town ("the town where I saw ...") names no place."""
    ws = [w.lower() for w in query_tokens(plan.place)]
    if not ws or not all(w in SPAN_EDGE_STOP or w in PLACE_NOUNS for w in ws):
        return plan
    return replace(plan, place="", notes=[*plan.notes, f"place {plan.place!r} is no place's name: not applied"])


def unused_words(plan: Plan, reading: Any, query: str) -> list[str]:
    """The search's words that name something (not function words, framing, relations, numbers, or what the
    reader linked) and that no field of the plan uses (the anchor it wrote as its target counts as used: "huge" of
    "the huge dump truck" when the target was "dump truck")."""
    circular = (plan.circular.anchor,) if plan.circular is not None else ()
    used = {stem(w.lower()) for part in (plan.target, plan.place, plan.exclude, *(h.anchor for h in plan.hops),
                                         *circular) for w in query_tokens(part)}
    linked: set[int] = set()
    if reading is not None:
        for s in reading.spans:
            if s.kind in ("person", "place", "time", "trip_day", "frame"):
                linked.update(range(s.start, s.end))
    out = []
    for m in re.finditer(r"[^\W_]+(?:['’-][^\W_]+)*", query):
        w = m.group(0).lower()
        if m.start() in linked or w in SPAN_EDGE_STOP or stem(w) in RELATION_WORDS or w.isdigit() or \
                stem(w) in used or re.fullmatch(r"\d+(st|nd|rd|th)", w) or len(w) < 3:
            continue
        out.append(m.group(0))
    return list(dict.fromkeys(out))


__all__ = [
    "RELATION_WORDS",
    "asked_thing",
    "day_within_trip",
    "excluded_thing",
    "exclusion_from_words",
    "find_words",
    "place_from_anchor",
    "place_from_unused",
    "place_not_unit",
    "said_first",
    "same_words",
    "target_asked",
    "target_from_unused",
    "target_not_command",
    "trip_from_visit",
    "unused_thing",
    "unused_words",
]
