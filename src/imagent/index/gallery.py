"""The gallery index: records in SQLite, vectors per named space, search with filters.

:class:`Gallery` is the one object the rest of imagent opens: a loaded view of the store
(:mod:`imagent.index.store`: schema, transactions, writes), its vector snapshots
(:mod:`imagent.index.snapshots`) and approximate stores (:mod:`imagent.index.ann`), and search over them.

Layout of an index directory::

    records.sqlite          records, per-record float32 vectors (the source of truth), skipped files, spaces
    vectors/snapshot.json   the snapshot's manifest: generation, index uuid, row count, sha256 of the row order,
                            spaces, dtype, shard_rows, each stored space's shard folder and rows per shard,
                            aliases (a space whose vectors equal another's is stored once, as that one)
    vectors/<space>/g<generation>-<token>/shard-00000.npy, shard-00001.npy, ...
                            the space's rows in row order, ``shard_rows`` per file (the last one shorter)
    vectors/.write.lock     taken by snapshot writers (one at a time per index)
    ann/<space>.faiss, .json  approximate stores (:mod:`imagent.index.ann`)
    manifest.json           count, generation and models, for people and scripts

Every write goes through SQLite transactions, so a killed build leaves the database at its last
committed batch (resume picks up from there) and never half-written. The shards are derived data
(:mod:`imagent.index.shards`): a snapshot write streams SQLite into a new shard folder, a batch of rows
at a time (bounded memory), and makes it current by replacing ``snapshot.json`` last; a write killed
between shards leaves the old manifest naming the old shards, untouched. When the manifest's generation,
row order or index uuid does not match the database's, the snapshot is rebuilt from SQLite on first use.
Every record write bumps the generation in the same transaction, so a snapshot can never be
mistaken for current after a write (a killed build included). The uuid is drawn when the database
is created, so a snapshot left beside a re-created database is not mistaken for its own either.
Indexes from before shards (``vectors/<space>.npy`` described by ``vectors/ids.json``) are read as they
are, one file as one shard, and rewritten in this layout by the next snapshot write.

Searches read the shards memory-mapped, one after another (:class:`~imagent.index.shards.ShardedVectors`):
the scan keeps a running top-k and never builds an (N, d) array; ``mapped_shards`` bounds how many stay
mapped, so a gallery larger than the memory a process may use can still be searched.

Vector spaces (names used by every method):

- ``image``: the dual encoder's image vectors (in caption mode, the captions encoded as images are);
- ``caption_dual``: captions in the dual encoder's text space (CLIP text encoder on both sides);
- ``caption_text``: captions in the text embedder's space;
- ``image@<name>``, ``caption_dual@<name>``, ``caption_text@<name>``: the same kinds from an extra encoder
  ``[encoders.<name>]`` (a dual encoder gives the first two, a text embedder the third): :func:`encoder_space`;
- ``visual``: the pixel model's visual features ("more like this", duplicates; :mod:`imagent.index.pixels`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.config import AnnOptions, IndexOptions, PixelOptions
from imagent.core.types import ImageRecord, MetadataConstraints, Ranking
from imagent.index import snapshots
from imagent.index.ann import DEFAULT_MIN_ROWS, AnnParams, AnnRecallWarning, AnnStore, search_pool
from imagent.index.describe import describe_records
from imagent.index.scoring import haversine_km, top_k
from imagent.index.shards import DEFAULT_SHARD_ROWS, ShardedVectors
from imagent.index.store import Reader, SpaceConflict, Store, Writer

SPACE_IMAGE = "image"
SPACE_CAPTION_DUAL = "caption_dual"
SPACE_CAPTION_TEXT = "caption_text"
BASE_SPACES = (SPACE_IMAGE, SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT)


def encoder_space(base: str, encoder: str | None = None) -> str:
    """The space of kind ``base`` (``image``, ``caption_dual``, ``caption_text``) filled by the extra encoder
    named ``encoder`` (``[encoders.<name>]``): ``image@siglip``; the main encoders' spaces (None) keep the bare
    kind."""
    return f"{base}@{encoder}" if encoder else base


def split_space(space: str) -> tuple[str, str | None]:
    """``image@siglip`` -> ``("image", "siglip")``; ``image`` -> ``("image", None)`` (the main encoders)."""
    base, sep, name = space.partition("@")
    return base, (name if sep else None)

class _LazyRecords:
    """id -> :class:`ImageRecord`, each parsed from its stored JSON on first use.

    The JSON text comes from the same read transaction as the ids (one consistent state); parsing every
    record when a gallery opens cost about a second per 100,000 images, and a search reads only the few
    records it returns (filters use :meth:`Gallery._metadata_arrays`, built once)."""

    def __init__(self, raw: dict[str, str]) -> None:
        self._raw = raw
        self._parsed: dict[str, ImageRecord] = {}

    def __getitem__(self, image_id: str) -> ImageRecord:
        rec = self._parsed.get(image_id)
        if rec is None:
            rec = self._parsed[image_id] = ImageRecord.from_dict(json.loads(self._raw[image_id]))
        return rec

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._raw

    def __len__(self) -> int:
        return len(self._raw)

    def values(self) -> Iterator[ImageRecord]:
        return (self[i] for i in self._raw)


class GalleryError(RuntimeError):
    """The index is missing, built with other models, or lacks a vector space."""


@dataclass(frozen=True)
class SpaceInfo:
    model_id: str
    dim: int


class Gallery:
    def __init__(self, root: str | Path, create: bool = False) -> None:
        self.root = Path(root).expanduser()
        db = self.root / "records.sqlite"
        if not db.exists() and not create:
            raise GalleryError(
                f"no gallery index at {self.root}; build one with `imagent index PATH --index {self.root}`"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "vectors").mkdir(exist_ok=True)
        # Approximate search (see search()): "auto" uses a current store for pools of >= ann_min_rows rows.
        self.ann_mode: str = "auto"
        # float16 halves the snapshot (and memory-mapped scans); SQLite keeps float32 either way.
        self.snapshot_dtype = np.dtype(np.float32)
        # Rows per shard file of the next snapshot written; shards a search keeps mapped (0: all).
        self.shard_rows: int = DEFAULT_SHARD_ROWS
        self.mapped_shards: int = 0
        self.ann_min_rows: int = DEFAULT_MIN_ROWS
        self.ann_params = AnnParams()
        self.ann_notes: list[str] = []  # warnings of the last build_ann (a calibration short of its target)
        # Pixel labels (imagent.index.pixels): whether tools may show and filter them as text, and the probability a
        # label needs to be shown or matched (the workspace sets both from [pixels]).
        self.labels_as_text = True
        self.label_min_p = 0.1
        # Values callers derive from this gallery and keep with it (keyed with its generation by the caller: the
        # request path's pixel notice), so they go when the gallery object does.
        self.derived: dict[str, Any] = {}
        # The [pixels] settings a photo's pixel description and result cards read (imagent.index.describe).
        self.pixel_options = PixelOptions()
        # The [ocr] settings the album tools' text clues read (an OcrOptions; None: its defaults).
        self.ocr_options: Any = None
        self._ann_stores: dict[str, AnnStore] = {}
        self._store = Store(db)
        self._load()

    # ------------------------------------------------------------------ storage plumbing
    def transaction(self) -> Any:
        """``with gallery.transaction() as w:`` a store :class:`~imagent.index.store.Writer` to hand to
        :meth:`upsert`, :meth:`remove`, ... ; committed on exit, rolled back on an exception."""
        return self._store.transaction()

    def meta(self, key: str, default: str | None = None) -> str | None:
        """A value of the index's ``meta`` table (generation, uuid, upgrade marks)."""
        return self._store.meta(key, default)

    def set_meta(self, key: str, value: str) -> None:
        self._store.set_meta(key, value)

    def sources(self) -> list[str]:
        """The folders and manifests indexed into this gallery (as the builder recorded them; for an index built
        before that, the folder its records' files share)."""
        if self._sources is None:
            found = sorted(set(self._store.meta_with_prefix("source:").values()))
            if not found and self.ids:
                paths = [p for (p,) in zip(*(self.metadata_columns(["path"]) or [[]]), strict=False) if p]
                try:
                    found = [os.path.commonpath(paths)] if paths else []
                except ValueError:  # paths on different drives
                    found = []
            self._sources = found
        return list(self._sources)

    def generation(self) -> int:
        return int(self._store.meta("generation", "0") or 0)

    def is_current(self) -> bool:
        """Whether the index is still at the generation this object loaded (no build committed since)."""
        return self.generation() == self.loaded_generation

    def uuid(self) -> str:
        return self._store.meta("uuid", "") or ""

    def _load(self) -> None:
        # One read transaction: records and spaces from the same committed state.
        with self._store.read() as r:
            self._load_from(r)

    def _load_from(self, r: Reader) -> None:
        # The build generation these rows are of: a newer one in the database means another process indexed since.
        self.loaded_generation = int(r.meta("generation", "0") or 0)
        rows = r.record_rows()
        self.ids: list[str] = [i for i, _ in rows]
        self._records = _LazyRecords(dict(rows))
        self._row_of = {i: n for n, i in enumerate(self.ids)}
        self._coverage: tuple[int, int] | None = None
        self._id_array: np.ndarray | None = None
        self._spaces = {name: SpaceInfo(model_id, dim) for name, model_id, dim in r.spaces()}
        self._ids_sha: str | None = None
        self._vectors: dict[str, ShardedVectors] = {}
        self._score_memo: dict[tuple[Any, ...], tuple[ShardedVectors, np.ndarray, np.ndarray | None]] = {}
        self._meta_arrays: dict[str, np.ndarray] | None = None
        self._by_hash: dict[str, str] | None = None
        self._sources: list[str] | None = None

    def reload(self) -> None:
        self._load()

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._row_of

    def record(self, image_id: str) -> ImageRecord:
        """The photo's record; one without a caption that the pixel model has seen carries its pixel description
        (:mod:`imagent.index.describe`), built now from the labels and people the index holds."""
        try:
            rec = self._records[image_id]
        except KeyError:
            raise KeyError(f"image id {image_id!r} is not in the gallery at {self.root}") from None
        describe_records(self, [rec])
        return rec

    def records(self, ids: Iterable[str] | None = None) -> list[ImageRecord]:
        """The records of ``ids`` (default: every photo), as :meth:`record` gives them."""
        out = [self._records[i] for i in (self.ids if ids is None else ids)]
        describe_records(self, out)
        return out

    @property
    def id_array(self) -> np.ndarray:
        """:attr:`ids` as a numpy object array: ``id_array[rows].tolist()`` turns row numbers into ids
        without a Python loop per row (a pool of 100,000 ids in a fraction of the time)."""
        if self._id_array is None:
            self._id_array = np.array(self.ids, dtype=object)
        return self._id_array

    def row(self, image_id: str) -> int:
        return self._row_of[image_id]

    def rows(self, ids: Iterable[str]) -> np.ndarray:
        return np.fromiter((self._row_of[i] for i in ids if i in self._row_of), dtype=np.int64)

    def spaces(self) -> dict[str, SpaceInfo]:
        return dict(self._spaces)

    def has_space(self, space: str) -> bool:
        return space in self._spaces

    def record_by_hash(self, content_hash: str) -> ImageRecord | None:
        """The record whose file has this sha256, if any (a reference image that is in the gallery)."""
        if self._by_hash is None:
            self._by_hash = {}
            for i in self.ids:
                h = self._records[i].content_hash
                if h:
                    self._by_hash.setdefault(h, i)
        found = self._by_hash.get(content_hash)
        return self._records[found] if found is not None else None

    def skipped(self) -> list[tuple[str, str]]:
        return self._store.skipped()

    def caption_coverage(self) -> tuple[int, int]:
        """``(records with a real caption, all records)``. Real: given by a manifest or a caption file, or
        written by a captioner; text derived from file names, dates and places does not count."""
        if self._coverage is None:
            self._coverage = (sum(1 for r in self._records.values() if r.has_caption), len(self._records))
        return self._coverage

    def skipped_keys(self) -> list[str]:
        return self._store.skipped_keys()

    def vectors(self, space: str) -> np.ndarray:
        """(N, dim) rows aligned with :attr:`ids`, from the snapshot (rebuilt if stale), of the snapshot's type.

        A one-shard snapshot (up to ``shard_rows`` images) is returned as its read-only memory map; a larger
        one as a copy in memory, made once. Searching never needs it: :meth:`scores`, :meth:`search` and
        :meth:`vector` read the shards; use this only where a whole matrix is really wanted."""
        return self.vector_shards(space).array()

    def vector(self, space: str, image_id: str) -> np.ndarray:
        """One record's stored vector in ``space`` as a float32 copy (no whole matrix is built)."""
        return np.array(self.vector_shards(space)[self.row(image_id)], dtype=np.float32)

    def vector_shards(self, space: str) -> ShardedVectors:
        """``space``'s snapshot as shards (memory-mapped), rebuilt first if stale; identical spaces share one."""
        if space not in self._spaces:
            raise GalleryError(
                f"the index at {self.root} has no {space!r} vectors (it has: "
                f"{', '.join(sorted(self._spaces)) or 'none'}); re-index with an encoder that provides them"
            )
        sv = self._vectors.get(space)
        if sv is None:
            target = snapshots.aliases(snapshots.current_meta(self._vec_dir, self._db_state())).get(space)
            # A space stored as another's (identical vectors): the very same shards, so scores are shared.
            sv = self.vector_shards(target) if target in self._spaces else self._load_snapshot(space)
            self._vectors[space] = sv
        return sv

    # ------------------------------------------------------------------ snapshots (imagent.index.snapshots)
    @property
    def _vec_dir(self) -> Path:
        return self.root / "vectors"

    def _db_state(self, generation: int | None = None, index_uuid: str | None = None) -> snapshots.DbState:
        if self._ids_sha is None:
            self._ids_sha = snapshots.ids_digest(self.ids)
        return snapshots.DbState(
            self.generation() if generation is None else generation, self.uuid() if index_uuid is None else index_uuid,
            self.ids, self._ids_sha, {k: (v.model_id, v.dim) for k, v in self._spaces.items()})

    def snapshot_is_current(self) -> bool:
        """Whether every space's snapshot matches the database as it is now (nothing to rebuild)."""
        return snapshots.is_current(self._vec_dir, self._db_state())

    def _open_snapshot(self, space: str) -> ShardedVectors | None:
        return snapshots.open_snapshot(self._vec_dir, self._db_state(), space, self.snapshot_dtype,
                                       self.mapped_shards)

    def _load_snapshot(self, space: str) -> ShardedVectors:
        # Twice: a writer in another process may have replaced the snapshot between our reading its
        # manifest and opening its shards (it removes the old ones once the new manifest is in place).
        for _ in range(2):
            sv = self._open_snapshot(space)
            if sv is not None:
                return sv
        try:
            self.write_snapshot()
        except OSError:
            # A read-only index folder (shared, mounted read-only): rebuild in memory instead.
            with self._store.read() as r:
                self._load_from(r)
                arr = snapshots.vectors_from_db(r, space, self._spaces[space].dim)
            return ShardedVectors.of_array(arr.astype(self.snapshot_dtype, copy=False))
        sv = self._open_snapshot(space)  # the fresh snapshot may store this space as an alias of an identical one
        if sv is None:
            raise GalleryError(f"the vector snapshot at {self.root / 'vectors'} cannot be read back after writing it")
        return sv

    def write_snapshot(self) -> None:
        """Rewrite every space's shards and the snapshot manifest from SQLite, in bounded memory
        (:func:`imagent.index.snapshots.write_snapshot`).

        Records, vectors and generation are read in one read transaction, so a writer committing
        meanwhile (another process) cannot make the snapshot mix two states under one generation."""
        with snapshots.snapshot_lock(self._vec_dir), self._store.read() as r:
            self._load_from(r)
            state = self._db_state(int(r.meta("generation", "0") or 0), r.meta("uuid", "") or "")
            snapshots.write_snapshot(self._vec_dir, r, state, self.snapshot_dtype, self.shard_rows)
        manifest = {
            "count": len(self.ids),
            "generation": state.generation,
            "spaces": {k: {"model_id": v.model_id, "dim": v.dim} for k, v in self._spaces.items()},
        }
        tmp = self.root / ".manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2))
        os.replace(tmp, self.root / "manifest.json")
        self._vectors = {}
        self._score_memo = {}

    # ------------------------------------------------------------------ writing (the builder uses these)
    def ensure_space(self, c: Writer, space: str, model_id: str, dim: int) -> None:
        """Declare a space; an existing space with another model or dim is an error (re-index anew)."""
        try:
            c.ensure_space(space, model_id, dim)
        except SpaceConflict as exc:
            raise GalleryError(
                f"index {self.root} holds {space!r} vectors from {exc.model_id} (dim {exc.dim}), but the "
                f"configured encoder is {model_id} (dim {dim}); use another --index or delete this one"
            ) from None
        self._spaces.setdefault(space, SpaceInfo(model_id, dim))

    def missing_vectors(self, spaces: Iterable[str]) -> dict[str, list[str]]:
        """space -> ids of the records (in row order) that have no vector in it: records stored before the
        space was added (or by a run killed while adding it). Reads SQLite only (no model, no snapshot)."""
        return self._store.missing_vectors(spaces)

    def put_vectors(self, c: Writer, image_id: str, vectors: dict[str, np.ndarray]) -> None:
        """Store vectors of an existing record (spaces added to the index later) inside the caller's
        transaction; the record and its other spaces stay as they are."""
        c.put_vectors(image_id, vectors)

    def upsert(self, c: Writer, record: ImageRecord, source_key: str, fingerprint: str,
               vectors: dict[str, np.ndarray]) -> None:
        """Insert or replace one record and its vectors inside the caller's transaction."""
        c.upsert(record, source_key, fingerprint, vectors)

    def update_record(self, c: Writer, record: ImageRecord) -> None:
        """Replace a stored record's fields (same id, row, source key and fingerprint) inside the caller's
        transaction; its vectors stay (the index upgrade that adds place names uses it)."""
        c.update_record(record)

    def remove(self, c: Writer, ids: Sequence[str]) -> None:
        c.remove(ids)

    def mark_skipped(self, c: Writer, source_key: str, path: str, reason: str) -> None:
        c.mark_skipped(source_key, path, reason)

    def forget_skipped(self, c: Writer, source_keys: Iterable[str]) -> None:
        """Drop skipped entries (files that are gone from the source, or fine now)."""
        c.forget_skipped(source_keys)

    def stage_pending(self, stage: str, version: str) -> list[str]:
        """Ids of the stored records the per-photo ``stage`` has not run on at ``version`` (row order)."""
        return self._store.stage_pending(stage, version)

    def seed_stage(self, stage: str, version: str, space: str) -> None:
        """:meth:`imagent.index.store.Store.seed_stage`, unless done already."""
        if self.meta(f"seeded:{stage}") is None:
            self._store.seed_stage(stage, version, space)

    def phashes(self) -> dict[str, int]:
        """Stored perceptual hashes by content hash (duplicate detection)."""
        return self._store.phashes()

    def put_phashes(self, hashes: dict[str, int]) -> None:
        self._store.put_phashes(hashes)

    def fingerprints(self) -> dict[str, tuple[str, str]]:
        """source_key -> (id, fingerprint) for every stored record (what an incremental run compares)."""
        return self._store.fingerprints()

    # ------------------------------------------------------------------ search
    def metadata_columns(self, fields: Sequence[str]) -> list[list[Any]] | None:
        """For each record field named (``taken_time``, ``latitude``, ``address``...), its values in row
        order, read by SQLite's JSON functions without building an :class:`ImageRecord` per photo (the
        album tools' filter columns: ~5x faster than parsing every record). None when the database no
        longer matches the ids loaded (another writer since): the caller then reads :meth:`records`."""
        rows = self._store.json_columns(fields)
        if [r[0] for r in rows] != self.ids:
            return None
        return [[r[k + 1] for r in rows] for k in range(len(fields))]

    def _metadata_arrays(self) -> dict[str, np.ndarray]:
        if self._meta_arrays is None:
            recs = self.records()
            self._meta_arrays = {
                "time": np.array(
                    [r.taken_time.timestamp() if r.taken_time else np.nan for r in recs], dtype=np.float64
                ),
                "lat": np.array([np.nan if r.latitude is None else r.latitude for r in recs], dtype=np.float64),
                "lon": np.array([np.nan if r.longitude is None else r.longitude for r in recs], dtype=np.float64),
            }
        return self._meta_arrays

    def candidate_rows(
        self,
        constraints: MetadataConstraints | None = None,
        subset: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> np.ndarray | None:
        """Rows allowed by the filters, in row order; ``None`` means every row (no filter given).

        Images with no time (or no GPS) never pass a time (or distance) filter."""
        mask: np.ndarray | None = None
        if subset is not None:
            mask = np.zeros(len(self.ids), dtype=bool)
            mask[self.rows(subset)] = True
        if constraints is not None and not constraints.is_empty():
            needs_meta = any(v is not None for v in (constraints.time_from, constraints.time_to,
                                                     constraints.within_km))
            m = self._metadata_arrays() if needs_meta else {}  # parsing every record costs ~1 s per 100k
            keep = np.ones(len(self.ids), dtype=bool)
            if constraints.time_from is not None:
                keep &= m["time"] >= constraints.time_from.timestamp()
            if constraints.time_to is not None:
                keep &= m["time"] <= constraints.time_to.timestamp()
            if constraints.within_km is not None:
                if constraints.near_latitude is None or constraints.near_longitude is None:
                    raise ValueError("a distance filter needs near_latitude and near_longitude")
                with np.errstate(invalid="ignore"):
                    d = haversine_km(constraints.near_latitude, constraints.near_longitude, m["lat"], m["lon"])
                    keep &= d <= constraints.within_km
            if constraints.rows is not None:  # a --where expression's matches (imagent.tools.photo_search)
                allowed = np.zeros(len(self.ids), dtype=bool)
                allowed[np.asarray(constraints.rows, dtype=np.int64)] = True
                keep &= allowed
            mask = keep if mask is None else (mask & keep)
        if exclude is not None:
            ex = self.rows(exclude)
            if ex.size:
                if mask is None:
                    mask = np.ones(len(self.ids), dtype=bool)
                mask[ex] = False
        return None if mask is None else np.flatnonzero(mask)

    def scores(self, query: np.ndarray, space: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Cosine of ``query`` (d,) or (q, d) with every row (or the given rows) of ``space``.

        A pool that covers most of the gallery (every row but the reference, a broad date filter)
        is scored by one scan of the whole matrix and then indexed: gathering ``mat[rows]`` would copy
        the matrix first (147 MB and ~7x the time at 100k x 384). Small pools are gathered. Shards are
        scanned one after another (:meth:`ShardedVectors.scores`), the same scores as one array."""
        mat = self.vector_shards(space)
        q = np.asarray(query, dtype=np.float32)
        # The same query over the same matrix (two spaces stored as one) is scanned once. The pool enters the
        # key by its size and ends and is compared whole on a hit (cheaper than hashing 100,000 row numbers).
        pool = None if rows is None else np.asarray(rows)
        key = (id(mat), q.shape, q.tobytes(),
               None if pool is None else (pool.shape, pool.dtype.str, pool[:1].tobytes(), pool[-1:].tobytes()))
        hit = self._score_memo.get(key)
        if hit is not None and hit[0] is mat and (pool is None or np.array_equal(hit[2], pool)):
            return hit[1].copy()
        out = mat.scores(q, rows)
        if len(self._score_memo) >= 8:
            self._score_memo.pop(next(iter(self._score_memo)), None)
        self._score_memo[key] = (mat, out, None if pool is None else pool.copy())
        return out.copy()

    def scan(self, queries: np.ndarray, space: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Cosine of each of ``queries`` (q, d) with every row of ``space``: a (q, len(self)) array aligned with
        :attr:`ids`, rows outside ``rows`` (when given) set to -inf.

        For a method that ranks several queries over one pool (OSCAR's tool calls): one matrix product reads
        the matrix once for all of them, and the pool is a mask on the result, never a gathered copy of the
        matrix or of the scores. Always exact (no approximate store)."""
        out = self.vector_shards(space).scores(np.atleast_2d(np.asarray(queries, dtype=np.float32)))
        if rows is not None:
            keep = np.zeros(out.shape[1], dtype=bool)
            keep[rows] = True
            out[:, ~keep] = -np.inf
        return out

    def search(
        self,
        query: np.ndarray,
        space: str,
        k: int,
        constraints: MetadataConstraints | None = None,
        subset: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> Ranking:
        """Cosine top-k of ``query`` in ``space`` among the rows the filters allow.

        Exact scan by default. When the space has a current approximate store (:mod:`imagent.index.ann`,
        large galleries) and the pool is large, the store proposes ``k * overfetch`` candidates inside the
        filter and they are re-ranked exactly: scores are exact cosines either way. Small pools (a tight
        filter, a per-query subset) are always scanned exactly, which is then cheaper than the store.
        The decision is :func:`~imagent.index.ann.search_pool`'s (the one ``benchmarks/search_scan.py``
        measures). A snapshot of several shards is scanned shard by shard with a running top-k (no
        gallery-sized array of scores); the ranking is the one the single-array scan gives, ties in row order."""
        rows = self.candidate_rows(constraints, subset, exclude)
        ids_ = self.ids
        store = self._usable_ann(space, query)
        found = search_pool(self.vector_shards(space), query, k, rows, store,
                            self._ann_identity(space) if store is not None else None, self.ann_params,
                            self.ann_min_rows, exact=lambda: self._exact_top_k(query, space, k, rows))
        return Ranking([ids_[int(r)] for r in found.rows], [float(x) for x in found.scores])

    def _exact_top_k(self, query: np.ndarray, space: str, k: int,
                     rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The exact scan of :meth:`search`: ``(rows, cosines)`` best first (one shard: through :meth:`scores`,
        whose memo scans the same query over the same matrix once)."""
        mat = self.vector_shards(space)
        if mat.num_shards > 1 and np.ndim(query) == 1:
            pos, top = mat.top_k(query, k, rows)
            return (pos if rows is None else rows[pos]), top
        s = self.scores(query, space, rows)
        best = top_k(s, k)
        return (best if rows is None else rows[best]), s[best]

    # ------------------------------------------------------------------ approximate search
    def _ann_identity(self, space: str) -> dict[str, Any]:
        info = self._spaces[space]
        return {"uuid": self.uuid(), "generation": self.generation(), "rows": len(self.ids),
                "model_id": info.model_id, "dim": info.dim}

    def ann_store(self, space: str) -> AnnStore:
        store = self._ann_stores.get(space)
        if store is None:
            store = self._ann_stores[space] = AnnStore(self.root, space)
        return store

    def configure(self, options: IndexOptions, ann: AnnOptions | None = None) -> None:
        """Apply the settings that shape storage and search: the snapshot's float type, the shard size of the next
        snapshot and how many shards stay mapped (``[indexing]``), and the approximate store (``[ann]``)."""
        ann = ann or AnnOptions()
        self.snapshot_dtype = np.dtype(options.vectors_dtype)
        self.shard_rows = options.shard_rows
        if options.mapped_shards != self.mapped_shards:
            self.mapped_shards = options.mapped_shards
            self._vectors, self._score_memo = {}, {}
        self.ann_mode = ann.mode
        self.ann_min_rows = 1 if ann.mode == "on" else ann.min_rows
        self.ann_params = AnnParams.of(ann)

    def ann_current(self, space: str) -> bool:
        """Whether ``space`` has an approximate store built from the database as it is now."""
        return space in self._spaces and self.ann_store(space).matches(self._ann_identity(space))

    def _usable_ann(self, space: str, query: np.ndarray) -> AnnStore | None:
        """The space's store when a search may use it (its identity and the pool's size are
        :func:`~imagent.index.ann.search_pool`'s to check); None when approximate search is off or the
        gallery is smaller than ``ann_min_rows`` (no pool of it can reach the threshold)."""
        if self.ann_mode == "off" or np.ndim(query) != 1 or space not in self._spaces:
            return None
        if len(self.ids) < self.ann_min_rows:
            return None
        return self.ann_store(space)

    def build_ann(self, spaces: Iterable[str] | None = None, force: bool = False) -> list[str]:
        """(Re)build the approximate store of each space (default: every space) unless it is current, and
        recalibrate a current one whose calibration was made for other settings (target recall, nprobe floor,
        over-fetch); returns the spaces built or recalibrated. ``ann_mode == "auto"`` builds only for galleries
        of at least ``ann_min_rows`` images (below that the exact scan is fast enough and exact). A calibration
        that stays short of its target at the probe cap is warned about (:class:`AnnRecallWarning`) and kept
        in :attr:`ann_notes` for the build report."""
        self.ann_notes = []
        if self.ann_mode == "off" or (self.ann_mode == "auto" and len(self.ids) < self.ann_min_rows and not force):
            return []
        built = []
        for space in list(spaces or self._spaces):
            store = self.ann_store(space)
            if force or not self.ann_current(space):
                store.build(self.vector_shards(space), self._ann_identity(space), self.ann_params)
            elif not store.calibrated_for(self.ann_params):
                store.recalibrate(self.vector_shards(space), self.ann_params)
            else:
                continue
            built.append(space)
            note = store.calibration_note()
            if note:
                self.ann_notes.append(note)
                warnings.warn(note, AnnRecallWarning, stacklevel=2)
        return built
