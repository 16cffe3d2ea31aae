"""Generate a held-out DISBench-layout album from a seed, with every relation the ``album`` planner knows.

The shipped ``album_mini`` is hand-declared (22 hand-written queries). This script *generates* albums from the Tux
Paint stamps (``../shared/data/stamps``; benchmarks may read ``../shared``) with a seeded random generator, so a
method can be measured on albums nobody tuned it on:

- users in other cities and countries (both hemispheres), each with a home city (four venues visited again and
  again: day outings), **multi-day trips** (two to four consecutive days in another city, one venue a day; two of
  the cities visited twice), single distractor photos on days of their own, and one **distractor user** with no
  queries whose album holds the same anchor objects (an album search must stay inside its user's photos);
- questions of every plan kind: same day / trip / place / city; N days or weeks after or before; the next or
  previous trip; the Nth day of a trip; the first, k-th or last visit to a place or a city; another visit; the same
  or following month, season and year; chains through an intermediate venue or event ("the {target} at the {venue}
  on the trip where I saw the {anchor}", "... at the {venue} the {season} after ...", "the day I saw the {mid} on
  the trip with the {anchor}", the {mid} photographed on another trip too); an exclusion on a trip; "photos"
  targets (a trip's, the Nth day in a city); a city; a month; no anchor; a negation. A person is not generated: the
  stamps show no faces;
- **each question in several wordings** (``--wordings``, 3): different templates of :data:`PHRASINGS` (six to ten a
  kind, written as different people ask before the ``album`` planner's rules were read: questions, fragments, "pics
  of", casual), one answer; the rows of a question share its ``question`` id, so reports show each question's worst
  wording;
- **decoy anchors**: for about a third of the anchored queries the anchor's object (the same stamp, so the same
  caption) is also photographed on another day, where the relation finds none of the target: only the joint
  evidence of anchor and target tells which photo the query means.

Every answer is computed from the declaration by the definitions below (not by any method's code):

- a *day* is a calendar day of ``taken_time``; a *trip* is a maximal run of the user's photo days at most one day
  apart (``trip_gap_days`` = 1); a *visit* to a venue (or city) is a trip's photos at that venue (in that city),
  visits in time order;
- N days after / before: the photos of the anchor's day +- N; N weeks: the trip holding the day +- 7N (planted
  exactly); the next / previous trip: the trip after / before the anchor's trip; the month, season (by the
  anchor's hemisphere: December-February is the northern winter) or year after: the next calendar month, the next
  season of that name after the anchor's own season, the next calendar year; same month / season / year: the
  anchor's own;
- same place: every photo at the anchor's venue; same city: every photo in its city; other visit: the anchor's
  venue's photos on the other trips; no anchor: all the user's photos; negation: every photo not at a venue whose
  address holds the named word;
- the Nth day of a trip: its Nth photo day (-1: the last); a venue on a trip (in the season after): the trip's (that
  season's) photos at that venue; a mid event: the day, on the anchor's trip, of the photo of the mid object; an
  exclusion on a trip: the trip's photos at other venues; the Nth day in a city: that day of the city's one trip; a
  city, a month: its photos;
- the answer: the photos of that subset whose (hidden) kind is the query's target kind (every photo of it for a
  "photos" question); the anchor is in it only when its own kind is the target kind.

A question is kept only when its answer is not empty, is not the anchor alone, differs from every target photo of
the album (the relation matters), differs from the target photos of the anchor's own day (for the relations that
leave that day), and, with a decoy, the relation from the decoy finds none of the target; a chain's venue, day or
exclusion must change its answer too. The ``queries.jsonl`` rows carry fields a method never reads (``question``,
``plan_kind``, ``phrasing``, ``decoy``) for per-kind and per-question reports.

Seeds: :data:`DEV_SEEDS` are for development (``--phrasings dev`` leaves out the last phrasing of each kind);
seeds 3000 and above were used while building the ``album`` method of issue 46; ``benchmarks/album_compare.py``
reports on seeds 4101-4103, run once with the code final.

    python benchmarks/holdout_album.py OUT_DIR [--seed 2101] [--phrasings all|dev] [--stamps DIR]

then ``imagent eval disbench --images-root OUT_DIR --method album``. Dates, places and devices are invented; the
stamps are GPL-2 (their COPYRIGHT file is copied along).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

# Every plan kind in several wordings, as different people ask (written before anything was run on them, and before
# the planner's rules were read: the same-day, same-trip, next-trip, Nth-day, other-visit, season-after and chained
# kinds in ten wordings each: questions, fragments, "pics of", casual). Each question of an album is written in
# ``--wordings`` (3) of its kind's wordings, chosen at random without repeats. Placeholders: {target} (plural noun),
# {Target} (capitalised), {anchor} (the anchor's object), {mid} (an object photographed on the anchor's trip), {n} (a
# count), {nth} (an ordinal), {season}, {place} and {venue} (a venue's words), {city}, {month}, {year}. A wording
# without {n} means one (a week, the day after); "day {n}" needs a positive n.
PHRASINGS: dict[str, tuple[str, ...]] = {
    "same_day": (
        "Which {target} did I take pictures of on the same day as the {anchor}?",
        "{Target} from the day my {anchor} photo was taken.",
        "Show me the {target} I shot that day I snapped the {anchor}.",
        "pics of {target} from the day of the {anchor}",
        "{target} same day as {anchor}",
        "what {target} did I see the day I saw the {anchor}?",
        "the {target} I photographed on the day I came across the {anchor}",
        "Find {target} in the photos I took on the {anchor} day.",
        "any {target} that day with the {anchor}?",
        "I saw the {anchor} one day and took some {target} too, which ones",
    ),
    "same_trip": (
        "The {target} from the trip where I photographed the {anchor}.",
        "Which {target} did I see during the same trip as the {anchor}?",
        "{Target} I shot on the journey when I took the {anchor} picture.",
        "pics of {target} from the {anchor} trip",
        "{target} on the trip with the {anchor}",
        "which {target} did I see while I was away on the trip when I photographed the {anchor}",
        "the {target} from that holiday where I took a picture of the {anchor}",
        "{Target} during the getaway where I saw the {anchor}.",
        "show me {target} from the whole trip I saw the {anchor} on",
        "what {target} turned up on the same vacation as my {anchor} shot?",
    ),
    "same_place": (
        "The {target} I photographed at the place where I saw the {anchor}.",
        "Which {target} did I shoot at the same spot as the {anchor}?",
        "{Target} taken at the location of my {anchor} picture.",
        "pics of {target} where I saw the {anchor}",
        "{target} at the {anchor} spot",
        "what {target} have I photographed at the same place as the {anchor}, any visit",
    ),
    "same_city": (
        "The {target} I photographed in the city where I saw the {anchor}.",
        "Which {target} did I shoot in the same town as the {anchor}?",
        "{Target} from the city of my {anchor} photo.",
        "{target} in the {anchor} city",
        "pics of {target} from the town where I took the {anchor} pic",
        "anything with {target} in the same city as my {anchor} photo?",
    ),
    "days_after": (
        "The {target} I photographed {n} days after I saw the {anchor}.",
        "{Target} I took the day after the {anchor} photo.",
        "Which {target} did I shoot {n} days later than the {anchor} picture?",
        "{target} {n} days after the {anchor}",
        "pics of {target}, {n} days after I saw the {anchor}",
        "what {target} did I see the next day after the {anchor} picture",
    ),
    "days_before": (
        "The {target} I photographed {n} days before I saw the {anchor}.",
        "{Target} I took the day before the {anchor} photo.",
        "Which {target} did I shoot {n} days earlier than the {anchor} picture?",
        "{target} {n} days before the {anchor}",
        "pics of {target} from {n} days before I saw the {anchor}",
        "what {target} did I photograph the day before I came across the {anchor}",
    ),
    "weeks_after": (
        "The {target} I photographed {n} weeks after I saw the {anchor}.",
        "Which {target} did I take a week after the {anchor} photo?",
        "{Target} shot {n} weeks later than my {anchor} picture.",
        "{target} {n} weeks after the {anchor}",
        "pics of {target} from {n} weeks after I saw the {anchor}",
        "what {target} did I take a week later than the {anchor} one",
    ),
    "weeks_before": (
        "The {target} I photographed {n} weeks before I saw the {anchor}.",
        "Which {target} did I take a week before the {anchor} photo?",
        "{Target} shot {n} weeks earlier than my {anchor} picture.",
        "{target} {n} weeks before the {anchor}",
        "pics of {target} from {n} weeks before I saw the {anchor}",
        "what {target} did I shoot a week ahead of the {anchor} picture",
    ),
    "next_trip": (
        "The {target} from my next trip after the one where I saw the {anchor}.",
        "{Target} I photographed on the trip following my {anchor} photo.",
        "Which {target} did I take on the trip right after the {anchor} picture?",
        "{target} from the trip after the {anchor} one",
        "pics of {target} on my next trip after seeing the {anchor}",
        "What {target} did I photograph on the following trip, the one after I saw the {anchor}?",
        "the {target} from the next time I went away after the {anchor} trip",
        "{Target} on the trip that came after the {anchor} photo.",
        "which {target} did I see on my very next outing after the one with the {anchor}",
        "{target}, the trip after the {anchor}",
    ),
    "previous_trip": (
        "The {target} from my trip before the one where I saw the {anchor}.",
        "{Target} I photographed on the trip preceding my {anchor} photo.",
        "Which {target} did I take on the trip just before the {anchor} picture?",
        "{target} from the trip before the {anchor} one",
        "pics of {target} on the trip before I saw the {anchor}",
        "what {target} did I photograph the trip prior to my {anchor} trip",
    ),
    "nth_day": (
        "The {target} I photographed on the {nth} day of the trip where I saw the {anchor}.",
        "{Target} from day {n} of my {anchor} trip.",
        "Which {target} did I shoot on the {nth} day of the trip with the {anchor}?",
        "pics of {target} from the {nth} day of the {anchor} trip",
        "{target} {nth} day of the trip where the {anchor} photo was taken",
        "on the trip where I saw the {anchor}, what {target} did I take on the {nth} day?",
        "the {nth} day of that trip with the {anchor} - any {target}?",
        "Show me {target} from the {nth} day of the holiday when I photographed the {anchor}.",
        "what {target} did I see on day {n} of the journey where I snapped the {anchor}",
        "{Target} taken the {nth} day of my trip, the one with the {anchor}.",
    ),
    "visit": (
        "The {target} from my {nth} visit to the place where I photographed the {anchor}.",
        "{Target} I shot the {nth} time I went to the spot where I saw the {anchor}.",
        "Which {target} did I photograph on my {nth} trip to where the {anchor} picture was taken?",
        "{target} on my {nth} visit to the {anchor} place",
        "pics of {target} from the {nth} time I was at the place with the {anchor}",
        "which {target} did I see the {nth} time I went where I took the {anchor} photo",
    ),
    "city_visit": (
        "The {target} from my {nth} trip to the city where I photographed the {anchor}.",
        "{Target} I took on my {nth} stay in the city of the {anchor} photo.",
        "Which {target} did I shoot the {nth} time I was in the town where I saw the {anchor}?",
        "{target} {nth} trip to the {anchor} city",
        "pics of {target} from my {nth} time in the city of the {anchor}",
        "what {target} did I shoot on my {nth} visit to the city where I saw the {anchor}",
    ),
    "other_visit": (
        "The {target} from my other visit to the place where I photographed the {anchor}.",
        "{Target} from a different visit to the place where I saw the {anchor}.",
        "Which {target} did I photograph at the {anchor} place on another occasion?",
        "{target} from the other time I went to where I saw the {anchor}",
        "pics of {target} at the {anchor} place, but a different visit",
        "what {target} did I photograph when I was at the spot of the {anchor} another time",
        "the {target} from another trip to the place where I took the {anchor} picture",
        "{Target} I shot at the {anchor} spot on a different day.",
        "on my other visits to where the {anchor} was, which {target} did I see",
        "{target} at the same place as the {anchor} but not on that visit",
    ),
    "month_after": (
        "The {target} I photographed in the month after I saw the {anchor}.",
        "{Target} from the month following my {anchor} picture.",
        "Which {target} did I take the month after the {anchor} photo?",
        "{target} the month after the {anchor}",
        "pics of {target} from the month after I saw the {anchor}",
        "what {target} did I photograph the next month, after the {anchor}",
    ),
    "same_month": (
        "The {target} I photographed in the same month as the {anchor}.",
        "{Target} from the month of my {anchor} picture.",
        "Which {target} did I shoot that month I saw the {anchor}?",
        "{target} same month as the {anchor}",
        "pics of {target} from the month I saw the {anchor} in",
        "what {target} did I take during the month I photographed the {anchor}",
    ),
    "season_after": (
        "The {target} I photographed the {season} after I saw the {anchor}.",
        "{Target} from the following {season}, after my {anchor} picture.",
        "Which {target} did I take in the {season} after the {anchor} photo?",
        "{target} the {season} after the {anchor}",
        "pics of {target} from the next {season} after I saw the {anchor}",
        "What {target} did I photograph in the {season} that came after my {anchor} photo?",
        "the {target} I took during the {season} following the {anchor}",
        "{Target}, {season} after the {anchor} picture.",
        "once I'd seen the {anchor}, which {target} did I shoot the next {season}?",
        "show me {target} from the first {season} after the {anchor} shot",
    ),
    "same_season": (
        "The {target} I photographed in the same {season} as the {anchor}.",
        "{Target} from that {season} when I saw the {anchor}.",
        "Which {target} did I shoot during the {season} of my {anchor} photo?",
        "{target} same {season} as the {anchor}",
        "pics of {target} from the {season} I saw the {anchor}",
        "what {target} did I take that {season}, the one with the {anchor}",
    ),
    "year_after": (
        "The {target} I photographed in the year after I saw the {anchor}.",
        "{Target} from the year following my {anchor} picture.",
        "Which {target} did I take the next year after the {anchor} photo?",
        "{target} the year after the {anchor}",
        "pics of {target} from a year on from the {anchor}",
        "what {target} did I shoot the year after I photographed the {anchor}",
    ),
    "same_year": (
        "The {target} I photographed in the same year as the {anchor}.",
        "{Target} from the year I saw the {anchor}.",
        "Which {target} did I shoot in the year of my {anchor} photo?",
        "{target} same year as the {anchor}",
        "pics of {target} from the year of the {anchor}",
        "what {target} did I take that year I saw the {anchor}",
    ),
    "venue_on_trip": (
        "The {target} at the {venue} on the trip where I photographed the {anchor}.",
        "{Target} I shot at the {venue} during the trip when I saw the {anchor}.",
        "Which {target} did I see at the {venue} on my {anchor} trip?",
        "pics of {target} at the {venue}, same trip as the {anchor}",
        "{target} {venue} trip with {anchor}",
        "on the trip where I took the {anchor} photo, what {target} did I photograph at the {venue}?",
        "the {venue} on the holiday with the {anchor} - show me the {target} there",
        "Find the {target} from my visit to the {venue} on the journey where I saw the {anchor}.",
        "what {target} were at the {venue} the trip I snapped the {anchor}",
        "{Target} photographed at the {venue} while on the {anchor} trip.",
    ),
    "venue_season_after": (
        "The {target} at the {venue} in the {season} after I saw the {anchor}.",
        "{Target} I photographed at the {venue} the following {season}, after the {anchor} photo.",
        "Which {target} did I shoot at the {venue} during the {season} after my {anchor} picture?",
        "pics of {target} at the {venue} the {season} after the {anchor}",
        "{target} {venue} next {season} after {anchor}",
        "the {season} after I saw the {anchor}, what {target} did I take at the {venue}?",
        "show me the {target} from the {venue} in the {season} that followed the {anchor} shot",
        "at the {venue}, the {season} after the {anchor}: which {target}?",
        "{Target} from my {venue} visits in the first {season} after the {anchor}.",
        "what {target} did I see at the {venue} that {season}, the one after I photographed the {anchor}",
    ),
    "mid_event": (
        "The {target} from the day I saw the {mid}, on the trip where I photographed the {anchor}.",
        "{Target} I shot the day of the {mid} during my {anchor} trip.",
        "On the trip with the {anchor}, which {target} did I take on the day I saw the {mid}?",
        "pics of {target} from the {mid} day of the {anchor} trip",
        "{target} same day as the {mid}, on the {anchor} trip",
        "that trip where I saw the {anchor}: the day with the {mid}, what {target} did I photograph",
        "Show me the {target} I took the day I came across the {mid} on the holiday with the {anchor}.",
        "which {target} are from the day of the {mid} photo, the trip I snapped the {anchor} on",
        "{Target} photographed on the {mid} day of the journey where I saw the {anchor}.",
        "on my {anchor} trip there was a day with the {mid}; the {target} from that day",
    ),
    "trip_except": (
        "The {target} from the trip where I saw the {anchor}, except the ones at the {venue}.",
        "{Target} on my {anchor} trip but not at the {venue}.",
        "Which {target} did I photograph on the trip with the {anchor}, away from the {venue}?",
        "pics of {target} from the {anchor} trip, leave out the {venue}",
        "{target} trip with the {anchor} minus the {venue} ones",
        "what {target} did I take on the holiday where I saw the {anchor}, not counting the {venue}",
    ),
    "photos_trip": (
        "All the photos from the trip where I saw the {anchor}.",
        "every picture from my {anchor} trip",
        "Show me everything I shot on the trip with the {anchor}.",
        "pics from the trip when I photographed the {anchor}",
        "What did I photograph on the trip where I saw the {anchor}?",
        "the whole trip with the {anchor}, all of it",
    ),
    "photos_city_day": (
        "Photos from my {nth} day in {city}.",
        "what did I take on day {n} in {city}?",
        "Show me all my pictures from the {nth} day of my {city} trip.",
        "pics from {city}, {nth} day",
        "everything I photographed on my {nth} day in {city}",
        "{city} trip, {nth} day: all the photos",
    ),
    "city_target": (
        "The {target} I photographed in {city}.",
        "{target} in {city}",
        "pics of {target} from {city}",
        "Which {target} did I see in {city}?",
        "show me my {city} {target}",
        "what {target} did I shoot when I was in {city}",
    ),
    "month_year": (
        "The {target} I photographed in {month} {year}.",
        "{target} {month} {year}",
        "pics of {target} from {month} {year}",
        "Which {target} did I take in {month} of {year}?",
        "show me {target} I shot during {month} {year}",
        "what {target} did I see back in {month} {year}",
    ),
    "no_anchor": (
        "All my photos of {target}.",
        "Which {target} have I ever photographed?",
        "Show me every picture of {target} in my album.",
        "pics of {target}",
        "{target}",
        "every {target} I have",
    ),
    "negation": (
        "The {target} I photographed anywhere except the {place}.",
        "{Target} that I did not take at the {place}.",
        "Which {target} did I shoot away from the {place}?",
        "{target} not at the {place}",
        "pics of {target} except at the {place}",
        "{target} anywhere but the {place}",
    ),
}
# Development albums (``--phrasings dev``) leave out the last phrasing of each kind; report albums use all.
DEV_SEEDS = (11, 12, 13)
REPORT_SEEDS = (2101, 2102, 2103)

# Target kinds: stamp id prefixes and the plural noun queries use. Fillers are photos no query asks for.
TARGETS: dict[str, tuple[tuple[str, ...], str]] = {
    "bird": (("animals__birds",), "birds"),
    "mammal": (("animals__mammals", "animals__marsupials"), "mammals"),
    "fish": (("animals__fish", "animals__shellfish"), "fish"),
    "insect": (("animals__insects",), "insects"),
    "flower": (("plants__flowers",), "flowers"),
    "fruit": (("food__fruit",), "fruit"),
    "vegetable": (("food__vegetables",), "vegetables"),
    "vehicle": (("vehicles__auto", "vehicles__emergency", "vehicles__construction", "vehicles__flight"), "vehicles"),
    "instrument": (("hobbies__music",), "musical instruments"),
    "tool": (("household__tools",), "tools"),
    "house": (("town__houses",), "houses"),
}
FILLERS = ("town__roadsigns", "symbols__chess", "clothes", "household__dishes", "symbols__money", "sports")
# Kinds with no anchor photo (a place, a city, a date, or nothing).
UNANCHORED = ("no_anchor", "negation", "photos_city_day", "city_target", "month_year")
# Kinds whose target is every photo of the subset ("photos"), not a kind of object.
PHOTOS_KINDS = ("photos_trip", "photos_city_day")
# Kinds whose relation reads the anchor's day, trip, place or time (a decoy can change their answer).
ANCHORED = tuple(k for k in PHRASINGS if k not in UNANCHORED)
# Relations that leave the anchor's day: their answer must differ from the target photos of that day.
LEAVES_DAY = ("days_after", "days_before", "weeks_after", "weeks_before", "next_trip", "previous_trip", "visit",
              "city_visit", "other_visit", "month_after", "season_after", "year_after", "nth_day",
              "venue_season_after", "mid_event")
# The largest answer a question may have: a kind of object, every photo of a subset.
MAX_ANSWER, MAX_PHOTOS_ANSWER = 14, 30
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
# How people name a venue of VENUES in a question (any of these; the Zoo, Harbour and Beach carry the city's name).
VENUE_WORDS = {
    "Zoo": ("zoo",), "Central Market": ("central market", "market"),
    "Botanical Garden": ("botanical garden", "botanical gardens", "gardens"), "Harbour": ("harbour",),
    "Old Town Square": ("old town square", "old town"), "City Museum": ("city museum", "museum"),
    "Beach": ("beach",), "Castle Hill": ("castle hill", "castle"), "Riverside Park": ("riverside park", "park"),
    "Cathedral": ("cathedral",), "Railway Station": ("railway station", "station"),
    "Lighthouse Point": ("lighthouse point", "lighthouse"),
}
# Kinds realised by planting an event at the offset (Generator.plant_offset).
PLANTED = ("days_after", "days_before", "weeks_after", "weeks_before")
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}
ORDINALS = {1: "first", 2: "second", 3: "third", -1: "last"}
SEASONS = ("winter", "spring", "summer", "autumn")

# (city, country, lat, lon); venues are placed 1.5-6 km around the centre.
CITIES = [
    ("Lisbon", "Portugal", 38.7223, -9.1393), ("Porto", "Portugal", 41.1579, -8.6291),
    ("Valencia", "Spain", 39.4699, -0.3763), ("Edinburgh", "United Kingdom", 55.9533, -3.1883),
    ("Bergen", "Norway", 60.3913, 5.3221), ("Prague", "Czechia", 50.0755, 14.4378),
    ("Krakow", "Poland", 50.0647, 19.9450), ("Montreal", "Canada", 45.5019, -73.5674),
    ("Seattle", "United States", 47.6062, -122.3321), ("Seoul", "South Korea", 37.5665, 126.9780),
    ("Santiago", "Chile", -33.4489, -70.6693), ("Buenos Aires", "Argentina", -34.6037, -58.3816),
    ("Auckland", "New Zealand", -36.8485, 174.7633), ("Hobart", "Australia", -42.8821, 147.3272),
    ("Montevideo", "Uruguay", -34.9011, -56.1645), ("Wellington", "New Zealand", -41.2865, 174.7762),
]
VENUES = ("Zoo", "Central Market", "Botanical Garden", "Harbour", "Old Town Square", "City Museum", "Beach",
          "Castle Hill", "Riverside Park", "Cathedral", "Railway Station", "Lighthouse Point")
DEVICES = ("Olympus E-M10", "Samsung SM-G991B", "Canon EOS R6", "Apple iPhone 12", "Sony RX100 VI", "Google Pixel 6",
           "Nikon Z50", "Xiaomi 12T")


@dataclass(eq=False)
class Venue:
    name: str
    city: str
    country: str
    lat: float
    lon: float

    @property
    def address(self) -> str:
        return f"{self.name}, {self.city}, {self.country}"


@dataclass(eq=False)
class Photo:
    stamp: dict[str, Any]
    kind: str
    when: datetime
    venue: Venue
    device: str
    photo_id: str = ""
    decoy_of: Photo | None = None

    @property
    def day(self) -> date:
        return self.when.date()


@dataclass
class User:
    name: str
    home: list[Venue]
    away: dict[str, list[Venue]]
    devices: tuple[str, str]
    photos: list[Photo] = field(default_factory=list)
    pools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # stamps not used yet, by kind
    taken: set[date] = field(default_factory=set)  # days with an event


def noun(caption: str) -> str:
    """"An Adelaide Rosella." -> "Adelaide Rosella"; "A pelican." -> "pelican"."""
    words = caption.strip().rstrip(".!").split()
    if words and words[0].lower() in {"a", "an", "the", "some"}:
        words = words[1:]
    text = " ".join(words)
    return text if any(w[:1].isupper() for w in words) else text.lower()


# Words an anchor's noun must not hold: a target kind's noun would make the query ambiguous ("my flowers picture"),
# a verb of the phrasings would make it unreadable ("the day I saw the saw").
_NOT_ANCHOR_WORDS = frozenset(w for _, plural in TARGETS.values() for w in plural.split()) | frozenset(
    w.rstrip("s") for _, plural in TARGETS.values() for w in plural.split()) | frozenset(
    {"saw", "shot", "took", "snapped", "photo", "picture", "trip", "day", "place", "city", "spot", "visit"})


def clear_anchor(p: Photo) -> bool:
    """Whether the photo's caption makes a clear anchor (module docstring: no kind noun, no phrasing verb)."""
    return not {w.lower().strip(".,!?'\"") for w in noun(p.stamp["caption"]).split()} & _NOT_ANCHOR_WORDS


def kind_of(stamp_id: str) -> str | None:
    for kind, (prefixes, _) in TARGETS.items():
        if stamp_id.startswith(prefixes):
            return kind
    if stamp_id.startswith(FILLERS):
        return "filler"
    return None


def season_index(d: date, lat: float) -> tuple[int, str]:
    """A season instance (consecutive three-month blocks December-February, March-May, ...) and its name in the
    hemisphere of ``lat``."""
    block = (d.year * 12 + d.month) // 3  # December joins the next January and February
    name = SEASONS[(block + (2 if lat < 0 else 0)) % 4]
    return block, name


class Calendar:
    """One user's photos with the definitions the answers are computed by (module docstring)."""

    def __init__(self, photos: list[Photo]) -> None:
        self.photos = sorted(photos, key=lambda p: p.when)
        days = sorted({p.day for p in self.photos})
        self.trip_of: dict[date, int] = {}
        trip = -1
        for i, d in enumerate(days):
            if i == 0 or (d - days[i - 1]).days > 1:
                trip += 1
            self.trip_of[d] = trip
        self.trips = trip + 1

    def trip(self, p: Photo) -> int:
        return self.trip_of[p.day]

    def visits(self, anchor: Photo, key: Callable[[Photo], Any]) -> list[list[Photo]]:
        """The visits (trips) to the anchor's venue or city (``key``), in time order, each its photos there."""
        out: dict[int, list[Photo]] = {}
        for p in self.photos:
            if key(p) == key(anchor):
                out.setdefault(self.trip(p), []).append(p)
        return [out[t] for t in sorted(out)]

    def trip_photos(self, p: Photo) -> list[Photo]:
        return [q for q in self.photos if self.trip(q) == self.trip(p)]

    @staticmethod
    def nth_day(photos: list[Photo], n: int) -> list[Photo]:
        """The photos of the n-th photo day (-1: the last) of ``photos``."""
        days = sorted({p.day for p in photos})
        k = n - 1 if n > 0 else n
        return [p for p in photos if p.day == days[k]] if -len(days) <= k < len(days) else []

    def subset(self, kind: str, anchor: Photo | None, n: int = 0, season: str = "", place: str = "",
               venue: Venue | None = None, mid: Photo | None = None, city: str = "", month: int = 0,
               year: int = 0) -> list[Photo]:
        """The photos a query's relation keeps (before the target), by the module's definitions."""
        ps = self.photos
        if kind == "no_anchor":
            return list(ps)
        if kind == "negation":
            return [p for p in ps if place.lower() not in p.venue.address.lower()]
        if kind == "city_target":
            return [p for p in ps if p.venue.city == city]
        if kind == "month_year":
            return [p for p in ps if (p.day.year, p.day.month) == (year, month)]
        if kind == "photos_city_day":
            trips = {self.trip(p) for p in ps if p.venue.city == city}
            if len(trips) != 1:
                return []
            return self.nth_day([p for p in ps if self.trip(p) in trips], n)
        assert anchor is not None
        a = anchor
        if kind == "nth_day":
            return self.nth_day(self.trip_photos(a), n)
        if kind in ("venue_on_trip", "trip_except"):
            return [p for p in self.trip_photos(a) if (p.venue is venue) == (kind == "venue_on_trip")]
        if kind == "photos_trip":
            return self.trip_photos(a)
        if kind == "mid_event":  # the day, on the anchor's trip, of the photo of the mid object
            assert mid is not None
            days = [p.day for p in self.trip_photos(a) if p.stamp["caption"] == mid.stamp["caption"]]
            return [p for p in ps if p.day in days[:1]]
        if kind == "venue_season_after":
            return [p for p in self.subset("season_after", a, season=season) if p.venue is venue]
        if kind == "same_day":
            return [p for p in ps if p.day == a.day]
        if kind == "same_trip":
            return [p for p in ps if self.trip(p) == self.trip(a)]
        if kind == "same_place":
            return [p for p in ps if p.venue is a.venue]
        if kind == "same_city":
            return [p for p in ps if p.venue.city == a.venue.city]
        if kind in ("days_after", "days_before"):
            want = a.day + timedelta(days=n if kind == "days_after" else -n)
            return [p for p in ps if p.day == want]
        if kind in ("weeks_after", "weeks_before"):
            want = a.day + timedelta(days=7 * n if kind == "weeks_after" else -7 * n)
            if want not in self.trip_of:
                return []
            return [p for p in ps if self.trip(p) == self.trip_of[want]]
        if kind in ("next_trip", "previous_trip"):
            t = self.trip(a) + (1 if kind == "next_trip" else -1)
            return [p for p in ps if self.trip(p) == t]
        if kind in ("visit", "city_visit"):
            visits = self.visits(a, (lambda p: id(p.venue)) if kind == "visit" else (lambda p: p.venue.city))
            k = n - 1 if n > 0 else n
            return list(visits[k]) if -len(visits) <= k < len(visits) else []
        if kind == "other_visit":
            return [p for p in ps if p.venue is a.venue and self.trip(p) != self.trip(a)]
        if kind in ("month_after", "same_month"):
            m = a.day.year * 12 + a.day.month - 1 + (1 if kind == "month_after" else 0)
            return [p for p in ps if p.day.year * 12 + p.day.month - 1 == m]
        if kind in ("year_after", "same_year"):
            y = a.day.year + (1 if kind == "year_after" else 0)
            return [p for p in ps if p.day.year == y]
        if kind in ("season_after", "same_season"):
            own, _ = season_index(a.day, a.venue.lat)
            if kind == "same_season":
                return [p for p in ps if season_index(p.day, a.venue.lat)[0] == own]
            later = sorted({b for p in ps if (b := season_index(p.day, a.venue.lat))[0] > own and b[1] == season})
            return [p for p in ps if later and season_index(p.day, a.venue.lat)[0] == later[0][0]]
        raise ValueError(f"unknown plan kind {kind!r}")

    def answer(self, kind: str, anchor: Photo | None, target: str, **spec: Any) -> list[Photo]:
        """The subset's photos of the target kind ("photos": every photo of it)."""
        return [p for p in self.subset(kind, anchor, **spec) if target == "photos" or p.kind == target]


@dataclass
class Spec:
    """One query before it is written: its kind, anchor, target kind and the relation's numbers."""

    kind: str
    anchor: Photo | None
    target: str  # a key of TARGETS, or "photos"
    n: int = 0
    season: str = ""
    place: str = ""  # how the question names a venue (negation, venue_*, trip_except)
    decoy: Photo | None = None
    venue: Venue | None = None
    mid: Photo | None = None
    city: str = ""
    month: int = 0
    year: int = 0

    def relation(self) -> dict[str, Any]:
        return {"n": self.n, "season": self.season, "place": self.place, "venue": self.venue, "mid": self.mid,
                "city": self.city, "month": self.month, "year": self.year}


class Generator:
    def __init__(self, stamps: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        rows = [json.loads(x) for x in (stamps / "captions.jsonl").read_text().splitlines() if x.strip()]
        self.by_kind: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            k = kind_of(r["id"])
            if k is not None and (stamps / r["file"]).is_file():
                self.by_kind.setdefault(k, []).append(r)
        self.cities = self.rng.sample(CITIES, len(CITIES))

    # ------------------------------------------------------------------ the albums
    def venues(self, city: tuple[str, str, float, float], count: int) -> list[Venue]:
        name, country, lat, lon = city
        out: list[Venue] = []
        for v in self.rng.sample(VENUES, count):
            while True:  # 1.5-6 km from the centre and > 1.5 km from the other venues
                dlat, dlon = self.rng.uniform(-0.05, 0.05), self.rng.uniform(-0.06, 0.06)
                if abs(dlat) + abs(dlon) > 0.015 and all(abs(o.lat - lat - dlat) + abs(o.lon - lon - dlon) > 0.03
                                                          for o in out):
                    break
            out.append(Venue(f"{name} {v}" if v in ("Zoo", "Harbour", "Beach") else v, name, country,
                             round(lat + dlat, 4), round(lon + dlon, 4)))
        return out

    def user(self, name: str) -> User:
        home = self.cities.pop()
        away = {c[0]: self.venues(c, 3) for c in (self.cities.pop() for _ in range(3))}
        devices = tuple(self.rng.sample(DEVICES, 2))
        user = User(name, self.venues(home, 4), away, devices)  # type: ignore[arg-type]
        user.pools = {k: self.rng.sample(v, len(v)) for k, v in self.by_kind.items()}
        start = date(self.rng.randint(2014, 2019), self.rng.randint(1, 12), self.rng.randint(1, 28))
        taken = user.taken

        def free(d: date, days: int = 1) -> bool:
            return all(abs((d + timedelta(days=i) - t).days) > 2 for i in range(days) for t in taken)

        def place_event(days: int) -> date:
            while True:
                d = start + timedelta(days=self.rng.randint(0, 900))
                if free(d, days):
                    taken.update(d + timedelta(days=i) for i in range(days))
                    return d

        trips = [(c, self.rng.randint(2, 4)) for c in [*away, *list(away)[:2]]]  # two cities visited twice
        for city, length in trips:
            d = place_event(length)
            for i in range(length):
                self.event(user, d + timedelta(days=i), self.rng.choice(away[city]))
        for i in range(22):  # day outings at home, each venue several times
            self.event(user, place_event(1), user.home[i % len(user.home)])
        for _ in range(8):  # single distractor photos on days of their own
            d = place_event(1)
            kind = self.rng.choice([k for k in TARGETS if user.pools[k]])
            self.add(user, kind, datetime.combine(d, datetime.min.time()) + timedelta(hours=self.rng.randint(9, 18)),
                     self.rng.choice(user.home), user.devices[1])
        return user

    def add(self, user: User, kind: str, when: datetime, venue: Venue, device: str) -> Photo | None:
        pool = user.pools.get(kind) or []
        if not pool:
            return None
        p = Photo(pool.pop(), kind, when, venue, device)
        user.photos.append(p)
        return p

    def event(self, user: User, d: date, venue: Venue, kinds: list[str] | None = None) -> None:
        kinds = kinds or self.rng.sample([k for k in TARGETS if len(user.pools[k]) >= 2], self.rng.choice((2, 2, 3)))
        shots = [k for k in kinds for _ in range(self.rng.randint(1, 3))]
        if self.rng.random() < 0.5:
            shots.append("filler")
        self.rng.shuffle(shots)
        t = datetime.combine(d, datetime.min.time()) + timedelta(hours=self.rng.randint(8, 14),
                                                                 minutes=self.rng.randint(0, 59))
        device = self.rng.choice(user.devices)
        for k in shots:
            self.add(user, k, t, venue, device)
            t += timedelta(minutes=self.rng.randint(4, 25))

    def plant_offset(self, user: User, kind: str) -> Spec | None:
        """An event exactly N days (or weeks) after or before a day outing, holding a target kind."""
        captions = [p.stamp["caption"] for p in user.photos]
        outings = [p for p in user.photos if p.venue in user.home and p.kind != "filler" and clear_anchor(p)
                   and captions.count(p.stamp["caption"]) == 1 and len(p.stamp["caption"].split()) <= 4]
        for _ in range(60):
            a = self.rng.choice(outings)
            n = self.rng.randint(1, 4) if kind.startswith("days") else self.rng.randint(1, 3)
            step = n * (7 if kind.startswith("weeks") else 1) * (1 if kind.endswith("after") else -1)
            d = a.day + timedelta(days=step)
            if any(abs((d - t).days) <= 2 for t in user.taken if t != a.day):
                continue
            target = self.rng.choice([k for k in TARGETS if len(user.pools[k]) >= 3 and k != a.kind])
            others = [k for k in TARGETS if len(user.pools[k]) >= 2 and k != target]
            self.event(user, d, self.rng.choice(user.home), [target, self.rng.choice(others)])
            user.taken.add(d)
            return Spec(kind, a, target, n=n)
        return None

    # ------------------------------------------------------------------ the queries
    def candidates(self, user: User, cal: Calendar, kind: str, used: frozenset[int] = frozenset()) -> list[Spec]:
        """Every valid (anchor, target, numbers) for ``kind`` in this album (photos in ``used``, by id, are not
        anchors or mid objects)."""
        if kind in UNANCHORED:
            return [s for s in self.unanchored(user, cal, kind) if self.valid(cal, s)]
        anchors = [p for p in self.clear_photos(cal) if p.kind != "filler" and id(p) not in used]
        if kind in ("venue_season_after", "mid_event", "venue_on_trip", "trip_except", "nth_day"):
            anchors = self.rng.sample(anchors, min(len(anchors), 40))  # the chained kinds: a sample is plenty
        out: list[Spec] = []
        for a in anchors:
            if kind in ("city_visit", "same_city") and a.venue.city not in user.away:
                continue
            for target in (["photos"] if kind in PHOTOS_KINDS else list(TARGETS)):
                out += [spec for spec in self.specs(cal, kind, a, target, used) if self.valid(cal, spec)]
        return out

    @staticmethod
    def clear_photos(cal: Calendar) -> list[Photo]:
        """Photos that can name a moment: a caption no other photo has, short, and a clear noun."""
        counts: dict[str, int] = {}
        for p in cal.photos:
            counts[p.stamp["caption"]] = counts.get(p.stamp["caption"], 0) + 1
        return [p for p in cal.photos if counts[p.stamp["caption"]] == 1 and len(p.stamp["caption"].split()) <= 4
                and p.decoy_of is None and clear_anchor(p)]

    def unanchored(self, user: User, cal: Calendar, kind: str) -> list[Spec]:
        out: list[Spec] = []
        if kind == "photos_city_day":
            return [Spec(kind, None, "photos", n=n, city=c) for c in user.away for n in (1, 2, 3, -1)]
        for target in TARGETS:
            if kind == "no_anchor":
                out.append(Spec(kind, None, target))
            elif kind == "city_target":
                out += [Spec(kind, None, target, city=c) for c in sorted({p.venue.city for p in cal.photos})]
            elif kind == "month_year":
                out += [Spec(kind, None, target, month=m, year=y)
                        for y, m in sorted({(p.day.year, p.day.month) for p in cal.photos})]
            else:  # negation
                for v in user.home:
                    word = v.name.split()[-1].lower() if v.name.split()[-1] in ("Zoo", "Harbour", "Beach") else \
                        v.name.lower()
                    out.append(Spec(kind, None, target, place=word))
        return out

    def venue_word(self, v: Venue) -> str:
        last = v.name.split()[-1]
        return self.rng.choice(VENUE_WORDS[last if last in ("Zoo", "Harbour", "Beach") else v.name])

    def specs(self, cal: Calendar, kind: str, a: Photo, target: str, used: frozenset[int]) -> list[Spec]:
        if kind in ("visit", "city_visit"):
            return [Spec(kind, a, target, n=k) for k in (1, 2, 3, -1)]
        if kind == "season_after":
            return [Spec(kind, a, target, season=s) for s in SEASONS]
        if kind == "same_season":
            return [Spec(kind, a, target, season=season_index(a.day, a.venue.lat)[1])]
        if kind in PLANTED:
            return []  # planted (plant_offset)
        trip = cal.trip_photos(a)
        if kind == "nth_day":
            days = len({p.day for p in trip})
            return [Spec(kind, a, target, n=k) for k in (1, 2, 3, -1) if days >= 2 and k <= days]
        if kind in ("venue_on_trip", "trip_except"):
            venues = list(dict.fromkeys(p.venue for p in trip if p.venue is not a.venue))
            return [Spec(kind, a, target, venue=v, place=self.venue_word(v)) for v in venues]
        if kind == "venue_season_after":
            visited: dict[Venue, set[date]] = {}
            for p in cal.photos:
                visited.setdefault(p.venue, set()).add(p.day)
            venues = [v for v, days in visited.items() if len(days) >= 3]
            return [Spec(kind, a, target, season=s, venue=v, place=self.venue_word(v)) for s in SEASONS
                    for v in venues]
        if kind == "mid_event":
            clear = {id(p) for p in self.clear_photos(cal)}
            return [Spec(kind, a, target, mid=m) for m in trip
                    if m.day != a.day and id(m) in clear and id(m) not in used and m.kind != target]
        return [Spec(kind, a, target)]

    @staticmethod
    def valid(cal: Calendar, s: Spec) -> bool:
        ans = cal.answer(s.kind, s.anchor, s.target, **s.relation())
        every = [p for p in cal.photos if s.target == "photos" or p.kind == s.target]
        cap = MAX_PHOTOS_ANSWER if s.target == "photos" else MAX_ANSWER
        if not ans or len(ans) > cap or (s.kind != "no_anchor" and set(ans) == set(every)):
            return False
        if s.anchor is None:
            return True
        if set(ans) <= {s.anchor}:
            return False  # the anchor alone answers: the relation says nothing
        if s.kind in LEAVES_DAY and {p for p in ans if p is not s.anchor} == {
                p for p in every if p.day == s.anchor.day and p is not s.anchor}:
            return False
        if s.kind in ("visit", "city_visit") and s.anchor in cal.subset(s.kind, s.anchor, **s.relation()):
            return False  # the visit asked for is another one than the anchor's
        if s.kind in ("nth_day", "venue_on_trip", "trip_except", "mid_event") and set(ans) == set(
                cal.answer("same_trip", s.anchor, s.target)):
            return False  # the day, venue or exclusion matters
        if s.kind in ("venue_on_trip", "venue_season_after"):
            named = [p for p in every if names(s.place, p.venue)]
            relation = cal.answer("same_trip" if s.kind == "venue_on_trip" else "season_after", s.anchor,
                                  s.target, season=s.season)
            if set(ans) == set(named) or set(ans) == set(relation):
                return False  # both the venue and the relation matter
            if {p for p in relation if names(s.place, p.venue)} != set(ans):
                return False  # the venue's words name it alone in the relation's photos
        return s.decoy is None or not cal.answer(s.kind, s.decoy, s.target, **s.relation())

    def decoy(self, user: User, cal: Calendar, s: Spec) -> Photo | None:
        """The anchor's stamp photographed again on another event day where the relation finds no target."""
        assert s.anchor is not None
        days = sorted({p.day for p in user.photos if p.day != s.anchor.day and p.decoy_of is None})
        self.rng.shuffle(days)
        for d in days:
            host = next(p for p in user.photos if p.day == d)
            when = max(p.when for p in user.photos if p.day == d) + timedelta(minutes=self.rng.randint(3, 20))
            dec = Photo(s.anchor.stamp, s.anchor.kind, when, host.venue, host.device, decoy_of=s.anchor)
            if not cal.answer(s.kind, dec, s.target, **s.relation()):
                user.photos.append(dec)
                return dec
        return None

    def mid_decoy(self, user: User, cal: Calendar, s: Spec) -> Photo | None:
        """The mid object of a chained question photographed again on another trip, on a day with the target:
        only the chain through the anchor's trip tells which day the question means."""
        assert s.anchor is not None and s.mid is not None
        trip = cal.trip(s.anchor)
        days = sorted({p.day for p in user.photos if p.decoy_of is None and cal.trip_of.get(p.day) != trip
                       and p.kind == s.target})
        if not days:
            return None
        d = self.rng.choice(days)
        host = next(p for p in user.photos if p.day == d)
        when = max(p.when for p in user.photos if p.day == d) + timedelta(minutes=self.rng.randint(3, 20))
        dec = Photo(s.mid.stamp, s.mid.kind, when, host.venue, host.device, decoy_of=s.mid)
        user.photos.append(dec)
        return dec

    def write_query(self, s: Spec, phrasing: int) -> str:
        template = PHRASINGS[s.kind][phrasing]
        plural = TARGETS[s.target][1] if s.target in TARGETS else "photos"
        n = s.n if "{n}" in template else 1
        words = {"target": plural, "Target": plural[:1].upper() + plural[1:],
                 "anchor": noun(s.anchor.stamp["caption"]) if s.anchor else "",
                 "mid": noun(s.mid.stamp["caption"]) if s.mid else "",
                 "n": NUMBERS.get(n, str(n)) if self.rng.random() < 0.7 else str(n),
                 "nth": ORDINALS.get(s.n, ""), "season": s.season, "place": s.place, "venue": s.place,
                 "city": s.city, "month": MONTHS[s.month - 1] if s.month else "", "year": str(s.year or "")}
        text = template.format(**words)
        for unit in ("day", "week"):  # "one days after" -> "one day after"
            text = text.replace(f" one {unit}s ", f" one {unit} ").replace(f" 1 {unit}s ", f" 1 {unit} ")
        return text

    @staticmethod
    def wordings(s: Spec, templates: tuple[str, ...]) -> list[int]:
        """The templates of ``templates`` that can say ``s``: without {n} a planted offset must be one; "day {n}"
        needs a positive n (not the last day)."""
        return [i for i, t in enumerate(templates)
                if ("{n}" in t or s.n == 1 or s.kind not in PLANTED) and not ("day {n}" in t and s.n < 1)]


def names(place: str, venue: Venue) -> bool:
    """Whether a venue's words (as a question names it: "gardens", "old town") name ``venue``: each word, its plural
    "s" dropped, begins a word of the venue's name."""
    have = venue.name.lower().split()
    return all(any(h.startswith(w.rstrip("s") if len(w) > 3 else w) for h in have) for w in place.split())


@dataclass
class Generated:
    """A generated album before it is written: its users (the last one a distractor), the queries kept (user
    index, spec) and each query user's final calendar."""

    gen: Generator
    users: list[User]
    kept: list[tuple[int, Spec]]
    final: dict[int, Calendar]


def generate(stamps: Path, seed: int, per_kind: int = 1) -> Generated:
    gen = Generator(stamps, seed)
    users = [gen.user(f"w{seed % 1000:03d}{i}") for i in range(3)]  # the third: a distractor user, no queries
    planted: dict[int, list[Spec]] = {0: [], 1: []}
    for kind in PLANTED:
        for u in range(2):
            spec = gen.plant_offset(users[u], kind)
            if spec is not None:
                planted[u].append(spec)
    # The distractor user photographs the query users' anchor objects too.
    chosen: list[tuple[int, Spec]] = []
    order = list(PHRASINGS)
    gen.rng.shuffle(order)
    for n_kind, kind in enumerate(order):
        for rep in range(per_kind):
            for u in ((n_kind + rep) % 2, (n_kind + rep + 1) % 2):
                cal = Calendar(users[u].photos)
                if kind in PLANTED:
                    captions = [p.stamp["caption"] for p in cal.photos]
                    options = [s for s in planted[u] if s.kind == kind and Generator.valid(cal, s)
                               and s.anchor is not None and captions.count(s.anchor.stamp["caption"]) == 1
                               and len(s.anchor.stamp["caption"].split()) <= 4 and clear_anchor(s.anchor)]
                used = frozenset(id(p) for _, s in chosen for p in (s.anchor, s.mid) if p is not None)
                if kind not in PLANTED:
                    options = gen.candidates(users[u], cal, kind, used)
                options = [s for s in options if id(s.anchor) not in used]
                if options:
                    spec = gen.rng.choice(options)
                    if spec.mid is not None:
                        gen.mid_decoy(users[u], cal, spec)
                    if spec.anchor is not None and spec.kind in ANCHORED and gen.rng.random() < 0.35 \
                            and spec.anchor.kind != spec.target and spec.kind not in PHOTOS_KINDS:
                        spec.decoy = gen.decoy(users[u], cal, spec)
                    chosen.append((u, spec))
                    break
    # Decoys added photos: check every query again against the final albums.
    final = {u: Calendar(users[u].photos) for u in range(2)}
    kept = [(u, s) for u, s in chosen if Generator.valid(final[u], s)]
    for _, s in kept:
        for p in (s.anchor, s.mid):
            if p is not None:
                host = users[2].photos[gen.rng.randrange(len(users[2].photos))]
                users[2].photos.append(Photo(p.stamp, p.kind, host.when + timedelta(minutes=2), host.venue,
                                             host.device))
    base = gen.rng.randint(10 ** 9, 9 * 10 ** 9)
    for u, user in enumerate(users):
        user.photos.sort(key=lambda p: p.when)
        for i, p in enumerate(user.photos):
            p.photo_id = str(base + u * 10 ** 6 + 7 + 37 * i)
    return Generated(gen, users, kept, final)


def build(stamps: Path, out: Path, seed: int, phrasings: str = "all", per_kind: int = 1,
          wordings: int = 3) -> dict[str, Any]:
    """Generate the album of ``seed`` and write it to ``out`` in DISBench's layout (with the captions sidecar);
    each question is written in ``wordings`` of its kind's wordings (rows ``gNNa``, ``gNNb``, ... of one
    ``question`` ``gNN``)."""
    made = generate(stamps, seed, per_kind)
    gen, users, kept, final = made.gen, made.users, made.kept, made.final
    for sub in ("images", "metadata", "captions"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    n_photos = 0
    for user in users:
        (out / "images" / user.name).mkdir()
        meta, caps = [], []
        for p in user.photos:
            shutil.copyfile(stamps / p.stamp["file"], out / "images" / user.name / f"{p.photo_id}.jpg")
            meta.append(json.dumps({"photo_id": p.photo_id, "metadata": {
                "taken_time": p.when.strftime("%Y-%m-%d %H:%M:%S"), "longitude": p.venue.lon,
                "latitude": p.venue.lat, "accuracy": 15, "address": p.venue.address, "capturedevice": p.device}},
                ensure_ascii=False))
            caps.append(json.dumps({"photo_id": p.photo_id, "caption": p.stamp["caption"]}, ensure_ascii=False))
        (out / "metadata" / f"{user.name}.jsonl").write_text("\n".join(meta) + "\n", encoding="utf-8")
        (out / "captions" / f"{user.name}.jsonl").write_text("\n".join(caps) + "\n", encoding="utf-8")
        n_photos += len(user.photos)
    rows = []
    for n, (u, s) in enumerate(kept, 1):
        templates = PHRASINGS[s.kind][:-1] if phrasings == "dev" else PHRASINGS[s.kind]
        options = Generator.wordings(s, templates)
        answer = final[u].answer(s.kind, s.anchor, s.target, **s.relation())
        trips = {final[u].trip(p) for p in answer} | ({final[u].trip(s.anchor)} if s.anchor is not None else set())
        intra = s.kind in ("same_day", "same_trip") or len(trips) == 1
        for w, phrasing in enumerate(gen.rng.sample(options, min(wordings, len(options)))):
            rows.append({"query_id": f"g{n:02d}{'abcdefghij'[w]}", "user_id": users[u].name,
                         "query": gen.write_query(s, phrasing), "answer": [p.photo_id for p in answer],
                         "event_type": "intra-event" if intra else "inter-event", "question": f"g{n:02d}",
                         "plan_kind": s.kind, "phrasing": phrasing, "decoy": s.decoy is not None})
    (out / "queries.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    if (stamps / "COPYRIGHT").is_file():
        shutil.copyfile(stamps / "COPYRIGHT", out / "COPYRIGHT")
    kinds = sorted({r["plan_kind"] for r in rows})
    return {"users": len(users), "photos": n_photos, "queries": len(rows), "questions": len(kept), "kinds": kinds,
            "missing_kinds": sorted(set(PHRASINGS) - set(kinds)), "decoys": sum(s.decoy is not None for _, s in kept)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    shared = Path(os.environ.get("IMAGENT_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument("--stamps", type=Path, default=shared / "data" / "stamps", help="the stamps folder (default: "
                    "$IMAGENT_SHARED/data/stamps, else ../shared/data/stamps beside the repository)")
    ap.add_argument("--seed", type=int, default=REPORT_SEEDS[0])
    ap.add_argument("--phrasings", choices=("all", "dev"), default="all",
                    help="dev: leave out the last phrasing of each kind (kept for the report albums)")
    ap.add_argument("--per-kind", type=int, default=1, help="questions per plan kind (alternating users)")
    ap.add_argument("--wordings", type=int, default=3, help="wordings of each question (different templates)")
    args = ap.parse_args()
    info = build(args.stamps, args.out, args.seed, args.phrasings, args.per_kind, args.wordings)
    print(f"holdout album (seed {args.seed}, phrasings {args.phrasings}): {info['users']} users (one a distractor), "
          f"{info['photos']} photos, {info['questions']} questions in {info['queries']} wordings over "
          f"{len(info['kinds'])} plan kinds, "
          f"{info['decoys']} with a decoy anchor -> {args.out}")
    if info["missing_kinds"]:
        print(f"plan kinds this seed could not realise: {', '.join(info['missing_kinds'])}")


if __name__ == "__main__":
    main()
