"""Place names offline (issue 23 item 1; issue 47 item 3): GeoNames via reverse-geocode for known coordinates
(the municipality the places around agree on, not the nearest town across water), EXIF GPS written by the test,
an index built before place names (or with names from an older rule) upgraded in place (no image encoded again),
the manifest's address winning, and the place in the derived text, the result rows and the album tools."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

import numpy as np
import pytest

from imagent.core.config import PlaceOptions
from imagent.core.types import ImageRecord
from imagent.index import places
from imagent.index.builder import build_index
from imagent.index.gallery import SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from imagent.index.parts import IndexParts
from imagent.tools.album import Album

VIENNA = (48.2085, 16.3721)  # Stephansplatz
SAN_DIEGO = (32.7353, -117.1490)  # Balboa Park


@pytest.mark.parametrize(("coords", "city", "country"), [
    (SAN_DIEGO, "San Diego", "United States"),
    (VIENNA, "Vienna", "Austria"),
    ((45.5017, -73.5673), "Montréal", "Canada"),  # downtown: the city, not the district GeoNames lists nearer
    ((51.1528, 14.9872), "Görlitz", "Germany"),  # a border town on the Neisse ...
    ((51.1500, 15.0083), "Zgorzelec", "Poland"),  # ... and its twin across the river, 1.5 km away
])
def test_known_coordinates(coords, city, country):
    p = places.reverse(*coords)
    assert p is not None and (p.city, p.country) == (city, country) and p.km < 5
    assert p.name.startswith(city) and p.name.endswith(country)


@pytest.mark.parametrize(("coords", "name"), [
    # Belém's riverside: Caparica (Almada, across the Tagus) is a bigger place within 3 km more than the nearest,
    # but the places around are Lisbon's municipality, and it is named by its seat.
    ((38.6979, -9.2065), "Lisbon, Portugal"),  # Jerónimos monastery
    ((38.6916, -9.2160), "Lisbon, Portugal"),  # Belém tower (was "Caparica, Setúbal, Portugal")
    ((38.7075, -9.1365), "Lisbon, Portugal"),  # Baixa
    ((38.6618, -9.2003), "Almada, Setúbal, Portugal"),  # Caparica itself: Almada's municipality, south bank
    ((38.5244, -8.8882), "Setúbal, Portugal"),
    ((38.7538, -9.2308), "Amadora, Lisbon, Portugal"),  # a municipality beside Lisbon keeps its own name
    ((34.9671, 135.7727), "Kyoto, Japan"),  # Fushimi Inari: a ward of Kyōto Shi
    ((35.0394, 135.7292), "Kyoto, Japan"),  # Kinkaku-ji
    ((41.4036, 2.1744), "Barcelona, Catalonia, Spain"),  # Sagrada Família: the city, not its district
    ((41.3597, 2.0997), "L'Hospitalet de Llobregat, Catalonia, Spain"),  # a town of Barcelona's province
    ((40.7115, -74.0005), "New York City, New York, United States"),  # Brooklyn Bridge, Manhattan end
    ((48.8584, 2.2945), "Paris, Île-de-France, France"),  # the Eiffel tower, among the suburbs' towns
    ((47.5596, 7.5886), "Basel, Basel-City, Switzerland"),  # three countries, a ring of suburbs around
    ((47.5862, 7.5620), "Saint-Louis, Grand Est, France"),  # ... its French neighbour
    ((42.0466, -8.6448), "Tui, Galicia, Spain"),  # the Minho border: Tui ...
    ((42.0290, -8.6440), "Valença, Viana do Castelo, Portugal"),  # ... and Valença across the river
    ((48.5722, 7.8157), "Kehl, Baden-Wurttemberg, Germany"),  # Kehl, across the Rhine from Strasbourg
])
def test_the_place_people_would_name(coords, name):
    p = places.reverse(*coords)
    assert p is not None and p.name == name


def test_a_point_at_sea_has_no_place_and_names_resolve():
    assert places.reverse(0.0, -140.0) is None  # the Pacific: the nearest town is hundreds of km away
    assert places.reverse(40.0, -40.0) is None  # mid-Atlantic
    assert places.reverse(0.0, -140.0, max_km=2000) is not None  # the limit is a setting
    assert places.reverse(float("nan"), 16.37) is None and places.reverse(91.0, 0.0) is None  # not on Earth
    vienna = places.find("vienna")
    assert vienna is not None and vienna.country == "Austria"
    assert places.find("Paris, Texas").region == "Texas" and places.find("Paris").country == "France"
    assert places.find("Montreal") == places.find("Montréal")  # accents do not matter
    assert places.find("Nowhereville Xyz") is None


def _folder(tmp_path, images):
    d = tmp_path / "photos"
    images.jpeg(d / "vienna_1.jpg", 1, images.exif(datetime(2019, 7, 14, 10, 0), VIENNA))
    images.jpeg(d / "zoo.jpg", 2, images.exif(datetime(2019, 7, 20, 9, 30), SAN_DIEGO))
    images.jpeg(d / "boat.jpg", 3, images.exif(datetime(2019, 8, 1, 12, 0), (0.0, -140.0)))
    return d


def test_exif_gps_gets_a_place_in_records_text_rows_and_album_tools(tmp_path, images, tiny):
    from imagent.api import record_place

    build_index(_folder(tmp_path, images), tmp_path / "idx", IndexParts.of(None, tiny))
    g = Gallery(tmp_path / "idx")
    by = {r.path.rsplit("/", 1)[-1]: r for r in g.records()}
    v = by["vienna_1.jpg"]
    assert v.place == "Vienna, Austria" and v.address is None
    assert v.latitude == pytest.approx(VIENNA[0], abs=1e-4)  # the coordinates are kept beside the name
    assert v.derived_text == "vienna; 14 July 2019; at Vienna, Austria"  # the day is kept
    assert by["zoo.jpg"].place == "San Diego, California, United States"
    assert by["boat.jpg"].place is None and "at 0.000 N, 140.000 W" in by["boat.jpg"].derived_text
    assert record_place(v) == "Vienna, Austria" and record_place(by["boat.jpg"]) == "0.00000, -140.00000"
    album = Album(g)
    assert album.filter("place ~ 'san diego'") == [by["zoo.jpg"].id]
    assert album.metadata([v.id], ["address"])[0]["address"] == "Vienna, Austria"  # GetMetadata's view


def test_an_old_index_is_upgraded_in_place_without_encoding_images_again(tmp_path, images, tiny):
    folder = _folder(tmp_path, images)
    dual = _PixelDual(tiny)
    idx = tmp_path / "idx"
    build_index(folder, idx, IndexParts.of(dual, tiny))
    g = Gallery(idx)
    image_before = g.vectors(SPACE_IMAGE).copy()
    # Make it an index from before place names: no place, the month-only date (embedded), no upgrade mark.
    keys = {i: (k, fp) for k, (i, fp) in g.fingerprints().items()}
    with g.transaction() as c:
        for r in g.records():
            old = r.to_dict()
            old.pop("place")
            old["derived_text"] = old["derived_text"].replace("14 July", "July").split("; at ")[0]
            g.upsert(c, ImageRecord.from_dict(old), *keys[r.id],
                     {SPACE_CAPTION_TEXT: tiny.encode_texts([old["derived_text"]])[0]})
    with sqlite3.connect(idx / "records.sqlite") as con:
        con.execute("DELETE FROM meta WHERE key LIKE 'upgrade:%'")
    g = Gallery(idx)
    assert all(r.place is None for r in g.records())
    dual.images = 0
    r = build_index(folder, idx, IndexParts.of(dual, tiny))
    assert (r.unchanged, r.added, r.updated, r.upgraded) == (3, 0, 0, 3)
    assert dual.images == 0  # no image was encoded again
    g = Gallery(idx)
    assert {x.place for x in g.records()} == {"Vienna, Austria", "San Diego, California, United States", None}
    assert any("14 July 2019" in x.derived_text for x in g.records())
    np.testing.assert_array_equal(g.vectors(SPACE_IMAGE), image_before)
    for x in g.records():  # the new text is embedded in the caption spaces
        np.testing.assert_allclose(g.vector(SPACE_CAPTION_TEXT, x.id), tiny.encode_texts([x.derived_text])[0])
    r = build_index(folder, idx, IndexParts.of(dual, tiny))  # done once: the next run does not look again
    assert (r.unchanged, r.upgraded) == (3, 0)


def test_names_from_an_older_rule_are_renamed_on_the_next_index(tmp_path, images, tiny):
    """An index whose places an older rule named (Belém's tower as "Caparica, Setúbal, Portugal") gets them named
    anew by the next `imagent index`, unchanged photos included, with no image read again."""
    folder = tmp_path / "photos"
    images.jpeg(folder / "torre.jpg", 1, images.exif(datetime(2023, 5, 2, 11, 0), (38.6916, -9.2160)))
    images.jpeg(folder / "vienna.jpg", 2, images.exif(datetime(2023, 5, 9, 11, 0), VIENNA))
    idx = tmp_path / "idx"
    build_index(folder, idx, IndexParts.of(None, tiny))
    g = Gallery(idx)
    keys = {i: (k, fp) for k, (i, fp) in g.fingerprints().items()}
    with g.transaction() as c:  # as the rule of issue 23 stored it
        for r in g.records():
            if r.path.endswith("torre.jpg"):
                r.place = "Caparica, Setúbal, Portugal"
                r.derived_text = r.derived_text.replace("Lisbon, Portugal", r.place)
                g.upsert(c, r, *keys[r.id], {SPACE_CAPTION_TEXT: tiny.encode_texts([r.derived_text])[0]})
    with sqlite3.connect(idx / "records.sqlite") as con:
        con.execute("UPDATE meta SET value = 'places-1' WHERE key LIKE 'upgrade:%'")
    r = build_index(folder, idx, IndexParts.of(None, tiny))
    assert (r.unchanged, r.upgraded) == (2, 1)
    by = {x.path.rsplit("/", 1)[-1]: x for x in Gallery(idx).records()}
    assert by["torre.jpg"].place == "Lisbon, Portugal" and by["vienna.jpg"].place == "Vienna, Austria"
    assert by["torre.jpg"].derived_text.endswith("at Lisbon, Portugal")
    assert Album(Gallery(idx)).filter("place ~ 'Lisbon'") == [by["torre.jpg"].id]


def test_the_manifest_address_wins_and_place_names_can_be_off(tmp_path, images, tiny):
    d = tmp_path / "m"
    images.jpeg(d / "a.jpg", 1)
    images.jpeg(d / "b.jpg", 2)
    rows = [{"file": "a.jpg", "latitude": SAN_DIEGO[0], "longitude": SAN_DIEGO[1], "address": "Hofburg, Wien"},
            {"file": "b.jpg", "latitude": VIENNA[0], "longitude": VIENNA[1]}]
    (d / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    build_index(d / "m.jsonl", tmp_path / "idx", IndexParts.of(None, tiny))
    by = {r.path.rsplit("/", 1)[-1]: r for r in Gallery(tmp_path / "idx").records()}
    assert by["a.jpg"].place is None and by["a.jpg"].place_name == "Hofburg, Wien"
    assert by["a.jpg"].derived_text.endswith("at Hofburg, Wien")
    assert by["b.jpg"].place_name == "Vienna, Austria"
    build_index(d / "m.jsonl", tmp_path / "off", IndexParts.of(None, tiny, places=PlaceOptions(names=False)))
    assert all(r.place is None for r in Gallery(tmp_path / "off").records())


class _PixelDual:
    """A dual encoder that 'sees pixels' (image vectors from the file bytes) and counts image encodings."""

    sees_pixels = True

    def __init__(self, tiny) -> None:
        self.tiny, self.model_id, self.dim, self.images = tiny, "pixel-8", tiny.dim, 0

    def encode_texts(self, texts):
        return self.tiny.encode_texts(texts)

    def encode_images(self, records):
        self.images += len(records)
        return self.tiny.encode_texts([open(r.path, "rb").read()[-64:].hex() for r in records])
