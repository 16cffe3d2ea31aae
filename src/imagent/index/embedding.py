"""The encoders' embedding as a per-photo stage (:class:`EmbedStage`): a batch of records' vectors in every space
the encoders fill, stored with the records.

The index builder (:mod:`imagent.index.builder`) runs it with the other stages of the composition
(:mod:`imagent.index.parts`); tests and benchmarks that build a gallery straight from records go through
:func:`gallery_from_records` / :func:`add_records`, which run the same stage, so there is one way vectors get into
an index.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from imagent.core.cache import stable_key
from imagent.core.imageio import ImageLoadError
from imagent.core.text import display_path
from imagent.core.types import ImageRecord
from imagent.index.gallery import (
    SPACE_CAPTION_DUAL,
    SPACE_CAPTION_TEXT,
    SPACE_IMAGE,
    Gallery,
    GalleryError,
    encoder_space,
    split_space,
)
from imagent.index.stages import LocalRunner, PendingRecord, Stage, Todo, store_new
from imagent.models.base import DualEncoder, TextEmbedder
from imagent.models.encoders import caption_text

if TYPE_CHECKING:
    from imagent.index.store import Writer


class LazyEncoder:
    """An encoder that is loaded on first use, with its model id known before that (from the config).

    An incremental ``imagent index`` that finds nothing new compares model ids only, so it never pays the
    seconds a model load costs. ``model_id`` is the configured prediction until the model is loaded, then
    the model's own (a wrong prediction is still caught when vectors are written)."""

    def __init__(self, load: Callable[[], Any], model_id: str | None = None, sees_pixels: bool | None = None) -> None:
        self._load = load
        self._model_id = model_id
        self._sees_pixels = sees_pixels
        self._encoder: Any = None

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def get(self) -> Any:
        if self._encoder is None:
            self._encoder = self._load()
        return self._encoder

    @property
    def model_id(self) -> str:
        if self._encoder is None and self._model_id is not None:
            return self._model_id
        return str(self.get().model_id)

    @property
    def dim(self) -> int:
        return int(self.get().dim)

    @property
    def sees_pixels(self) -> bool:
        if self._encoder is None and self._sees_pixels is not None:
            return self._sees_pixels
        return bool(getattr(self.get(), "sees_pixels", True))

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self.get().encode_texts(texts)

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray:
        return self.get().encode_images(records)


def encoder_model_id(encoder: Any) -> str:
    return str(encoder.model_id)


def encoder_dim(encoder: Any) -> int | None:
    """The encoder's dim, or None for a :class:`LazyEncoder` not loaded yet (asking would load it)."""
    if isinstance(encoder, LazyEncoder) and not encoder.loaded:
        return None
    return int(encoder.dim)


def embedding_text(record: ImageRecord) -> str:
    """What the caption spaces embed: the captions, else the text derived from names, date and place."""
    return caption_text(record) or record.derived_text.strip()


@dataclass(frozen=True)
class ExtraEncoder:
    """An extra retriever (config ``[encoders.<name>]``) and its spaces: a dual encoder fills ``image@<name>``
    and ``caption_dual@<name>``, a text embedder ``caption_text@<name>``. ``encoder`` may be a
    :class:`LazyEncoder` (loaded only when something must be embedded or a query encoded)."""

    name: str
    kind: Literal["dual", "text"]
    encoder: Any

    @property
    def spaces(self) -> list[str]:
        if self.kind == "dual":
            return [encoder_space(SPACE_IMAGE, self.name), encoder_space(SPACE_CAPTION_DUAL, self.name)]
        return [encoder_space(SPACE_CAPTION_TEXT, self.name)]


def space_encoders(dual: Any, text: Any, extras: Sequence[ExtraEncoder] = ()) -> dict[str, Any]:
    """space -> the encoder that fills it, for every space these encoders provide (main ones first).
    Names only: nothing is loaded."""
    out: dict[str, Any] = {}
    if dual is not None:
        out[SPACE_IMAGE] = out[SPACE_CAPTION_DUAL] = dual
    if text is not None:
        out[SPACE_CAPTION_TEXT] = text
    for extra in extras:
        for space in extra.spaces:
            out[space] = extra.encoder
    return out


def is_pixel_backend(name: str) -> bool:
    from imagent.models.pixels import is_pixel_backend as known

    return known(name)


def _unwrap(encoder: Any) -> Any:
    return encoder.get() if isinstance(encoder, LazyEncoder) else encoder


@dataclass
class EmbedRow:
    """One record's vectors (space -> vector), the model id of each space's encoder (as loaded, where it ran),
    and whether its file could not be read for an image space (zero vectors there)."""

    vectors: dict[str, np.ndarray]
    models: dict[str, str]
    unreadable: bool = False


class EmbedStage(Stage):
    """The encoders' embedding: every record's vector in each space the dual encoder, the text embedder and the
    extra encoders fill (main spaces first). A record without a caption is embedded by its derived text (file and
    folder words, date, place); one with neither gets zero caption vectors (cosine 0).

    Identical computations are shared: in caption mode with the same text model, the image, caption_dual and
    caption_text spaces are one encoding (so are the spaces of extra encoders with the same model). ``conse`` (caption
    mode with a pixel model): the image space of a captionless photo with labels takes their ConSE vector
    (:mod:`imagent.index.pixels`); the ``effnet-lite0`` dual encoder's image vectors come from the pixel stage's pass
    over the same chunk when it ran (one forward pass a photo).

    Its output is its own marker: :meth:`todo` is the stored records lacking a vector in one of its spaces (spaces
    added to the index since, or left by a killed run), grouped by the spaces they lack; only those are computed.
    Its version is its spaces' model ids, which the index keeps per space: another model in a space is refused
    (:meth:`check`), not re-run (re-embedding a library is asked for with another index)."""

    name = "embed"
    needs = "pixels"
    stores = ("vectors: image, caption_dual, caption_text (and @<name> for [encoders.*])",)
    tracked = False

    def __init__(self, dual: DualEncoder | None, text: TextEmbedder | None, extras: Sequence[ExtraEncoder] = (),
                 conse: Callable[[], Any] | None = None) -> None:
        self.dual = dual
        self.text = text
        self.extras = list(extras)
        self._load_conse = conse
        self._conse: Any = None
        self.unreadable: list[str] = []
        self.added_spaces: list[str] = []
        self.gained = False  # a space of added_spaces is new to the index (not one a stage dropped rows of)
        self.backfilled = 0

    @property
    def encoders(self) -> dict[str, Any]:
        return space_encoders(self.dual, self.text, self.extras)

    @property
    def version(self) -> str:
        return ";".join(f"{space}={encoder_model_id(enc)}" for space, enc in self.encoders.items())

    @property
    def conse(self) -> Any:
        if self._conse is None and self._load_conse is not None:
            self._conse = self._load_conse()
        return self._conse

    def caption_spaces(self) -> tuple[str, ...]:
        """The spaces that do not read pixels (what new captions or place names change)."""
        return tuple(s for s, e in self.encoders.items()
                     if not (split_space(s)[0] == SPACE_IMAGE and getattr(e, "sees_pixels", True)))

    def check(self, gallery: Gallery) -> None:
        """Refuse encoders that differ from the index's. Compares model ids, which a :class:`LazyEncoder` knows from
        the config without loading the model (a run that changes nothing never loads it); dims are compared when
        known, and again when vectors are written (:meth:`Gallery.ensure_space`)."""
        if self.dual is None and self.text is None:
            raise ValueError("build_index needs a dual encoder or a text embedder")
        known: dict[int, tuple[str, int | None]] = {}  # one model id / dim look-up per encoder
        have = gallery.spaces()
        for space, enc in self.encoders.items():
            model_id, dim = known.setdefault(id(enc), (encoder_model_id(enc), encoder_dim(enc)))
            info = have.get(space)
            if info is not None and (info.model_id != model_id or (dim is not None and info.dim != dim)):
                name = split_space(space)[1]
                fix = (f"keep [encoders.{name}] at {info.model_id}, or give the new model another name under "
                       "[encoders] (its spaces are added beside the old ones)" if name else
                       "use another --index or delete this one")
                raise GalleryError(
                    f"index {gallery.root} holds {space!r} vectors from {info.model_id} (dim {info.dim}), but the "
                    f"configured encoder is {model_id}{f' (dim {dim})' if dim is not None else ''}; {fix}"
                )

    # ------------------------------------------------------------------ compute
    def embed(self, records: Sequence[ImageRecord], spaces: Collection[str] | None = None,
              seen: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """space -> (n, dim) float32 for ``spaces`` (default: all of this stage's); ``seen``: the pixel stage's rows
        for these records (the ``effnet-lite0`` dual encoder's image vectors come from them)."""
        captions = [embedding_text(r) for r in records]
        has_caption = np.array([bool(c) for c in captions])
        out: dict[str, np.ndarray] = {}
        done: dict[str, np.ndarray] = {}  # "model_id|what" -> vectors

        def texts_in(encoder: Any) -> np.ndarray:
            key = f"{encoder.model_id.removeprefix('caption:')}|captions"
            if key not in done:
                vecs = np.zeros((len(records), encoder.dim), dtype=np.float32)
                idx = np.flatnonzero(has_caption)
                if idx.size:
                    vecs[idx] = encoder.encode_texts([captions[i] for i in idx])
                done[key] = vecs
            return done[key]

        def images_in(encoder: Any) -> np.ndarray:
            key = f"{encoder.model_id}|images"
            if key not in done:
                if seen is not None and is_pixel_backend(str(encoder.model_id).split("+", 1)[0]):
                    done[key] = _unwrap(encoder).conse.vectors([row.tops for row in seen])  # unreadable: zeros
                else:
                    done[key] = np.asarray(encoder.encode_images(list(records)), dtype=np.float32)
            return done[key]

        for space, encoder in self.encoders.items():
            if spaces is not None and space not in spaces:
                continue
            if split_space(space)[0] == SPACE_IMAGE and getattr(encoder, "sees_pixels", True):
                out[space] = images_in(encoder)
            elif space == SPACE_IMAGE and self._load_conse is not None:
                out[space] = self._conse_rows(list(records), texts_in(encoder))
            else:
                out[space] = texts_in(encoder)
        return out

    def _conse_rows(self, records: list[ImageRecord], base: np.ndarray) -> np.ndarray:
        """Caption mode's image vectors: ``base`` (the text embeddings) with each captionless photo that has labels
        replaced by its ConSE vector from those labels."""
        rows = [n for n, r in enumerate(records) if not r.has_caption and r.labels]
        if not rows or self.conse is None:
            return base
        out = np.array(base, dtype=np.float32, copy=True)
        out[rows] = self.conse.of_labels([records[n] for n in rows])
        return out

    def _models(self, spaces: Collection[str]) -> dict[str, str]:
        return {s: str(e.model_id) for s, e in self.encoders.items() if s in spaces}

    def compute(self, records: list[ImageRecord], earlier: Mapping[str, list[Any]], part: tuple[str, ...] = ()
                ) -> list[EmbedRow]:
        """Every space (``part``: only those), one :class:`EmbedRow` a record. For stored records (``part`` given), a
        file that cannot be read any more gets zero vectors in the image spaces (flagged ``unreadable``)."""
        spaces = part or None
        try:
            vectors = self.embed(records, spaces, earlier.get("pixels"))
        except ImageLoadError:
            if not part or len(records) == 1:
                raise
            return [row for rec in records for row in self._one_by_one(rec, part)]
        models = self._models(vectors)
        return [EmbedRow({s: v[n] for s, v in vectors.items()}, models) for n in range(len(records))]

    def _one_by_one(self, rec: ImageRecord, part: tuple[str, ...]) -> list[EmbedRow]:
        try:
            return self.compute([rec], {}, part)
        except ImageLoadError:
            pass
        images = [s for s in part if split_space(s)[0] == SPACE_IMAGE
                  and getattr(self.encoders[s], "sees_pixels", True)]
        rest = [s for s in part if s not in images]
        vectors = {s: v[0] for s, v in self.embed([rec], rest).items()} if rest else {}
        vectors.update({s: np.zeros(self.encoders[s].dim, dtype=np.float32) for s in images})
        return [EmbedRow(vectors, self._models(vectors), unreadable=True)]

    # ------------------------------------------------------------------ store
    def put(self, c: Writer, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[EmbedRow],
            part: tuple[str, ...] = ()) -> None:
        declared: set[str] = set()
        for rec, row in zip(records, out, strict=True):
            for space, vec in row.vectors.items():
                if space not in declared:
                    gallery.ensure_space(c, space, row.models[space], int(np.asarray(vec).shape[-1]))
                    declared.add(space)
            gallery.put_vectors(c, rec.id, row.vectors)
            if row.unreadable:
                self.unreadable.append(display_path(rec.path))

    def todo(self, gallery: Gallery) -> list[Todo]:
        """Stored records lacking a vector in one of this stage's spaces, grouped by the spaces they lack."""
        spaces = list(self.encoders)
        missing = gallery.missing_vectors(spaces)
        if not missing:
            return []
        gallery.reload()
        lacking: dict[str, list[str]] = {}  # id -> its missing spaces, in space order
        for space in spaces:
            for i in missing.get(space, []):
                lacking.setdefault(i, []).append(space)
        order = {i: n for n, i in enumerate(gallery.ids)}
        groups: dict[tuple[str, ...], list[str]] = {}
        for i, sp in sorted(lacking.items(), key=lambda kv: order.get(kv[0], 0)):
            groups.setdefault(tuple(sp), []).append(i)
        self.added_spaces = list(missing)
        self.gained = any(sp not in gallery.spaces() for sp in missing)
        self.backfilled = len(lacking)
        return [Todo(ids, part) for part, ids in groups.items()]

    def notes(self) -> list[str]:
        out = []
        if self.backfilled and self.gained:
            out.append(f"the index gains space(s) {', '.join(self.added_spaces)}: {self.backfilled} stored image(s) "
                       "embedded in them (their other spaces stay as they are)")
        elif self.backfilled:
            out.append(f"{self.backfilled} stored image(s) embedded in space(s) {', '.join(self.added_spaces)} again "
                       "(left by an earlier run, or new labels from the pixel model; their other spaces stay as they "
                       "are)")
        if self.unreadable:
            n = len(self.unreadable)
            out.append(f"{n} stored image(s) could not be read for the new image space(s) and got zero vectors "
                       f"(index them again once the files are back): {', '.join(self.unreadable[:5])}"
                       f"{' ...' if n > 5 else ''}")
        return out


def add_records(gallery: Gallery, pending: Sequence[PendingRecord], dual: DualEncoder | None,
                text: TextEmbedder | None, extras: Sequence[ExtraEncoder] = (), stages: Sequence[Stage] = ()) -> None:
    """Embed and store one batch of new records in a single transaction (all or nothing); ``stages``: per-photo
    stages run before the embedding (e.g. the pixel stage of :class:`imagent.index.parts.IndexParts`)."""
    store_new(gallery, [*stages, EmbedStage(dual, text, extras)], LocalRunner(), pending)


def gallery_from_records(
    root: str, records: Sequence[ImageRecord], dual: DualEncoder | None, text: TextEmbedder | None,
    batch_size: int = 256, extras: Sequence[ExtraEncoder] = (), stages: Sequence[Stage] = (),
) -> Gallery:
    """Build (or extend) a gallery straight from records (tests, benchmarks, the Python API); ``stages``: per-photo
    stages run before the embedding (the pixel stage for labels and visual features)."""
    g = Gallery(root, create=True)
    items = [PendingRecord(r, f"record:{r.id}", stable_key(r.to_dict())) for r in records]
    for start in range(0, len(items), batch_size):
        add_records(g, items[start : start + batch_size], dual, text, extras, stages)
    g.write_snapshot()
    return g


__all__ = ["EmbedRow", "EmbedStage", "ExtraEncoder", "LazyEncoder", "PendingRecord", "add_records", "embedding_text",
           "gallery_from_records", "space_encoders"]
