"""Core value types shared by every layer: records, queries, rankings, results."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from imagent.core.trace import Trace


@dataclass
class ImageRecord:
    """One gallery image.

    ``id`` is stable: a manifest's own id when it gives one, else the first 16 hex digits of the
    sha256 of the file's bytes (so a renamed file keeps its id).
    """

    id: str
    path: str
    content_hash: str = ""
    captions: list[str] = field(default_factory=list)
    taken_time: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    address: str | None = None
    tags: list[str] = field(default_factory=list)
    width: int | None = None
    height: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Where ``captions`` came from: "given" (manifest / imported file), "captioner:<model id>" (a model
    # described the pixels), or "" when the record has none. Only these count as captions.
    caption_source: str = ""
    # Words known without any model (folder and file-name words, EXIF date, place) for an image with no
    # caption: what caption spaces embed instead. Never counted as a caption (methods that read captions
    # refuse an index of these); traces say when it was used.
    derived_text: str = ""
    device: str | None = None  # camera / phone model (EXIF Model or a manifest's device field)
    # The place name found offline for the coordinates (imagent.index.places: nearest GeoNames town, region,
    # country), kept beside them; None without GPS or when no town is near. ``address`` (given) wins over it.
    place: str | None = None
    # What the pixel model (imagent.models.pixels) sees, best first: ``{"name", "p", "index"}`` (ImageNet class
    # name, probability, class index); empty when no pixel model ran on the photo.
    labels: list[dict[str, Any]] = field(default_factory=list)
    # The text read in the photo (imagent.models.ocr, the index's ``text`` stage), in reading order: ``{"text", "box",
    # "confidence"}`` (box: four ``[x, y]`` corners as fractions of the upright photo); empty when none was found or
    # no OCR ran on the photo.
    text_lines: list[dict[str, Any]] = field(default_factory=list)
    # What the pixel model saw, in words, for a photo without a caption (:mod:`imagent.index.describe`: its labels
    # above the card floor with their everyday parent category, the people named in it, the text found in it): what
    # a model that cannot see pixels reads for it (:meth:`surrogate`). Built by the gallery from what the index
    # holds when it hands the record out; never stored, never a caption.
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.captions and not self.caption_source:
            self.caption_source = "given"  # captions handed over by a caller or a manifest

    @property
    def caption(self) -> str:
        return self.captions[0] if self.captions else ""

    @property
    def place_name(self) -> str | None:
        """Where the photo was taken in words: the given address, else the place found for its GPS."""
        return self.address or self.place

    @property
    def has_caption(self) -> bool:
        return bool(self.captions)

    @property
    def text(self) -> str:
        """The text read in the photo, one line each, in reading order ("" when none)."""
        return "\n".join(str(x.get("text", "")) for x in self.text_lines)

    def surrogate(self) -> str:
        """The text that stands in for the pixels when a model cannot see images (caption mode): the captions, else
        what the pixel model saw (:attr:`description`), else the words derived from its names; then when and where
        it was taken."""
        parts = [" ".join(c.strip() for c in self.captions) or self.description or self.derived_text
                 or "(no caption)"]
        if self.taken_time is not None:
            parts.append(f"taken {self.taken_time.isoformat(sep=' ')}")
        if self.place_name:
            parts.append(f"at {self.place_name}")
        elif self.latitude is not None and self.longitude is not None:
            parts.append(f"at lat {self.latitude:.5f}, lon {self.longitude:.5f}")
        if self.tags:
            parts.append("tags: " + ", ".join(self.tags))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "content_hash": self.content_hash,
            "captions": list(self.captions),
            "taken_time": self.taken_time.isoformat() if self.taken_time else None,
            "latitude": self.latitude,
            "longitude": self.longitude,
            "address": self.address,
            "tags": list(self.tags),
            "width": self.width,
            "height": self.height,
            "extra": dict(self.extra),
            "caption_source": self.caption_source,
            "derived_text": self.derived_text,
            "device": self.device,
            "place": self.place,
            **({"labels": [dict(x) for x in self.labels]} if self.labels else {}),
            **({"text_lines": [dict(x) for x in self.text_lines]} if self.text_lines else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageRecord:
        t = d.get("taken_time")
        return cls(
            id=d["id"],
            path=d.get("path", ""),
            content_hash=d.get("content_hash", ""),
            captions=list(d.get("captions") or []),
            taken_time=datetime.fromisoformat(t) if t else None,
            latitude=d.get("latitude"),
            longitude=d.get("longitude"),
            address=d.get("address"),
            tags=list(d.get("tags") or []),
            width=d.get("width"),
            height=d.get("height"),
            extra=dict(d.get("extra") or {}),
            caption_source=d.get("caption_source") or ("given" if d.get("captions") else ""),
            derived_text=d.get("derived_text") or "",
            device=d.get("device"),
            place=d.get("place"),
            labels=[dict(x) for x in d.get("labels") or []],
            text_lines=[dict(x) for x in d.get("text_lines") or []],
        )


@dataclass
class MetadataConstraints:
    """Optional hard filters a query carries (PhotoCraft-style personal search, user filters)."""

    time_from: datetime | None = None
    time_to: datetime | None = None
    near_latitude: float | None = None
    near_longitude: float | None = None
    within_km: float | None = None
    # A filter expression of the album filter language (``imagent search --where``), and the gallery rows it
    # allows (a numpy int array, computed for the gallery the query runs on by imagent.tools.photo_search).
    where: str | None = None
    rows: Any = None

    def is_empty(self) -> bool:
        return all(v is None for v in vars(self).values())


@dataclass
class DialogueTurn:
    question: str
    answer: str


@dataclass
class Query:
    """What a user asks.

    - text-to-image: ``text`` only;
    - composed (CIR): ``text`` is the modification, ``reference`` the reference image record;
    - chat-based: ``text`` is the opening description, ``dialogue`` the question/answer turns so far.
    """

    text: str
    id: str = ""
    reference: ImageRecord | None = None
    dialogue: list[DialogueTurn] = field(default_factory=list)
    constraints: MetadataConstraints | None = None
    # Candidate subset to rank (GeneCIS per-query gallery, CIRR subset); None = whole gallery.
    candidates: list[str] | None = None
    # Ids never returned (e.g. the reference image on CIRR).
    exclude: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        if self.dialogue:
            return "chat"
        if self.reference is not None:
            return "cir"
        return "tir"


MATCH_STRONG = "strong"
MATCH_POSSIBLE = "possible"
MATCH_NONE = "none"


@dataclass(frozen=True)
class MatchCut:
    """Where a cosine ranking's scores stop matching (:mod:`imagent.index.levels` computes it from the query's
    scores over the whole gallery): a score of at least ``strong`` is a strong match, of at least ``possible`` a
    possible one, anything lower no match. ``median`` and ``spread`` (1.4826 x the median absolute deviation) are
    the distribution's, over ``photos`` photos (``sampled``: an even sample of a large gallery)."""

    strong: float
    possible: float
    median: float
    spread: float
    photos: int
    sampled: bool = False

    def level(self, score: float) -> str:
        """``strong``, ``possible`` or ``none`` for one score of the ranking this cut belongs to."""
        if score >= self.strong:
            return MATCH_STRONG
        return MATCH_POSSIBLE if score >= self.possible else MATCH_NONE

    def z(self, score: float) -> float:
        """The robust z-score of one score."""
        return (score - self.median) / self.spread

    def to_dict(self) -> dict[str, Any]:
        return {"strong": round(self.strong, 6), "possible": round(self.possible, 6), "median": round(self.median, 6),
                "spread": round(self.spread, 6), "photos": self.photos, "sampled": self.sampled}


@dataclass
class Ranking:
    """Ranked gallery ids, best first, with the score each method assigned. ``cut``: where the scores stop
    matching, for a cosine ranking over the gallery (:class:`MatchCut`; None for other rankings: their scores
    are not compared with the gallery's)."""

    ids: list[str]
    scores: list[float]
    cut: MatchCut | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.scores):
            raise ValueError("Ranking ids and scores differ in length")

    def __len__(self) -> int:
        return len(self.ids)

    def top(self, k: int) -> Ranking:
        return Ranking(self.ids[:k], self.scores[:k], self.cut)

    def head(self, n: int = 10) -> list[list[Any]]:
        """The first ``n`` as ``[id, score]`` pairs: how traces show a ranking (the web UI draws them)."""
        return [[i, round(float(s), 4)] for i, s in zip(self.ids[:n], self.scores[:n], strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "scores": [float(s) for s in self.scores]}


class Source:
    """Which path produced a :class:`Result` (its ``source``), so that every number shown says whose it is.

    - ``"method"``: the method's own answer or plan;
    - ``"fallback:<name>"``: a named fallback path the method took instead (``fallback:best_seen``,
      ``fallback:plain_search``, ``fallback:composed_query``...): a result, but not the method's own;
    - ``"error"``: the method could not answer (its model calls failed, the per-query call cap); the reason is
      in ``Result.source_reason``. Such a result may still carry a ranking: the never-empty answer that
      interactive search shows, labelled in the trace. Evaluations never score it: it is a query error.
    """

    METHOD = "method"
    ERROR = "error"
    FALLBACK_PREFIX = "fallback:"

    @staticmethod
    def fallback(name: str) -> str:
        """The source string of the named fallback path."""
        if not name or ":" in name:
            raise ValueError(f"a fallback name is a plain word, got {name!r}")
        return Source.FALLBACK_PREFIX + name

    @staticmethod
    def is_fallback(source: str) -> bool:
        return source.startswith(Source.FALLBACK_PREFIX)

    @staticmethod
    def check(source: str) -> str:
        """``source`` itself when it is one of the forms above; ValueError otherwise."""
        if source in (Source.METHOD, Source.ERROR) or (
                Source.is_fallback(source) and len(source) > len(Source.FALLBACK_PREFIX)):
            return source
        raise ValueError(f"unknown result source {source!r} (expected 'method', 'error' or 'fallback:<name>')")


# A method's own behaviour counts for one query: flat names to non-negative integers, "by kind" counts as
# ``"<count>.<kind>"`` (``"tool_calls.ImageSearch"``, ``"set_operations.DIFFERENCE"``). Evaluations sum them over
# the queries without knowing the names (``metrics.json`` ``behaviour``).
Counts = dict[str, int]


@dataclass
class Result:
    """A method's answer: the final ranking, its trace and any named intermediate rankings
    (e.g. ``stage1``/``stage2`` for ablations reported side by side, or one per dialogue round).

    ``answer_set``: for methods that answer with a *set* (PhotoCraft, ImageSeeker on DISBench), the
    set itself, apart from any ranking; set-valued benchmarks score it. ``None`` for ranking methods.

    ``source``: which path produced it (:class:`Source`: ``method``, ``fallback:<name>`` or ``error``) and
    ``source_reason`` why, when it is not the method's own; ``counts``: the method's own behaviour counts for
    this query (:data:`Counts`)."""

    ranking: Ranking
    trace: Trace
    stages: dict[str, Ranking] = field(default_factory=dict)
    answer_set: list[str] | None = None
    source: str = Source.METHOD
    source_reason: str = ""
    counts: Counts = field(default_factory=dict)
    # Who chose ``answer_set`` (decision 10): ``"model"`` (the method's model wrote the ids), ``"code"`` (a list
    # code computed: clear matches, a trip's photos, an executed plan), ``"mixed"``; ``""`` for ranking methods.
    # ``code_selected_share``: the fraction of the answer set that equals a list computed by code (0..1), None
    # when the result is not a set answer.
    answer_origin: str = ""
    code_selected_share: float | None = None
    # What the method's preflight warned about for this query (``Method.preflight``; shown in the trace too).
    warnings: list[str] = field(default_factory=list)
    # The vector spaces the ranking was scored in (the method's ``search_spaces``, or "more like this"'s space),
    # so each result row can say what answered it (a caption, the pixels, file-name words); empty when unknown.
    spaces: list[str] = field(default_factory=list)
    # What the query reader understood of a plain-words question (``QueryReading.to_dict()`` of
    # :mod:`imagent.tools.query_reader`: the people, places and dates linked as filters, the content words, notes);
    # None when the question was not read (a method named explicitly, a reference, "more like this").
    understood: dict[str, Any] | None = None
    # Photos the text read in them matched (:mod:`imagent.tools.text_search`): id -> ``{"words", "quoted", "share",
    # "content_score"}`` (the phrases and words its text holds; ``content_score`` the method's own score, None when
    # the method did not rank it). Empty when no text was matched.
    text_matches: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        Source.check(self.source)
        if self.code_selected_share is not None and not 0.0 <= self.code_selected_share <= 1.0:
            raise ValueError(f"code_selected_share must lie in [0, 1], got {self.code_selected_share!r}")
        for key, n in self.counts.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"behaviour count {key!r} must be a non-negative int, got {n!r}")

    @property
    def is_error(self) -> bool:
        return self.source == Source.ERROR

    @property
    def is_fallback(self) -> bool:
        return Source.is_fallback(self.source)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the behaviour count ``key``."""
        self.counts[key] = self.counts.get(key, 0) + n

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ranking": self.ranking.to_dict(),
            "stages": {k: v.to_dict() for k, v in self.stages.items()},
            "trace": self.trace.to_dict(),
            "source": self.source,
            "source_reason": self.source_reason,
            "counts": dict(self.counts),
            "warnings": list(self.warnings),
        }
        if self.answer_set is not None:
            d["answer_set"] = list(self.answer_set)
            d["answer_origin"] = self.answer_origin
            d["code_selected_share"] = self.code_selected_share
        if self.understood is not None:
            d["understood"] = self.understood
        if self.text_matches:
            d["text_matches"] = {k: dict(v) for k, v in self.text_matches.items()}
        return d
