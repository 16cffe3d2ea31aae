"""An album's photos on the calendar and the map: days, trips, visits, months, seasons and years, as numpy masks.

:class:`Timeline` is built once per album search from the album's metadata columns (:attr:`Album.meta`, shared by
every album over one gallery), so every question below is one vectorised pass over the album's photos:

- a photo's *day* is the calendar day of its wall-clock time; a *trip* is a maximal run of photo days at most
  ``gap_days`` apart (``trip_gap_days``: photos on consecutive days belong to one trip, a day without photos
  between two photo days ends it when ``gap_days`` is 1);
- *same place*: within ``place_km`` of the photo's GPS (else the same address); *same city*: within ``city_km``;
- a *visit* to a place (or city) is one trip's photos there, visits in time order;
- calendar *months* and *years*; *seasons* are consecutive three-month blocks (December-February, March-May, ...)
  named by the hemisphere of the photo's latitude (December is winter in the north, summer in the south).

Photos without a time are on no day and in no trip; photos without GPS and address are at no place. imagent's own
vocabulary (the ``album`` method's plan executes over it), not a paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np

from imagent.index.scoring import haversine_km

SEASONS = ("winter", "spring", "summer", "autumn")
_EPOCH = date(1970, 1, 1)
NO_DAY = -(2**62)


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


@dataclass
class Timeline:
    """The album's photos (``ids``, in album order) with their day, trip, month, season block, year, GPS and
    address, each a numpy array (or list) aligned with ``ids``."""

    ids: list[str]
    day: np.ndarray  # int64 days since 1970-01-01, NO_DAY when the photo has no time
    lat: np.ndarray  # float64, NaN without GPS
    lon: np.ndarray
    address: list[str]  # lower-cased given address or place name, "" when unknown
    gap_days: float = 1.0

    def __post_init__(self) -> None:
        self.pos = {i: n for n, i in enumerate(self.ids)}
        self.has_day = self.day != NO_DAY
        self.trip = np.full(len(self.ids), -1, dtype=np.int64)
        timed = np.flatnonzero(self.has_day)
        if len(timed):
            days = np.unique(self.day[timed])
            starts = np.concatenate(([True], np.diff(days) > self.gap_days))
            trip_of_day = np.cumsum(starts) - 1
            self.trip[timed] = trip_of_day[np.searchsorted(days, self.day[timed])]
        self.trips = int(self.trip.max()) + 1 if len(timed) else 0
        dates = [day_date(d) if d != NO_DAY else None for d in self.day.tolist()]
        self.month = np.array([d.year * 12 + d.month - 1 if d else -1 for d in dates], dtype=np.int64)
        self.year = np.array([d.year if d else -1 for d in dates], dtype=np.int64)
        self.season_block = np.array([(d.year * 12 + d.month) // 3 if d else -1 for d in dates], dtype=np.int64)

    @classmethod
    def of(cls, album: object, gap_days: float = 1.0) -> Timeline:
        """The timeline of an :class:`~imagent.tools.album.Album` (scoped or whole), from its metadata columns."""
        meta = album.meta  # type: ignore[attr-defined]
        rows = album.rows  # type: ignore[attr-defined]
        ids = list(album.ids)  # type: ignore[attr-defined]
        rows = np.arange(meta.size) if rows is None else np.asarray(rows)
        seconds = meta.time[rows]
        day = np.where(np.isfinite(seconds), np.floor(np.nan_to_num(seconds) / 86400.0), NO_DAY).astype(np.int64)
        codes = meta.address.codes[rows]
        uniques = meta.address.uniques
        address = [uniques[c] if c >= 0 else "" for c in codes.tolist()]
        return cls(ids, day, meta.lat[rows].astype(np.float64), meta.lon[rows].astype(np.float64), address,
                   gap_days)

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, photo_id: str) -> int:
        return self.pos[photo_id]

    def date_of(self, i: int) -> date | None:
        return day_date(self.day[i]) if self.has_day[i] else None

    # ------------------------------------------------------------------ time
    def days_mask(self, day: int) -> np.ndarray:
        return self.day == day

    def trip_mask(self, trip: int) -> np.ndarray:
        return (self.trip == trip) & (trip >= 0)

    def nearest_day(self, day: int, tolerance: int, within: np.ndarray | None = None) -> int | None:
        """The photo day nearest ``day`` (within ``tolerance`` days; the earlier one on a tie), or None."""
        mask = self.has_day if within is None else self.has_day & within
        if not mask.any():
            return None
        days = np.unique(self.day[mask])
        gaps = np.abs(days - day)
        best = int(np.argmin(gaps))
        return int(days[best]) if gaps[best] <= tolerance else None

    def season_of(self, i: int) -> tuple[int, str]:
        """The photo's season block and its name in the photo's hemisphere (north when it has no GPS)."""
        block = int(self.season_block[i])
        south = bool(np.isfinite(self.lat[i]) and self.lat[i] < 0)
        return block, SEASONS[(block + (2 if south else 0)) % 4]

    def season_name(self, block: int, south: bool) -> str:
        return SEASONS[(block + (2 if south else 0)) % 4]

    # ------------------------------------------------------------------ space
    def place_mask(self, i: int, km: float) -> np.ndarray:
        """Photos within ``km`` of photo ``i``'s GPS; without GPS, those with the same address; else none."""
        if np.isfinite(self.lat[i]) and np.isfinite(self.lon[i]):
            with np.errstate(invalid="ignore"):
                return haversine_km(float(self.lat[i]), float(self.lon[i]), self.lat, self.lon) <= km
        if self.address[i]:
            return np.array([a == self.address[i] for a in self.address], dtype=bool)
        return np.zeros(len(self.ids), dtype=bool)

    def address_mask(self, words: str) -> np.ndarray:
        """Photos whose address (or place name) holds ``words`` (case-insensitive)."""
        w = words.strip().lower()
        if not w:
            return np.zeros(len(self.ids), dtype=bool)
        seen: dict[str, bool] = {}
        return np.array([seen.setdefault(a, bool(a) and w in a) for a in self.address], dtype=bool)

    def visits(self, mask: np.ndarray) -> list[int]:
        """The trips holding a photo of ``mask``, in time order: the visits to a place (or city) ``mask`` keeps."""
        return sorted({int(t) for t in self.trip[mask & (self.trip >= 0)].tolist()})


__all__ = ["NO_DAY", "SEASONS", "Timeline", "add_months", "day_date", "day_number"]
