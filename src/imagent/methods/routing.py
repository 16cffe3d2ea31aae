"""Which method answers a query typed in plain words: the web UI's one search box and ``imagent search`` without
``--method`` (:func:`imagent.api.route_method` is the entry point; this module holds the rule).

The question is read first (:mod:`imagent.tools.query_reader`): the people, places and dates it names are filters,
the rest is content. Three kinds of query:

- **album-style**: the photos wanted are defined by their relation to something else the album holds, an
  *anchor*: "the birds from the day I saw the penguin", "photos from our trip after the conference", "my other
  visit to the place where we had pizza". Content search cannot answer these (the anchor's day or place must be
  found first), so they go to the ``album`` method when it is installed. Otherwise the best content search answers
  and the route says so (``fallback``: the relation is not applied).
- **filter**: a question that names only people, places and dates ("Barack", "Kyoto 2023", "photos from
  Lisbon last May"): their photos, listed in time order (no model);
- **content**: everything else ("a penguin", "red car at night", "my cat on the sofa") goes to the best content
  search the index supports, read from the index itself (:data:`CONTENT_ROUTES`, first that applies): pixel
  vectors when the index's image space sees pixels or the pixel model has seen the photos (their captions where
  they have them, else what the classifier saw), captions when photos have them, and else the words of file and
  folder names, dates and places (every indexed photo has those).

The album-style test is a rule over words and the structure of relations, never a list of queries
(:func:`album_signals`): an *anchor clause* (an event or place noun followed by a personal clause: "the day I ...",
"the place where we ...", "the morning my sister ..."), a *temporal relation to an event or a clause* ("after the
concert", "before we left", "while I was ..."), *recurrence or sameness* ("the same day", "my other visit", "the
second time", "the day after", "went back"), a *personal event* ("our honeymoon", "my trip", "my birthday party"),
*a journey* ("from the trip to Japan"), *the period of an event* ("the week of the wedding", "on the morning of"),
or a *spatial relation to a clause* ("near where I ...", "around the place we ..."); and *the Nth day of a trip*
("my second day in Kyoto", the reader's :attr:`~imagent.tools.query_reader.QueryReading.trip_day`). The signals are
looked for in the question without what the reader linked: "last summer" is a date, not a recurrence, and "my trip
to Japan" names the photos taken in Japan (a place filter), not an anchor ("the food I photographed in Lisbon" is
a content search for food in Lisbon, "my second trip to Japan" stays an album query).
``tests/methods/test_routing.py`` checks varied phrasings both ways.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from imagent.core.types import Result, Source

ALBUM_METHOD = "album"

# Nouns naming a stretch of time, an outing or event, or a place one goes to: what an anchor is made of.
_TIME = ("day|days|morning|mornings|afternoon|evening|night|week|weekend|month|year|summer|winter|spring|autumn|"
         "fall|season|time|times|moment|hour")
_EVENT = ("trip|trips|visit|visits|holiday|holidays|vacation|vacations|journey|tour|outing|excursion|getaway|"
          "occasion|event|party|wedding|anniversary|birthday|graduation|honeymoon|reunion|funeral|ceremony|"
          "concert|festival|show|game|match|race|marathon|hike|walk|ride|drive|cruise|flight|stay|camping|"
          "conference|meeting|dinner|lunch|breakfast|brunch|meal|picnic|barbecue|bbq|date|celebration|"
          "christmas|easter|thanksgiving|halloween")
_PLACE = ("place|spot|city|town|village|country|park|restaurant|cafe|bar|beach|museum|zoo|hotel|house|home|flat|"
          "apartment|garden|lake|mountain|island|street|market|church|school|office|campsite|station|airport")
_ANCHOR_NOUN = f"(?:{_TIME}|{_EVENT}|{_PLACE})"
# Who lived the anchor: a personal subject (or the possessive of one) opening the clause after the noun.
_PERSON = (r"(?:i|we|me|us|you|my|our|your|he|she|they|his|her|their|mom|mum|dad|grandma|grandpa|"
           r"the kids|the children|the family|the baby)")
_REL = r"(?:when|where|that|which|on which|in which|at which|during which)"
_DET = r"(?:the|that|this|those|these|a|an|my|our|his|her|their|your)"
_ORDINAL = (r"(?:other|another|previous|next|following|last|first|second|third|fourth|fifth|earlier|later|final|"
            r"same|different|return|repeat)")

# (name, pattern): a signal is the first match of its pattern, shown in the route's reason.
SIGNALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # "the day I saw", "the place where we had", "the morning my sister", "the trip when they"
    ("anchor clause", re.compile(
        rf"\b{_DET}\s+(?:[\w']+\s+)?{_ANCHOR_NOUN}\s+(?:{_REL}\s+)?{_PERSON}\b(?:\s+[\w']+)?")),
    # "after the concert", "before we left", "during our stay", "while I was", "since my graduation"
    ("time relation", re.compile(
        rf"\b(?:before|after|during|while|since|until|till|following|prior to|ahead of|right after|just before)"
        rf"\s+(?:{_PERSON}\b|{_DET}\s+(?:[\w']+\s+){{0,2}}?(?:{_EVENT}|{_TIME})\b)")),
    # "when we were in Lisbon", "when I visited"
    ("time clause", re.compile(r"\bwhen\s+(?:i|we|my|our)\b")),
    # "the same day", "my other visit", "the second time", "the next morning"
    ("recurrence", re.compile(rf"\b{_ORDINAL}\s+(?:[\w']+\s+)?(?:{_TIME}|{_EVENT})\b")),
    # "the day before", "the week after"
    ("relative day", re.compile(rf"\b(?:{_TIME})\s+(?:before|after|earlier|later)\b")),
    # "went back to", "came back", "returned to", "again"
    ("return", re.compile(r"\b(?:went back|go back|going back|came back|come back|returned to|revisited|"
                          r"visited again|again)\b")),
    # "our honeymoon", "my trip", "my birthday party"
    ("personal event", re.compile(rf"\b(?:my|our)\s+(?:[\w']+\s+){{0,2}}?(?:{_EVENT})\b")),
    # "from the trip to Japan", "during the stay in Rome"
    ("journey", re.compile(r"\b(?:from|during|on|of)\s+(?:the|that)\s+(?:[\w']+\s+)?(?:trip|visit|holiday|vacation|"
                           r"journey|tour|excursion|stay|cruise|honeymoon)\s+(?:to|in|at|with)\b")),
    # "the week of the wedding", "on the morning of", "from the day with"
    ("period of", re.compile(rf"\b(?:the|that)\s+(?:{_TIME}|{_EVENT})\s+(?:of|with)\s+(?:the|my|our|that|his|her)\b")),
    # "near where I took", "around the place we stayed"
    ("place relation", re.compile(rf"\b(?:near|around|close to|next to|not far from|by)\s+(?:where\s+{_PERSON}\b|"
                                  rf"the\s+(?:{_PLACE})\s+(?:{_REL}\s+)?{_PERSON}\b)")),
)


def album_signals(text: str) -> list[str]:
    """The relation phrases that make ``text`` an album-style query, each as ``"kind: 'phrase'"`` (empty: none)."""
    words = " ".join(re.findall(r"[\w']+", text.lower()))
    found = []
    for name, pattern in SIGNALS:
        m = pattern.search(words)
        if m:
            found.append(f"{name}: '{m.group(0)}'")
    return found


def is_album_query(text: str) -> bool:
    return bool(album_signals(text))


# --------------------------------------------------------------------------- content search


@dataclass(frozen=True)
class ContentRoute:
    """A content search the index may support: ``method`` answers when ``check(gallery)`` gives a reason."""

    method: str
    check: Callable[[Any], str]


def _sees_pixels(gallery: Any) -> str:
    info = gallery.spaces().get("image")
    if info is not None and not str(info.model_id).startswith("caption:"):
        return f"the index's image vectors see pixels ({info.model_id})"
    return ""


def _pixel_model(gallery: Any) -> str:
    """The pixel model has seen the photos (:mod:`imagent.index.pixels`): the image space holds each photo's caption
    vector where it has one, else its ConSE vector (what the classifier saw), so ``clip`` searches both."""
    if not gallery.has_space("visual"):
        return ""
    return "the pixel model has seen the photos: searched by caption where they have one, else by what it saw"


def _captions(gallery: Any) -> str:
    if not gallery.has_space("caption_text"):
        return ""
    columns = gallery.metadata_columns(["caption_source"])
    if columns is not None:  # read in SQLite, without parsing every record
        with_caption, total = sum(1 for s in columns[0] if s), len(columns[0])
    else:
        with_caption, total = gallery.caption_coverage()
    if not with_caption:
        return ""
    return f"{with_caption} of {total} photos have captions: searched by caption"


def _derived_words(gallery: Any) -> str:
    if not gallery.has_space("caption_text"):
        return ""
    return ("no captions and no model that sees pixels: searched by the words of file and folder names, dates and "
            "places")


def _image_space(gallery: Any) -> str:
    return "the index's image vectors" if gallery.has_space("image") else ""


# First that applies wins. A part that adds a better content search (pixel features, say) inserts its own entry.
CONTENT_ROUTES: list[ContentRoute] = [
    ContentRoute("clip", _sees_pixels),
    ContentRoute("clip", _pixel_model),
    ContentRoute("caption", _captions),
    ContentRoute("caption", _derived_words),
    ContentRoute("clip", _image_space),
]


def content_method(gallery: Any, available: Callable[[str], bool] | None = None) -> tuple[str, str]:
    """``(method, reason)``: the best content search ``gallery`` supports among the installed methods."""
    for route in CONTENT_ROUTES:
        if available is not None and not available(route.method):
            continue
        reason = route.check(gallery)
        if reason:
            return route.method, reason
    return "clip", "the dual encoder's image space (the index states nothing better)"


# --------------------------------------------------------------------------- the route


@dataclass(frozen=True)
class Route:
    """Where a plain-words query goes. ``kind``: ``album`` (a relation to an anchor) or ``content``; ``fallback``
    says why the method is not the one the query calls for ("" when it is)."""

    method: str
    kind: str
    reason: str
    fallback: str = ""
    signals: tuple[str, ...] = field(default_factory=tuple)
    # What the query reader understood (QueryReading.to_dict()), None when the question was not read.
    understood: dict[str, Any] | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "kind": self.kind, "reason": self.reason, "fallback": self.fallback,
                "signals": list(self.signals), "understood": self.understood}

    def label(self, result: Result) -> Result:
        """``result`` of the routed method, its source saying when it is a fallback (never silent): the method's own
        answer to a query that called for another becomes ``fallback:content_search`` with the reason."""
        if self.fallback and result.source == Source.METHOD:
            result.source, result.source_reason = Source.fallback("content_search"), self.fallback
        return result


def unlinked_text(text: str, reading: Any) -> str:
    """``text`` without the spans the reader linked (people, places, dates) and the journey words they frame, with
    the framing words before them ("during our holiday" in "food during our holiday in Greece", "on my trip" in "...
    on my trip to Japan"): where relation signals are looked for."""
    from imagent.tools.query_reader import JOURNEY_WORDS

    spans = sorted(reading.spans, key=lambda s: s.start)
    cut = []
    for n, s in enumerate(spans):
        if s.kind in ("person", "place", "time"):
            cut.append((s.start, s.end))
        elif s.kind == "frame" and s.text.lower() in JOURNEY_WORDS:
            k = n
            while k > 0 and spans[k - 1].kind == "frame":
                k -= 1
            cut.append((spans[k].start, s.end))
    out, at = [], 0
    for start, end in sorted(cut):
        out.append(text[at:start])
        at = max(at, end)
    out.append(text[at:])
    return " ".join("".join(out).split())


def route(text: str, gallery: Any, available: Callable[[str], bool], reading: Any = None) -> Route:
    """The method for ``text`` over ``gallery``; ``available(name)`` says whether a method is installed; ``reading``
    (a :class:`~imagent.tools.query_reader.QueryReading` of ``text``, or None) what the query reader understood."""
    signals = tuple(album_signals(text if reading is None else unlinked_text(text, reading)))
    if reading is not None and reading.trip_day is not None:
        day = next((s.text for s in reading.spans if s.kind == "trip_day"), "")
        signals = (f"day of a trip: '{day}'", *signals)
    method, why = content_method(gallery, available)
    understood = reading.to_dict() if reading is not None else None
    if not signals:
        if reading is not None and reading.filters_only:
            said = " · ".join(u.label for u in reading.understood)
            return Route(method, "filter", f"the question names only who, where or when ({said}): their photos in "
                         "time order", understood=understood)
        return Route(method, "content", why, understood=understood)
    relation = "; ".join(signals)
    if available(ALBUM_METHOD):
        return Route(ALBUM_METHOD, "album", f"the query relates photos to an anchor ({relation})",
                     signals=signals, understood=understood)
    return Route(method, "album", why, signals=signals, understood=understood,
                 fallback=(f"the query relates photos to an anchor ({relation}), but the {ALBUM_METHOD!r} method is "
                           f"not installed: a content search ({method}) answered, without the relation"))
