"""The ``album`` method's plan: a photo-album search parsed into a short typed chain by one grammar-constrained call.

A :class:`Plan` is a chain ``anchor -> relations -> target``:

- the **target**: what the wanted photos show (``"photos"`` when any photo will do), where they were taken
  (``place``: a venue or town named by the search, "at the market") and what the search rules out (``exclude``);
- one or two **hops** (:class:`Hop`), innermost first: the target's photos stand in ``hops[0].relation`` to the
  photo of ``hops[0].anchor``; with a second hop, that anchor photo itself stands in ``hops[1].relation`` to the
  photo of ``hops[1].anchor`` ("the birds from the day I saw the kite, on the trip where I photographed the
  tower": kite -same day-> birds, and the kite lies on the same trip as the tower);
- the filters the query reader (:mod:`imagent.tools.query_reader`) linked: people, places and dates of the library
  (:attr:`Plan.where`), and the Nth day of a trip it read (``trip_day``).

Relations are one typed table (:data:`RELATION_TABLE`: name, unit, direction, whether it needs a count); the
executor (:mod:`imagent.methods.album.execute`) dispatches on a relation's unit and direction, never on its name.

The model writes the chain as one flat JSON object decoded under a grammar built for this search
(:func:`plan_schema`): every relation of the table is always offered (words narrow, never forbid: a search's words
narrow the *values* a field can take — the counts and seasons it states, the runs of its own words a target, place,
anchor or exclusion can be — never the relations); :func:`read_plan` checks the object against the search and says
in :attr:`Plan.notes` whatever it changed. The prompt (``prompts/planner/plan.txt``) is a static prefix with the
search last, so llama.cpp's prefix cache evaluates only the search's own tokens after the first query. imagent's
own (``docs/album.md``), not a paper's.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from string import Template
from typing import Any

# Words that say a direction in time from the anchor, or its own moment; and the words people use for each unit of
# the table. Only for :meth:`Relation.agrees` (which plan the words back better) and for a season a plan names
# with another relation: never to narrow what a plan may say.
AFTER_WORDS = frozenset({"after", "following", "followed", "next", "later", "subsequent", "afterwards", "since",
                         "then", "once"})
BEFORE_WORDS = frozenset({"before", "previous", "preceding", "preceded", "prior", "earlier", "ahead", "ago",
                          "until"})
SAME_WORDS = frozenset({"same", "during", "while", "whole", "entire", "throughout"})
_DAY_WORDS = {"day", "days", "morning", "afternoon", "evening", "night", "date", "today", "yesterday", "tomorrow",
              "tonight", "noon", "daytime", "time"}
_TRIP_WORDS = {"trip", "trips", "journey", "journeys", "holiday", "holidays", "vacation", "vacations", "getaway",
               "outing", "outings", "tour", "travel", "travels", "excursion", "stay", "weekend", "break", "away",
               "visit", "time", "occasion"}
_PLACE_WORDS = {"place", "places", "spot", "spots", "location", "site", "venue", "where", "there", "at"}
_CITY_WORDS = {"city", "cities", "town", "towns", "village"}
_VISIT_WORDS = {"visit", "visits", "visited", "time", "times", "went", "go", "been", "back", "stay", "trip",
                "trips", "occasion", "returned", "again", "other", "another", "different"}
UNIT_WORDS: dict[str, frozenset[str]] = {
    "day": frozenset(_DAY_WORDS), "trip": frozenset(_TRIP_WORDS), "trip day": frozenset(_DAY_WORDS),
    "week": frozenset({"week", "weeks", "fortnight"}), "month": frozenset({"month", "months"}),
    "season": frozenset({"season", "seasons", "spring", "summer", "autumn", "fall", "winter"}),
    "year": frozenset({"year", "years", "anniversary"}), "place": frozenset(_PLACE_WORDS | {"same"}),
    "city": frozenset(_CITY_WORDS), "visit": frozenset(_VISIT_WORDS), "city visit": frozenset(_CITY_WORDS),
    "occasion": frozenset()}


# Words that are only a unit of time or place: never an anchor alone.
UNIT_ONLY = frozenset().union(*UNIT_WORDS.values()) - {"at", "there", "where", "away", "back", "other", "another",
                                                        "different", "again", "go", "went", "been"}


@dataclass(frozen=True)
class Relation:
    """One relation of the table: ``unit`` what it counts in (day, trip, trip day, week, month, season, year,
    place, city, visit, city visit, occasion; album for none), ``direction`` -1 (before), 0 (the anchor's own, or a
    rank) or 1 (after), ``counted`` whether it takes a count (N units, a visit's rank, the Nth day), ``other`` the
    anchor's place on its *other* visits, ``keeps`` what it keeps in words (the trace and the docs), ``aliases``
    other names a plan may give it (one of the unit: "year after" is "years after" with a count of 1)."""

    name: str
    unit: str
    direction: int
    counted: bool
    keeps: str
    other: bool = False
    aliases: tuple[str, ...] = ()

    def agreement(self, words: set[str]) -> int:
        """How well a search's words say this relation: one point for a word of its unit (the visits of a city
        count the city's words and the visits' both), one for its direction (a word such as "after" or "before";
        for the anchor's own day, trip or period, no word of time order, or one such as "same" or "during" beside
        it; a rank or a place has no direction of its own), and one for the rank of a trip's day or a visit (the
        Nth day the reader read, :data:`NTH_DAY`; an ordinal, or "other" for the other visits). A soft measure: the
        plan check weighs it, and a second plan is offered the relations the words say best; a first plan may say
        any relation."""
        if self.unit == "album":
            return 2
        unit = UNIT_WORDS.get(self.unit, frozenset())
        score = len({self.unit} & {"city visit"}) * int(bool(words & UNIT_WORDS["visit"])) + int(bool(words & unit))
        if self.direction > 0:
            return score + int(bool(words & AFTER_WORDS))
        if self.direction < 0:
            return score + int(bool(words & BEFORE_WORDS))
        if self.unit == "trip day":  # which day of the trip: the reader read its rank (else a day, or a trip)
            return score + 2 * int(NTH_DAY in words)
        plain = not (words & (AFTER_WORDS | BEFORE_WORDS)) or bool(words & SAME_WORDS)
        score += int(plain)
        if self.unit in ("visit", "city visit"):  # which visit: the other ones, or one by a rank not the day's
            ranked = bool(words & set(ORDINALS)) and NTH_DAY not in words
            score += int(bool(words & OTHER_WORDS) if self.other else ranked)
        return score

    def agrees(self, words: set[str]) -> bool:
        """Whether the words say this relation at all: a word of its unit (when it has some) and of its direction,
        and for a visit which one (a rank, or "other")."""
        unit = UNIT_WORDS.get(self.unit, frozenset())
        return self.agreement(words) >= (2 if unit else 1) + int(self.unit == "city visit") + int(
            self.unit in ("visit", "city visit"))


RELATION_TABLE: tuple[Relation, ...] = (
    Relation("none", "album", 0, False, "the whole album (no anchor)"),
    Relation("same day", "day", 0, False, "the anchor's day"),
    Relation("days after", "day", 1, True, "the day {count} day(s) after the anchor's", aliases=("day after",)),
    Relation("days before", "day", -1, True, "the day {count} day(s) before the anchor's", aliases=("day before",)),
    Relation("same trip", "trip", 0, False, "the anchor's trip (its run of consecutive photo days)"),
    Relation("next trip", "trip", 1, True, "the trip {count} trip(s) after the anchor's", aliases=("trip after",)),
    Relation("previous trip", "trip", -1, True, "the trip {count} trip(s) before the anchor's",
             aliases=("trip before",)),
    Relation("trip day", "trip day", 0, True, "day {count} of the anchor's trip (-1: its last day)"),
    Relation("weeks after", "week", 1, True, "the trip {count} week(s) after the anchor's day",
             aliases=("week after",)),
    Relation("weeks before", "week", -1, True, "the trip {count} week(s) before the anchor's day",
             aliases=("week before",)),
    Relation("same month", "month", 0, False, "the anchor's calendar month"),
    Relation("months after", "month", 1, True, "the calendar month {count} month(s) after the anchor's",
             aliases=("month after",)),
    Relation("months before", "month", -1, True, "the calendar month {count} month(s) before the anchor's",
             aliases=("month before",)),
    Relation("same season", "season", 0, False, "the anchor's season"),
    Relation("season after", "season", 1, False, "the next {season} after the anchor's season"),
    Relation("season before", "season", -1, False, "the last {season} before the anchor's season"),
    Relation("same year", "year", 0, False, "the anchor's calendar year"),
    Relation("years after", "year", 1, True, "the calendar year {count} year(s) after the anchor's",
             aliases=("year after",)),
    Relation("years before", "year", -1, True, "the calendar year {count} year(s) before the anchor's",
             aliases=("year before",)),
    Relation("same place", "place", 0, False, "the anchor's place"),
    Relation("same city", "city", 0, False, "the anchor's city"),
    Relation("visit", "visit", 0, True, "visit {count} to the anchor's place (-1: the last)"),
    Relation("other visit", "visit", 0, False, "the anchor's place on its other visits", other=True),
    Relation("city visit", "city visit", 0, True, "visit {count} to the anchor's city (-1: the last)"),
    Relation("after", "occasion", 1, False, "the first later trip that shows the target"),
    Relation("before", "occasion", -1, False, "the last earlier trip that shows the target"),
)
RELATIONS: dict[str, Relation] = {r.name: r for r in RELATION_TABLE}
ALIASES: dict[str, str] = {a: r.name for r in RELATION_TABLE for a in r.aliases}
SEASON_NAMES = ("spring", "summer", "autumn", "winter")
MAX_WORDS_CHARS = 48
MAX_SPAN_WORDS = 6
MAX_HOPS = 2
# The flat object the model writes, in the order it writes it: the fields a branch of the grammar requires, then
# the optional ones it writes only when the search says them (fewer tokens to generate: a plain plan is ~25).
PLAN_FIELDS = ("target", "link", "anchor", "relation", "link2", "anchor2", "relation2", "place", "count", "season",
               "exclude")
MAX_LINK_WORDS = 10
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "target": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS},
        "link": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS * 2},
        "anchor": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS},
        "relation": {"enum": list(RELATIONS)},
        "link2": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS * 2},
        "anchor2": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS},
        "relation2": {"enum": list(RELATIONS)},
        "place": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS},
        "count": {"enum": [*range(1, 32), -1]},
        "season": {"enum": list(SEASON_NAMES)},
        "exclude": {"type": "string", "minLength": 1, "maxLength": MAX_WORDS_CHARS},
    },
    "required": ["target"],
    "additionalProperties": False,
}
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "few": 3,
                "fortnight": 2}
ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
            "ninth": 9, "tenth": 10, "last": -1, "final": -1, "latest": -1, "recent": -1}
# Words that rule something out: a plan may name an exclusion only when the search holds one of them.
NEGATIONS = frozenset({"not", "except", "without", "excluding", "exclude", "nt", "didn", "don", "wasn", "weren",
                       "isn", "aren", "minus", "but", "besides", "none", "no", "never", "away", "apart", "unlike",
                       "outside", "leave", "leaving", "skip", "skipping", "other", "than", "counting", "beyond",
                       "aside", "excepting", "save", "barring", "ignore", "ignoring", "omit", "omitting"})
# Words that never begin or end the name of a thing (target, place, anchor, exclusion): function words, and the
# verbs and nouns of photographing. The nouns of relations may ("the coin show", "sports day", "road trip").
SPAN_EDGE_STOP = frozenset({
    "the", "a", "an", "of", "my", "our", "your", "his", "her", "their", "its", "this", "that", "these", "those", "i",
    "we", "you", "me", "us", "one", "ones", "where", "when", "which", "what", "who", "whom", "while", "and", "or",
    "with", "at", "in", "on", "to", "from", "for", "by", "as", "after", "before", "during", "same", "saw", "seen",
    "see", "seeing", "photographed", "photograph", "photographing", "took", "take", "taken", "taking", "shot",
    "shoot", "shooting", "snapped", "snap", "went", "go", "going", "was", "were", "is", "are", "be", "been", "did",
    "do", "does", "have", "has", "had", "ever", "all", "every", "some", "any", "photo", "photos",
    "picture", "pictures", "pic", "pics", "image", "images", "there", "very", "just", "right", "than", "not",
    "except", "but", "also", "then", "once", "so", "it", "them", "they", "here", "if", "up", "out",
    "about", "into", "over", "under", "across", "along", "through", "toward", "towards", "upon", "onto", "among",
    "between", "beside", "behind", "within", "via", "off", "down", "again", "too", "only", "got", "get", "came",
    "come", "visited", "visit",
    "next", "following", "previous", "other", "another", "later", "earlier", "first", "second", "third", "last",
    "would", "could", "can", "like", "around", "near", "back", "away", "anywhere", "everything", "whole", "time",
    "album", "albums", "collection", "library", "camera", "phone"})
# Words that ask for every photo ("every picture from ...", "all the photos of ...").
ASKS_EVERY = frozenset({"all", "every", "everything", "whole", "entire"})
# Words that name a stretch of time, never a thing a photo shows: a target of only these is every photo of it.
MOMENT_WORDS = frozenset({"trip", "trips", "journey", "holiday", "holidays", "vacation", "getaway", "day", "days",
                          "week", "weeks", "weekend", "month", "months", "year", "years", "visit", "stay"})
# The verbs of photographing: "what did I photograph on ..." asks for every photo of the moment.
PHOTOGRAPH_VERBS = frozenset({"photograph", "photographed", "shoot", "shot", "take", "took", "snap", "snapped",
                              "capture", "captured"})
# Not a word: said (:func:`~imagent.methods.album.method.relation_words`) when the query reader read the Nth day of
# a trip ("my last day in Krakow", "day 3"), the rank of a ``trip day``; its ordinal then ranks no visit.
NTH_DAY = "#nth-day"
# Words that say a visit other than the anchor's own.
OTHER_WORDS = frozenset({"other", "another", "different", "else", "elsewhen"})
# Words inside a run that end a thing's name: pronouns, the verbs of seeing and photographing, time order.
SPAN_BREAK = frozenset({"where", "when", "which", "that", "who", "while", "i", "we", "you", "he", "she", "they",
                        "saw", "seen", "see", "photographed", "took", "taken", "shot", "snapped", "was", "were",
                        "did", "after", "before", "during", "since", "until", "but", "except", "not", "than"})
# A target that asks for every photo of the subset, not for something they show.
GENERIC_TARGETS = frozenset({"photo", "photos", "picture", "pictures", "image", "images", "shot", "shots", "snap",
                             "snaps", "everything", "all", "any", "pics", "pic", "pix", "snapshots", "stuff",
                             "things", "thing", "every", "whole", "lot"})
_TOKEN = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_WORD = re.compile(r"[a-z0-9]+")
_COMMON = frozenset({"the", "a", "an", "of", "my", "at", "in", "on", "to", "from", "with", "and", "i", "me", "some"})


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def stem(word: str) -> str:
    """A crude singular: enough to ground "kites" in "kite" (no dictionary)."""
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2 and not word.endswith(("ss", "us", "is")):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


@dataclass
class Hop:
    """One relation of a chain: the photos in ``relation`` (:data:`RELATIONS`) to the photo of ``anchor``, with
    the ``count`` it needs (three days: 3, the fourth visit: 4, the last: -1) and a ``season`` when it names one."""

    anchor: str
    relation: str
    count: int = 0
    season: str = ""
    # What the executor searches for the anchor: its words less the people, places and dates the query reader
    # linked in them (None: the anchor's words), and those links as a filter its candidates must pass.
    content: str | None = None
    clues: str = ""
    link: str = ""  # the search's words the model read the relation from (shown in the trace)

    def __post_init__(self) -> None:
        if self.content is None:
            self.content = self.anchor
        if self.relation not in RELATIONS or self.relation == "none":
            raise ValueError(f"a hop needs a relation of the table other than none, got {self.relation!r}")
        if self.season and self.season not in SEASON_NAMES:
            raise ValueError(f"unknown season {self.season!r}")

    @property
    def rel(self) -> Relation:
        return RELATIONS[self.relation]

    def describe(self) -> str:
        return self.rel.keeps.format(count=self.count, season=self.season or "season") + f" of {self.anchor!r}"

    def to_dict(self) -> dict[str, Any]:
        out = {"anchor": self.anchor, "relation": self.relation, "count": self.count, "season": self.season,
               "link": self.link}
        if self.content != self.anchor or self.clues:
            out.update({"content": self.content, "clues": self.clues})
        return out


@dataclass
class Plan:
    """A parsed album search (module docstring). ``notes``: what :func:`read_plan` changed and why; ``where``: the
    query reader's filters (filter language), ``understood`` what they say in words; ``trip_day`` the Nth day of a
    trip the reader read (applied to the target's photos when no hop says it); ``circular`` the hop whose anchor
    the model also wrote as the target, which :func:`read_plan` dropped or read as asking for every photo (the
    method reads it back when the search names another thing the plan left out: ``method.target_from_unused``)."""

    target: str
    hops: list[Hop] = field(default_factory=list)
    place: str = ""
    exclude: str = ""
    where: str = ""
    understood: list[str] = field(default_factory=list)
    trip_day: int | None = None
    notes: list[str] = field(default_factory=list)
    circular: Hop | None = None

    def __post_init__(self) -> None:
        if len(self.hops) > MAX_HOPS:
            raise ValueError(f"a plan has at most {MAX_HOPS} hops")

    @classmethod
    def single(cls, target: str, anchor: str = "", relation: str = "none", count: int = 0, season: str = "",
               **kw: Any) -> Plan:
        """A plan of at most one hop (``relation`` "none": no anchor)."""
        hops = [Hop(anchor, relation, count, season)] if relation != "none" and anchor else []
        return cls(target, hops, **kw)

    @property
    def anchored(self) -> bool:
        return bool(self.hops)

    @property
    def relation(self) -> str:
        """The innermost relation ("none" without an anchor)."""
        return self.hops[0].relation if self.hops else "none"

    @property
    def anchor(self) -> str:
        return self.hops[0].anchor if self.hops else ""

    @property
    def every_photo(self) -> bool:
        """The target asks for every photo the chain keeps ("the photos from my second trip ...")."""
        t = [w for w in words(self.target) if w not in _COMMON]
        # "the whole trip", "that day": a unit of time or place is no thing a photo shows, it is the photos of it
        return not t or all(w in GENERIC_TARGETS or w in MOMENT_WORDS for w in t)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "place": self.place, "hops": [h.to_dict() for h in self.hops],
                "exclude": self.exclude, "where": self.where, "trip_day": self.trip_day}

    def describe(self) -> str:
        """The plan in one readable line (the trace and the CLI show it)."""
        text = "find every photo" if self.every_photo else f"find {self.target!r}"
        if self.place:
            text += f" at {self.place!r}"
        if self.hops:
            text += " in " + self.hops[0].describe()
            for hop in self.hops[1:]:
                text += ", that photo in " + hop.describe()
        if self.trip_day is not None and self.relation != "trip day":
            text += f", on day {self.trip_day if self.trip_day > 0 else 'last'} of a trip"
        if self.understood:
            text += ", " + " · ".join(self.understood)
        if self.exclude:
            text += f", not at or showing {self.exclude!r}"
        return text


def query_tokens(query: str) -> list[str]:
    """The search's words as they are written (letters and digits, with inner apostrophes and hyphens)."""
    return _TOKEN.findall(query)


def spans(tokens: list[str]) -> list[str]:
    """Every run of 1..MAX_SPAN_WORDS consecutive words of the search that starts and ends with a word of its own
    (not one of :data:`SPAN_EDGE_STOP`: "the", "where I saw" and "photo" never bound a thing's name) and holds no
    word that ends a thing's name (:data:`SPAN_BREAK`: "the city where I saw the kite" is two things), as written
    and in lower case: what a plan's target, place, anchors and exclusion may be."""
    out: dict[str, None] = {}
    for i, first in enumerate(tokens):
        if first.lower() in SPAN_EDGE_STOP:
            continue
        for j in range(i, min(i + MAX_SPAN_WORDS, len(tokens))):
            if j > i and tokens[j].lower() in SPAN_BREAK:
                break
            if tokens[j].lower() not in SPAN_EDGE_STOP:
                run = " ".join(tokens[i: j + 1])
                out[run] = None
                out[run.lower()] = None
    return list(out)


def _span_pattern(options: list[str]) -> dict[str, Any]:
    """A string schema (for the grammar) matching exactly one of ``options``."""
    # Words are letters and digits with inner apostrophes and hyphens (:func:`query_tokens`): nothing to escape.
    alts = "|".join(sorted(options, key=len, reverse=True))
    return {"type": "string", "pattern": f"^({alts})$"}


def _branch(props: dict[str, Any], required: Sequence[str], optional: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": {k: props[k] for k in (*required, *optional)},
            "required": list(required), "additionalProperties": False}


def stated_counts(tokens: Sequence[str]) -> list[int]:
    """The numbers and ordinals the search states, and 0 and 1 unless it says "last" (-1)."""
    ws = {t.lower() for t in tokens} | {p for t in tokens for p in re.split(r"['’-]", t.lower())}
    counts: set[int] = set()
    for w in ws:
        if w.isdigit() and 0 < int(w) < 32:
            counts.add(int(w))
        counts.update(v for k, v in {**NUMBER_WORDS, **ORDINALS}.items() if k == w)
        if re.fullmatch(r"\d+(st|nd|rd|th)", w) and 0 < int(w[:-2]) < 32:
            counts.add(int(w[:-2]))
    if -1 not in counts:  # "the day after" states no count (1); "my last visit" rules 1 out
        counts |= {0, 1}
    return sorted(counts, key=lambda c: (c < 0, c))


def plan_schema(query: str, without: Sequence[str] = (), target: str = "") -> dict[str, Any]:
    """:data:`PLAN_SCHEMA` narrowed to one search's *values*: target, place, anchors and exclusion are runs of the
    search's own words (the target may also be "photos"), the count one it states, the season one it names, an
    exclusion only when it holds a word that rules something out (:data:`NEGATIONS`). Every relation of the table
    is offered (but those in ``without``: a second plan after one that found nothing). Three branches: no anchor;
    one hop; two hops; each writes its required fields, then only the optional ones the search says. A small model
    then picks and copies instead of writing. ``target``: the target a second plan keeps (the first one's, when the
    first found nothing: the second reads the rest of the search again)."""
    tokens = query_tokens(query)
    ws = {t.lower() for t in tokens}
    seasons = [s for s in SEASON_NAMES if s in ws or (s == "autumn" and "fall" in ws)]
    runs = spans(tokens) or list(dict.fromkeys(tokens))
    span = _span_pattern(runs)
    # An anchor names a thing, an event or a place: not a unit of time or place alone ("city", "winter", "the day").
    things = [r for r in runs if any(w.lower() not in UNIT_ONLY for w in r.split())]
    anchor = _span_pattern(things) if things else span
    related = [r for r in RELATIONS if r != "none" and r not in without]
    related += [a for a, r in ALIASES.items() if r in related]
    counts = [c for c in stated_counts(tokens) if c]
    linking = [" ".join(tokens[i: j]) for i in range(len(tokens))
               for j in range(i + 1, min(i + MAX_LINK_WORDS, len(tokens)) + 1)]
    link = _span_pattern(list(dict.fromkeys([*linking, *(x.lower() for x in linking)])))
    props: dict[str, Any] = {"target": {"enum": [target]} if target else _span_pattern([*runs, "photos"]),
                             "link": link, "anchor": anchor, "link2": link,
                             "relation": {"enum": related}, "anchor2": anchor,
                             "relation2": {"enum": [*(r for r in RELATIONS if r != "none"), *ALIASES]},
                             "place": span,
                             "count": {"enum": counts}, "season": {"enum": seasons}}
    negated = ws | {p for w in ws for p in re.split(r"['’-]", w)}
    optional = ["place", *(["exclude"] if negated & NEGATIONS else [])]
    props["exclude"] = span
    timed = ["count", *(["season"] if seasons else [])]
    branches = [_branch(props, ["target"], optional)]
    if related:
        branches.append(_branch(props, ["target", "link", "anchor", "relation"],
                                [*optional[:1], *timed, *optional[1:]]))
        branches.append(_branch(props, ["target", "link", "anchor", "relation", "link2", "anchor2", "relation2"],
                                [*optional[:1], *timed, *optional[1:]]))
    return {"anyOf": branches} if len(branches) > 1 else branches[0]


def offered_relations(schema: dict[str, Any]) -> list[str]:
    """The relations a plan schema offers (the trace lists them beside the plan)."""
    branches = schema.get("anyOf", [schema])
    names = {r for b in branches for r in b["properties"].get("relation", {"enum": ["none"]})["enum"]}
    return [r for r in RELATIONS if r in names | {"none"}]


def plan_prompt(query: str) -> str:
    """The planner's prompt: the static instructions and examples, then the search (so a prompt cache reuses all
    but the search's own tokens)."""
    text = (files("imagent.methods.album") / "prompts" / "planner" / "plan.txt").read_text(encoding="utf-8")
    return Template(text.strip()).substitute(query=" ".join(query.split()))


def _grounded(value: str, query_words: set[str]) -> bool:
    """Whether ``value`` shares a word (crudely singular) with the search, common words aside."""
    own = {stem(w) for w in words(value) if w not in _COMMON}
    return bool(own & query_words)


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _hop(anchor: str, relation: str, count: int, season: str, notes: list[str], which: str,
         link: str = "") -> Hop | None:
    """One hop from the model's fields, its count and season made consistent with its relation (each change a
    note); None without an anchor or a relation."""
    relation = ALIASES.get(relation, relation)
    if relation not in RELATIONS:
        notes.append(f"{which} {relation!r} is not a relation of the table: read as 'none'")
        relation = "none"
    if relation != "none" and not anchor:
        notes.append(f"{which} {relation!r} without an anchor: read as 'none'")
        return None
    if relation == "none":
        if anchor:
            notes.append(f"anchor {anchor!r} with {which} 'none': the anchor is not used")
        return None
    rel = RELATIONS[relation]
    if rel.counted and (count == 0 or (count < 0 and rel.unit not in ("visit", "city visit", "trip day"))):
        count = 1
    elif not rel.counted and count:
        count = 0
    if season and rel.unit != "season":
        season = ""
    return Hop(anchor, relation, count, season, link=link)


def said_words(query: str) -> set[str]:
    """A search's words for :meth:`Relation.agreement`, lower-cased, with "same" added where it names the anchor's
    own moment another way: "that month", "this trip", "the year of"."""
    tokens = [t.lower() for t in query_tokens(query)]
    units = frozenset().union(*UNIT_WORDS.values()) - {"at", "where", "there", "away", "back"}
    own = any((a in ("that", "this") and b in units) or (a in units and b == "of")
              for a, b in itertools.pairwise(tokens))
    return set(tokens) | ({"same"} if own else set())


def best_relations(words: set[str]) -> list[str]:
    """The relations (but none) the search's words say best (:meth:`Relation.agreement`)."""
    scores = {r.name: r.agreement(words) for r in RELATION_TABLE if r.unit != "album"}
    top = max(scores.values())
    return [r for r, v in scores.items() if v == top]


# Relations whose one word more makes them another: a visit or a place of a city (the search says "city", "town").
CITY_FORMS = {"visit": "city visit", "same place": "same city"}


def _refine(hop: Hop, words: set[str], stated: list[int], notes: list[str]) -> None:
    """Words narrow the model's reading (never widen it): a visit of a city, a count the search states alone."""
    link = {w.lower() for w in query_tokens(hop.link)} or words
    if hop.relation in CITY_FORMS and link & UNIT_WORDS["city"]:
        notes.append(f"the search names a city: {hop.relation!r} read as {CITY_FORMS[hop.relation]!r}")
        hop.relation = CITY_FORMS[hop.relation]
    others = [c for c in stated if c not in (0, 1)]
    if hop.rel.counted and hop.count == 1 and len(others) == 1:
        notes.append(f"the search states {others[0]}: count {others[0]}")
        hop.count = others[0]


def _circular(target: str, anchor: str) -> bool:
    """Whether a target and an anchor name the same thing: one's content words (stems) hold the other's ("crow" and
    "crow trip"), the words of units and photographing aside."""
    def content(text: str) -> set[str]:
        return {stem(w) for w in words(text) if w not in _COMMON and w not in UNIT_ONLY and w not in GENERIC_TARGETS}

    t, a = content(target), content(anchor)
    return bool(a) and (a <= t or (bool(t) and t <= a))


def asks_every_photo(query: str) -> bool:
    """Whether a search asks for every photo of a moment rather than for a thing in them: "all", "every", "the
    whole ...", a photo noun ("pictures from the trip with ..."), or "what did I photograph / shoot / take"."""
    asked = set(words(query))
    photo_nouns = GENERIC_TARGETS - ASKS_EVERY - {"any", "thing", "things", "stuff", "lot"}
    return bool(asked & ASKS_EVERY or asked & photo_nouns or ("what" in asked and asked & PHOTOGRAPH_VERBS))


def read_plan(value: Any, query: str, target: str = "") -> Plan:
    """The model's JSON object (:data:`PLAN_FIELDS`) as a :class:`Plan`, checked against the search's words
    (``target``: an earlier plan's target, for a second plan that wrote its anchor as its target):

    - ``place``, ``anchor``, ``anchor2`` and ``exclude`` must share a word with the search, else they are dropped
      (a small model copies an example's words); a relation without an anchor is ``none``, an anchor without a
      relation is not used; a second hop without a first is the first;
    - ``target`` falls back to the search itself when it names nothing of the search;
    - a counted relation with count 0 counts 1 ("the day after", "the next trip"); a count of a relation that takes
      none is 0; a season only goes with a season relation.

    Each change is a note on the plan (shown in the trace). ``ValueError`` when ``value`` is not such an object."""
    if not isinstance(value, dict):
        raise ValueError(f"the plan is not a JSON object: {value!r}")
    q = {stem(w) for w in words(query) if w not in _COMMON}
    notes: list[str] = []

    def text(key: str) -> str:
        return " ".join(str(value.get(key) or "").split())[:MAX_WORDS_CHARS]

    season = text("season").lower()
    season = season if season in SEASON_NAMES else ""
    fields = {k: text(k) for k in ("target", "place", "anchor", "anchor2", "exclude")}
    circular: Hop | None = None
    generic = Plan(fields["target"] or "photos").every_photo
    if not generic and not _grounded(fields["target"], q):
        notes.append(f"target {fields['target']!r} names nothing the search says: the search's own words are the "
                     "target")
        fields["target"] = " ".join(query.split())[:MAX_WORDS_CHARS * 3]
    for name in ("place", "anchor", "anchor2", "exclude"):
        if fields[name] and not _grounded(fields[name], q):
            notes.append(f"{name} {fields[name]!r} names nothing the search says: dropped")
            fields[name] = ""
    relation = ALIASES.get(str(value.get("relation") or "none"), str(value.get("relation") or "none"))
    if season and relation in RELATIONS and RELATIONS[relation].unit not in ("season", "album"):
        ws = set(words(query))
        relation = "season after" if ws & AFTER_WORDS else "season before" if ws & BEFORE_WORDS else "same season"
        notes.append(f"the plan names the {season} with relation {value.get('relation')!r}: read as {relation!r}")
    if not season and relation in RELATIONS and RELATIONS[relation].unit == "season" and RELATIONS[relation].direction:
        ws = {t.lower() for t in query_tokens(query)}
        named = [s for s in SEASON_NAMES if s in ws or (s == "autumn" and "fall" in ws)]
        if len(named) == 1:  # "the winter after ...": the season the search names, which the model left out
            season = named[0]
            notes.append(f"the search names the {season}: {relation!r} is the next (last) {season}")
    if fields["anchor"] and _circular(fields["target"], fields["anchor"]):
        said = set(words(query))
        if relation in RELATIONS and RELATIONS[relation].unit in ("visit", "trip day") and \
                not RELATIONS[relation].agrees(said):  # "every picture from my hippopotamus trip": not a visit
            plain = next((r for r in ("same trip", "same day") if RELATIONS[r].agrees(said)), None)
            if plain:
                notes.append(f"the search ranks no visit or day: {relation!r} read as {plain!r}")
                relation = plain
        dropped = _hop(fields["anchor"], relation, _count(value.get("count")), season, [], "relation", text("link"))
        if relation in RELATIONS and RELATIONS[relation].agrees(said) and asks_every_photo(query):
            notes.append(f"target {fields['target']!r} is the anchor {fields['anchor']!r} and the search asks for "
                         "every photo of that moment: the target is every photo")
            fields["target"] = "photos"
            circular = dropped
        elif target and relation in RELATIONS and RELATIONS[relation].agrees(said) and \
                not _circular(target, fields["anchor"]) and _grounded(target, q):
            notes.append(f"target {fields['target']!r} is the anchor {fields['anchor']!r}: the first plan's target "
                         f"{target!r} is kept")
            fields["target"] = target
        else:
            notes.append(f"anchor {fields['anchor']!r} is the target itself: no anchor")
            circular = dropped
            fields["anchor"], relation = "", "none"
    first = _hop(fields["anchor"], relation, _count(value.get("count")), season, notes, "relation",
                 text("link"))
    second = _hop(fields["anchor2"], str(value.get("relation2") or "none"), 0, season, notes, "relation2",
                  text("link2"))
    hops = [h for h in (first, second) if h is not None]
    said = said_words(query)
    stated = stated_counts([t for t in query_tokens(query) if t.lower() not in ("a", "an")])
    for h in hops:
        _refine(h, said, stated, notes)
    if circular is not None:  # the hop a reading may give back counts what the search states too
        _refine(circular, said, stated, [])
    if second is not None and first is None:
        notes.append("a second hop without a first: it is the plan's only hop")
    return Plan(fields["target"], hops, place=fields["place"], exclude=fields["exclude"], notes=notes,
                circular=circular)


__all__ = ["GENERIC_TARGETS", "MAX_HOPS", "NTH_DAY", "PLAN_FIELDS", "PLAN_SCHEMA", "RELATIONS", "RELATION_TABLE",
           "SEASON_NAMES", "Hop", "Plan", "Relation", "best_relations", "offered_relations", "plan_prompt",
           "plan_schema", "read_plan", "said_words", "stated_counts", "stem"]
