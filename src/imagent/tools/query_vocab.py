"""The query reader's vocabulary (:mod:`imagent.tools.query_reader`): what a library's questions are read against,
built from its index once per index generation: the parts of its photos' addresses, the words of the labels its
photos carry (names, synonyms, parent categories) and the years they were taken. People come live from the face data
(:mod:`imagent.index.people`), so a name given a moment ago counts at once.

Words are compared folded (lower case, no accents) and by a crude singular (:func:`stem`), on both sides.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagent.core.text import unaccent

WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # a word: letters and digits, with inner apostrophes
# Generic words of a place's name, left aside when a span is compared with it ("Place des Festivals").
PLACE_GENERIC = frozenset({"place", "the", "of", "de", "des", "du", "la", "le", "les", "da", "do", "di", "del",
                           "della", "dos", "das", "van", "von", "der", "den", "het", "el", "al", "los", "las"})


def fold(text: str) -> str:
    """Lower case without accents: ``Montréal`` and ``montreal`` match."""
    return unaccent(text.replace("’", "'")).casefold()


def stem(word: str) -> str:
    """A crude singular (no dictionary): ``festivals`` -> ``festival``, ``beaches`` -> ``beach``, ``cities`` ->
    ``city``; applied to both sides of a comparison."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def word_keys(text: str) -> tuple[str, ...]:
    """``text``'s words as the reader compares them: folded, crudely singular, split as a question is (letters and
    digits with inner apostrophes: "O'Hare" is one word, "Anna-Maria" two)."""
    words = (w[:-2] if w.endswith("'s") and len(w) > 2 else w for w in WORD.findall(fold(text)))
    return tuple(stem(w) for w in words)  # a possessive 's left off, as the reader leaves it off a question's words


@dataclass
class Vocabulary:
    """What a library's questions are read against (people come live from the face data, see :func:`read_query`).

    ``places``: the words of each address part (stemmed, folded; the part's generic words left aside) -> the part
    as stored, most photos first when spellings differ; ``partial``: for parts of three or more words, each
    distinctive word -> those parts; ``labels``: the words of the labels this library's photos carry (names,
    synonyms, parent categories; stemmed) -> the class or category named; ``years``: the years with photos;
    ``generation``: the index generation it was built for."""

    places: dict[tuple[str, ...], str] = field(default_factory=dict)
    partial: dict[str, list[str]] = field(default_factory=dict)
    labels: dict[tuple[str, ...], str] = field(default_factory=dict)
    years: list[int] = field(default_factory=list)
    generation: int = -1
    max_place_words: int = 1
    max_label_words: int = 1

    @classmethod
    def build(cls, addresses: Iterable[str | None] | Mapping[str, int], label_names: Iterable[Sequence[str]] = (),
              years: Iterable[int] = (), generation: int = -1) -> Vocabulary:
        """From the photos' addresses (one per photo, or each distinct one with its number of photos), the names of
        their labels (each a class's words: its name, synonyms and parent categories) and the years with photos."""
        counts: dict[str, int] = {}
        if isinstance(addresses, Mapping):
            counts = {a: int(n) for a, n in addresses.items() if a}
        else:
            for address in addresses:
                if address:
                    counts[address] = counts.get(address, 0) + 1
        part_counts: dict[str, int] = {}
        for address, n in counts.items():
            for part in (p.strip() for p in address.split(",")):
                if part and not part.isdigit():
                    part_counts[part] = part_counts.get(part, 0) + n
        vocab = cls(years=sorted(set(years)), generation=generation)
        for part, _n in sorted(part_counts.items(), key=lambda kv: -kv[1]):
            keys = word_keys(part)
            core = tuple(k for k in keys if k not in PLACE_GENERIC) or keys
            for key in {keys, core}:
                if key and key not in vocab.places:
                    vocab.places[key] = part
            if len(keys) >= 3:
                for k in core:
                    if k not in PLACE_GENERIC and not k.isdigit() and part not in vocab.partial.get(k, []):
                        vocab.partial.setdefault(k, []).append(part)
        for names in label_names:
            for name in names:
                key = word_keys(name)
                if key and key not in vocab.labels:
                    vocab.labels[key] = name
        vocab.max_place_words = max((len(k) for k in vocab.places), default=1)
        vocab.max_label_words = max((len(k) for k in vocab.labels), default=1)
        return vocab

    def place(self, key: tuple[str, ...]) -> str | None:
        return self.places.get(key)

    def place_parts(self, word: str) -> list[str]:
        """The address parts a word names by stem, whole or as one of their words ("festival" -> ["Place des
        Festivals"]; "zoo" -> ["Melbourne Zoo"]): for anchors, which weigh places but do not filter by them."""
        key = stem(fold(word.strip()))
        found = [p for k, p in self.places.items() if key in k]
        return list(dict.fromkeys(found))


_VOCABS: weakref.WeakKeyDictionary[Any, tuple[list[str], int, dict[Any, Vocabulary]]] = weakref.WeakKeyDictionary()
_VOCAB_LOCK = threading.Lock()


def _label_words(indices: Iterable[int]) -> list[list[str]]:
    from imagent.models.pixels import label_data

    classes = label_data()
    out = []
    for i in indices:
        if 0 <= int(i) < len(classes):
            c = classes[int(i)]
            out.append([c["name"], *c.get("wordnet", []), *(p for p, _ in c.get("parents", []))])
    return out


def vocabulary(gallery: Any) -> Vocabulary:
    """The :class:`Vocabulary` of ``gallery`` (or of an album's photos: an album scoped to some photos, one user's
    in a shared index, is read against the places, labels and years of those photos only, so a place another user
    visited is not a place of this album), built on first use and again only when the index's generation or loaded
    records change, from the album's metadata columns (:attr:`imagent.tools.album.Album.meta`, which filters use
    too): its distinct addresses with their numbers of photos (each written as stored, read from one record of it),
    the labels its photos carry and the years they were taken."""
    from imagent.tools.album import Album

    rows = gallery.rows if isinstance(gallery, Album) else None
    gallery = getattr(gallery, "gallery", gallery)
    generation = gallery.generation()
    key = None if rows is None else (len(rows), hash(np.asarray(rows).tobytes()))
    with _VOCAB_LOCK:
        hit = _VOCABS.get(gallery)
        if hit is not None and hit[0] is gallery.ids and hit[1] == generation and key in hit[2]:
            return hit[2][key]
    vocab = _build(gallery, Album(gallery).meta, rows, generation)
    with _VOCAB_LOCK:
        hit = _VOCABS.get(gallery)
        cached = hit[2] if hit is not None and hit[0] is gallery.ids and hit[1] == generation else {}
        if len(cached) >= 64:  # an album per user of a shared index: a few dozen at most are kept
            cached.pop(next(iter(cached)))
        _VOCABS[gallery] = (gallery.ids, generation, {**cached, key: vocab})
    return vocab


def _build(gallery: Any, meta: Any, rows: np.ndarray | None, generation: int) -> Vocabulary:
    """The vocabulary of ``rows`` of ``gallery`` (None: every photo)."""
    codes = meta.address.codes if rows is None else meta.address.codes[rows]
    where = np.flatnonzero(codes >= 0)
    present, first, n = np.unique(codes[where], return_index=True, return_counts=True)
    picked = where[first] if rows is None else np.asarray(rows)[where[first]]
    ids = gallery.ids
    addresses: dict[str, int] = {}
    for row, count in zip(picked.tolist(), n.tolist(), strict=True):
        name = gallery.record(ids[row]).place_name  # as stored (the column holds it in lower case)
        if name:
            addresses[name] = addresses.get(name, 0) + count
    labels: list[list[str]] = []
    if meta.labels is not None:
        present = np.unique(meta.labels if rows is None else meta.labels[rows])
        labels = _label_words(int(i) for i in present if i >= 0)
    times = meta.time if rows is None else meta.time[rows]
    times = times[~np.isnan(times)]
    years = np.unique(times.astype(np.int64).astype("datetime64[s]").astype("datetime64[Y]").astype(np.int64)
                      + 1970).tolist() if len(times) else []
    return Vocabulary.build(addresses, labels, years, generation)


__all__ = ["PLACE_GENERIC", "Vocabulary", "fold", "stem", "vocabulary", "word_keys"]
