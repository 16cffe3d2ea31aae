"""The metadata filter language of the ``FilterMetadata`` album tool: a real parser, never ``eval``.

Grammar (keywords and field names are case-insensitive)::

    expr       := and_expr ( ("or" | "||") and_expr )*
    and_expr   := unary ( ("and" | "&&") unary )*
    unary      := ("not" | "!") unary | primary
    primary    := "(" expr ")" | near | comparison | between
    near       := "near" "(" (number "," number | string) "," number ")"   -- lat, lon | place name, km
    comparison := field op value
    between    := field "between" value "and" value                     -- both ends included
    op         := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">=" | "~" | "contains"

Fields (aliases in brackets):

- ``time`` [date, datetime, taken]: a date or a prefix of one, quoted or bare: ``'2013'``, ``'2013-06'``,
  ``'2013-06-09'``, ``'2013-06-09 14'``, ``'2013-06-09 14:30'``, ``'2013-06-09 14:30:05'`` (``T`` or a
  space before the hour; ``/`` or ``-`` between date parts). A prefix is the whole period it names:
  ``time = '2013-06'`` is all of June 2013, ``time <= '2013-06'`` ends with June, ``time > '2013-06'``
  starts in July, ``time >= '2013-06-09' and time < '2013-06-10'`` is one day. Times are wall-clock
  times as the camera wrote them (no time zone arithmetic).
- ``address`` [place, location]: ``~`` / ``contains`` is a case-insensitive substring match
  (``address ~ 'paris'``); ``=`` a case-insensitive whole-string match; ``!=`` its negation.
- ``device`` [camera]: as ``address``.
- ``lat`` [latitude], ``lon`` [lng, longitude]: numbers, with ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``.
- ``near(lat, lon, km)``: within ``km`` kilometres (great-circle distance) of the point; ``near('Vienna', km)``
  names the point: the most populous place of that name in the offline GeoNames data
  (:mod:`imagent.index.places`; ``'Paris, Texas'`` narrows it by region or country).
- ``address`` is the given address, else the place name found offline for the photo's GPS
  (``place ~ 'san diego'``).
- ``person`` [people]: the people found in the photo (:mod:`imagent.index.people`). ``=`` a person's whole name,
  any case (``person = 'Anna'``; a name no group has is an error that lists the names), or a group by its id
  as ``imagent people`` lists it (``person = 7`` or ``'#7'``); ``~`` part of a name; ``!=`` photos with people,
  none of them that one (``not person = 'Anna'``: every photo without Anna). Evaluated through
  :attr:`AlbumMeta.people`, which the album layer sets.
- ``month``, ``weekday`` [day_of_week], ``hour``: the calendar of ``time`` (wall clock), for periods that repeat:
  ``month = 5`` or ``month = 'may'`` (every May), ``month >= 6 and month <= 8``; ``weekday = 'sunday'`` (or
  ``'sun'``, or 1..7 with Monday 1, as ISO 8601); ``hour >= 5 and hour < 12`` (mornings). ``=``, ``!=``, ``<``,
  ``<=``, ``>``, ``>=`` on numbers (a name stands for its number). The query reader
  (:mod:`imagent.tools.query_reader`) writes them for "in May", "on Sundays", "in the morning".
- ``label`` [labels]: what the pixel model saw (:mod:`imagent.models.pixels`), counting only the photo's stored
  labels of probability at least ``pixels.label_min_p`` (0.1). ``label ~ 'bird'``: one of those labels has
  ``bird`` as a whole word (any case; singular or plural) of its class name, of one of its WordNet synonyms or of
  one of its WordNet parent categories (all of them, up to "animal": so ``label ~ 'bird'`` finds a flamingo and a
  goldfinch, ``label ~ 'dog'`` every dog breed, ``label ~ 'cat'`` a tabby, ``label ~ 'car'`` a sports car and a
  car wheel but never a "carnivore"); ``label = 'flamingo'``: a label's class name is exactly that; ``label !=
  'x'``: a labelled photo with no such label. A photo the pixel model has not seen has no label (false, as any missing
  field). An index without labels, or a run with ``pixels.labels_as_text = false``, refuses the field.
- ``text`` [ocr]: the text read in the photo (signs, menus, tickets: the index's OCR pass, :mod:`imagent.index.text`).
  ``text ~ 'sol'``: its text contains ``sol``, in any case and without accents, inside a word too ("Solar",
  "Sol"; ``text ~ 'cafe sol'`` the two words in a row: spaces are single); ``text = 'sol'``: its text holds ``sol``
  as a whole word (``text = 'cafe sol'``: those words in that order, across lines too), as a quoted search
  (``"Cafe Sol"``) matches; ``text != 'x'``: a photo with text that does not hold it. A photo without text (none
  found, or no OCR ran) matches neither.

``~`` (``contains``) needs something to look for: an empty pattern (``address ~ ''``, ``person ~ ''``, ``label ~
''``, ``text ~ ''``) is an error on every text field, not "matches everything" on one and "nothing" on another. Nesting
(parentheses and ``not``/``!``) is bounded at :data:`MAX_NESTING` levels: deeper is an error, never a crash.

A comparison on a photo that lacks that field is false (``time != '2013'`` skips photos without a
time; ``not time = '2013'`` keeps them). Errors (:class:`FilterError`) say where the expression went
wrong, what was expected and what the language allows, so a model can rewrite the expression.

Evaluation is vectorised over :class:`AlbumMeta` (numpy arrays; the text fields factorised into codes
over their distinct values, matched once per distinct value), never a Python loop per photo.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from imagent.core.types import ImageRecord
from imagent.index.scoring import haversine_km
from imagent.index.text import PhotoTexts, line_texts
from imagent.index.text import query_words as text_words
from imagent.tools.base import ToolError

ALLOWED = (
    "Allowed: time with = != < <= > >= and a date or date prefix in quotes ('2013', '2013-06', '2013-06-09', "
    "'2013-06-09 14:30'); address (or place) or device with ~ (case-insensitive contains), = or !=; lat, lon "
    "with = != < <= > >= and a number; near(lat, lon, km) or near('Vienna', km); person with = (a name, any case, or "
    "a group number) or ~ (part of a name); label (what the pixel model saw) with ~ (a whole word of a class or of "
    "a parent category such as 'bird'), = or !=; text (words read in the photo) with ~ (contains, any case) or = "
    "(whole words); field between A and B; combined "
    "with and, or, not and parentheses. Example: time >= '2013-06-09' and time < '2013-06-10' and address ~ 'paris'"
)

FIELDS = {
    "time": "time", "date": "time", "datetime": "time", "taken": "time",
    "address": "address", "place": "address", "location": "address",
    "device": "device", "camera": "device",
    "lat": "lat", "latitude": "lat",
    "lon": "lon", "lng": "lon", "longitude": "lon",
    "person": "person", "people": "person",
    "label": "label", "labels": "label",
    "text": "text", "ocr": "text",
    "month": "month", "weekday": "weekday", "day_of_week": "weekday", "hour": "hour",
}
# The calendar fields: a number, or a name that stands for one.
CALENDAR_FIELDS = {"month": (1, 12), "weekday": (1, 7), "hour": (0, 23)}
MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
               "november", "december")
WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_OPS_BY_FIELD = {
    "time": {"=", "!=", "<", "<=", ">", ">="},
    "lat": {"=", "!=", "<", "<=", ">", ">="},
    "lon": {"=", "!=", "<", "<=", ">", ">="},
    "address": {"=", "!=", "~"},
    "device": {"=", "!=", "~"},
    "person": {"=", "!=", "~"},
    "label": {"=", "!=", "~"},
    "text": {"=", "!=", "~"},
    "month": {"=", "!=", "<", "<=", ">", ">="},
    "weekday": {"=", "!=", "<", "<=", ">", ">="},
    "hour": {"=", "!=", "<", "<=", ">", ">="},
}
_KEYWORDS = {"and", "or", "not", "near", "contains", "between"}
# Parentheses and not/! nested deeper than this are refused (the parser and the evaluator recurse per level).
MAX_NESTING = 64

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<date>\d{4}[-/]\d{1,2}(?:[-/]\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?)?(?![\w.]))
  | (?P<number>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<open_string>['"])
  | (?P<op>==|!=|<>|<=|>=|&&|\|\||[=<>~!(),])
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
    """,
    re.X,
)
_DATE = re.compile(r"^(\d{4})(?:[-/](\d{1,2})(?:[-/](\d{1,2})(?:[T ](\d{1,2})(?::(\d{2})(?::(\d{2}))?)?)?)?)?$")


class FilterError(ToolError):
    """The expression is not valid; the message says where, why and what is allowed."""


@dataclass(frozen=True)
class Token:
    kind: str  # date number string op name end
    text: str
    pos: int
    value: Any = None


def _error(expr: str, pos: int, what: str) -> FilterError:
    near = expr[pos: pos + 20] if pos < len(expr) else "the end"
    where = f"at position {pos} (near {near!r})" if pos < len(expr) else "at the end"
    return FilterError(f"bad filter expression {where}: {what}. {ALLOWED}")


def quote_string(text: str) -> str:
    """``text`` as a string literal of this language (single quotes; double quotes when it holds a single
    quote; backslash escapes when it holds both or a backslash), so it reads back as exactly ``text``."""
    if "\\" not in text and "'" not in text:
        return f"'{text}'"
    if "\\" not in text and '"' not in text:
        return f'"{text}"'
    return "'" + re.sub(r"(['\\\\])", r"\\\1", text) + "'"


def tokenize(expr: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise _error(expr, pos, f"unexpected character {expr[pos]!r}")
        kind = m.lastgroup or ""
        text = m.group(0)
        if kind == "open_string":
            raise _error(expr, pos, f"the string starting with {text} is never closed")
        if kind == "string":
            out.append(Token("string", text, pos, re.sub(r"\\(.)", r"\1", text[1:-1])))
        elif kind == "number":
            out.append(Token("number", text, pos, float(text)))
        elif kind == "date":
            out.append(Token("date", text, pos, text))
        elif kind == "op":
            op = {"==": "=", "<>": "!=", "&&": "and", "||": "or", "!": "not"}.get(text, text)
            out.append(Token("name" if op in {"and", "or", "not"} else "op", text, pos, op))
        elif kind == "name":
            out.append(Token("name", text, pos, text.lower()))
        pos = m.end()
    out.append(Token("end", "", len(expr)))
    return out


# --------------------------------------------------------------------------- AST


@dataclass(frozen=True)
class Compare:
    field: str  # canonical field name
    op: str  # = != < <= > >= ~
    value: Any  # (lo, hi) seconds for time; float for lat/lon; lower-case str for text


@dataclass(frozen=True)
class Between:
    field: str
    lo: Any
    hi: Any


@dataclass(frozen=True)
class Near:
    lat: float
    lon: float
    km: float


@dataclass(frozen=True)
class BoolOp:
    op: str  # and | or
    items: tuple[Any, ...]


@dataclass(frozen=True)
class Not:
    item: Any


def parse_time_prefix(text: str) -> tuple[float, float]:
    """``[start, end)`` in wall-clock seconds of the period a date prefix names; ValueError if invalid."""
    m = _DATE.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a date; write it as YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DD HH:MM[:SS]")
    year, month, day, hour, minute, second = (int(g) if g is not None else None for g in m.groups())
    try:
        start = datetime(year, month or 1, day or 1, hour or 0, minute or 0, second or 0)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid date ({exc})") from None
    if month is None:
        end = datetime(year + 1, 1, 1)  # type: ignore[operator]
    elif day is None:
        end = datetime(year + (month == 12), month % 12 + 1, 1)  # type: ignore[operator]
    elif hour is None:
        end = start + timedelta(days=1)
    elif minute is None:
        end = start + timedelta(hours=1)
    elif second is None:
        end = start + timedelta(minutes=1)
    else:
        end = start + timedelta(seconds=1)
    return wall_seconds(start), wall_seconds(end)


_EPOCH = datetime(1970, 1, 1)


def wall_seconds(dt: datetime) -> float:
    """Whole seconds since 1970-01-01 of the wall-clock time ``dt`` shows (its time zone, if any, and
    fractions of a second ignored)."""
    return (dt.replace(tzinfo=None, microsecond=0) - _EPOCH).total_seconds()


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.toks = tokenize(expr)
        self.i = 0
        self.depth = 0

    def nest(self) -> None:
        """One more level of parentheses or ``not``; :class:`FilterError` past :data:`MAX_NESTING`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.err(f"the expression nests parentheses and 'not' more than {MAX_NESTING} levels deep; "
                           "write it flatter")

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def err(self, what: str, tok: Token | None = None) -> FilterError:
        return _error(self.expr, (tok or self.tok).pos, what)

    def is_kw(self, word: str) -> bool:
        return self.tok.kind == "name" and self.tok.value == word

    def expect_op(self, op: str, context: str = "") -> Token:
        if self.tok.kind != "op" or self.tok.value != op:
            raise self.err(f"expected {op!r}{context} but found {self._found()}")
        t = self.tok
        self.i += 1
        return t

    def _found(self) -> str:
        return "the end of the expression" if self.tok.kind == "end" else repr(self.tok.text)

    def parse(self) -> Any:
        if self.tok.kind == "end":
            raise FilterError(f"the filter expression is empty. {ALLOWED}")
        node = self.or_expr()
        if self.tok.kind != "end":
            if self.tok.kind == "op" and self.tok.value == ")":
                raise self.err("a ')' without a matching '('")
            raise self.err(f"expected 'and', 'or' or the end of the expression but found {self._found()}")
        return node

    def or_expr(self) -> Any:
        items = [self.and_expr()]
        while self.is_kw("or"):
            self.i += 1
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else BoolOp("or", tuple(items))

    def and_expr(self) -> Any:
        items = [self.unary()]
        while self.is_kw("and"):
            self.i += 1
            items.append(self.unary())
        return items[0] if len(items) == 1 else BoolOp("and", tuple(items))

    def unary(self) -> Any:
        if self.is_kw("not"):
            self.nest()
            self.i += 1
            node = Not(self.unary())
            self.depth -= 1
            return node
        return self.primary()

    def primary(self) -> Any:
        t = self.tok
        if t.kind == "op" and t.value == "(":
            self.nest()
            self.i += 1
            node = self.or_expr()
            if not (self.tok.kind == "op" and self.tok.value == ")"):
                raise self.err(f"expected ')' to close the '(' at position {t.pos} but found {self._found()}")
            self.i += 1
            self.depth -= 1
            return node
        if self.is_kw("near"):
            return self.near()
        if t.kind == "end":
            raise self.err("the expression ends where a condition was expected")
        if t.kind != "name" or t.value in _KEYWORDS:
            raise self.err(f"expected a condition (a field such as time, address, device, lat, lon, or near(...)) "
                           f"but found {self._found()}")
        field = FIELDS.get(t.value)
        if field is None:
            raise self.err(f"unknown field {t.text!r}; fields are time, address, device, lat, lon, person, label, "
                                 "text, month, weekday, hour")
        self.i += 1
        if self.is_kw("between"):
            self.i += 1
            lo = self.value(field, "=")
            if not self.is_kw("and"):
                raise self.err(f"expected 'and' after '{t.text} between A' but found {self._found()}")
            self.i += 1
            hi = self.value(field, "=")
            return Between(field, lo, hi)
        op_tok = self.tok
        if self.is_kw("contains"):
            op = "~"
        elif op_tok.kind == "op" and op_tok.value in {"=", "!=", "<", "<=", ">", ">=", "~"}:
            op = op_tok.value
        else:
            raise self.err(f"expected a comparison operator after {t.text!r} but found {self._found()}")
        if op not in _OPS_BY_FIELD[field]:
            allowed = " ".join(sorted(_OPS_BY_FIELD[field]))
            word = "contains" if op == "~" else op
            raise self.err(f"{t.text} does not take {word!r}; it takes {allowed}", op_tok)
        self.i += 1
        return Compare(field, op, self.value(field, op))

    def value(self, field: str, op: str) -> Any:
        t = self.tok
        if t.kind not in {"string", "number", "date"}:
            raise self.err(f"expected a value for {field} but found {self._found()}")
        self.i += 1
        if field == "time":
            text = t.value if t.kind != "number" else t.text
            if t.kind == "number" and not re.fullmatch(r"\d{4}", t.text):
                raise self.err(f"time needs a date such as '2013-06-09', not the number {t.text}", t)
            try:
                return parse_time_prefix(str(text))
            except ValueError as exc:
                raise self.err(str(exc), t) from None
        if field in CALENDAR_FIELDS:
            return self.calendar_value(field, t)
        if field in {"lat", "lon"}:
            try:
                return float(t.value)
            except (TypeError, ValueError):
                raise self.err(f"{field} needs a number, not {t.text}", t) from None
        text = str(t.value if t.kind != "number" else t.text).strip().lower()
        if op == "~" and not text:
            raise self.err(f"{field} ~ needs something to look for, not an empty string (it would match every photo "
                           f"with a {field}, or none)", t)
        if field == "text" and not text_words(text):
            raise self.err(f"text {'~' if op == '~' else op} needs letters or digits to look for, not {t.text}", t)
        return text

    def calendar_value(self, field: str, t: Token) -> float:
        """A month, weekday or hour: a number in its range, or (month, weekday) a name or its first three letters."""
        lo, hi = CALENDAR_FIELDS[field]
        names = {"month": MONTH_NAMES, "weekday": WEEKDAY_NAMES}.get(field, ())
        if t.kind == "string" and names:
            word = str(t.value).strip().lower()
            for n, name in enumerate(names, 1):
                if word == name or (len(word) >= 3 and name.startswith(word)):
                    return float(n)
            raise self.err(f"{field} takes a number from {lo} to {hi} or a name ({', '.join(names)}), not {t.text}",
                           t)
        try:
            value = float(t.value if t.kind == "number" else str(t.value).strip())
        except (TypeError, ValueError):
            value = float("nan")
        if not (value == int(value) if value == value else False) or not lo <= value <= hi:
            raise self.err(f"{field} takes a whole number from {lo} to {hi}" + (" or a name" if names else "")
                           + f", not {t.text}", t)
        return value

    def number(self, what: str) -> float:
        t = self.tok
        if t.kind != "number":
            raise self.err(f"near(lat, lon, km) needs a number for {what} but found {self._found()}")
        self.i += 1
        return float(t.value)

    def place(self, tok: Token) -> tuple[float, float]:
        """The coordinates of a named place, from the offline GeoNames data place names come from."""
        from imagent.index import places

        name = str(tok.value).strip()
        try:
            found = places.find(name) if name else None
        except places.PlacesUnavailable as exc:
            raise self.err(f"near({tok.text}, ...) needs the offline place data: {exc}; give near(lat, lon, km)",
                           tok) from None
        if found is None:
            raise self.err(f"near: no place called {tok.text} in the offline place data (GeoNames towns of 1,000+ "
                           "people; narrow a common name as 'Paris, France'); or give near(lat, lon, km)", tok)
        return found.latitude, found.longitude

    def near(self) -> Near:
        start = self.tok
        self.i += 1
        usage = " (near takes three numbers: near(lat, lon, km))"
        self.expect_op("(", usage)
        if self.tok.kind == "string":  # near('Vienna', km)
            usage = " (near with a place takes its name and a distance: near('Vienna', km))"
            lat, lon = self.place(self.tok)
            self.i += 1
        else:
            lat = self.number("lat")
            self.expect_op(",", usage)
            lon = self.number("lon")
        self.expect_op(",", usage)
        km = self.number("km")
        self.expect_op(")", usage)
        if not -90 <= lat <= 90 or not -180 <= lon <= 180:
            raise self.err(f"near: lat must be in [-90, 90] and lon in [-180, 180], got {lat:g}, {lon:g}", start)
        if km <= 0:
            raise self.err(f"near: the distance must be more than 0 km, got {km:g}", start)
        return Near(lat, lon, km)


def parse_filter(expr: str) -> Any:
    """The expression's syntax tree; :class:`FilterError` when it is not valid."""
    if not isinstance(expr, str):
        raise FilterError(f"the filter expression must be a string. {ALLOWED}")
    return _Parser(expr).parse()


# --------------------------------------------------------------------------- evaluation


class _TextColumn:
    """A text field factorised: per-photo codes into the distinct lower-cased values (-1: none)."""

    def __init__(self, values: Sequence[str | None]) -> None:
        index: dict[str, int] = {}
        codes = np.empty(len(values), dtype=np.int32)
        self.shown: list[str] = []  # each distinct value as first stored (for messages)
        for n, v in enumerate(values):
            key = (v or "").strip().lower()
            if key and key not in index:
                self.shown.append((v or "").strip())
            codes[n] = index.setdefault(key, len(index)) if key else -1
        self.codes = codes
        self.uniques = list(index)

    def containing(self, value: str) -> list[tuple[str, int]]:
        """The stored values that contain ``value`` (lower case), as first stored, with how many photos have
        each, most first."""
        counts = np.bincount(self.codes[self.codes >= 0], minlength=len(self.uniques))
        found = [(self.shown[n], int(counts[n])) for n, u in enumerate(self.uniques) if value and value in u]
        return sorted(found, key=lambda x: -x[1])

    def mask(self, op: str, value: str) -> np.ndarray:
        if op == "~":
            hit = np.fromiter((value in u for u in self.uniques), dtype=bool, count=len(self.uniques))
        else:
            hit = np.fromiter((u == value for u in self.uniques), dtype=bool, count=len(self.uniques))
        table = np.append(hit, False)  # code -1 (no value) -> the extra False at the end
        m = table[self.codes]
        if op == "!=":
            m = ~m & (self.codes >= 0)
        return m


class AlbumMeta:
    """Column arrays of an album's metadata, built once: what filters are evaluated on.

    ``time``: wall-clock seconds (NaN: no time); ``lat``/``lon``: degrees (NaN: no GPS); ``address`` and
    ``device``: text per photo (None: unknown); ``labels``: per photo its stored labels' class indices (None: the
    label field is refused, as when the index has no labels or they are not offered as text); ``texts``: per photo
    the lines of text read in it (None: none read in any photo)."""

    def __init__(self, time: np.ndarray, lat: np.ndarray, lon: np.ndarray, address: Sequence[str | None],
                 device: Sequence[str | None], labels: Sequence[Sequence[int]] | None = None,
                 texts: Sequence[Sequence[str] | None] | None = None) -> None:
        self.size = len(time)
        self.time = np.asarray(time, dtype=np.float64)
        self.lat = np.asarray(lat, dtype=np.float64)
        self.lon = np.asarray(lon, dtype=np.float64)
        self.address = _TextColumn(address)
        self.device = _TextColumn(device)
        self.labels: np.ndarray | None = None
        if labels is not None:
            width = max((len(x) for x in labels), default=0) or 1
            self.labels = np.full((self.size, width), -1, dtype=np.int32)
            for n, x in enumerate(labels):
                self.labels[n, : len(x)] = x
        self.text = PhotoTexts(texts if texts is not None else [None] * self.size)  # the field text
        # Rows in chronological order (photos without a time last): results are listed this way.
        self.chrono = np.argsort(np.where(np.isnan(self.time), np.inf, self.time), kind="stable")
        # () -> the people of the rows, an object with ``mask(op, value)`` (imagent.index.people.PeopleIndex;
        # set by the album layer, read at each evaluation so names given meanwhile count); None: no people.
        self.people: Any = None
        self._calendar: dict[str, np.ndarray] = {}  # month, weekday, hour columns (:meth:`calendar`)

    @classmethod
    def from_records(cls, records: Sequence[ImageRecord], label_min_p: float | None = None) -> AlbumMeta:
        """``label_min_p``: labels of at least this probability make the label column (None: no label column)."""
        n = len(records)
        return cls(
            np.fromiter((wall_seconds(r.taken_time) if r.taken_time is not None else np.nan for r in records),
                        np.float64, n),
            np.fromiter((np.nan if r.latitude is None else r.latitude for r in records), np.float64, n),
            np.fromiter((np.nan if r.longitude is None else r.longitude for r in records), np.float64, n),
            [r.place_name for r in records], [r.device for r in records],
            None if label_min_p is None else [label_indices(r.labels, label_min_p) for r in records],
            [line_texts(r.text_lines) for r in records])

    @classmethod
    def from_columns(cls, taken: Sequence[str | None], lat: Sequence[float | None], lon: Sequence[float | None],
                     address: Sequence[str | None], device: Sequence[str | None],
                     labels: Sequence[Sequence[int]] | None = None,
                     texts: Sequence[Sequence[str] | None] | None = None) -> AlbumMeta:
        """From stored values: ``taken`` as ISO 8601 text (``ImageRecord.to_dict``), parsed by numpy in C;
        the first 19 characters are the wall-clock time (fractions of a second and any offset dropped)."""
        stamps = np.array([t[:19] if t else "NaT" for t in taken], dtype="datetime64[s]")
        seconds = stamps.astype(np.int64).astype(np.float64)
        seconds[np.isnat(stamps)] = np.nan
        return cls(seconds, np.array(lat, dtype=np.float64), np.array(lon, dtype=np.float64), address, device, labels,
                   texts)

    def evaluate(self, node: Any) -> np.ndarray:
        """A boolean mask over rows."""
        with np.errstate(invalid="ignore"):
            return self._eval(node)

    def _eval(self, node: Any) -> np.ndarray:
        if isinstance(node, BoolOp):
            masks = [self._eval(i) for i in node.items]
            out = masks[0].copy()
            for m in masks[1:]:
                if node.op == "and":
                    out &= m
                else:
                    out |= m
            return out
        if isinstance(node, Not):
            return ~self._eval(node.item)
        if isinstance(node, Near):
            return haversine_km(node.lat, node.lon, self.lat, self.lon) <= node.km
        if isinstance(node, Between):
            if node.field == "time":
                return (self.time >= node.lo[0]) & (self.time < node.hi[1])
            if node.field in {"lat", "lon", *CALENDAR_FIELDS}:
                col = self.calendar(node.field) if node.field in CALENDAR_FIELDS else getattr(self, node.field)
                return (col >= min(node.lo, node.hi)) & (col <= max(node.lo, node.hi))
            raise FilterError(f"between works on time, lat, lon, month, weekday and hour, not {node.field}. {ALLOWED}")
        if isinstance(node, Compare):
            if node.field == "person":
                return self._person(node)
            if node.field == "label":
                return self._label_mask(node.op, node.value)
            if node.field == "text":
                return self._text_mask(node.op, node.value)
            if node.field in {"address", "device"}:
                return getattr(self, node.field).mask(node.op, node.value)
            col = self.calendar(node.field) if node.field in CALENDAR_FIELDS else \
                self.time if node.field == "time" else getattr(self, node.field)
            if node.field == "time":
                lo, hi = node.value
            else:
                lo = hi = node.value
            has = ~np.isnan(col)
            if node.op == "=":
                return (col >= lo) & (col < hi) if node.field == "time" else col == lo
            if node.op == "!=":
                inside = (col >= lo) & (col < hi) if node.field == "time" else col == lo
                return has & ~inside
            if node.op == "<":
                return col < lo
            if node.op == ">=":
                return col >= lo
            if node.op == "<=":
                return col < hi if node.field == "time" else col <= hi
            if node.op == ">":
                return col >= hi if node.field == "time" else col > hi
        raise TypeError(f"unknown filter node {node!r}")

    def calendar(self, field: str) -> np.ndarray:
        """The month (1-12), ISO weekday (Monday 1) or hour (0-23) of each row's time (NaN: no time), computed once."""
        cache = self._calendar
        if field not in cache:
            has = ~np.isnan(self.time)
            secs = np.where(has, self.time, 0).astype(np.int64)
            if field == "month":
                months = secs.astype("datetime64[s]").astype("datetime64[M]").astype(np.int64) % 12 + 1
                col = months.astype(np.float64)
            elif field == "weekday":  # 1970-01-01 was a Thursday (ISO weekday 4)
                col = ((secs // 86400 + 3) % 7 + 1).astype(np.float64)
            else:
                col = ((secs % 86400) // 3600).astype(np.float64)
            col[~has] = np.nan
            cache[field] = col
        return cache[field]

    def _person(self, node: Compare) -> np.ndarray:
        if self.people is None:
            raise FilterError("person: this album has no face data (photos indexed from a folder get their faces "
                              "found by `imagent index`)")
        try:
            mask = self.people().mask(node.op, node.value)
        except ValueError as exc:  # a name no group has, an unknown group id: say which names exist
            raise FilterError(str(exc)) from None
        return np.asarray(mask, dtype=bool)
    def _label_mask(self, op: str, value: str) -> np.ndarray:
        from imagent.models.pixels import classes_matching, label_data

        if self.labels is None:
            raise FilterError("these photos carry no labels as text (no pixel model has seen them, or the run keeps "
                              f"them out: pixels.labels_as_text = false); filter by another field. {ALLOWED}")
        classes = label_data()
        if op == "~":
            found = classes_matching(value)
            hit = np.array([c["index"] in found for c in classes])
        else:
            hit = np.array([c["name"].strip().lower() == value for c in classes])
        table = np.append(hit, False)  # index -1 (no label) -> the extra False at the end
        found = table[self.labels].any(axis=1)
        if op == "!=":
            return ~found & (self.labels >= 0).any(axis=1)
        return found

    def _text_mask(self, op: str, value: str) -> np.ndarray:
        if op == "~":
            return self.text.contains(value)
        found = self.text.phrase(value)
        return ~found & self.text.has_text if op == "!=" else found

    def filter_rows(self, expr: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Rows matching ``expr`` (within ``rows`` when given), in chronological order."""
        mask = self.evaluate(parse_filter(expr))
        if rows is not None:
            allowed = np.zeros(self.size, dtype=bool)
            allowed[rows] = True
            mask &= allowed
        return self.chrono[mask[self.chrono]]


def label_indices(labels: Sequence[dict[str, Any]], min_p: float) -> list[int]:
    """The class indices of a photo's stored labels of probability at least ``min_p``."""
    return [int(x["index"]) for x in labels if "index" in x and float(x.get("p", 0)) >= min_p]


__all__ = ["ALLOWED", "FIELDS", "MAX_NESTING", "AlbumMeta", "FilterError", "label_indices", "parse_filter",
           "parse_time_prefix", "quote_string", "tokenize", "wall_seconds"]
