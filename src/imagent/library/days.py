"""The library's order (newest first, photos without a date last) with its months and days, its pages, and how the
library and a photo's folder are named (by their folders' names, never the server's paths)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imagent.core.text import display_path
from imagent.core.types import ImageRecord
from imagent.index.gallery import Gallery
from imagent.tools.album import Album

PER_PAGE = 60
MAX_PER_PAGE = 200


class PageError(ValueError):
    """A page or page size out of range, or not a number."""


def page_number(raw: str | None, pages: int) -> int:
    """``raw`` as a page of ``0 .. pages - 1`` (page 0 of an empty listing too), else :class:`PageError`."""
    text = (raw or "0").strip()
    if not text.isdigit() or not text.isascii():
        raise PageError(f"page must be a whole number from 0 to {max(pages - 1, 0)}, got {text[:40]!r}")
    page = int(text[:40])
    if page >= max(pages, 1):
        raise PageError(f"page {text[:40]} is past the last page ({max(pages - 1, 0)})")
    return page


def per_page_number(raw: str | None) -> int:
    text = (raw or str(PER_PAGE)).strip()
    if not text.isdigit() or not text.isascii() or not 1 <= int(text[:10]) <= MAX_PER_PAGE:
        raise PageError(f"per_page must be a whole number from 1 to {MAX_PER_PAGE}, got {text[:40]!r}")
    return int(text)


@dataclass
class Month:
    month: str  # "2021-07"
    count: int
    first: int  # the position of its first photo in the library's order


class LibraryOrder:
    """The gallery's rows newest first (photos without a date last, in the order indexed), with the month of each
    and the number of photos per day; built once per state of the index."""

    def __init__(self, gallery: Gallery) -> None:
        meta = Album(gallery).meta
        dated = meta.chrono[~np.isnan(meta.time[meta.chrono])][::-1]
        undated = np.flatnonzero(np.isnan(meta.time))
        self.rows = np.concatenate([dated, undated]).astype(np.int64)
        self.position = np.empty(len(self.rows), dtype=np.int64)
        self.position[self.rows] = np.arange(len(self.rows))
        seconds = meta.time[dated].astype("datetime64[s]")
        self.days = {str(d): int(n) for d, n in zip(*np.unique(seconds.astype("datetime64[D]"),
                                                              return_counts=True), strict=True)}
        months = seconds.astype("datetime64[M]").astype(str)
        self.months: list[Month] = []
        for i, month in enumerate(months):  # newest first, each with the position of its first photo
            if not self.months or self.months[-1].month != month:
                self.months.append(Month(str(month), 0, i))
            self.months[-1].count += 1
        self.undated = len(undated)


def library_name(gallery: Gallery) -> str:
    """What the library is called: its folders' (or manifests') names, never their paths on the server."""
    names = []
    for source in gallery.sources():
        p = Path(source)
        name = display_path(p.stem if p.suffix.lower() in (".json", ".jsonl", ".csv") else p.name)
        if name and name not in names:
            names.append(name)
    return ", ".join(names) or display_path(gallery.root.name) or "imagent"


def folder_of(record: ImageRecord, sources: list[str]) -> str:
    """The photo's folder as the library knows it: ``<library folder>/<subfolder>``, never the server's full path
    (shown through :func:`imagent.core.text.display_path`)."""
    if not record.path:
        return ""
    path = Path(record.path)
    for source in sources:
        root = Path(source)
        base = root.parent if root.suffix.lower() in (".json", ".jsonl", ".csv") else root
        with contextlib.suppress(ValueError):
            rel = path.parent.relative_to(base)
            return display_path(Path(base.name) / rel if str(rel) != "." else base.name)
    return display_path(path.parent.name)


__all__ = ["MAX_PER_PAGE", "PER_PAGE", "LibraryOrder", "Month", "PageError", "folder_of", "library_name",
           "page_number", "per_page_number"]
