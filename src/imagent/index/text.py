"""Text in photos in the index: what the OCR model read (:mod:`imagent.models.ocr`), stored and matched.

Each photo's text lines live on its record (``ImageRecord.text_lines``: ``{"text", "box", "confidence"}``, in
reading order). This module is the one place they are matched against what a person types:

- **words**: a photo's text as search sees it is its words, without accents and case
  (:func:`photo_words`: ``Café SOL`` -> ``cafe``, ``sol``), runs the recogniser glued together cut apart
  (:func:`~imagent.models.ocr.split_words`: ``GARAGESALE`` -> ``garage``, ``sale``);
- :class:`PhotoTexts` holds the texts of a whole gallery, factorised over their distinct values (most photos have
  none), and answers, vectorised over photos: which contain a string (``text ~ 'sol'``: case- and
  accent-insensitive, inside a word too: "solar"), which hold a phrase as whole words (``text = 'cafe sol'``, and a
  quoted search, ``"Cafe Sol"``), and which share of a query's words each photo's text holds (the boost of a plain
  search, :func:`lift`: over the words some text holds, weighted by their rarity, :meth:`PhotoTexts.share`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from imagent.core.text import unaccent

# Words too common to be evidence that a photo's text is the one meant ("the sign for Sintra": sign, sintra): left out
# of the share of a query's words a text holds. Quoted phrases and the filter match every word.
COMMON_WORDS = frozenset({
    "a", "an", "the", "of", "for", "to", "in", "on", "at", "by", "with", "from", "and", "or", "is", "are", "was",
    "were", "be", "it", "its", "this", "that", "these", "those", "i", "we", "my", "our", "me", "us", "you", "your",
    "he", "she", "they", "his", "her", "their", "them", "photo", "photos", "picture", "pictures", "pic", "pics",
    "image", "images", "called", "named", "saying", "says", "said", "read", "reads", "reading", "written", "word",
    "words", "text", "photographed", "took", "taken", "saw", "seen", "shot", "snapped"})
# Lines a record's text gives a description at most (the longest texts are menus and screenshots).
MAX_DESCRIBED_LINES = 8
MAX_LINE_CHARS = 80


def fold(text: str) -> str:
    """Lower case without accents, white space made single spaces: how text is compared."""
    return " ".join(unaccent(text).casefold().split())


def query_words(text: str) -> list[str]:
    """The words of what a person typed, as photo texts are matched against them (``"Café-Sol 9"`` -> ``cafe``,
    ``sol``, ``9``)."""
    from imagent.models.ocr import split_words

    return split_words(unaccent(text))


def clue_words(text: str) -> list[str]:
    """The words of a query that count as evidence in a photo's text: :func:`query_words` less
    :data:`COMMON_WORDS` ("the restaurant called Sol" -> restaurant, sol)."""
    return [w for w in dict.fromkeys(query_words(text)) if w not in COMMON_WORDS]


@lru_cache(maxsize=4096)
def _line_words(line: str) -> tuple[str, ...]:
    from imagent.models.ocr import split_words

    return tuple(split_words(unaccent(line)))


def photo_words(lines: Iterable[str]) -> list[list[str]]:
    """The words of each text line of a photo (lower case, no accents, glued runs cut apart)."""
    return [list(_line_words(line)) for line in lines]


def line_texts(text_lines: Sequence[dict[str, Any]]) -> list[str]:
    """The text of each stored line, in reading order."""
    return [str(x.get("text", "")) for x in text_lines if str(x.get("text", "")).strip()]


def described_lines(text_lines: Sequence[dict[str, Any]]) -> list[str]:
    """The lines a description gives a model: in reading order, at most :data:`MAX_DESCRIBED_LINES`, each at most
    :data:`MAX_LINE_CHARS` characters."""
    out = []
    for line in line_texts(text_lines)[:MAX_DESCRIBED_LINES]:
        line = " ".join(line.split())
        out.append(line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…")
    return out


class _Text:
    """One distinct photo text: its folded lines (substring search) and its words (whole-word search)."""

    __slots__ = ("joined", "lines", "sequence", "words")

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = [fold(x) for x in lines]
        per_line = photo_words(lines)
        self.words = frozenset(w for ws in per_line for w in ws)
        self.joined = " ".join(" ".join(ws) for ws in per_line)  # "garagesale" matches "garage sale" too
        self.sequence = f" {self.joined} "  # whole words in reading order

    def contains(self, pattern: str) -> bool:
        return any(pattern in x for x in self.lines) or pattern in self.joined

    def has_phrase(self, words: Sequence[str]) -> bool:
        return bool(words) and f" {' '.join(words)} " in self.sequence


class PhotoTexts:
    """The text read in each photo of a gallery (rows in gallery order), factorised over the distinct texts: every
    match is computed once per distinct text, then spread over the photos by a code array (-1: no text)."""

    def __init__(self, texts: Sequence[Sequence[str] | None]) -> None:
        index: dict[tuple[str, ...], int] = {}
        codes = np.full(len(texts), -1, dtype=np.int32)
        for n, lines in enumerate(texts):
            key = tuple(x for x in (lines or ()) if x.strip())
            if key:
                codes[n] = index.setdefault(key, len(index))
        self.codes = codes
        self.uniques = [_Text(k) for k in index]
        self.size = len(texts)
        self.photos_per_text = np.bincount(codes[codes >= 0], minlength=len(self.uniques))  # photos holding each

    @property
    def has_text(self) -> np.ndarray:
        """Which photos have any text."""
        return self.codes >= 0

    @property
    def with_text(self) -> int:
        return int((self.codes >= 0).sum())

    def _spread(self, hit: Iterable[Any], dtype: Any = bool) -> np.ndarray:
        table = np.fromiter(hit, dtype=dtype, count=len(self.uniques))
        return np.append(table, np.zeros(1, dtype=dtype))[self.codes]  # code -1 -> the extra zero at the end

    def contains(self, pattern: str) -> np.ndarray:
        """Photos whose text contains ``pattern`` (folded; inside a word too)."""
        p = fold(pattern)
        return self._spread(u.contains(p) for u in self.uniques) if p else np.zeros(self.size, dtype=bool)

    def phrase(self, phrase: str) -> np.ndarray:
        """Photos whose text holds ``phrase``'s words as whole words, in order, in reading order (across lines too: a
        sign that stacks "Cafe" over "Sol")."""
        words = query_words(phrase)
        return self._spread(u.has_phrase(words) for u in self.uniques)

    def share(self, words: Sequence[str]) -> np.ndarray:
        """For each photo, the share of ``words`` (from :func:`clue_words`) its text holds as whole words (0..1),
        counted over the words some photo's text holds at all (a word no text holds, "restaurant" in "the restaurant
        called Sol", is the content search's alone), each weighted by its rarity among the photos with text
        (``log(1 + photos with text / photos whose text holds it)``, as BM25's idf): "the day I photographed the sign
        for Sintra" gives the photo of SINTRA the whole share."""
        wanted = list(dict.fromkeys(words))
        counts = self.photos_per_text
        df = {w: int(sum(counts[n] for n, u in enumerate(self.uniques) if w in u.words)) for w in wanted}
        idf = {w: math.log(1 + self.with_text / df[w]) for w in wanted if df[w]}
        total = sum(idf.values())
        if not total:
            return np.zeros(self.size, dtype=np.float64)
        return self._spread((sum(v for w, v in idf.items() if w in u.words) / total for u in self.uniques), np.float64)

    def matched(self, row: int, words: Sequence[str]) -> list[str]:
        """Which of ``words`` the text of photo ``row`` holds."""
        code = int(self.codes[row])
        return [] if code < 0 else [w for w in dict.fromkeys(words) if w in self.uniques[code].words]

    def near(self, pattern: str, limit: int = 5) -> list[str]:
        """Words of the photos' texts that contain ``pattern`` or are contained in it (for an empty result's hint),
        most photos first."""
        p = fold(pattern)
        counts = self.photos_per_text
        found: dict[str, int] = {}
        for n, u in enumerate(self.uniques):
            for w in u.words:
                if len(w) > 2 and (p in w or w in p):
                    found[w] = found.get(w, 0) + int(counts[n])
        return [w for w, _ in sorted(found.items(), key=lambda kv: -kv[1])][:limit]


def lift(scores: np.ndarray, share: np.ndarray, unit: float, boost_z: float) -> np.ndarray:
    """``scores`` with each photo lifted by ``boost_z`` robust z-units (``unit``: the scores' spread) times the share
    of the query's words its text holds (:meth:`PhotoTexts.share`): a photo whose text holds them all rises
    ``boost_z`` spreads above its content score (with the default above a strong match's z, from the median); one
    that holds half of them (by weight) half as far."""
    return np.asarray(scores, dtype=np.float64) + unit * boost_z * np.asarray(share, dtype=np.float64)


_QUOTED = re.compile(r"\"([^\"]*)\"|“([^”]*)”|„([^“”]*)[“”]")


def quoted_phrases(text: str) -> list[tuple[int, int, str]]:
    """The phrases written in double quotes in ``text`` (straight, curly or low-high), ``(start, end, phrase)``
    with the quotes inside ``start..end``; empty phrases left out."""
    out = []
    for m in _QUOTED.finditer(text):
        phrase = next(g for g in m.groups() if g is not None).strip()
        if phrase and query_words(phrase):
            out.append((m.start(), m.end(), phrase))
    return out


__all__ = ["COMMON_WORDS", "MAX_DESCRIBED_LINES", "PhotoTexts", "clue_words", "described_lines", "fold", "lift",
           "line_texts", "photo_words", "query_words", "quoted_phrases", "unaccent"]
