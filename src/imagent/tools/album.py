"""A personal photo album as agent tools see it: ranked search, metadata, filters, photos to view.

:class:`Album` wraps a :class:`~imagent.index.gallery.Gallery` (one user's photos) and its encoders. It
is the data side of PhotoCraft's and ImageSeeker's tools (Table 4 of the PhotoCraft paper); the agent
side (:mod:`imagent.methods.album.tools`) turns it into typed tools and holds the named subsets.

- :meth:`Album.search`: cosine top-k in the album's vector spaces, optionally within a subset and
  with a *visual cue* (a photo whose vector joins the query); with ``text_clues`` (the ``album`` method: imagent's
  own, not the papers' ImageSearch) the text read in the photos is a clue too, in :meth:`Album.search` and
  :meth:`Album.scores`: a photo whose text holds the query's
  words is lifted (:func:`imagent.index.text.lift`, ``ocr.search_boost_z``), so "the sign for Sintra" finds the
  photo of the sign that says SINTRA;
- :meth:`Album.metadata`: time, place (lat, lon, address), device and people of given photos, and the pixel
  model's labels (``labels``: ``[{"name", "p"}]``) when the photos have them and the run offers them as text, and
  the text read in them (``text``: its lines) when they have some;
- :meth:`Album.filter`: the photos matching a filter expression (:mod:`imagent.tools.filter_lang`, ``text ~
  'sintra'`` among its fields), evaluated over column arrays built once per album;
- :meth:`Album.view`: image parts for photos, each tied to its id (a blind model receives the
  record's surrogate: captions, date, place).

Every call is vectorised (numpy over the album's rows), so a call on a 100,000-photo album stays
within tens of milliseconds (``benchmarks/album_tools.py`` measures it).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.config import OcrOptions
from imagent.core.types import ImageRecord, Ranking
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery, GalleryError
from imagent.index.levels import robust_spread
from imagent.index.people import people_index
from imagent.index.scoring import top_k as top_k_rows
from imagent.index.text import clue_words, lift, line_texts
from imagent.models.base import DualEncoder, ImagePart, TextEmbedder
from imagent.tools.base import ToolError
from imagent.tools.filter_lang import AlbumMeta, label_indices

# Spaces tried, in order, when none is configured: the image space first (the Standard track has only
# image embeddings), then caption spaces.
DEFAULT_SPACE_ORDER = (SPACE_IMAGE, SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT)
METADATA_FIELDS = ("time", "place", "lat", "lon", "address", "device")
# Also accepted, and given by default when the index has face data (imagent.index.people). Not in METADATA_FIELDS,
# which the agents' GetMetadata schema lists, so their prompts stay as they are until they show people.
PEOPLE_FIELD = "people"
_QUERY_CACHE_SIZE = 4096  # text vectors kept per encoder (a 384-d vector: 1.5 KiB)
_VECTORS: weakref.WeakKeyDictionary[Any, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()
_VECTORS_LOCK = threading.Lock()
# gallery -> (the ids list the columns were built from, the columns); a reload replaces ``gallery.ids``.
_META_CACHE: weakref.WeakKeyDictionary[Gallery, tuple[list[str], AlbumMeta]] = weakref.WeakKeyDictionary()
_META_LOCK = threading.Lock()


def format_time(record: ImageRecord) -> str | None:
    """The photo's wall-clock time as ``YYYY-MM-DD HH:MM:SS`` (what filters compare against)."""
    t = record.taken_time
    return t.strftime("%Y-%m-%d %H:%M:%S") if t is not None else None


class Album:
    """One user's photos and the encoders that search them.

    ``spaces``: ``[(space, weight), ...]`` scored by :meth:`search` (weights renormalised over the
    spaces the index has); default: the first of image, caption_dual, caption_text the index has.
    ``dual`` encodes text queries for the image and caption_dual spaces, ``text`` for caption_text.
    ``text_clues``: :meth:`search` lifts photos whose text holds the query's words (module doc).
    """

    def __init__(
        self,
        gallery: Gallery,
        dual: DualEncoder | None = None,
        text: TextEmbedder | None = None,
        spaces: Sequence[tuple[str, float]] | None = None,
        text_clues: bool = False,
    ) -> None:
        self.gallery = gallery
        self.dual = dual
        self.text = text
        self.text_clues = text_clues
        if spaces is None:
            first = next((s for s in DEFAULT_SPACE_ORDER if gallery.has_space(s)), None)
            spaces = [(first, 1.0)] if first else []
        self.spaces = [(s, float(w)) for s, w in spaces if w > 0 and gallery.has_space(s)]

    def scoped(self, ids: Sequence[str]) -> Album:
        """This album restricted to ``ids`` (DISBench: one user's photos of an index that holds every user's):
        searches, filters and id checks never leave the scope; ids the gallery lacks are ignored."""
        return _ScopedAlbum(self.gallery, self.dual, self.text, self.spaces, ids, self.text_clues)

    # ------------------------------------------------------------------ ids
    @property
    def ids(self) -> list[str]:
        return self.gallery.ids

    def __len__(self) -> int:
        return len(self.gallery)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self.gallery

    @property
    def rows(self) -> np.ndarray | None:
        """The album's gallery rows, or None for the whole gallery (what vectorised calls index with)."""
        return None

    def time_span(self) -> tuple[ImageRecord, ImageRecord] | None:
        """The records of the album's oldest and newest photo (by the filter language's time column), or None
        when no photo has a time. Vectorised: a 100,000-photo album is one pass over a numpy column."""
        rows = self.rows
        times = self.meta.time if rows is None else self.meta.time[rows]
        if not len(times) or not np.isfinite(times).any():
            return None
        first, last = int(np.nanargmin(times)), int(np.nanargmax(times))
        if rows is not None:
            first, last = int(rows[first]), int(rows[last])
        ids = self.gallery.ids
        return self.gallery.record(ids[first]), self.gallery.record(ids[last])

    def split_known(self, ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """``(known, unknown)``, each in the given order without duplicates."""
        known: list[str] = []
        unknown: list[str] = []
        for i in dict.fromkeys(str(x).strip() for x in ids):
            (known if i in self.gallery else unknown).append(i)
        return known, unknown

    def require_known(self, ids: Sequence[str], what: str = "photo") -> list[str]:
        """The ids, all of which must exist; :class:`ToolError` naming the unknown ones otherwise."""
        known, unknown = self.split_known(ids)
        if unknown:
            shown = ", ".join(unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
            raise ToolError(f"unknown {what} id(s): {shown}; use ids exactly as the tools returned them")
        return known

    @cached_property
    def meta(self) -> AlbumMeta:
        """Metadata columns of the whole gallery, built on first use and shared by every Album over the same
        gallery while its records stay as loaded (methods build an Album per query; a 100,000-photo
        gallery's columns take a fraction of a second to build, once)."""
        with _META_LOCK:
            hit = _META_CACHE.get(self.gallery)
            if hit is not None and hit[0] is self.gallery.ids:
                return hit[1]
            ids = self.gallery.ids
            cols = self.gallery.metadata_columns(["taken_time", "latitude", "longitude", "address", "device", "place",
                                                  "labels", "text_lines"])
            min_p = self.label_min_p
            texts = None
            if cols is not None:  # the given address, else the place name found for the GPS
                texts = [line_texts(json.loads(x)) if x else None for x in cols.pop()]
                raw = cols.pop()
                labels = None if min_p is None else [label_indices(json.loads(x), min_p) if x else [] for x in raw]
                cols[3] = [a or p for a, p in zip(cols[3], cols.pop(), strict=True)]
            meta = (AlbumMeta.from_records(self.gallery.records(), min_p) if cols is None
                    else AlbumMeta.from_columns(*cols, labels=labels, texts=texts))
            meta.people = _people_of(self.gallery)  # the filter field person (imagent.index.people)
            _META_CACHE[self.gallery] = (ids, meta)
            return meta

    @property
    def label_min_p(self) -> float | None:
        """The probability a label needs to count (filters, metadata), or None when labels are not offered as text
        (``pixels.labels_as_text = false``)."""
        if not getattr(self.gallery, "labels_as_text", True):
            return None
        return float(getattr(self.gallery, "label_min_p", 0.1))

    # ------------------------------------------------------------------ search
    def _encoder(self, space: str) -> DualEncoder | TextEmbedder:
        enc = self.text if space == SPACE_CAPTION_TEXT else self.dual
        if enc is None:
            raise GalleryError(f"no encoder was given for the {space!r} space")
        info = self.gallery.spaces().get(space)
        if info is not None and info.model_id != enc.model_id:
            raise GalleryError(
                f"the index's {space!r} vectors come from {info.model_id}, but the configured encoder is "
                f"{enc.model_id}; re-index or configure the same model"
            )
        return enc

    def _text_vector(self, space: str, query: str) -> np.ndarray:
        return self._text_vectors(space, [query])[0]

    def _text_vectors(self, space: str, queries: Sequence[str]) -> np.ndarray:
        """The text vectors of ``queries`` in ``space``: those this process has not encoded with that encoder yet
        are encoded in one batch (the cache is the encoder's, shared by every album: a search asked again, or the
        same words in another search, costs no encoding)."""
        enc = self._encoder(space)
        with _VECTORS_LOCK:
            try:
                cache = _VECTORS.setdefault(enc, {})
            except TypeError:  # an encoder that cannot be weakly referenced: no cache beyond this call
                cache = {}
            known = {q: cache[q] for q in queries if q in cache}
        missing = [q for q in dict.fromkeys(queries) if q not in known]
        if missing:
            known.update((q, np.asarray(v, dtype=np.float32)) for q, v in zip(missing, enc.encode_texts(missing),
                                                                             strict=True))
            with _VECTORS_LOCK:
                for q in missing:
                    if len(cache) >= _QUERY_CACHE_SIZE:
                        cache.pop(next(iter(cache)))
                    cache[q] = known[q]
        return np.stack([known[q] for q in queries])

    def search(self, query: str = "", top_k: int = 20, within: Sequence[str] | None = None,
               visual_cue: str | None = None) -> Ranking:
        """Photos best matching ``query`` (and/or looking like ``visual_cue``), best first.

        With both, the query vector in each space is the normalised sum of the text's vector and the
        cue photo's vector there (the paper's encoder embeds text and image jointly; this is the
        closest the index's single-modality vectors allow). The cue photo itself is not returned."""
        query = (query or "").strip()
        if not query and not visual_cue:
            raise ToolError("ImageSearch needs a query (short keywords) or a visual_cue photo id")
        if not self.spaces:
            raise GalleryError(f"the index at {self.gallery.root} has no vector space to search "
                               f"(it has: {', '.join(self.gallery.spaces()) or 'none'})")
        if visual_cue is not None:
            self.require_known([visual_cue], "visual_cue photo")
        rows = None if within is None else self.gallery.rows(within)
        if rows is not None and visual_cue is not None:
            rows = rows[rows != self.gallery.row(visual_cue)]
        n = len(self.gallery) if rows is None else len(rows)
        total = self._score_rows(query, rows, visual_cue)
        if rows is None and visual_cue is not None:
            total[self.gallery.row(visual_cue)] = -np.inf
            n -= 1
        if self.text_clues and query:
            total = self._text_lift(total, query, rows)
        best = top_k_rows(total, min(top_k, n))
        picked = best if rows is None else rows[best]
        ids = self.gallery.ids
        return Ranking([ids[int(r)] for r in picked], [float(total[int(b)]) for b in best])

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Every photo's score for each of ``queries``: a ``(len(queries), len(album))`` array aligned with
        :attr:`ids`, from one scan of each searched space for all of them (no sort): what an executor that weighs
        a whole album for several texts at once reads."""
        texts = [(q or "").strip() for q in queries]
        if not texts or not all(texts):
            raise ToolError("scores need one or more non-empty queries")
        if not self.spaces:
            raise GalleryError(f"the index at {self.gallery.root} has no vector space to search "
                               f"(it has: {', '.join(self.gallery.spaces()) or 'none'})")
        rows = self.rows
        total = np.zeros((len(texts), len(self)), dtype=np.float32)
        weight = sum(w for _, w in self.spaces)
        for space, w in self.spaces:
            got = np.asarray(self.gallery.scores(self._text_vectors(space, texts), space, rows), dtype=np.float32)
            total += (w / weight) * got.reshape(len(texts), -1)
        if self.text_clues:  # each text's photos whose words it holds lifted, as search lifts them
            for k, text in enumerate(texts):
                total[k] = self._text_lift(total[k], text, rows)
        return total

    def text_vectors(self, queries: Sequence[str]) -> np.ndarray:
        """The text vectors of ``queries`` in the album's first searched space (to compare texts with each other)."""
        if not self.spaces:
            raise GalleryError(f"the index at {self.gallery.root} has no vector space to search")
        return self._text_vectors(self.spaces[0][0], list(queries))

    def scores_at(self, queries: Sequence[str], at: np.ndarray) -> np.ndarray:
        """:meth:`scores` at the album positions ``at`` only (a ``(len(queries), len(at))`` array): what an
        executor reads for a few photos and many texts, without a scan of the whole album per text (the cosines
        alone: a text clue's lift is measured against the whole album's scores, which this does not scan)."""
        texts = [(q or "").strip() for q in queries]
        if not texts or not all(texts):
            raise ToolError("scores need one or more non-empty queries")
        at = np.asarray(at, dtype=np.int64)
        rows = at if self.rows is None else self.rows[at]
        total = np.zeros((len(texts), len(at)), dtype=np.float32)
        weight = sum(w for _, w in self.spaces) or 1.0
        for space, w in self.spaces:
            got = np.asarray(self.gallery.scores(self._text_vectors(space, texts), space, rows), dtype=np.float32)
            total += (w / weight) * got.reshape(len(texts), -1)
        return total

    def _score_rows(self, query: str, rows: np.ndarray | None, visual_cue: str | None = None) -> np.ndarray:
        """The weighted sum over the searched spaces of the cosine of ``query`` (and/or the cue photo's vector)
        with the photos of ``rows`` (None: every photo of the gallery)."""
        n = len(self.gallery) if rows is None else len(rows)
        total = np.zeros(n, dtype=np.float32)
        weight = sum(w for _, w in self.spaces)
        for space, w in self.spaces:
            q = self._text_vector(space, query) if query else None
            if visual_cue is not None:
                cue = self.gallery.vector(space, visual_cue)
                q = cue if q is None else q + cue
                q = q / max(float(np.linalg.norm(q)), 1e-12)
            total += (w / weight) * np.asarray(self.gallery.scores(q, space, rows), dtype=np.float32)
        return total

    @property
    def has_text(self) -> bool:
        """Whether any photo of the gallery has text read from it."""
        return bool(self.meta.text.with_text)

    def _text_lift(self, total: np.ndarray, query: str, rows: np.ndarray | None) -> np.ndarray:
        """``total`` (scores over ``rows``, None: every row) with each photo lifted by the share of the query's words
        (framing words aside: "the sign for Sintra" -> sign, sintra) its text holds, ``ocr.search_boost_z`` robust
        spreads of these scores for all of them."""
        texts = self.meta.text
        boost = (getattr(self.gallery, "ocr_options", None) or OcrOptions()).search_boost_z
        words = clue_words(query)
        if not texts.with_text or boost <= 0 or not words:
            return total
        share = texts.share(words)
        share = share if rows is None else share[rows]
        if not share.any():
            return total
        return lift(total, share, robust_spread(total), boost).astype(np.float32)

    # ------------------------------------------------------------------ metadata
    def metadata(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """For each known id: its time, place (lat, lon, address), device and people (``fields`` picks some;
        ``place`` stands for lat, lon and address; ``people`` are names, ``#id`` for a group not named yet, and
        come only when asked for or when the index has face data), and with all fields (``fields`` None) its pixel
        labels (``labels``: ``[{"name", "p"}]``) when it has some and they are offered as text, and the text read in
        it (``text``: its lines) when it has some. Unknown ids raise :class:`ToolError`."""
        wanted = set(fields or (*METADATA_FIELDS, PEOPLE_FIELD))
        bad = wanted - {*METADATA_FIELDS, PEOPLE_FIELD}
        if bad:
            raise ToolError(f"unknown metadata field(s) {', '.join(sorted(bad))}; fields are "
                            f"{', '.join((*METADATA_FIELDS, PEOPLE_FIELD))}")
        if "place" in wanted:
            wanted |= {"lat", "lon", "address"}
        people = people_index(self.gallery) if PEOPLE_FIELD in wanted else None
        if people is not None and not people.has_data and not fields:
            people = None  # an index without face data: no people key unless asked for
        out = []
        for i in self.require_known(ids):
            r = self.gallery.record(i)
            row: dict[str, Any] = {"id": i}
            if "time" in wanted:
                row["time"] = format_time(r)
            if "lat" in wanted:
                row["lat"] = r.latitude
            if "lon" in wanted:
                row["lon"] = r.longitude
            if "address" in wanted:
                row["address"] = r.place_name  # the given address, else the place found for the GPS
            if "device" in wanted:
                row["device"] = r.device
            if people is not None:
                row["people"] = people.labels_of(i)
            min_p = self.label_min_p
            if fields is None and r.labels and min_p is not None:
                row["labels"] = [{"name": x["name"], "p": x["p"]} for x in r.labels if float(x["p"]) >= min_p]
            if fields is None and r.text_lines:
                row["text"] = line_texts(r.text_lines)
            out.append(row)
        return out

    # ------------------------------------------------------------------ filter
    def filter(self, expression: str, within: Sequence[str] | None = None) -> list[str]:
        """Ids matching ``expression``, in chronological order; :class:`~imagent.tools.filter_lang.FilterError`
        (a :class:`ToolError`) when it does not parse."""
        rows = None if within is None else self.gallery.rows(within)
        matched = self.meta.filter_rows(expression, rows)
        ids = self.gallery.ids
        return [ids[int(r)] for r in matched]

    # ------------------------------------------------------------------ view
    def view(self, ids: Sequence[str]) -> tuple[list[tuple[str, ImagePart]], list[tuple[str, str]]]:
        """``(images, missing)``: an image part per photo whose file exists (the record rides along for
        caption mode), and ``(id, surrogate text)`` for photos whose file is gone."""
        images: list[tuple[str, ImagePart]] = []
        missing: list[tuple[str, str]] = []
        for i in self.require_known(ids):
            r = self.gallery.record(i)
            if r.path and Path(r.path).is_file():
                images.append((i, ImagePart(record=r)))
            else:
                missing.append((i, r.surrogate()))
        return images, missing


def _people_of(gallery: Gallery) -> Any:
    """``() -> PeopleIndex`` of ``gallery`` at the time of the call (the filter field ``person``); the gallery
    is held weakly (the metadata cache must not keep it alive)."""
    ref = weakref.ref(gallery)

    def current() -> Any:
        g = ref()
        if g is None:
            raise ToolError("the album's index is closed")
        return people_index(g)

    return current


class _ScopedAlbum(Album):
    """An album holding only ``scope`` of the gallery's photos (:meth:`Album.scoped`)."""

    def __init__(self, gallery: Gallery, dual: DualEncoder | None, text: TextEmbedder | None,
                 spaces: Sequence[tuple[str, float]], scope: Sequence[str], text_clues: bool = False) -> None:
        super().__init__(gallery, dual, text, spaces, text_clues)
        # In gallery order, by row numbers: work in the scope's size, never a Python loop over the gallery.
        self._rows = np.unique(gallery.rows(scope))
        self._scope_ids: list[str] = gallery.id_array[self._rows].tolist()
        self._scope = set(self._scope_ids)

    def scoped(self, ids: Sequence[str]) -> Album:
        return _ScopedAlbum(self.gallery, self.dual, self.text, self.spaces, [i for i in ids if i in self._scope],
                            self.text_clues)

    @property
    def ids(self) -> list[str]:
        return self._scope_ids

    @property
    def rows(self) -> np.ndarray:
        return self._rows

    def __len__(self) -> int:
        return len(self._scope_ids)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._scope

    def split_known(self, ids: Iterable[str]) -> tuple[list[str], list[str]]:
        known, unknown = [], []
        for i in dict.fromkeys(str(x).strip() for x in ids):
            (known if i in self._scope else unknown).append(i)
        return known, unknown

    def _within(self, within: Sequence[str] | None) -> list[str]:
        return self._scope_ids if within is None else [i for i in within if i in self._scope]

    def search(self, query: str = "", top_k: int = 20, within: Sequence[str] | None = None,
               visual_cue: str | None = None) -> Ranking:
        return super().search(query, top_k, self._within(within), visual_cue)

    def filter(self, expression: str, within: Sequence[str] | None = None) -> list[str]:
        return super().filter(expression, self._within(within))


__all__ = ["DEFAULT_SPACE_ORDER", "METADATA_FIELDS", "PEOPLE_FIELD", "Album", "format_time"]
