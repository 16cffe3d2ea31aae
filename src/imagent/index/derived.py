"""Text known about an image without any model: folder and file-name words, the date, the place.

An image with no caption and no model that sees pixels would otherwise be a zero vector in every caption
space (every search scores it 0). Its names often say what it shows (``animals__birds__penguin.jpg``,
``Holiday Spain 2013/beach_sunset.jpg``), and EXIF says when and where it was taken. :func:`derive_text`
turns that into a short phrase the caption spaces embed instead (``record.derived_text``). It is never a
caption: ``caption_source`` stays ``""`` and methods that need real captions do not count it.

Name words: the path below the source folder (the source folder's own name is left out: it names the
collection, not the image), split on ``_ - . __``, spaces and camelCase; pure digits are dropped unless they
look like a year, and so are camera prefixes (``IMG``, ``DSC``, ...) and hash-like tokens. A file name that is
not UTF-8 is read as Windows-1252 (the usual case of Latin-1 names), so ``caf\\xe9.jpg`` gives "café".
"""

from __future__ import annotations

import os
import re
from datetime import datetime

# Prefixes cameras and phones put in file and folder names: they say nothing about the content.
_CAMERA_WORDS = frozenset({
    "img", "image", "dsc", "dscn", "dscf", "dcim", "pxl", "mvimg", "vid", "wp", "pict", "pic", "photo", "sam",
    "gopr", "dji", "screenshot", "scan", "jpg", "jpeg", "png", "heic", "edited", "copy", "final", "burst",
    "cover", "portrait", "raw",
})
_SPLIT = re.compile(r"[\s_\-.,;+=()\[\]{}#~]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
_HEXLIKE = re.compile(r"^(?=.*\d)[0-9a-f]{8,}$", re.IGNORECASE)
_YEAR = re.compile(r"^(18[3-9]\d|19\d\d|20\d\d|21\d\d)$")


def _readable(name: str) -> str:
    """A path component as text: surrogate-escaped bytes (a non-UTF-8 name) re-read as Windows-1252."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        raw = os.fsencode(name)
        return raw.decode("cp1252", "replace").replace("\ufffd", " ")


def name_words(component: str) -> list[str]:
    """The meaningful words of one folder or file name (no extension), lower-cased."""
    out: list[str] = []
    for chunk in _SPLIT.split(_readable(component)):
        for word in _CAMEL.split(chunk):
            w = word.strip("'\"`!?&@$%^*|\\/<>:").lower()
            if not w or (not any(c.isalpha() for c in w) and not _YEAR.match(w)):
                continue  # empty, pure digits (frame counters), punctuation
            if w in _CAMERA_WORDS or _HEXLIKE.match(w) or (len(w) == 1 and not w.isdigit()):
                continue
            out.append(w)
    return out


def path_words(path: str, root: str | None) -> list[str]:
    """Words of the folders below ``root`` and of the file's name, in order, each word once."""
    rel = os.path.relpath(path, root) if root else os.path.basename(path)
    if rel.startswith(".."):
        rel = os.path.basename(path)
    parts = rel.split(os.sep)
    parts[-1] = os.path.splitext(parts[-1])[0]
    words: list[str] = []
    for part in parts:
        words.extend(name_words(part))
    return list(dict.fromkeys(words))


def date_phrase(taken: datetime | None) -> str:
    """``14 June 2013``: the day, month and year people search for (the hour rarely is)."""
    return f"{taken.day} {taken:%B} {taken.year}" if taken is not None else ""


def place_phrase(address: str | None, latitude: float | None, longitude: float | None,
                 place: str | None = None) -> str:
    """``at Vienna, Austria``: the given address, else the place found for the coordinates, else the
    coordinates themselves."""
    if address or place:
        return f"at {(address or place or '').strip()}"
    if latitude is not None and longitude is not None:
        ns, ew = ("N" if latitude >= 0 else "S"), ("E" if longitude >= 0 else "W")
        return f"at {abs(latitude):.3f} {ns}, {abs(longitude):.3f} {ew}"
    return ""


def derive_text(
    path: str,
    root: str | None,
    taken: datetime | None = None,
    address: str | None = None,
    latitude: float | None = None,
    longitude: float | None = None,
    tags: list[str] | None = None,
    place: str | None = None,
) -> str:
    """``"animals birds penguin; 14 June 2013; at Paris"``; ``""`` when nothing is known."""
    words = path_words(path, root) + [t.strip().lower() for t in tags or [] if t.strip()]
    parts = [" ".join(dict.fromkeys(words)), date_phrase(taken), place_phrase(address, latitude, longitude, place)]
    return "; ".join(p for p in parts if p)
