"""A small synthetic album for the ``album`` method's tests: known days, trips, places and captions (real MiniLM)."""

from __future__ import annotations

from datetime import datetime

import pytest

HOBART_A = (-42.8800, 147.3300, "Harbour Road, Hobart, Tasmania, Australia")  # southern hemisphere
HOBART_B = (-42.8950, 147.3200, "Salamanca Place, Hobart, Tasmania, Australia")  # ~2 km from A: same city
BERGEN = (60.3970, 5.3240, "Bryggen, Bergen, Norway")
PORTO = (41.1410, -8.6130, "Ribeira, Porto, Portugal")

# (id, taken, place, caption). Trips (photo days at most one day apart): T1 03-06..03-07 Hobart (lighthouse a1,
# a sailing boat on its second day), T2 03-09 Hobart, T3 03-20 Bergen (a decoy lighthouse c1, with a dog too), T4
# 04-02 Bergen, T5 06-15 Hobart, T6 09-10 Porto, T7 2022-01-05 Bergen, T8 2022-02-01 Hobart (a windmill alone on its
# day), T9 2022-03-10 Porto (a decoy sailing boat beside a dog); x1 has no time and no place.
SYNTHETIC_ALBUM = [
    ("a1", "2021-03-06 10:00", HOBART_A, "A lighthouse."),
    ("a2", "2021-03-06 10:10", HOBART_A, "A brown dog."),
    ("a3", "2021-03-06 10:20", HOBART_A, "A black dog."),
    ("a4", "2021-03-06 10:30", HOBART_A, "A red car."),
    ("a5", "2021-03-07 09:00", HOBART_B, "A sailing boat."),
    ("a6", "2021-03-07 09:15", HOBART_B, "A spotted dog."),
    ("b1", "2021-03-09 11:00", HOBART_A, "A bicycle."),
    ("b2", "2021-03-09 11:10", HOBART_A, "A pineapple."),
    ("c1", "2021-03-20 12:00", BERGEN, "A lighthouse."),
    ("c2", "2021-03-20 12:10", BERGEN, "A tractor."),
    ("c3", "2021-03-20 12:20", BERGEN, "A kite."),
    ("c4", "2021-03-20 12:30", BERGEN, "A grey dog."),
    ("d1", "2021-04-02 15:00", BERGEN, "A white dog."),
    ("d2", "2021-04-02 15:10", BERGEN, "A teapot."),
    ("e1", "2021-06-15 10:00", HOBART_A, "A poodle."),
    ("e2", "2021-06-15 10:10", HOBART_A, "A cathedral."),
    ("f1", "2021-09-10 14:00", PORTO, "A husky."),
    ("f2", "2021-09-10 14:10", PORTO, "A banana."),
    ("g1", "2022-01-05 13:00", BERGEN, "A beagle."),
    ("g2", "2022-01-05 13:10", BERGEN, "A snowman."),
    ("h1", "2022-02-01 16:00", HOBART_B, "A windmill."),
    ("i1", "2022-03-10 10:00", PORTO, "A sailing boat."),
    ("i2", "2022-03-10 10:05", PORTO, "A golden retriever."),
    ("x1", None, None, "An umbrella."),
]
# Another user's photos in the same index (a scoped album never sees them).
OTHER_USER = [("z1", "2021-03-06 10:05", HOBART_A, "A brown dog."), ("z2", "2021-03-06 10:06", HOBART_A,
                                                                      "A lighthouse.")]


@pytest.fixture(scope="session")
def synthetic_gallery(tmp_path_factory, stamp_records, caption_dual, minilm):
    """The synthetic album (and another user's two photos) in caption mode, built once. Read-only."""
    from imagent.core.types import ImageRecord
    from imagent.index.embedding import gallery_from_records

    path = stamp_records[0].path  # any real image file: the captions stand in for the pixels
    records = []
    for pid, taken, place, caption in SYNTHETIC_ALBUM + OTHER_USER:
        lat, lon, address = place if place else (None, None, None)
        records.append(ImageRecord(id=pid, path=path, captions=[caption], caption_source="given",
                                   taken_time=datetime.fromisoformat(taken) if taken else None, latitude=lat,
                                   longitude=lon, address=address, device="Test Camera"))
    return gallery_from_records(str(tmp_path_factory.mktemp("synthetic-album")), records, caption_dual, minilm)


@pytest.fixture(scope="session")
def synthetic_album(synthetic_gallery, caption_dual, minilm):
    """:class:`~imagent.tools.album.Album` of the synthetic album's own photos (the other user's left out)."""
    from imagent.tools.album import Album

    return Album(synthetic_gallery, caption_dual, minilm).scoped([row[0] for row in SYNTHETIC_ALBUM])


@pytest.fixture
def album_method(synthetic_gallery, caption_dual, minilm):
    """``make(model, **config)``: the ``album`` method over the synthetic album with ``model`` in every role."""
    from imagent.methods.album.method import AlbumSearch
    from imagent.methods.base import MethodContext
    from imagent.models.roles import Roles

    def make(model, **config):
        ctx = MethodContext(gallery=synthetic_gallery, dual=caption_dual, text=minilm,
                            roles=Roles.from_models({"default": model}))
        return AlbumSearch(ctx, config)

    return make
