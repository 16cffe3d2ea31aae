"""An album's photos on the calendar and the map: days, trips, visits, months, seasons and years, as numpy masks.

:class:`Timeline` is built from the album's metadata columns (:attr:`Album.meta`, shared by every album over one
gallery) with numpy only (no Python pass over the photos) and cached per album (:meth:`Timeline.of`), so each
question below is one vectorised pass over the album's photos, and a 100,000-photo album is a few milliseconds:

- a photo's *day* is the calendar day of its wall-clock time; a *trip* is a maximal run of photo days at most
  ``gap_days`` apart (``trip_gap_days``: photos on consecutive days belong to one trip, a day without photos
  between two photo days ends it when ``gap_days`` is 1); the *Nth day of a trip* its Nth photo day;
- *same place*: within ``place_km`` of the photo's GPS (else the same address); *same city*: within ``city_km``;
  a place *named* by words: photos whose address has a part holding those words by stem ("festival" ~ "Place des
  Festivals", "gardens" ~ "Botanical Garden");
- a *visit* to a place (or city) is one trip's photos there, visits in time order;
- calendar *months* and *years*; *seasons* are consecutive three-month blocks (December-February, March-May, ...)
  named by the hemisphere of the photo's latitude (December is winter in the north, summer in the south).

Photos without a time are on no day and in no trip; photos without GPS and address are at no place. imagent's own
vocabulary (the ``album`` method's plan executes over it), not a paper's.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cached_property
from typing import Any

import numpy as np

from imagent.index.scoring import haversine_km

SEASONS = ("winter", "spring", "summer", "autumn")
_EPOCH = date(1970, 1, 1)
NO_DAY = -(2**62)
# Words of a place's name that do not name it ("Place des Festivals": "festival" names it).
_PLACE_GENERIC = frozenset({"the", "of", "de", "des", "du", "la", "le", "les", "da", "do", "di", "del", "della",
                            "place", "and", "at", "in", "on", "my", "a", "an", "to", "from"})
_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Timeline]] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()
_CACHE_PER_META = 16


def day_number(d: date) -> int:
    """Days since 1970-01-01."""
    return (d - _EPOCH).days


def day_date(n: int) -> date:
    return _EPOCH + timedelta(days=int(n))


def add_months(d: date, months: int) -> date:
    """``d`` moved by whole calendar months (the day clipped to the month's length: Jan 31 + 1 month = Feb 28)."""
    m = d.year * 12 + d.month - 1 + months
    year, month = divmod(m, 12)
    for day in (d.day, 30, 29, 28):
        try:
            return date(year, month + 1, min(d.day, day))
        except ValueError:
            continue
    raise ValueError(f"cannot move {d} by {months} months")


def place_stems(text: str) -> list[str]:
    """The words of a place's name that name it, folded and crudely singular ("the Botanical Gardens" ->
    ["botanical", "garden"])."""
    from imagent.tools.query_reader import fold, stem

    return [stem(w) for w in "".join(c if c.isalnum() else " " for c in fold(text)).split()
            if w not in _PLACE_GENERIC]


@dataclass
class Timeline:
    """The album's photos (``ids``, in album order) with their day, trip, month, season block, year, GPS and
    address (``codes`` into ``uniques``, the distinct lower-cased addresses; -1: none), each a numpy array aligned
    with ``ids``."""

    ids: list[str]
    day: np.ndarray  # int64 days since 1970-01-01, NO_DAY when the photo has no time
    lat: np.ndarray  # float64, NaN without GPS
    lon: np.ndarray
    codes: np.ndarray  # int32 address codes, -1 when unknown
    uniques: list[str]
    gap_days: float = 1.0

    def __post_init__(self) -> None:
        self.has_day = self.day != NO_DAY
        self.trip = np.full(len(self.ids), -1, dtype=np.int64)
        timed = np.flatnonzero(self.has_day)
        self.photo_days = np.unique(self.day[timed]) if len(timed) else np.zeros(0, dtype=np.int64)
        if len(timed):
            starts = np.concatenate(([True], np.diff(self.photo_days) > self.gap_days))
            self.trip_of_day = np.cumsum(starts) - 1
            self.trip[timed] = self.trip_of_day[np.searchsorted(self.photo_days, self.day[timed])]
        else:
            self.trip_of_day = np.zeros(0, dtype=np.int64)
        self.trips = int(self.trip.max()) + 1 if len(timed) else 0
        months = np.where(self.has_day, self.day, 0).astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
        months = months + 1970 * 12  # year * 12 + month - 1
        self.month = np.where(self.has_day, months, -1)
        self.year = np.where(self.has_day, months // 12, -1)
        self.season_block = np.where(self.has_day, (months + 1) // 3, -1)

    @classmethod
    def of(cls, album: Any, gap_days: float = 1.0) -> Timeline:
        """The timeline of an :class:`~imagent.tools.album.Album` (scoped or whole), from its metadata columns;
        built once per (metadata columns, scope, gap) and kept while the columns live."""
        meta = album.meta
        rows = album.rows
        key = ("all" if rows is None else hash(np.asarray(rows).tobytes()), len(album), float(gap_days))
        with _CACHE_LOCK:
            hit = _CACHE.get(meta, {}).get(key)
        if hit is not None:
            return hit
        ids = list(album.ids)
        rows = np.arange(meta.size) if rows is None else np.asarray(rows)
        seconds = meta.time[rows]
        day = np.where(np.isfinite(seconds), np.floor(np.nan_to_num(seconds) / 86400.0), NO_DAY).astype(np.int64)
        tl = cls(ids, day, meta.lat[rows].astype(np.float64), meta.lon[rows].astype(np.float64),
                 meta.address.codes[rows], meta.address.uniques, gap_days)
        with _CACHE_LOCK:
            cached = _CACHE.setdefault(meta, {})
            if len(cached) >= _CACHE_PER_META:
                cached.pop(next(iter(cached)))
            cached[key] = tl
        return tl

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def pos(self) -> dict[str, int]:
        return {i: n for n, i in enumerate(self.ids)}

    def index(self, photo_id: str) -> int:
        return self.pos[photo_id]

    def address(self, i: int) -> str:
        c = int(self.codes[i])
        return self.uniques[c] if c >= 0 else ""

    def date_of(self, i: int) -> date | None:
        return day_date(self.day[i]) if self.has_day[i] else None

    # ------------------------------------------------------------------ time
    def days_mask(self, day: int) -> np.ndarray:
        return self.day == day

    def trip_mask(self, trip: int) -> np.ndarray:
        return (self.trip == trip) & (trip >= 0)

    def trip_days(self, trip: int) -> np.ndarray:
        """The photo days of a trip, in order."""
        return self.photo_days[self.trip_of_day == trip]

    def nearest_day(self, day: int, tolerance: int, within: np.ndarray | None = None) -> int | None:
        """The photo day nearest ``day`` (within ``tolerance`` days; the earlier one on a tie), or None."""
        days = self.photo_days if within is None else np.unique(self.day[self.has_day & within])
        if not len(days):
            return None
        gaps = np.abs(days - day)
        best = int(np.argmin(gaps))
        return int(days[best]) if gaps[best] <= tolerance else None

    def season_of(self, i: int) -> tuple[int, str]:
        """The photo's season block and its name in the photo's hemisphere (north when it has no GPS)."""
        block = int(self.season_block[i])
        return block, self.season_name(block, self.south(i))

    def south(self, i: int) -> bool:
        return bool(np.isfinite(self.lat[i]) and self.lat[i] < 0)

    def season_name(self, block: int, south: bool) -> str:
        return SEASONS[(block + (2 if south else 0)) % 4]

    # ------------------------------------------------------------------ space
    def place_mask(self, i: int, km: float) -> np.ndarray:
        """Photos within ``km`` of photo ``i``'s GPS; without GPS, those with the same address; else none."""
        if np.isfinite(self.lat[i]) and np.isfinite(self.lon[i]):
            with np.errstate(invalid="ignore"):
                return haversine_km(float(self.lat[i]), float(self.lon[i]), self.lat, self.lon) <= km
        if self.codes[i] >= 0:
            return self.codes == self.codes[i]
        return np.zeros(len(self.ids), dtype=bool)

    def _by_address(self, hit: np.ndarray) -> np.ndarray:
        """A mask over photos from a mask over :attr:`uniques`."""
        return np.append(hit, False)[self.codes]

    def address_mask(self, words: str) -> np.ndarray:
        """Photos whose address (or place name) holds ``words`` (case-insensitive)."""
        w = words.strip().lower()
        if not w:
            return np.zeros(len(self.ids), dtype=bool)
        return self._by_address(np.fromiter((w in u for u in self.uniques), dtype=bool, count=len(self.uniques)))

    def named_place_mask(self, words: str) -> np.ndarray:
        """Photos at a place ``words`` name: an address part holding every word that names a place (by stem; "the
        gardens" ~ "Botanical Garden", "festival" ~ "Place des Festivals"); none when the words name nothing."""
        want = set(place_stems(words))
        if not want:
            return np.zeros(len(self.ids), dtype=bool)
        hit = np.fromiter((any(want <= set(place_stems(part)) for part in u.split(","))
                           for u in self.uniques), dtype=bool, count=len(self.uniques))
        return self._by_address(hit)

    def visits(self, mask: np.ndarray) -> list[int]:
        """The trips holding a photo of ``mask``, in time order: the visits to a place (or city) ``mask`` keeps."""
        return np.unique(self.trip[mask & (self.trip >= 0)]).tolist()


__all__ = ["NO_DAY", "SEASONS", "Timeline", "add_months", "day_date", "day_number", "place_stems"]
