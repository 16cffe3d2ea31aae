"""What the library service answers with: typed values the web routes send as JSON (``to_dict``) and the CLI prints.

Every text field that comes from a file name or path is already shown through
:func:`imagent.core.text.display_path` (a name that is not UTF-8 reads ``caf\\xe9.jpg``), so any of these values can
be written as JSON or to a terminal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Label:
    """What the pixel model saw in a photo, with its probability."""

    name: str
    p: float


@dataclass
class PersonRef:
    """A face group in a photo (``name`` None until given)."""

    id: int
    name: str | None


@dataclass
class TextLine:
    """A line of text read in a photo (the index's OCR pass): its text, its box (four ``[x, y]`` corners as fractions
    of the upright photo) and the recogniser's confidence."""

    text: str
    box: list[list[float]]
    confidence: float


@dataclass
class PhotoCard:
    """A photo as a grid or a result list shows it. ``path`` and ``file`` are for showing (not for opening)."""

    id: str
    caption: str
    path: str
    file: str
    taken: str | None
    place: str | None
    labels: list[Label] = field(default_factory=list)
    people: list[PersonRef] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PhotoDetail(PhotoCard):
    """One photo with everything the index knows of it, and its neighbours in the library's order."""

    folder: str = ""
    device: str | None = None
    latitude: float | None = None
    longitude: float | None = None
    width: int | None = None
    height: int | None = None
    captions: list[str] = field(default_factory=list)
    caption_source: str | None = None
    text_lines: list[TextLine] = field(default_factory=list)  # the text read in it (the photo view draws the boxes)
    position: int = 0
    total: int = 0
    previous: str | None = None
    next: str | None = None


@dataclass
class LibraryInfo:
    name: str
    size: int
    undated: int


@dataclass
class MonthPage:
    """A month of the library, its photos and the page its first photo is on."""

    month: str
    count: int
    page: int


@dataclass
class LibraryPage:
    """One page of the library (newest first) or of a filter's matches (oldest first): ``days`` the number of photos
    of each day shown (whole-day counts), ``months`` every month with its page (the library only), ``hint`` why a
    filter matched nothing when a near miss says it (:func:`imagent.tools.photo_search.empty_hint`)."""

    library: LibraryInfo
    total: int
    page: int
    pages: int
    per_page: int
    photos: list[PhotoCard]
    days: dict[str, int]
    where: str | None
    order: str
    months: list[MonthPage] | None = None
    hint: str | None = None  # a filter that matched nothing: the near miss that explains it (place ~ 'Kyoto')

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.months is None:
            out.pop("months")
        return out


@dataclass
class PhotoFile:
    """A photo's bytes as the index recorded them, and their media type."""

    data: bytes
    media_type: str


__all__ = ["Label", "LibraryInfo", "LibraryPage", "MonthPage", "PersonRef", "PhotoCard", "PhotoDetail", "PhotoFile"]
