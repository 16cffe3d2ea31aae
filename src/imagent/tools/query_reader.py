"""The query reader: a question in plain words linked to the library's own vocabulary before any model runs.

Every plain-words search reads its question here first (``imagent search`` without ``--method``, the web search
box, :class:`~imagent.api.SearchRequest` with ``read_query=True``, the ``album`` method and the agents' tools).
Spans of the question are linked to what this library holds:

- **people**: the names given to face groups (:mod:`imagent.index.people`), whole names in any case ("joe", "Anna
  Maria") or, when only one person has it, one word of a name ("Barack" for "Barack Obama"); a name given a moment
  ago links at once (the people index follows the face data's version);
- **places**: the parts of the photos' addresses (``"Kyoto, Japan"`` -> Kyoto, Japan; ``"Place des Festivals,
  Montreal, Canada"``): a span links when its words equal a part's, word by word, without accents and by crude
  singular ("festival" ~ "Place des Festivals": the part's generic words "place", "des" left aside; "kyoto" ~
  "Kyoto"), or when it is written with a capital and is a run of a three-word part's distinctive words ("Louvre" ~
  "Musee du Louvre"); common country forms link to the country as stored ("USA", "the States" -> "United States";
  "UK", "Britain" -> "United Kingdom"; "Holland" -> "Netherlands");
- **dates** (:mod:`imagent.tools.query_time`): years, months, seasons (northern hemisphere unless told
  ``hemisphere="south"``), weekdays, parts of the day, explicit dates, ranges and dates relative to ``today``;
- **the Nth day of a trip** ("my second day in Kyoto", "day 3", "the last day"): :attr:`QueryReading.trip_day`,
  not a filter (the ``album`` method applies it);
- **quoted words**: a phrase in double quotes (``"Cafe Sol"``, ``“EXIT”``) is text to find in the photos (the words
  read in them, :mod:`imagent.index.text`): :attr:`QueryReading.texts`, never linked to a person, place or date; its
  words stay content too, so the content search sees them (the request path ranks the photos whose text holds the
  phrase first: :mod:`imagent.tools.text_search`);
- **label words**: words naming what the pixel model saw in this library's photos (their stored labels, with
  synonyms and parent categories: "bird" for a flamingo). They stay **content** words and are only marked
  (:attr:`QueryReading.labels`): the content search finds them, a label filter would lose every photo the
  classifier got wrong.

A linked person, place or date becomes a filter in the filter language (:mod:`imagent.tools.filter_lang`:
``person = 'Joe'``, ``place ~ 'Kyoto'``, ``time = '2023'``, ``month = 5``) that composes with ``--where``
(:attr:`QueryReading.where`: people all hold; places are alternatives, as are dates of one kind; dates of
different kinds all hold, "Sunday mornings in 2023"). The rest of the question, less the words that only frame it
("photos of", "pics", "show me", "my", "the ... I photographed"), is the content (:attr:`QueryReading.content`;
empty when the question names only people, places and dates: their photos are listed in time order).

Never a guess: a capitalised word that links to nothing is a content word, not a person ("Christmas", "Show",
"Diego" alone); a name where a person is expected ("photos of Zed", "with Zed") that no group has gets a note
("no person named 'Zed' in this library: searched as words"), as does a place no photo is from ("Tokyo").

The public API (stable; the ``album`` method and the agents' tools call it):

- :func:`read_query` ``(question, gallery, *, today=None, unlink=(), hemisphere="north") -> QueryReading``: the
  question read against the gallery's vocabulary (``gallery`` may be an :class:`~imagent.tools.album.Album`);
- :class:`QueryReading`: ``people``, ``places``, ``times`` (each a list of :class:`Understood`: ``kind``,
  ``value``, ``where``, ``text``, ``key``, ``label``), ``content``, ``labels``, ``texts``, ``trip_day``, ``notes``,
  ``spans``
  (every word's :class:`Span`), ``understood`` (all links in question order), ``where``, ``describe()``,
  ``to_dict()``; ``unlink`` takes :attr:`Understood.key` values (``"place:Kyoto"``) a person removed (the chips of
  the web app): those words are read as content;
- :func:`search_words` ``(question, where, gallery, *, unlink=(), whole=False) -> (text, where, reading)``: what
  a search looks for once its question is read (the request path's use);
- :func:`vocabulary` ``(gallery) -> Vocabulary``: the places, label words and years of an index, built once per
  index generation (``benchmarks/query_reader.py`` measures it at 100,000 photos); :meth:`Vocabulary.place_parts`
  the places a word matches by stem (for anchors: "festival" ~ "Place des Festivals").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from imagent.core.trace import Trace
from imagent.index.text import quoted_phrases
from imagent.tools.filter_lang import quote_string
from imagent.tools.query_time import MONTHS, SEASONS, WEEKDAYS, TimeLink, Word, find_times
from imagent.tools.query_vocab import Vocabulary, fold, stem, vocabulary, word_keys

KINDS = ("person", "place", "time")
# Words that only frame a question: never content.
FRAME_WORDS = frozenset({
    "photo", "photos", "picture", "pictures", "pic", "pics", "pix", "image", "images", "shot", "shots", "snap",
    "snaps", "snapshot", "snapshots", "me", "see", "looking", "want", "need", "please", "all", "every", "any",
    "some", "my", "our", "mine", "ours", "i",
    "we", "us", "you", "your", "the", "a", "an", "of", "from", "in", "at", "on", "with", "and", "or", "to", "during",
    "that", "which", "who", "whom", "there", "taken", "took", "take", "photographed", "photograph", "shoot",
    "snapped", "captured", "saw", "seen", "was", "were", "is", "are", "be", "been", "have", "had", "has", "did", "do",
    "can", "could", "would", "for", "by", "about", "it", "its", "those", "these", "this", "them", "they", "he",
    "she", "his", "her", "their", "what", "where", "when", "while", "one", "ones", "got", "made", "let", "lets",
    "also", "just", "only", "ever", "everything", "stuff", "things", "thing"})
# Requests ("show me", "find"): framing at the start of the question or before "me", "us", "all", "my"...; elsewhere
# words ("the coin show").
COMMAND_WORDS = frozenset({"show", "find", "search", "get", "give", "display", "look", "list"})
# Nouns of a journey: framing when a linked place or date says which ("my trip to Japan", "the 2023 holiday").
JOURNEY_WORDS = frozenset({"trip", "trips", "visit", "visits", "holiday", "holidays", "vacation", "vacations",
                           "journey", "tour", "travel", "travels", "stay", "time", "days", "weekend", "getaway",
                           "honeymoon", "break"})
# Words before a span that make it a place ("in Paris"), or a person ("with Anna", "of Anna").
PLACE_PREPOSITIONS = frozenset({"in", "at", "from", "to", "near", "around", "outside", "inside", "across",
                                "through", "visiting", "visited", "into"})
TIME_PREPOSITIONS = frozenset({"in", "during", "last", "this", "since", "until", "till", "before", "after", "early",
                               "late", "mid", "every", "each", "on"})
PERSON_CUES = frozenset({"of", "with", "and", "featuring", "showing", "by"})
# Capitalised words that are not names, though they may look like one.
NOT_NAMES = frozenset({"i", "christmas", "xmas", "easter", "halloween", "thanksgiving", "hanukkah", "diwali",
                       "ramadan", "eid", "passover", "new", "year", "years", "eve", "valentine", "valentines",
                       "mother", "father", "mom", "mum", "dad", "day", "ok", "okay", "tv", "god"})
# Everyday words that are also the names of towns: linked only when written with a capital or after "in", "at"...
EVERYDAY_PLACE_WORDS = frozenset({"nice", "reading", "bath", "split", "mobile", "orange", "hope", "marion",
                                  "victoria", "florence", "camp", "home", "university", "university park", "union",
                                  "paradise", "eagle", "bay", "beach", "park", "market", "church", "centre", "center",
                                  "city", "lake", "mountain", "river", "valley", "garden", "gardens", "harbour",
                                  "station", "airport", "hill", "hills", "port", "bridge", "castle", "palace"})
# Common forms of countries (and the UK's nations), as a person writes them -> the name stored.
COUNTRY_FORMS: dict[str, tuple[str, ...]] = {
    "usa": ("united states",), "us": ("united states",), "u s": ("united states",), "u s a": ("united states",),
    "america": ("united states",), "the states": ("united states",), "states": ("united states",),
    "united states of america": ("united states",),
    "uk": ("united kingdom",), "u k": ("united kingdom",), "britain": ("united kingdom",),
    "great britain": ("united kingdom",), "england": ("england", "united kingdom"),
    "holland": ("netherlands",), "the netherlands": ("netherlands",), "czech republic": ("czechia",),
    "czechia": ("czech republic",), "korea": ("south korea",), "south korea": ("korea, republic of",),
    "russia": ("russian federation",), "vietnam": ("viet nam",), "turkey": ("turkiye", "türkiye"),
    "uae": ("united arab emirates",), "emirates": ("united arab emirates",)}
# "my second day", "day 3", "the last day"
ORDINAL_DAYS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
                "eighth": 8, "ninth": 9, "tenth": 10, "last": -1, "final": -1}
# Words that pick one journey among several ("my other trip to Kyoto"): a relation, left to the album method.
RANKS = frozenset({"other", "another", "next", "previous", "earlier", "later", "same", "different", "latest",
                   "recent", "most"})
_TOKEN = re.compile(r"\d{4}-\d{1,2}(?:-\d{1,2})?|[^\W_]+(?:['’][^\W_]+)*")
_ORDINAL_NUMBER = re.compile(r"(\d{1,2})(?:st|nd|rd|th)")


def words_of(text: str) -> list[Word]:
    """The words of ``text`` (letters and digits with inner apostrophes; ISO dates whole), possessives marked."""
    out = []
    for m in _TOKEN.finditer(text):
        raw = m.group(0)
        possessive = bool(re.search(r"['’]s$", raw, re.I)) and len(raw) > 2
        base = raw[:-2] if possessive else raw
        out.append(Word(base, fold(base), m.start(), m.end(), base[:1].isupper(), possessive))
    return out


def _people_names(gallery: Any) -> list[str]:
    """The names of the named groups with photos in ``gallery`` ([] without face data)."""
    if gallery is None:
        return []
    from imagent.index.people import people_index

    try:
        index = people_index(getattr(gallery, "gallery", gallery))
    except Exception:
        return []
    return sorted({n for p, n in index.names.items() if n and p in index.rows})


# --------------------------------------------------------------------------- the reading


@dataclass(frozen=True)
class Span:
    """A run of the question's words and how it was read: ``kind`` one of person, place, time (filters), trip_day,
    content (searched; ``value`` the label it names when it is a label word), text (a quoted phrase, ``value`` the
    phrase without its quotes: text to find in the photos), frame (words that only frame the
    question: "photos of", "my"); ``start``/``end`` character offsets; ``value`` what it links to; ``where`` its
    filter ("" for none)."""

    start: int
    end: int
    text: str
    kind: str
    value: str = ""
    where: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "text": self.text, "kind": self.kind, "value": self.value,
                "where": self.where}


@dataclass(frozen=True)
class Understood:
    """One thing the reader understood as a filter (a chip of the web app): ``kind`` person, place or time;
    ``value`` the name as stored or the period in words; ``where`` its filter; ``text`` the words as typed;
    ``facets`` (dates) what it constrains."""

    kind: str
    value: str
    where: str
    text: str
    facets: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``kind:value``: what a request's ``unlink`` names to read these words as content instead."""
        return f"{self.kind}:{self.value}"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.value}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "where": self.where, "text": self.text, "key": self.key,
                "label": self.label}


@dataclass
class QueryReading:
    """A question as the reader understood it (module docstring)."""

    text: str
    people: list[Understood] = field(default_factory=list)
    places: list[Understood] = field(default_factory=list)
    times: list[Understood] = field(default_factory=list)
    content: str = ""
    labels: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # quoted phrases: text to find in the photos
    trip_day: int | None = None
    notes: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    unlinked: list[str] = field(default_factory=list)

    @property
    def understood(self) -> list[Understood]:
        """Every filter understood, in the order the question says them."""
        order = {s.value + s.kind: s.start for s in self.spans}
        return sorted([*self.people, *self.places, *self.times], key=lambda u: order.get(u.value + u.kind, 0))

    @property
    def where(self) -> str | None:
        """The filters as one expression: every person; any of the places; dates of one facet any of them, of
        different facets all (None when nothing was understood)."""
        groups: list[str] = [u.where for u in self.people]
        if self.places:
            groups.append(_either([u.where for u in self.places]))
        by_facet: dict[tuple[str, ...], list[str]] = {}
        for u in self.times:
            by_facet.setdefault(u.facets, []).append(u.where)
        groups.extend(_either(v) for v in by_facet.values())
        if not groups:
            return None
        return " and ".join(f"({g})" if " or " in g and not g.startswith("(") and len(groups) > 1 else g
                            for g in groups)

    @property
    def filters_only(self) -> bool:
        """The question names people, places or dates and nothing to look for: list their photos."""
        return not self.content and bool(self.understood) and self.trip_day is None

    def describe(self) -> str:
        """One line: ``person Joe · place Kyoto · content 'birds'`` (what the CLI prints after "understood:")."""
        parts = [u.label for u in self.understood]
        if self.trip_day is not None:
            parts.append(f"trip day {self.trip_day if self.trip_day > 0 else 'last'}")
        parts.extend(f'text "{t}"' for t in self.texts)
        if self.content:
            parts.append(f"content {self.content!r}")
        return " · ".join(parts) or "nothing"

    def record(self, trace: Trace, applied: bool = True) -> None:
        """A trace step ``read`` with what was understood (``applied``: whether the search filters by it; a method
        that reads the question itself gets it whole)."""
        with trace.step("read", question=self.text) as step:
            step.outputs = {"understood": [u.label for u in self.understood], "where": self.where,
                            "content": self.content, "labels": list(self.labels), "texts": list(self.texts),
                            "trip_day": self.trip_day, "filtered": applied}
            for note in self.notes:
                step.note(note)
            if not applied and self.where:
                step.note("the method reads the question itself: the filters understood are shown, not applied here")

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "understood": [u.to_dict() for u in self.understood],
                "people": [u.value for u in self.people], "places": [u.value for u in self.places],
                "times": [u.value for u in self.times], "content": self.content, "labels": list(self.labels),
                "texts": list(self.texts), "trip_day": self.trip_day, "where": self.where, "notes": list(self.notes),
                "unlinked": list(self.unlinked), "describe": self.describe(),
                "spans": [s.to_dict() for s in self.spans]}


def _either(parts: Sequence[str]) -> str:
    parts = list(dict.fromkeys(parts))
    if len(parts) == 1:
        return parts[0]
    return "(" + " or ".join(f"({p})" if " and " in p and not p.startswith("(") else p for p in parts) + ")"


@dataclass(frozen=True)
class _Link:
    start: int  # word index
    end: int
    kind: str
    value: str
    where: str
    facets: tuple[str, ...] = ()
    note: str = ""


class _Reader:
    """One question against one vocabulary (see :func:`read_query`)."""

    def __init__(self, question: str, vocab: Vocabulary, people: Sequence[str], today: date,
                 unlink: Iterable[str], hemisphere: str) -> None:
        self.text = question
        self.words = words_of(question)
        self.w = [x.lower for x in self.words]
        self.vocab = vocab
        self.people = {tuple(w.lower for w in words_of(n)): n for n in people}
        self.today = today
        self.unlink = {fold(k) for k in unlink}
        self.hemisphere = hemisphere
        self.notes: list[str] = []
        self.journeys: set[int] = set()  # journey words framed by a linked place or date
        # Quoted phrases ("Cafe Sol"): (first word, end word, phrase); their words are never linked.
        self.quotes: list[tuple[int, int, str]] = []
        for start, end, phrase in quoted_phrases(question):
            inside = [k for k, w in enumerate(self.words) if start <= w.start < end]
            if inside:
                self.quotes.append((inside[0], inside[-1] + 1, phrase))
        self.quoted = {k for a, b, _ in self.quotes for k in range(a, b)}

    def at(self, i: int) -> str:
        return self.w[i] if 0 <= i < len(self.w) else ""

    def removed(self, kind: str, value: str) -> bool:
        return fold(f"{kind}:{value}") in self.unlink

    # ------------------------------------------------------------------ people
    def person(self, i: int) -> _Link | None:
        for n in range(min(4, len(self.w) - i), 0, -1):  # the longest name first
            key = tuple(self.w[i: i + n])
            name = self.people.get(key)
            if name is not None and (n > 1 or self.words[i].cap or not (self._common(i) or self.at(i - 1) in
                                                                        ("a", "an", "the", "some", "my", "our"))):
                return _Link(i, i + n, "person", name, f"person = {quote_string(name)}")  # not "may", "a rose"
        # One word of exactly one person's name ("Barack" for "Barack Obama"), written as a name or not a word that
        # means something else here (a label, a date, a framing word).
        word = self.words[i]
        owners = [name for key, name in self.people.items() if len(key) > 1 and word.lower in key]
        if len(owners) == 1 and (word.cap or not self._common(i)):
            return _Link(i, i + 1, "person", owners[0], f"person = {quote_string(owners[0])}")
        return None

    def _common(self, i: int) -> bool:
        w = self.at(i)
        return (w in FRAME_WORDS or w in MONTHS or w in WEEKDAYS or w in SEASONS or (stem(w),) in self.vocab.labels
                or w in EVERYDAY_PLACE_WORDS)

    # ------------------------------------------------------------------ places
    def place(self, i: int) -> _Link | None:
        after_preposition = self.at(i - 1) in PLACE_PREPOSITIONS
        for n in range(min(self.vocab.max_place_words + 1, len(self.w) - i), 0, -1):
            span = self.words[i: i + n]
            key = tuple(stem(x.lower) for x in span)
            phrase = " ".join(x.lower for x in span)
            names = [self.vocab.place(key)] if self.vocab.place(key) else []
            if not names and phrase in COUNTRY_FORMS and (n > 1 or phrase not in ("us", "states") or span[0].cap):
                stored = (self.vocab.place(word_keys(c)) for c in COUNTRY_FORMS[phrase])
                names = [x for x in stored if x][:1]
            if not names:
                continue
            everyday = n == 1 and (self._common(i) or (key[0],) in self.vocab.labels)
            if everyday and not (span[0].cap and i > 0) and not after_preposition:
                continue  # "nice photos", "a park": words, not the towns of those names
            if n == 1 and span[0].lower in FRAME_WORDS and not span[0].cap:
                continue
            name = names[0]
            return _Link(i, i + n, "place", name, f"place ~ {quote_string(name)}")
        word = self.words[i]
        parts = self.vocab.partial.get(stem(word.lower), [])
        if word.cap and len(parts) == 1 and not self._common(i):
            # a capitalised run of a long name's own words ("Louvre", "Queen Victoria")
            n = 1
            while i + n < len(self.w) and stem(self.w[i + n]) in word_keys(parts[0]) and self.words[i + n].cap:
                n += 1
            return _Link(i, i + n, "place", parts[0], f"place ~ {quote_string(parts[0])}")
        return None

    # ------------------------------------------------------------------ trip days
    def trip_day(self, i: int) -> tuple[int, int] | None:
        """``(end, n)`` for "second day", "2nd day", "last day", "day 3", "day three"."""
        w = self.at(i)
        n = ORDINAL_DAYS.get(w)
        m = _ORDINAL_NUMBER.fullmatch(w)
        if m:
            n = int(m.group(1))
        if n is not None and (self.at(i + 1) == "day" or (n > 0 and self.at(i + 1) in ("morning", "evening"))):
            return i + 2, n
        if w == "day":
            nxt = self.at(i + 1)
            from imagent.tools.query_time import NUMBERS

            if nxt.isdigit() and 0 < int(nxt) < 60:
                return i + 2, int(nxt)
            if nxt in NUMBERS and nxt not in ("a", "an", "few", "couple"):
                return i + 2, NUMBERS[nxt]
        return None

    # ------------------------------------------------------------------ the pass
    def links(self) -> tuple[list[_Link], dict[int, tuple[int, int]]]:
        times, notes = find_times(self.words, self.today, self.vocab.years, self.hemisphere)
        self.notes.extend(notes)
        time_at = {t.start: t for t in times}
        out: list[_Link] = []
        trip_days: dict[int, tuple[int, int]] = {}
        i = 0
        while i < len(self.words):
            td = self.trip_day(i)
            if td is not None:
                trip_days[i] = td
                i = td[0]
                continue
            candidates = [c for c in (self.person(i), self.place(i), self._time(time_at.get(i))) if c is not None]
            candidates = [c for c in candidates if not self.removed(c.kind, c.value)
                          and not self.quoted.intersection(range(c.start, c.end))]
            if not candidates:
                i += 1
                continue
            best = max(candidates, key=lambda c: (c.end - c.start, self._prefer(c)))
            out.append(best)
            i = best.end
        return out, trip_days

    def _time(self, t: TimeLink | None) -> _Link | None:
        if t is None:
            return None
        return _Link(t.start, t.end, "time", t.label, t.where, t.facets, t.note)

    def _prefer(self, link: _Link) -> int:
        """Among links of one length: a place after "in", "at"...; a date after "in", "last", "since"... ("in May"
        with a person named May); a person elsewhere; then a place; a date last."""
        before = self.at(link.start - 1)
        if link.kind == "place":
            return 3 if before in PLACE_PREPOSITIONS else 1
        if link.kind == "time":
            return 4 if before in TIME_PREPOSITIONS else 0
        return 2

    def read(self) -> QueryReading:
        links, trip_days = self.links()
        reading = QueryReading(self.text, unlinked=sorted(self.unlink))
        covered: dict[int, _Link] = {}
        for link in links:
            for k in range(link.start, link.end):
                covered[k] = link
            u = Understood(link.kind, link.value, link.where, self._text(link.start, link.end), link.facets)
            bucket = {"person": reading.people, "place": reading.places, "time": reading.times}[link.kind]
            if u.key not in {x.key for x in bucket}:
                bucket.append(u)
        self._frame_journeys(covered, links)
        content: list[str] = []
        quote_at = {a: (b, phrase) for a, b, phrase in self.quotes}
        i = 0
        while i < len(self.words):
            if i in quote_at:  # a quoted phrase: text to find in the photos, its words content too
                end, phrase = quote_at[i]
                reading.texts.append(phrase)
                content.extend(w.text for w in self.words[i:end])
                reading.spans.append(Span(self.words[i].start, self.words[end - 1].end, self._text(i, end), "text",
                                          phrase))
                i = end
                continue
            if i in trip_days:
                end, n = trip_days[i]
                reading.trip_day = n
                reading.spans.append(Span(self.words[i].start, self.words[end - 1].end, self._text(i, end),
                                          "trip_day", str(n)))
                i = end
                continue
            link = covered.get(i)
            if link is not None:
                if link.start == i:
                    reading.spans.append(Span(self.words[i].start, self.words[link.end - 1].end,
                                              self._text(i, link.end), link.kind, link.value, link.where))
                i = link.end
                continue
            i = self._word(i, content, reading)
        reading.content = " ".join(content)
        if not reading.content and not links and reading.trip_day is None:  # nothing but framing: search it all
            reading.content = " ".join(w.text for w in self.words)
        reading.notes = list(dict.fromkeys([*self.notes, *self._unknown_names(covered, trip_days)]))
        if not reading.times:
            reading.notes = [n for n in reading.notes if not n.startswith(("seasons are read", "winter", "summer"))]
        return reading

    def _word(self, i: int, content: list[str], reading: QueryReading) -> int:
        """One word not linked: a label word (with the words after it that make a longer label), content, or
        framing. Returns the next index."""
        word = self.words[i]
        command = word.lower in COMMAND_WORDS and (i == 0 or self.at(i + 1) in ("me", "us", "all", "my", "our", "the",
                                                                                "for", "up", "at"))
        if word.lower in FRAME_WORDS or i in self.journeys or command:
            reading.spans.append(Span(word.start, word.end, word.text, "frame"))
            return i + 1
        for n in range(min(self.vocab.max_label_words, len(self.w) - i), 0, -1):
            key = tuple(stem(x) for x in self.w[i: i + n])
            label = self.vocab.labels.get(key)
            if label is not None:
                text = self._text(i, i + n)
                content.append(" ".join(x.text for x in self.words[i: i + n]))
                reading.labels.append(text)
                reading.spans.append(Span(word.start, self.words[i + n - 1].end, text, "content", label))
                return i + n
        content.append(word.text)
        reading.spans.append(Span(word.start, word.end, word.text, "content"))
        return i + 1

    def _frame_journeys(self, covered: dict[int, _Link], links: Sequence[_Link]) -> None:
        """"trip", "visit", "holiday" next to a linked place or date ("my trip to Japan", "Kyoto trip", "the 2023
        holiday") say which photos, and are framing; elsewhere they are content."""
        for link in links:
            if link.kind not in ("place", "time"):
                continue
            for k in (link.start - 1, link.start - 2, link.end, link.end + 1):
                before = self.at(k - 1)
                if before in ORDINAL_DAYS or before in RANKS or _ORDINAL_NUMBER.fullmatch(before):
                    continue  # "my second trip to Japan", "my other visit to Kyoto": which one is a relation
                if self.at(k) in JOURNEY_WORDS and k not in covered:
                    between = range(k + 1, link.start) if k < link.start else range(link.end, k)
                    if all(self.at(j) in FRAME_WORDS for j in between):
                        self.journeys.add(k)

    def _text(self, i: int, j: int) -> str:
        return self.text[self.words[i].start: self.words[j - 1].end]

    def _unknown_names(self, covered: dict[int, _Link], trip_days: dict[int, tuple[int, int]]) -> list[str]:
        """Notes for capitalised words where a person or a place is expected that link to nothing."""
        notes = []
        for i, word in enumerate(self.words):
            if i in covered or i in trip_days or i in self.quoted or not word.cap or word.lower in NOT_NAMES \
                    or self._common(i):
                continue
            if i == 0 and not word.possessive:
                continue  # the first word of a sentence is capitalised anyway
            run = [word.text]
            k = i + 1
            while k < len(self.words) and self.words[k].cap and k not in covered and not self._common(k):
                run.append(self.words[k].text)
                k += 1
            if i > 0 and self.words[i - 1].cap and (i - 1) not in covered and not self._common(i - 1):
                continue  # inside a run already noted
            name = " ".join(run)
            before = self.at(i - 1)
            if before in PLACE_PREPOSITIONS:
                notes.append(self._unknown_place(name))
            elif before in PERSON_CUES or word.possessive or self.words[k - 1].possessive:
                notes.append(self._unknown_place(name) or
                             f"no person named {name!r} in this library: searched as words")
        return [n for n in notes if n]

    def _unknown_place(self, name: str) -> str:
        from imagent.index import places

        try:
            known = places.find(name) if places.available() else None
        except Exception:
            known = None
        if known is None:
            return ""
        return f"no photo in this library is from {name!r} ({known.name}): searched as words"


def search_words(question: str, where: str | None, gallery: Any, *, unlink: Iterable[str] = (),
                 whole: bool = False) -> tuple[str, str | None, QueryReading]:
    """What a search looks for once its question is read (``SearchRequest(read_query=True)``):
    ``(text, where, reading)``. The filters understood are joined to ``where`` (both hold) and the content words are
    the text (empty with only filters: the matching photos are listed in time order); ``whole`` (a method that reads
    the question itself, ``Method.reads_question``) keeps the question and ``where`` as they are, the reading beside
    them. A question with nothing linked is searched as written (as a method named explicitly searches it)."""
    reading = read_query(question, gallery, unlink=unlink)
    if whole or reading.where is None:
        return question, where, reading
    where = reading.where if where is None else f"({where}) and {reading.where}"
    return reading.content, where, reading


def read_query(question: str, gallery: Any = None, *, today: date | None = None, unlink: Iterable[str] = (),
               hemisphere: str = "north", vocab: Vocabulary | None = None,
               people: Sequence[str] | None = None) -> QueryReading:
    """``question`` read against ``gallery``'s own vocabulary (module docstring): its people (named face groups),
    places (address parts), dates (relative to ``today``, default the machine's date) and label words.

    ``unlink``: :attr:`Understood.key` values ("place:Kyoto") a person removed: those words are read as content.
    ``hemisphere``: "north" or "south", for seasons. ``vocab`` and ``people`` replace what ``gallery`` holds (for
    tests and callers that hold them already); ``gallery`` may be None then."""
    vocab = vocab if vocab is not None else (vocabulary(gallery) if gallery is not None else Vocabulary())
    names = list(people) if people is not None else _people_names(gallery)
    return _Reader(question, vocab, names, today or date.today(), unlink, hemisphere).read()


__all__ = ["FRAME_WORDS", "JOURNEY_WORDS", "KINDS", "QueryReading", "Span", "Understood", "Vocabulary", "fold",
           "read_query", "search_words", "stem", "vocabulary", "words_of"]
