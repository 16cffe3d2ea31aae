"""Records from inputs: what one image's record holds (ids, EXIF or manifest metadata, place, derived text).

:func:`make_record` builds the record of one source item from its probed file; :func:`record_for_file` gives
the gallery's record for a file (or a transient one: a reference image outside the index). A photo with GPS
and no given address gets a place name found offline (:mod:`imagent.index.places`); a photo with no caption gets
``derived_text`` (:mod:`imagent.index.derived`). :func:`upgraded` brings a stored record up to date (place
name, derived text with the day) without reading its image again: the builder uses it on unchanged inputs
of an index built before these fields, and re-embeds only the caption spaces of what changed.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

from imagent.core.config import IndexOptions, PlaceOptions
from imagent.core.hashing import short_id
from imagent.core.imageio import FileProbe, ImageLoadError, probe_file
from imagent.core.text import display_path
from imagent.core.types import ImageRecord
from imagent.index import places
from imagent.index.derived import derive_text
from imagent.index.gallery import Gallery
from imagent.index.sources import RowFields, SourceItem, abspath, given

# The version of the fields upgraded() fills; stored per source in the index's meta table once a run did it.
# places-2: names from the municipality the places around agree on (issue 47), so stored places are named anew.
UPGRADE_VERSION = "places-2"


def place_for(rec: ImageRecord, options: PlaceOptions) -> str | None:
    """The offline place name of the record's coordinates (None: no GPS, a given address, none near, the
    feature off, or the data not installed)."""
    if not options.names or rec.address or rec.latitude is None or rec.longitude is None:
        return None
    try:
        found = places.reverse(rec.latitude, rec.longitude, options.max_km, options.town_km, options.municipal_km)
    except places.PlacesUnavailable:
        return None
    return found.name if found is not None else None


def _derived(rec: ImageRecord, root: str | None) -> str:
    return derive_text(rec.path, root, rec.taken_time, rec.address, rec.latitude, rec.longitude, rec.tags,
                       rec.place)


def make_record(item: SourceItem, probe: FileProbe, root: str | None = None,
                place_options: PlaceOptions | None = None) -> ImageRecord:
    """The record for one input. With no caption, ``derived_text`` holds what its names, date and place
    say (:mod:`imagent.index.derived`), which the caption spaces embed instead of nothing."""
    row = item.row or RowFields()
    found = ImageRecord(id=short_id(probe.content_hash), path=item.path, content_hash=probe.content_hash,
                        taken_time=probe.taken_time, latitude=probe.latitude, longitude=probe.longitude,
                        width=probe.info.width, height=probe.info.height, device=getattr(probe, "device", None))
    rec = replace(found, **copy.deepcopy(row.given))  # what the row gives wins over what the file says
    if given(rec.extra.get("device")):  # a manifest's "device" column (DISBench's capturedevice) names the device
        rec.device = str(rec.extra["device"]).strip()
    rec.place = place_for(rec, place_options or PlaceOptions())
    if not rec.captions:
        rec.derived_text = _derived(rec, root)
    return rec


def upgraded(rec: ImageRecord, root: str | None, options: PlaceOptions) -> ImageRecord | None:
    """``rec`` with its place name and derived text as an index built now would have them, or None when
    they are the same already (nothing to store or re-embed)."""
    # Named anew by the current rule when the data is here (a stored name from an older rule is replaced);
    # without it, what is stored stays.
    place = place_for(rec, options) if options.names and places.available() else rec.place
    new = replace(rec, place=place, captions=list(rec.captions), tags=list(rec.tags), extra=dict(rec.extra))
    if not new.captions:
        new.derived_text = _derived(new, root)
    if new.place == rec.place and new.derived_text == rec.derived_text:
        return None
    return new


def record_for_file(path: str | Path, gallery: Gallery | None, options: IndexOptions | None = None,
                    place_options: PlaceOptions | None = None) -> ImageRecord:
    """The gallery's record for this file's content if it has one, else a transient record.

    A transient record has the content-hash id, EXIF time and position (and their place name), no caption.
    Raises :class:`ImageLoadError` (a ``ValueError``) with the reason when the file is not a usable image."""
    options = options or IndexOptions()
    p = abspath(path)
    try:
        probe = probe_file(p, options.max_pixels, options.max_file_bytes)
    except ImageLoadError as exc:
        raise ImageLoadError(f"cannot use {path} as an image: {exc}") from None
    if gallery is not None:
        found = gallery.record_by_hash(probe.content_hash)
        if found is not None:
            return found
    return make_record(SourceItem(key=f"file:{p}", path=p, display=display_path(p)), probe, None, place_options)
