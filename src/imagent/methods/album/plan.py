"""The ``album`` method's plan: a photo-album search parsed into typed fields by one grammar-constrained model call.

A :class:`Plan` says what the wanted photos show (``target``), what identifies the moment or place they are tied to
(``anchor``, empty for none), how they relate to the anchor's photo (``relation``, one of :data:`RELATIONS`) with
the number it needs (``count``: three days, the fourth visit, -1 for the last) and a ``season`` when one is named,
what the search rules out (``exclude``: "not at the zoo") and a person who must be in the photos (``person``).
:mod:`imagent.methods.album.execute` runs it over the album; nothing here searches.

The model writes the plan as one JSON object decoded under a grammar built from :data:`PLAN_SCHEMA` (enums for the
relation, count and season; bounded strings), so the reply is always well-formed; :func:`read_plan` then checks it
against the search's own words and says in :attr:`Plan.notes` whatever it changed (a field naming words the search
does not hold is dropped; a relation that needs a count without one gets 1). The prompt
(``prompts/planner/plan.txt``) is a static prefix with the search last, so llama.cpp's prefix cache evaluates only
the search's own tokens after the first query. imagent's own (``docs/album.md``), not a paper's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from string import Template
from typing import Any

# relation -> what it keeps (how the trace and docs word it)
RELATIONS: dict[str, str] = {
    "none": "the whole album (no anchor)",
    "same day": "the anchor's day",
    "same trip": "the anchor's trip (its run of consecutive photo days)",
    "same place": "the anchor's place",
    "same city": "the anchor's city",
    "days after": "the day {count} day(s) after the anchor's",
    "days before": "the day {count} day(s) before the anchor's",
    "weeks after": "the trip {count} week(s) after the anchor's day",
    "weeks before": "the trip {count} week(s) before the anchor's day",
    "months after": "the trip {count} month(s) after the anchor's day",
    "months before": "the trip {count} month(s) before the anchor's day",
    "years after": "the trip {count} year(s) after the anchor's day",
    "years before": "the trip {count} year(s) before the anchor's day",
    "next trip": "the trip {count} trip(s) after the anchor's",
    "previous trip": "the trip {count} trip(s) before the anchor's",
    "after": "the first later trip that shows the target",
    "before": "the last earlier trip that shows the target",
    "visit": "visit {count} to the anchor's place (-1: the last)",
    "city visit": "visit {count} to the anchor's city (-1: the last)",
    "other visit": "the anchor's place on its other visits",
    "same month": "the anchor's calendar month",
    "month after": "the calendar month after the anchor's",
    "month before": "the calendar month before the anchor's",
    "same season": "the anchor's season",
    "season after": "the next {season} after the anchor's season (the next season when none is named)",
    "season before": "the last {season} before the anchor's season (the season before when none is named)",
    "same year": "the anchor's calendar year",
    "year after": "the calendar year after the anchor's",
    "year before": "the calendar year before the anchor's",
}
# Relations whose count is a number of units or trips (0 from the model means one) or a visit's rank.
COUNTED = frozenset({"days after", "days before", "weeks after", "weeks before", "months after", "months before",
                     "years after", "years before", "next trip", "previous trip", "visit", "city visit"})
SEASON_NAMES = ("spring", "summer", "autumn", "winter")
COUNTS = (*range(0, 32), -1)
MAX_WORDS_CHARS = 40
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "target": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS},
        "anchor": {"type": "string", "maxLength": MAX_WORDS_CHARS},
        "relation": {"enum": list(RELATIONS)},
        "count": {"enum": list(COUNTS)},
        "season": {"enum": ["", *SEASON_NAMES]},
        "exclude": {"type": "string", "maxLength": MAX_WORDS_CHARS},
        "person": {"type": "string", "maxLength": MAX_WORDS_CHARS},
    },
    "required": ["target", "anchor", "relation", "count", "season", "exclude", "person"],
    "additionalProperties": False,
}
# The grammar of one search (:func:`plan_schema`) offers only the relations whose words the search holds: each
# family of relations and the words that can express it (a search holding none of them is offered every relation).
CUES: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "day": (frozenset({"day", "days", "morning", "afternoon", "evening", "night", "date", "today", "yesterday",
                       "tomorrow", "tonight", "daytime", "noon"}),
            ("same day", "days after", "days before", "after", "before")),
    "week": (frozenset({"week", "weeks", "fortnight", "weekend"}), ("weeks after", "weeks before")),
    "month": (frozenset({"month", "months"}),
              ("same month", "month after", "month before", "months after", "months before")),
    "season": (frozenset({"season", "seasons", "spring", "summer", "autumn", "fall", "winter"}),
               ("same season", "season after", "season before")),
    "year": (frozenset({"year", "years", "anniversary", "annual"}),
             ("same year", "year after", "year before", "years after", "years before")),
    "trip": (frozenset({"trip", "trips", "journey", "journeys", "holiday", "holidays", "vacation", "vacations",
                        "travel", "travels", "travelled", "traveled", "tour", "outing", "outings", "getaway",
                        "excursion", "stay", "stays", "break"}),
             ("same trip", "next trip", "previous trip", "visit", "city visit", "after", "before")),
    "visit": (frozenset({"visit", "visits", "visited", "went", "go", "going", "been", "time", "times", "again",
                         "back", "returned", "return", "occasion", "occasions", "stay", "stays", "came"}),
              ("visit", "city visit", "other visit")),
    "place": (frozenset({"place", "places", "spot", "spots", "location", "locations", "site", "venue", "where",
                         "there", "same"}),
              ("same place", "visit", "other visit", "same day", "same trip")),
    "city": (frozenset({"city", "cities", "town", "towns", "village", "capital"}), ("same city", "city visit")),
    "other": (frozenset({"other", "another", "different", "else", "again"}), ("other visit",)),
    "event": (frozenset({"when", "while", "during", "that", "saw", "seen", "photographed", "took", "shot", "snapped",
                         "met", "had"}),
              ("same day", "same trip")),
}
# Relations that look forward (backward) in time need a word that does.
AFTER_WORDS = frozenset({"after", "later", "following", "next", "since", "subsequent", "afterwards", "then",
                         "followed"})
BEFORE_WORDS = frozenset({"before", "earlier", "previous", "preceding", "prior", "ago", "last", "ahead", "until",
                          "preceded"})
AFTER_RELATIONS = frozenset({"days after", "weeks after", "months after", "years after", "next trip", "after",
                             "month after", "season after", "year after"})
BEFORE_RELATIONS = frozenset({"days before", "weeks before", "months before", "years before", "previous trip",
                              "before", "month before", "season before", "year before"})
# Relations that keep the anchor's own day, trip or calendar period: with a word of time order ("after") they need a
# word such as "same" or "during" too ("the month after I saw ..." is not "the same month").
SAME_RELATIONS = frozenset({"same day", "same trip", "same month", "same season", "same year"})
SAME_WORDS = frozenset({"same", "that", "this", "during", "while", "whole", "entire", "throughout"})
PLACE_RELATIONS = frozenset({"same place", "visit", "other visit"})
# A visit by its rank needs an ordinal; another visit a word such as "other".
RANKED_RELATIONS = frozenset({"visit", "city visit"})
OTHER_RELATIONS = frozenset({"other visit"})
OTHER_WORDS = frozenset({"other", "another", "different", "else", "again", "elsewhen"})
# Words that rule something out: with a strong one the plan must name what (exclude), with a weak one it may.
NEGATIONS = frozenset({"not", "except", "without", "excluding", "nt", "didn", "don", "wasn", "weren", "isn", "aren"})
WEAK_NEGATIONS = frozenset({"but", "besides", "none", "no", "never", "away", "apart", "unlike", "other", "outside"})
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "few": 3,
                "fortnight": 2}
ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
            "ninth": 9, "tenth": 10, "last": -1, "final": -1, "latest": -1, "recent": -1}
_TOKEN = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
# A capitalised word after one of these names a place, not a person.
PLACE_PREPOSITIONS = frozenset({"in", "at", "from", "to", "near", "around", "outside", "inside", "across", "through"})
MAX_SPAN_WORDS = 6
_FUNCTION_WORDS = frozenset({
    "the", "a", "an", "of", "my", "our", "your", "his", "her", "their", "its", "this", "that", "these", "those", "i",
    "we", "you", "me", "us", "one", "ones", "where", "when", "which", "what", "who", "while", "and", "or", "with",
    "at", "in", "on", "to", "from", "for", "by", "as", "after", "before", "during", "same", "saw", "seen", "see",
    "photographed", "photograph", "took", "take", "taken", "shot", "shoot", "snapped", "snap", "went", "go",
    "visited", "visit", "was", "were", "is", "did", "do", "have", "had", "ever", "all", "every", "some", "any",
    "show", "find", "photo", "photos", "picture", "pictures", "pic", "pics", "image", "images", "day", "trip",
    "place", "time", "there", "very", "just", "right", "first", "second", "third", "last", "next", "following",
    "previous", "other", "another", "not", "except", "but", "away", "anywhere", "than", "later", "earlier"})
# Words that never begin or end the name of a thing (target, anchor, exclude) in a plan: function words, the verbs
# and nouns of photographing, and the words of relations (a season's name may: "the summer fair").
SPAN_EDGE_STOP = _FUNCTION_WORDS | AFTER_WORDS | BEFORE_WORDS | frozenset(ORDINALS) | frozenset(NUMBER_WORDS) | (
    frozenset().union(*(cues for family, (cues, _) in CUES.items() if family not in ("event", "season"))))

# A target that asks for every photo of the constrained subset, not for something they show.
GENERIC_TARGETS = frozenset({"photo", "photos", "picture", "pictures", "image", "images", "shot", "shots", "snap",
                             "snaps", "everything", "all", "any", "all photos", "every photo", "pics", "pic"})
_WORD = re.compile(r"[a-z0-9]+")
# Words too common to ground a field in the search's text.
_COMMON = frozenset({"the", "a", "an", "of", "my", "at", "in", "on", "to", "from", "with", "and", "i", "me", "some"})


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _stem(word: str) -> str:
    """A crude singular: enough to ground "kites" in "kite" (no dictionary)."""
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


@dataclass
class Plan:
    """A parsed album search (see the module docstring). ``notes``: what :func:`read_plan` changed and why."""

    target: str
    anchor: str = ""
    relation: str = "none"
    count: int = 0
    season: str = ""
    exclude: str = ""
    person: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"unknown relation {self.relation!r}; one of {', '.join(RELATIONS)}")
        if self.season and self.season not in SEASON_NAMES:
            raise ValueError(f"unknown season {self.season!r}")

    @property
    def anchored(self) -> bool:
        return self.relation != "none" and bool(self.anchor)

    @property
    def every_photo(self) -> bool:
        """The target asks for every photo the relation keeps ("the photos from my second trip ...")."""
        t = " ".join(w for w in words(self.target) if w not in _COMMON)
        return not t or t in GENERIC_TARGETS or all(w in GENERIC_TARGETS for w in t.split())

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "anchor": self.anchor, "relation": self.relation, "count": self.count,
                "season": self.season, "exclude": self.exclude, "person": self.person}

    def describe(self) -> str:
        """The plan in one readable line (the trace and the CLI show it)."""
        keep = RELATIONS[self.relation].format(count=self.count, season=self.season or "season")
        what = "every photo" if self.every_photo else repr(self.target)
        text = f"find {what}" + (f" in {keep} of {self.anchor!r}" if self.anchored else "")
        if self.person:
            text += f", with {self.person}"
        if self.exclude:
            text += f", not at or showing {self.exclude!r}"
        return text


def query_tokens(query: str) -> list[str]:
    """The search's words as they are written (letters and digits, with inner apostrophes and hyphens)."""
    return _TOKEN.findall(query)


def offered_relations(query: str) -> list[str]:
    """The relations the search's words can express (:data:`CUES`; forward relations only with a word such as
    "after", backward ones with one such as "before"), "none" always among them; every relation when no cue is
    there."""
    ws = {w.lower().replace("’", "'") for w in query_tokens(query)}
    ws |= {p for w in ws for p in re.split(r"['-]", w)}
    offered: set[str] = set()
    for family, (cues, relations) in CUES.items():
        if family != "event" and ws & cues:
            offered.update(relations)
    if not offered and ws & CUES["event"][0]:  # "when I saw ...", with no word of a day, trip or place
        offered.update(CUES["event"][1])
    if not offered:
        offered = set(RELATIONS)
    if ws & CUES["city"][0]:  # a city or town named: its visits, not one place's
        offered -= PLACE_RELATIONS
    if not ws & AFTER_WORDS:
        offered -= AFTER_RELATIONS
    if not ws & BEFORE_WORDS:
        offered -= BEFORE_RELATIONS
    if ws & (AFTER_WORDS | BEFORE_WORDS) and not ws & SAME_WORDS:
        offered -= SAME_RELATIONS
    ranked = any(w in ORDINALS or re.fullmatch(r"\d+(st|nd|rd|th)", w) for w in ws)
    if ranked:  # a rank ("my second trip", "the first time after") picks one occasion of several, not the anchor's own
        offered -= SAME_RELATIONS | {"same place", "same city"}
    else:
        offered -= RANKED_RELATIONS
    if not ws & OTHER_WORDS:
        offered -= OTHER_RELATIONS
    offered.add("none")
    return [r for r in RELATIONS if r in offered]


def spans(tokens: list[str]) -> list[str]:
    """Every run of 1..MAX_SPAN_WORDS consecutive words of the search that starts and ends with a word of its own
    (not one of :data:`SPAN_EDGE_STOP`: "the", "one where I saw" and "photo" never bound a thing's name), as
    written and in lower case: what a plan's target, anchor and exclude may be."""
    out: dict[str, None] = {}
    for i, first in enumerate(tokens):
        if first.lower() in SPAN_EDGE_STOP:
            continue
        for j in range(i, min(i + MAX_SPAN_WORDS, len(tokens))):
            if tokens[j].lower() not in SPAN_EDGE_STOP:
                run = " ".join(tokens[i: j + 1])
                out[run] = None
                out[run.lower()] = None
    return list(out)


def _span_pattern(options: list[str], optional: bool) -> str:
    """A regex (for the grammar) matching exactly one of ``options`` (or the empty string, ``optional``)."""
    # Words are letters and digits with inner apostrophes and hyphens (:func:`query_tokens`): nothing to escape.
    alts = "|".join(sorted(options, key=len, reverse=True))
    return f"^({alts})?$" if optional else f"^({alts})$"


def plan_schema(query: str, without: Sequence[str] = ()) -> dict[str, Any]:
    """:data:`PLAN_SCHEMA` narrowed to one search: target, anchor and exclude are runs of the search's own words
    (the target may also be "photos"), the person one of its capitalised words, the relation one the search's words
    can express (:func:`offered_relations`), the count one it states (numbers, ordinals; 0 and 1 always), the season
    one it names, and exclude only when it says "not", "except", "without" (:data:`NEGATIONS`). A small model then
    picks and copies instead of writing (it copied a worked example's words into the plan otherwise). ``without``:
    relations left out (a second plan after one that found nothing)."""
    tokens = query_tokens(query)
    lower = [t.lower() for t in tokens]
    ws = set(lower) | {p for w in lower for p in re.split(r"['’-]", w)}
    counts: set[int] = set()
    for w in ws:
        if w.isdigit() and 0 < int(w) < 32:
            counts.add(int(w))
        counts.update(v for k, v in {**NUMBER_WORDS, **ORDINALS}.items() if k == w)
        if re.fullmatch(r"\d+(st|nd|rd|th)", w) and 0 < int(w[:-2]) < 32:
            counts.add(int(w[:-2]))
    if -1 not in counts:  # "the day after" states no count (1); "my last visit" rules 1 out
        counts |= {0, 1}
    seasons = [s for s in SEASON_NAMES if s in ws or (s == "autumn" and "fall" in ws)]
    runs = spans(tokens) or list(dict.fromkeys(tokens))
    names: list[str] = []  # runs of capitalised words (the first word of the search is capitalised anyway)
    for i in range(1, len(tokens)):
        if tokens[i - 1].lower() in PLACE_PREPOSITIONS:  # "in Paris", "at Lyon": a place, not a person
            continue
        for j in range(i, min(i + 3, len(tokens))):
            if not tokens[j][:1].isupper() or tokens[j] == "I":
                break
            names.append(" ".join(tokens[i: j + 1]))
    props = dict(PLAN_SCHEMA["properties"])
    props["target"] = {"type": "string", "pattern": _span_pattern([*runs, "photos"], optional=False)}
    props["count"] = {"enum": sorted(counts, key=lambda c: (c < 0, c))}
    props["season"] = {"enum": seasons if len(seasons) == 1 else ["", *seasons]}  # one named: that one
    props["exclude"] = ({"type": "string", "pattern": _span_pattern(runs, optional=not ws & NEGATIONS)}
                        if ws & (NEGATIONS | WEAK_NEGATIONS) else {"enum": [""]})
    props["person"] = ({"type": "string", "pattern": _span_pattern(names, optional=True)} if names
                       else {"enum": [""]})
    # An anchor comes with a relation to it, no anchor with "none": two branches of one grammar.
    branches = [{**PLAN_SCHEMA, "properties": {**props, "anchor": {"enum": [""]}, "relation": {"enum": ["none"]}}}]
    related = [r for r in offered_relations(query) if r != "none" and r not in without]
    if related:
        branches.append({**PLAN_SCHEMA, "properties": {
            **props, "anchor": {"type": "string", "pattern": _span_pattern(runs, optional=False)},
            "relation": {"enum": related}}})
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def plan_prompt(query: str) -> str:
    """The planner's prompt: the static instructions and examples, then the search (so a prompt cache reuses all
    but the search's own tokens)."""
    text = (files("imagent.methods.album") / "prompts" / "planner" / "plan.txt").read_text(encoding="utf-8")
    return Template(text.strip()).substitute(query=" ".join(query.split()))


def _grounded(value: str, query_words: set[str]) -> bool:
    """Whether ``value`` shares a word (crudely singular) with the search, common words aside."""
    own = {_stem(w) for w in words(value) if w not in _COMMON}
    return bool(own & query_words)


def read_plan(value: Any, query: str) -> Plan:
    """The model's JSON object (under :data:`PLAN_SCHEMA`) as a :class:`Plan`, checked against the search's words:

    - ``anchor``, ``exclude`` and ``person`` must share a word with the search, else they are dropped (a small
      model copies an example's words); a relation other than ``none`` without an anchor becomes ``none``;
    - ``target`` falls back to the search itself when it names nothing of the search;
    - a counted relation (:data:`COUNTED`) with count 0 counts 1 ("the day after", "the next trip");
    - a count of a relation that takes none is 0.

    Each change is a note on the plan (shown in the trace). ``ValueError`` when ``value`` is not such an object."""
    if not isinstance(value, dict):
        raise ValueError(f"the plan is not a JSON object: {value!r}")
    q = {_stem(w) for w in words(query) if w not in _COMMON}
    notes: list[str] = []

    def text(key: str) -> str:
        return " ".join(str(value.get(key) or "").split())[:MAX_WORDS_CHARS]

    relation = str(value.get("relation") or "none")
    if relation not in RELATIONS:
        notes.append(f"relation {relation!r} is not one of the plan's: read as 'none'")
        relation = "none"
    try:
        count = int(value.get("count") or 0)
    except (TypeError, ValueError):
        count = 0
    season = text("season").lower()
    if season not in SEASON_NAMES:
        season = ""
    target, anchor, exclude, person = text("target"), text("anchor"), text("exclude"), text("person")
    generic = Plan(target or "photos").every_photo
    if not generic and not _grounded(target, q):
        notes.append(f"target {target!r} names nothing the search says: the search's own words are the target")
        target = " ".join(query.split())[:MAX_WORDS_CHARS * 3]
    for name, val in (("anchor", anchor), ("exclude", exclude), ("person", person)):
        if val and not _grounded(val, q):
            notes.append(f"{name} {val!r} names nothing the search says: dropped")
            if name == "anchor":
                anchor = ""
            elif name == "exclude":
                exclude = ""
            else:
                person = ""
    taken = {_stem(w) for w in words(f"{target} {anchor}")}
    if person and {_stem(w) for w in words(person)} & taken:
        notes.append(f"person {person!r} repeats the target's or anchor's words: dropped")
        person = ""
    if relation != "none" and not anchor:
        notes.append(f"relation {relation!r} without an anchor: read as 'none'")
        relation = "none"
    if relation == "none" and anchor:
        notes.append(f"anchor {anchor!r} with relation 'none': the anchor is not used")
        anchor = ""
    if relation in COUNTED and (count == 0 or (count < 0 and relation not in ("visit", "city visit"))):
        count = 1
    elif relation not in COUNTED and count:
        count = 0
    if season and relation not in ("season after", "season before", "same season"):
        season = ""
    return Plan(target, anchor, relation, count, season, exclude, person, notes)


__all__ = ["COUNTED", "GENERIC_TARGETS", "PLAN_SCHEMA", "RELATIONS", "SEASON_NAMES", "Plan", "plan_prompt",
           "read_plan"]
