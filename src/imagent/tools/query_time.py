"""Dates in plain words, for the query reader (:mod:`imagent.tools.query_reader`): years, months, seasons,
weekdays, parts of the day, explicit dates, ranges and dates relative to today, each read into an expression of
the filter language (:mod:`imagent.tools.filter_lang`).

What is read (case-insensitive; ``today`` is given, so tests fix it):

- a period: ``2023``, ``the 90s``, ``May 2023``, ``summer 2023`` (``summer of 2023``, ``2023 summer``),
  ``14 May 2023``, ``May 14th, 2023``, ``2023-05-14`` -> ``time = '2023'``, ``time = '2023-05'``, or
  ``time >= '2023-06-01' and time < '2023-09-01'``; a day without a year (``May 14``) is that day of every year
  the library has photos in;
- ranges: ``between 2019 and 2021``, ``from May to July 2023``, ``since 2020``, ``after May 2023``,
  ``before 2020`` (of the periods above);
- relative to today: ``today``, ``yesterday``, ``tonight``, ``this/last week|weekend|month|year``, ``this/last
  summer``, ``last May``, ``last Sunday``, ``3 days ago``, ``a year ago``, ``the past 2 weeks``. "last X" is the
  latest X that has ended by today (in July, "last summer" is the year before's; in October, this year's);
  "this X" the latest that has begun;
- periods that repeat: a month (``in May``: ``month = 5``), a season (``summer``: ``month >= 6 and month <= 8``),
  weekdays (``on Sundays``: ``weekday = 'sunday'``; ``weekends``), parts of the day (``in the morning``,
  ``at night``, ``Sunday morning``, ``evenings``: ``hour >= 17 and hour < 21``).

Seasons are meteorological (spring March to May, summer June to August, autumn September to November, winter
December to February) in the northern hemisphere unless ``hemisphere="south"`` (each shifted by six months); a
winter named by a year starts in December of that year. Parts of the day: morning 5-12 h, afternoon 12-17 h,
evening 17-21 h, night 21-5 h. "May", "March", "spring" and "fall" are dates only where a date is meant (written
with a capital, next to a day or a year, or after "in", "last", "this", "during"...): "the fall of Rome", "a
spring", "you may" stay words. A bare "night", "morning" or "weekend" stays a word too ("night sky").
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

MONTHS = {name: n for n, name in enumerate(calendar.month_name) if name} | {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "oct": 10, "nov": 11,
    "dec": 12}
MONTHS = {k.lower(): v for k, v in MONTHS.items()}
WEEKDAYS = {name.lower(): n for n, name in enumerate(calendar.day_name, 1)}  # ISO: Monday 1
SEASONS = {"spring": "spring", "summer": "summer", "autumn": "autumn", "fall": "autumn", "winter": "winter"}
# The first month and the number of months of each season, northern hemisphere (south: +6 months).
SEASON_START = {"spring": 3, "summer": 6, "autumn": 9, "winter": 12}
PARTS_OF_DAY = {"morning": (5, 12), "afternoon": (12, 17), "evening": (17, 21), "night": (21, 5)}
UNITS = {"day": "day", "days": "day", "week": "week", "weeks": "week", "month": "month", "months": "month",
         "year": "year", "years": "year", "weekend": "weekend", "weekends": "weekend"}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "few": 3}
# Words before a month or season name that make it a date ("in May", "last spring").
DATE_CONTEXT = frozenset({"in", "during", "last", "this", "next", "of", "since", "until", "till", "before", "after",
                          "from", "early", "late", "mid", "through", "throughout", "by", "past", "previous", "every",
                          "each", "between", "and", "to", "or", "on"})
# Month or season names that are also everyday words: dates only with context (see the module doc).
AMBIGUOUS = frozenset({"may", "march", "mar", "spring", "fall", "jan", "sat", "sun", "dec", "jun", "aug", "sept",
                       "sep", "oct", "nov", "apr", "feb", "jul"})
_YEAR = re.compile(r"(19|20)\d\d")
_DECADE = re.compile(r"(?:(19|20)(\d)0|(\d)0)s")
_DAY = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?")
_ISO = re.compile(r"(\d{4})-(\d{1,2})(?:-(\d{1,2}))?")


@dataclass(frozen=True)
class Word:
    """One word of a question: ``text`` as typed (a possessive ``'s`` left off), ``lower`` folded to lower case
    without accents, its character span ``start``-``end`` (with any possessive), ``cap`` whether it starts with a
    capital, ``possessive`` whether ``'s`` followed it."""

    text: str
    lower: str
    start: int
    end: int
    cap: bool
    possessive: bool = False


@dataclass(frozen=True)
class TimeLink:
    """Words ``start``..``end`` (word indices, end excluded) read as a date: ``where`` in the filter language,
    ``label`` in words ("summer 2024", "Sundays", "morning"), ``facets`` what it constrains (``period``, ``month``,
    ``weekday``, ``hour``: links of one facet are alternatives, of different facets all hold), ``note`` what a
    person should know about how it was read ("" for nothing)."""

    start: int
    end: int
    where: str
    label: str
    facets: tuple[str, ...]
    note: str = ""


Period = tuple[datetime, datetime, str]  # [start, end) and its label


# --------------------------------------------------------------------------- expressions


def _stamp(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d") if dt.time() == datetime.min.time() else dt.strftime("%Y-%m-%d %H:%M")


def period_where(start: datetime, end: datetime) -> str:
    """``[start, end)`` as a filter: a whole year, month or day as its prefix (``time = '2023-05'``), else a range."""
    if start.time() == end.time() == datetime.min.time():
        if start.month == start.day == 1 and end == start.replace(year=start.year + 1):
            return f"time = '{start.year}'"
        if start.day == 1 and end == _add_months(start, 1):
            return f"time = '{start:%Y-%m}'"
        if end == start + timedelta(days=1):
            return f"time = '{start:%Y-%m-%d}'"
    return f"time >= '{_stamp(start)}' and time < '{_stamp(end)}'"


def _any(parts: Sequence[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return "(" + " or ".join(f"({p})" if " and " in p else p for p in parts) + ")"


def month_where(first: int, last: int) -> str:
    """Months ``first``..``last`` of any year (wrapping past December)."""
    if first == last:
        return f"month = {first}"
    if first < last:
        return f"month >= {first} and month <= {last}"
    return f"(month >= {first} or month <= {last})"


def hour_where(part: str) -> str:
    lo, hi = PARTS_OF_DAY[part]
    return f"hour >= {lo} and hour < {hi}" if lo < hi else f"(hour >= {lo} or hour < {hi})"


def _add_months(dt: datetime, n: int) -> datetime:
    m = dt.month - 1 + n
    return dt.replace(year=dt.year + m // 12, month=m % 12 + 1, day=1)


def _day(d: date) -> datetime:
    return datetime(d.year, d.month, d.day)


def season_months(season: str, hemisphere: str) -> tuple[int, int]:
    first = (SEASON_START[season] + (6 if hemisphere == "south" else 0) - 1) % 12 + 1
    return first, (first + 1) % 12 + 1


def season_period(season: str, year: int, hemisphere: str) -> Period:
    """The season named by ``year``: it starts in that year (a northern winter: December ``year`` to February)."""
    first, _ = season_months(season, hemisphere)
    start = datetime(year, first, 1)
    end = _add_months(start, 3)
    label = f"{season} {year}" if start.year == (end - timedelta(days=1)).year else \
        f"{season} {year}-{str(year + 1)[2:]}"
    return start, end, label


def _label_day(d: datetime) -> str:
    return f"{d:%a} {d.day} {d:%b %Y}"


# --------------------------------------------------------------------------- the reader


class _Times:
    """One pass over a question's words (see :func:`find_times`)."""

    def __init__(self, words: Sequence[Word], today: date, years: Sequence[int], hemisphere: str) -> None:
        self.w = [x.lower for x in words]
        self.words = words
        self.today = today
        self.years = sorted(set(years)) or [today.year]
        self.hemisphere = hemisphere
        self.notes: list[str] = []

    def at(self, i: int) -> str:
        return self.w[i] if 0 <= i < len(self.w) else ""

    # ------------------------------------------------------------------ atoms
    def year(self, i: int) -> int | None:
        return int(self.at(i)) if _YEAR.fullmatch(self.at(i)) else None

    def month(self, i: int, context: bool = True) -> int | None:
        """A month name at ``i``; an ambiguous one only with date context (or ``context=False``: already a date)."""
        m = MONTHS.get(self.at(i))
        if m is None:
            return None
        if self.at(i) in AMBIGUOUS and context and not self._date_context(i):
            return None
        return m

    def season(self, i: int, context: bool = True) -> str | None:
        s = SEASONS.get(self.at(i))
        if s is None:
            return None
        if self.at(i) in AMBIGUOUS and context and not self._date_context(i):
            return None
        return s

    def _date_context(self, i: int) -> bool:
        word = self.words[i]
        if word.cap and i > 0 and self.at(i) in MONTHS:  # "May" within a sentence; not "Spring" (a name)
            return True
        return (self.at(i - 1) in DATE_CONTEXT or (self.at(i - 1) == "the" and self.at(i - 2) in DATE_CONTEXT)
                or (self.at(i + 1) in ("or", "and", "to") and self.at(i + 2) in MONTHS)
                or self.year(i + 1) is not None or self.year(i - 1) is not None
                or bool(_DAY.fullmatch(self.at(i + 1))) or word.possessive)

    def day_number(self, i: int) -> int | None:
        m = _DAY.fullmatch(self.at(i))
        return int(m.group(1)) if m and 1 <= int(m.group(1)) <= 31 else None

    # ------------------------------------------------------------------ periods
    def period(self, i: int) -> tuple[int, list[Period]] | None:
        """An absolute period starting at word ``i``: ``(end, [periods])`` (several: a day of every year)."""
        for read in (self._iso, self._day_month, self._month_day, self._month_year, self._season_year,
                     self._decade, self._year):
            got = read(i)
            if got is not None:
                return got
        return None

    def _iso(self, i: int) -> tuple[int, list[Period]] | None:
        m = _ISO.fullmatch(self.at(i))
        if not m:
            return None
        y, mo, d = int(m.group(1)), int(m.group(2)), m.group(3)
        try:
            start = datetime(y, mo, int(d) if d else 1)
        except ValueError:
            return None
        end = start + timedelta(days=1) if d else _add_months(start, 1)
        return i + 1, [(start, end, _label_day(start) if d else f"{start:%B %Y}")]

    def _dated(self, i: int, month: int, day: int, year: int | None) -> list[Period]:
        out = []
        for y in [year] if year is not None else self.years:
            try:
                start = datetime(y, month, day)
            except ValueError:
                continue
            out.append((start, start + timedelta(days=1), _label_day(start) if year is not None else
                        f"{day} {calendar.month_name[month]}"))
        return out

    def _day_month(self, i: int) -> tuple[int, list[Period]] | None:
        """``14 May [2023]``, ``the 14th of May``."""
        k = i + 1 if self.at(i) == "the" else i
        day = self.day_number(k)
        if day is None:
            return None
        j = k + 2 if self.at(k + 1) == "of" else k + 1
        month = self.month(j, context=False)
        if month is None:
            return None
        year = self.year(j + 1)
        got = self._dated(i, month, day, year)
        return (j + 1 + (year is not None), got) if got else None

    def _month_day(self, i: int) -> tuple[int, list[Period]] | None:
        """``May 14``, ``May 14th, 2023``."""
        month = self.month(i, context=False)
        day = self.day_number(i + 1) if month is not None else None
        if month is None or day is None or self.year(i + 1) is not None:
            return None
        year = self.year(i + 2)
        got = self._dated(i, month, day, year)
        return (i + 2 + (year is not None), got) if got else None

    def _month_year(self, i: int) -> tuple[int, list[Period]] | None:
        """``May 2023``, ``May of 2023``, ``2023 May``."""
        month, j = self.month(i, context=False), i + 1
        if month is not None:
            j = i + 2 if self.at(i + 1) == "of" else i + 1
            year = self.year(j)
            if year is None:
                return None
        else:
            year, month, j = self.year(i), self.month(i + 1, context=False), i + 1
            if year is None or month is None:
                return None
        start = datetime(year, month, 1)
        return j + 1, [(start, _add_months(start, 1), f"{start:%B %Y}")]

    def _season_year(self, i: int) -> tuple[int, list[Period]] | None:
        """``summer 2023``, ``the summer of 2023``, ``2023 summer``."""
        season = self.season(i, context=False)
        if season is not None:
            j = i + 2 if self.at(i + 1) == "of" else i + 1
            year = self.year(j)
        else:
            year, season, j = self.year(i), self.season(i + 1, context=False), i + 1
        if season is None or year is None:
            return None
        start, end, label = season_period(season, year, self.hemisphere)
        self._season_note(season)
        if start.year != (end - timedelta(days=1)).year:
            self.notes.append(f"{season} {year} is read as {start:%B %Y} to {end - timedelta(days=1):%B %Y}")
        return j + 1, [(start, end, label)]

    def _decade(self, i: int) -> tuple[int, list[Period]] | None:
        m = _DECADE.fullmatch(self.at(i))
        if not m:
            return None
        if m.group(1):
            first = int(m.group(1) + m.group(2) + "0")
        else:
            d = int(m.group(3)) * 10
            first = (1900 if d >= 30 else 2000) + d
        return i + 1, [(datetime(first, 1, 1), datetime(first + 10, 1, 1), f"the {first}s")]

    def _year(self, i: int) -> tuple[int, list[Period]] | None:
        year = self.year(i)
        if year is None:
            return None
        return i + 1, [(datetime(year, 1, 1), datetime(year + 1, 1, 1), str(year))]

    def _season_note(self, season: str) -> None:
        first, last = season_months(season, self.hemisphere)
        note = (f"seasons are read for the {self.hemisphere}ern hemisphere ({season}: "
                f"{calendar.month_name[first]} to {calendar.month_name[last]})")
        if note not in self.notes:
            self.notes.append(note)

    # ------------------------------------------------------------------ ranges
    def range(self, i: int) -> TimeLink | None:
        """``between A and B``, ``from A to B``, ``since A``, ``after A``, ``before A`` (A, B periods)."""
        word = self.at(i)
        if word in ("between", "from"):
            joins = ("and",) if word == "between" else ("to", "until", "till", "through")
            first = self.period(i + 1)
            bare = self.month(i + 1, context=False) if first is None else None  # "between May and July 2023"
            k = first[0] if first is not None else i + 2
            if (first is None and bare is None) or (first is not None and len(first[1]) != 1) or \
                    self.at(k) not in joins:
                return None
            second = self.period(k + 1)
            if second is None or len(second[1]) != 1:
                return None
            b = second[1][0]
            if first is not None:
                a = first[1][0]
            elif self.month(k + 1, context=False) is not None:  # the year of the second month, or the one before
                start = datetime(b[0].year - (bare > b[0].month), bare, 1)
                a = (start, _add_months(start, 1), f"{start:%B %Y}")
            else:
                return None
            return self._range_link(i, second[0], a[0], b[1], f"{a[2]} to {b[2]}")
        if word in ("since", "after", "before", "until", "till"):
            got = self.period(i + 1)
            if got is None or len(got[1]) != 1:
                return None
            start, end, label = got[1][0]
            if word in ("since", "after"):
                lo = start if word == "since" else end
                return TimeLink(i, got[0], f"time >= '{_stamp(lo)}'", f"{word} {label}", ("period",))
            hi = start if word == "before" else end
            return TimeLink(i, got[0], f"time < '{_stamp(hi)}'", f"{word} {label}", ("period",))
        return None

    def _range_link(self, i: int, end: int, lo: datetime, hi: datetime, label: str) -> TimeLink | None:
        if hi <= lo:
            return None
        return TimeLink(i, end, period_where(lo, hi), label, ("period",))

    # ------------------------------------------------------------------ relative to today
    def relative(self, i: int) -> TimeLink | None:
        for read in (self._today, self._this_last, self._ago, self._past_n):
            got = read(i)
            if got is not None:
                return got
        return None

    def _with_part(self, i: int, j: int, start: datetime, label: str) -> TimeLink:
        """A day from ``i`` to ``j``, with a part of it when one follows ("yesterday morning")."""
        part = self.at(j).rstrip("s")
        if part in PARTS_OF_DAY:
            lo, hi = PARTS_OF_DAY[part]
            a = start + timedelta(hours=lo)
            b = start + timedelta(hours=hi) + (timedelta(days=1) if hi < lo else timedelta(0))
            return TimeLink(i, j + 1, period_where(a, b), f"{label} {part}", ("period",))
        return TimeLink(i, j, period_where(start, start + timedelta(days=1)), label, ("period",))

    def _today(self, i: int) -> TimeLink | None:
        t = _day(self.today)
        word = self.at(i)
        if word == "today":
            return self._with_part(i, i + 1, t, f"today ({_label_day(t)})")
        if word == "yesterday":
            y = t - timedelta(days=1)
            return self._with_part(i, i + 1, y, f"yesterday ({_label_day(y)})")
        if word == "tonight":
            return TimeLink(i, i + 1, period_where(t + timedelta(hours=17), t + timedelta(hours=29)),
                            f"tonight ({_label_day(t)})", ("period",))
        return None

    def _this_last(self, i: int) -> TimeLink | None:
        which = self.at(i)
        if which not in ("this", "last", "past", "previous"):
            return None
        last = which != "this"
        what = self.at(i + 1)
        t = _day(self.today)
        if what == "night" and which == "last":
            y = t - timedelta(days=1)
            return TimeLink(i, i + 2, period_where(y + timedelta(hours=21), t + timedelta(hours=5)),
                            f"last night ({_label_day(y)})", ("period",))
        if what in ("morning", "afternoon", "evening") and which == "this":
            return self._with_part(i, i + 1, t, "today")
        unit = UNITS.get(what)
        if unit in ("week", "month", "year", "weekend"):
            return self._unit(i, unit, last)
        if what in WEEKDAYS:
            back = (t.isoweekday() - WEEKDAYS[what]) % 7
            if last and back == 0:
                back = 7
            return self._with_part(i, i + 2, t - timedelta(days=back), f"{which} {what.capitalize()} "
                                   f"({_label_day(t - timedelta(days=back))})")
        month = self.month(i + 1, context=False)
        if month is not None:
            y = t.year if (t.month > month or (t.month == month and not last)) else t.year - 1
            start = datetime(y, month, 1)
            return TimeLink(i, i + 2, period_where(start, _add_months(start, 1)), f"{start:%B %Y}", ("period",))
        season = self.season(i + 1, context=False)
        if season is not None:
            self._season_note(season)
            options = [season_period(season, y, self.hemisphere) for y in range(t.year - 2, t.year + 1)]
            fits = [p for p in options if (p[1] <= t if last else p[0] <= t)]
            start, end, label = fits[-1]
            return TimeLink(i, i + 2, period_where(start, end), label, ("period",))
        return None

    def _unit(self, i: int, unit: str, last: bool) -> TimeLink:
        t = _day(self.today)
        if unit == "week":
            start = t - timedelta(days=t.weekday()) - timedelta(days=7 if last else 0)
            end = start + timedelta(days=7)
            label = f"week of {start.day} {start:%b %Y}"
        elif unit == "weekend":
            saturday = t - timedelta(days=(t.isoweekday() - 6) % 7)
            if last and saturday + timedelta(days=2) > t:
                saturday -= timedelta(days=7)
            start, end, label = saturday, saturday + timedelta(days=2), f"weekend of {saturday.day} {saturday:%b %Y}"
        elif unit == "month":
            start = _add_months(t.replace(day=1), -1 if last else 0)
            end, label = _add_months(start, 1), f"{start:%B %Y}"
        else:
            start = datetime(t.year - (1 if last else 0), 1, 1)
            end, label = start.replace(year=start.year + 1), str(start.year)
        return TimeLink(i, i + 2, period_where(start, end), label, ("period",))

    def _count(self, i: int) -> int | None:
        word = self.at(i)
        if word.isdigit() and 0 < int(word) < 200:
            return int(word)
        return NUMBERS.get(word)

    def _ago(self, i: int) -> TimeLink | None:
        """``3 days ago``, ``a year ago``, ``two weeks ago``."""
        n, unit = self._count(i), UNITS.get(self.at(i + 1))
        if n is None or unit in (None, "weekend") or self.at(i + 2) != "ago":
            return None
        t = _day(self.today)
        if unit == "day":
            start = t - timedelta(days=n)
            end, label = start + timedelta(days=1), _label_day(start)
        elif unit == "week":
            start = t - timedelta(days=t.weekday() + 7 * n)
            end, label = start + timedelta(days=7), f"week of {start.day} {start:%b %Y}"
        elif unit == "month":
            start = _add_months(t.replace(day=1), -n)
            end, label = _add_months(start, 1), f"{start:%B %Y}"
        else:
            start = datetime(t.year - n, 1, 1)
            end, label = start.replace(year=start.year + 1), str(start.year)
        return TimeLink(i, i + 3, period_where(start, end), label, ("period",))

    def _past_n(self, i: int) -> TimeLink | None:
        """``the past 2 weeks``, ``last 3 days``: up to today."""
        if self.at(i) not in ("past", "last"):
            return None
        n, unit = self._count(i + 1), UNITS.get(self.at(i + 2))
        if n is None or unit in (None, "weekend"):
            return None
        t = _day(self.today)
        end = t + timedelta(days=1)
        days = {"day": n - 1, "week": 7 * n - 1, "month": 30 * n - 1}.get(unit)
        if days is None:  # a year back, to the day after (29 February reads as the 28th)
            start = t.replace(year=t.year - n, day=min(t.day, 28 if t.month == 2 else t.day)) + timedelta(days=1)
        else:
            start = t - timedelta(days=days)
        return TimeLink(i, i + 3, period_where(start, end), f"the past {n} {unit}s", ("period",))

    # ------------------------------------------------------------------ periods that repeat
    def recurring(self, i: int) -> TimeLink | None:
        word = self.at(i)
        name = word[:-1] if word.endswith("s") and word[:-1] in WEEKDAYS else word
        if name in WEEKDAYS:
            part = self.at(i + 1).rstrip("s")
            where, label, facets, end = f"weekday = '{name}'", f"{name.capitalize()}s", ("weekday",), i + 1
            if part in PARTS_OF_DAY:
                where, label = f"{where} and {hour_where(part)}", f"{name.capitalize()} {part}s"
                facets, end = ("weekday", "hour"), i + 2
            return TimeLink(i, end, where, label, facets)
        if word == "weekends" or (word == "weekend" and self.at(i - 1) in ("on", "at", "the") and
                                  self.at(i - 2) in ("on", "at")):
            return TimeLink(i, i + 1, "(weekday = 'saturday' or weekday = 'sunday')", "weekends", ("weekday",))
        part = word[:-1] if word.endswith("s") else word
        if part in PARTS_OF_DAY and ((word.endswith("s") and part != "night") or
                                     (self.at(i - 1) == "the" and self.at(i - 2) in ("in", "during")) or
                                     (part == "night" and self.at(i - 1) == "at")):
            return TimeLink(i, i + 1, hour_where(part), f"{part}s" if part != "night" else "at night", ("hour",))
        month = self.month(i)
        if month is not None:
            return TimeLink(i, i + 1, f"month = {month}", calendar.month_name[month], ("month",))
        season = self.season(i)
        if season is not None:
            self._season_note(season)
            return TimeLink(i, i + 1, month_where(*season_months(season, self.hemisphere)), season, ("month",))
        return None


def find_times(words: Sequence[Word], today: date, years: Sequence[int] = (),
               hemisphere: str = "north") -> tuple[list[TimeLink], list[str]]:
    """The dates of a question, left to right, without overlaps: ``(links, notes)``. ``years``: the years the library
    has photos in (a day named without a year is that day of each)."""
    if hemisphere not in ("north", "south"):
        raise ValueError(f"hemisphere is 'north' or 'south', not {hemisphere!r}")
    reader = _Times(words, today, years, hemisphere)
    links: list[TimeLink] = []
    i = 0
    while i < len(words):
        link = reader.range(i) or reader.relative(i)
        if link is None:
            got = reader.period(i)
            if got is not None:
                end, periods = got
                where = _any([period_where(a, b) for a, b, _ in periods])
                label = periods[0][2] if len(periods) == 1 or len({p[2] for p in periods}) == 1 else \
                    " or ".join(p[2] for p in periods)
                link = TimeLink(i, end, where, label, ("period",))
        link = link or reader.recurring(i)
        if link is None:
            i += 1
            continue
        links.append(link)
        i = link.end
    return links, reader.notes


__all__ = ["MONTHS", "PARTS_OF_DAY", "SEASONS", "WEEKDAYS", "TimeLink", "Word", "find_times", "hour_where",
           "month_where", "period_where", "season_months", "season_period"]
