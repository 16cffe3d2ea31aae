"""The gallery index: records in SQLite, vectors per named space, search with filters.

Layout of an index directory::

    records.sqlite     records, per-record vectors (the source of truth), skipped files, spaces
    vectors/<space>.npy  dense snapshot of each space, rows aligned with ``ids.json``
    vectors/ids.json     row order of the snapshot, the generation it was made at and the index's uuid

Every write goes through SQLite transactions, so a killed build leaves the database at its last
committed batch (resume picks up from there) and never half-written. The ``.npy`` snapshots are
derived data, replaced atomically (write to a temp file, ``os.replace``); when their generation,
row order or index uuid does not match the database's, they are rebuilt from SQLite on first use.
Every record write bumps the generation in the same transaction, so a snapshot can never be
mistaken for current after a write (a killed build included). The uuid is drawn when the database
is created, so a snapshot left beside a re-created database is not mistaken for its own either.

Vector spaces (names used by every method):

- ``image``: the dual encoder's image vectors (in caption mode, the captions encoded as images are);
- ``caption_dual``: captions in the dual encoder's text space (CLIP text encoder on both sides);
- ``caption_text``: captions in the text embedder's space.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.config import IndexOptions
from imagent.core.types import ImageRecord, MetadataConstraints, Ranking
from imagent.index.ann import AnnParams, AnnStore, search_reranked
from imagent.index.scoring import cosine_scores, haversine_km, top_k

SPACE_IMAGE = "image"
# A candidate pool of at least 1/_GATHER_FRACTION of the gallery is scored by scanning every row and
# indexing the scores (no copy of the matrix); smaller pools gather their rows first.
_GATHER_FRACTION = 4
SPACE_CAPTION_DUAL = "caption_dual"
SPACE_CAPTION_TEXT = "caption_text"

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    row INTEGER UNIQUE NOT NULL,
    path TEXT NOT NULL,
    source_key TEXT NOT NULL,       -- what identifies the input (absolute path or manifest row key)
    fingerprint TEXT NOT NULL,      -- size:mtime:caption-hash; a change triggers re-indexing
    data TEXT NOT NULL              -- ImageRecord.to_dict() as JSON
);
CREATE INDEX IF NOT EXISTS records_source ON records(source_key);
CREATE TABLE IF NOT EXISTS vectors (
    space TEXT NOT NULL, id TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (space, id)
);
CREATE TABLE IF NOT EXISTS spaces (name TEXT PRIMARY KEY, model_id TEXT NOT NULL, dim INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS skipped (source_key TEXT PRIMARY KEY, path TEXT, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _sql_text(s: str) -> str | bytes:
    """A key or path as SQLite can store it. Text with lone surrogates (a file name that is not UTF-8, as
    ``os.listdir`` decodes it) is stored as its ``surrogatepass`` bytes: exact and reversible, so the file still
    opens and the next run finds the same key; valid text is stored as text, unchanged."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def _from_sql(value: str | bytes | None) -> str:
    """Inverse of :func:`_sql_text`."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value or ""


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
        self._db_path = db
        self._local = threading.local()
        # Approximate search (see search()): "auto" uses a current store for pools of >= ann_min_rows rows.
        self.ann_mode: str = "auto"
        # float16 halves the snapshot (and memory-mapped scans); SQLite keeps float32 either way.
        self.snapshot_dtype = np.dtype(np.float32)
        self.ann_min_rows: int = 200_000
        self.ann_params = AnnParams()
        self._ann_stores: dict[str, AnnStore] = {}
        conn = self._conn()
        conn.executescript(SCHEMA)
        if conn.execute("SELECT 1 FROM meta WHERE key='uuid'").fetchone() is None:
            # Only written once, so opening an existing index stays a read.
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('uuid', ?)", (uuid.uuid4().hex,))
        self._load()

    # ------------------------------------------------------------------ storage plumbing
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._db_path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
        return conn

    class _Tx:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type: Any, *_: Any) -> None:
            if exc_type is not None:
                self.conn.execute("ROLLBACK")
                return
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, I/O error) leaves the transaction open; end it so the
                # connection stays usable and nothing half-done can be committed later.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise

    def transaction(self) -> Gallery._Tx:
        return Gallery._Tx(self._conn())

    def _meta(self, key: str, default: str | None = None) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def generation(self) -> int:
        return int(self._meta("generation", "0") or 0)

    def uuid(self) -> str:
        return self._meta("uuid", "") or ""

    def _bump_generation(self, c: sqlite3.Connection) -> None:
        c.execute(
            "INSERT INTO meta(key, value) VALUES('generation', '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def _load(self) -> None:
        c = self._conn()
        if c.in_transaction:
            self._load_from(c)
            return
        # One read transaction: records and spaces from the same committed state.
        c.execute("BEGIN")
        try:
            self._load_from(c)
        finally:
            c.execute("COMMIT")

    def _load_from(self, c: sqlite3.Connection) -> None:
        rows = c.execute("SELECT id, data FROM records ORDER BY row").fetchall()
        self.ids: list[str] = [r[0] for r in rows]
        self._records = _LazyRecords({r[0]: r[1] for r in rows})
        self._row_of = {i: n for n, i in enumerate(self.ids)}
        self._coverage: tuple[int, int] | None = None
        self._id_array: np.ndarray | None = None
        self._spaces = {
            name: SpaceInfo(model_id, dim)
            for name, model_id, dim in c.execute("SELECT name, model_id, dim FROM spaces")
        }
        self._vectors: dict[str, np.ndarray] = {}
        self._score_memo: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._meta_arrays: dict[str, np.ndarray] | None = None
        self._by_hash: dict[str, str] | None = None

    def reload(self) -> None:
        self._load()

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._row_of

    def record(self, image_id: str) -> ImageRecord:
        try:
            return self._records[image_id]
        except KeyError:
            raise KeyError(f"image id {image_id!r} is not in the gallery at {self.root}") from None

    def records(self, ids: Iterable[str] | None = None) -> list[ImageRecord]:
        return [self._records[i] for i in (self.ids if ids is None else ids)]

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
        return [(_from_sql(p) or _from_sql(k), _from_sql(r))
                for k, p, r in self._conn().execute("SELECT source_key, path, reason FROM skipped")]

    def caption_coverage(self) -> tuple[int, int]:
        """``(records with a real caption, all records)``. Real: given by a manifest or a caption file, or
        written by a captioner; text derived from file names, dates and places does not count."""
        if self._coverage is None:
            self._coverage = (sum(1 for r in self._records.values() if r.has_caption), len(self._records))
        return self._coverage

    def skipped_keys(self) -> list[str]:
        return [_from_sql(k) for (k,) in self._conn().execute("SELECT source_key FROM skipped")]

    def vectors(self, space: str) -> np.ndarray:
        """(N, dim) float32 rows aligned with :attr:`ids`, loaded from the snapshot (rebuilt if stale)."""
        if space not in self._spaces:
            raise GalleryError(
                f"the index at {self.root} has no {space!r} vectors (it has: "
                f"{', '.join(sorted(self._spaces)) or 'none'}); re-index with an encoder that provides them"
            )
        arr = self._vectors.get(space)
        if arr is None:
            target = self._snapshot_aliases().get(space)
            # A space stored as another's (identical vectors): the very same array, so scores are shared.
            arr = self.vectors(target) if target in self._spaces else self._load_snapshot(space)
            self._vectors[space] = arr
        return arr

    def _snapshot_meta(self) -> dict[str, Any] | None:
        info = self.root / "vectors" / "ids.json"
        try:
            meta = json.loads(info.read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def _snapshot_ok(self) -> bool:
        meta = self._snapshot_meta()
        if meta is None:
            return False
        spaces = {k: [v.model_id, v.dim] for k, v in self._spaces.items()}
        return (
            meta.get("generation") == self.generation()
            and meta.get("uuid") == self.uuid()
            and meta.get("ids") == self.ids
            and meta.get("spaces", spaces) == spaces
        )

    def _snapshot_aliases(self) -> dict[str, str]:
        """Spaces whose snapshot is another space's file (identical vectors), when the snapshot is current."""
        if not self._snapshot_ok():
            return {}
        aliases = (self._snapshot_meta() or {}).get("aliases") or {}
        return {k: v for k, v in aliases.items() if isinstance(k, str) and isinstance(v, str)}

    def snapshot_is_current(self) -> bool:
        """Whether every space's ``.npy`` matches the database as it is now (nothing to rebuild)."""
        if not self._snapshot_ok():
            return False
        aliases = self._snapshot_aliases()
        return all((self.root / "vectors" / f"{aliases.get(s, s)}.npy").exists() for s in self._spaces)

    def _load_snapshot(self, space: str) -> np.ndarray:
        path = self.root / "vectors" / f"{space}.npy"
        if self._snapshot_ok() and path.exists():
            try:
                arr = np.load(path, mmap_mode="r")
                if arr.shape == (len(self.ids), self._spaces[space].dim) and arr.dtype == self.snapshot_dtype:
                    return arr
            except (OSError, ValueError):
                pass
        try:
            self.write_snapshot()
        except OSError:
            # A read-only index folder (shared, mounted read-only): rebuild in memory instead.
            self._load()
            return self._vectors_from_db(space)
        # The fresh snapshot may store this space as an alias of an identical one.
        target = self._snapshot_aliases().get(space, space)
        return np.load(self.root / "vectors" / f"{target}.npy", mmap_mode="r")

    def _vectors_from_db(self, space: str) -> np.ndarray:
        dim = self._spaces[space].dim
        out = np.zeros((len(self.ids), dim), dtype=np.float32)
        for image_id, blob in self._conn().execute("SELECT id, vec FROM vectors WHERE space=?", (space,)):
            r = self._row_of.get(image_id)
            if r is not None:
                out[r] = np.frombuffer(blob, dtype=np.float32)
        return out

    def write_snapshot(self) -> None:
        """Rewrite every space's ``.npy`` and ``ids.json`` atomically from SQLite.

        Records, vectors and generation are read in one read transaction, so a writer committing
        meanwhile (another process) cannot make the snapshot mix two states under one generation.
        ``ids.json`` is replaced last: until then the old one names an older generation and
        readers keep treating the snapshot as stale."""
        c = self._conn()
        c.execute("BEGIN")
        try:
            self._load_from(c)
            generation = int(self._meta("generation", "0") or 0)
            index_uuid = self._meta("uuid", "") or ""
            arrays = {space: self._vectors_from_db(space) for space in self._spaces}
        finally:
            c.execute("COMMIT")
        vec_dir = self.root / "vectors"
        # Identical spaces are stored once (caption mode embeds the same captions for `image`,
        # `caption_dual` and `caption_text` when one text model serves both roles).
        aliases: dict[str, str] = {}
        written: list[str] = []
        for space, arr in arrays.items():
            same = next((w for w in written if arrays[w].shape == arr.shape and np.array_equal(arrays[w], arr)), None)
            if same is not None:
                aliases[space] = same
                continue
            written.append(space)
            tmp = vec_dir / f".{space}.npy.tmp"
            with open(tmp, "wb") as f:
                np.save(f, arr.astype(self.snapshot_dtype, copy=False))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, vec_dir / f"{space}.npy")
        spaces = {k: [v.model_id, v.dim] for k, v in self._spaces.items()}
        tmp = vec_dir / ".ids.json.tmp"
        tmp.write_text(json.dumps({"generation": generation, "uuid": index_uuid, "spaces": spaces,
                                   "aliases": aliases, "ids": self.ids}))
        os.replace(tmp, vec_dir / "ids.json")
        for space in aliases:  # an older snapshot's own file for a space that is now an alias
            (vec_dir / f"{space}.npy").unlink(missing_ok=True)
        manifest = {
            "count": len(self.ids),
            "generation": generation,
            "spaces": {k: {"model_id": v.model_id, "dim": v.dim} for k, v in self._spaces.items()},
        }
        tmp = self.root / ".manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2))
        os.replace(tmp, self.root / "manifest.json")
        self._vectors = {}
        self._score_memo = {}

    # ------------------------------------------------------------------ writing (the builder uses these)
    def ensure_space(self, c: sqlite3.Connection, space: str, model_id: str, dim: int) -> None:
        """Declare a space; an existing space with another model or dim is an error (re-index anew)."""
        row = c.execute("SELECT model_id, dim FROM spaces WHERE name=?", (space,)).fetchone()
        if row is None:
            c.execute("INSERT INTO spaces(name, model_id, dim) VALUES (?,?,?)", (space, model_id, dim))
            self._spaces[space] = SpaceInfo(model_id, dim)
        elif (row[0], row[1]) != (model_id, dim):
            raise GalleryError(
                f"index {self.root} holds {space!r} vectors from {row[0]} (dim {row[1]}), but the "
                f"configured encoder is {model_id} (dim {dim}); use another --index or delete this one"
            )

    def upsert(
        self,
        c: sqlite3.Connection,
        record: ImageRecord,
        source_key: str,
        fingerprint: str,
        vectors: dict[str, np.ndarray],
    ) -> None:
        """Insert or replace one record and its vectors inside the caller's transaction."""
        existing = c.execute("SELECT row FROM records WHERE id=?", (record.id,)).fetchone()
        if existing is None:
            nxt = c.execute("SELECT COALESCE(MAX(row), -1) + 1 FROM records").fetchone()[0]
            row = int(nxt)
        else:
            row = int(existing[0])
        c.execute(
            "INSERT OR REPLACE INTO records(id, row, path, source_key, fingerprint, data) VALUES (?,?,?,?,?,?)",
            (record.id, row, _sql_text(record.path), _sql_text(source_key), fingerprint,
             json.dumps(record.to_dict())),  # ensure_ascii: surrogates in the JSON are \\u-escaped
        )
        c.execute("DELETE FROM skipped WHERE source_key=?", (_sql_text(source_key),))
        for space, vec in vectors.items():
            v = np.asarray(vec, dtype=np.float32).reshape(-1)
            c.execute(
                "INSERT OR REPLACE INTO vectors(space, id, vec) VALUES (?,?,?)", (space, record.id, v.tobytes())
            )
        self._bump_generation(c)

    def remove(self, c: sqlite3.Connection, ids: Sequence[str]) -> None:
        for i in ids:
            c.execute("DELETE FROM records WHERE id=?", (i,))
            c.execute("DELETE FROM vectors WHERE id=?", (i,))
        if ids:
            self._bump_generation(c)

    def mark_skipped(self, c: sqlite3.Connection, source_key: str, path: str, reason: str) -> None:
        c.execute(
            "INSERT OR REPLACE INTO skipped(source_key, path, reason) VALUES (?,?,?)",
            (_sql_text(source_key), _sql_text(path), _sql_text(reason)),
        )

    def forget_skipped(self, c: sqlite3.Connection, source_keys: Iterable[str]) -> None:
        """Drop skipped entries (files that are gone from the source, or fine now)."""
        c.executemany("DELETE FROM skipped WHERE source_key=?", [(_sql_text(k),) for k in source_keys])

    def fingerprints(self) -> dict[str, tuple[str, str]]:
        """source_key -> (id, fingerprint) for every stored record (what an incremental run compares)."""
        return {_from_sql(k): (i, f)
                for i, k, f in self._conn().execute("SELECT id, source_key, fingerprint FROM records")}

    # ------------------------------------------------------------------ search
    def metadata_columns(self, fields: Sequence[str]) -> list[list[Any]] | None:
        """For each record field named (``taken_time``, ``latitude``, ``address``...), its values in row
        order, read by SQLite's JSON functions without building an :class:`ImageRecord` per photo (the
        album tools' filter columns: ~5x faster than parsing every record). None when the database no
        longer matches the ids loaded (another writer since): the caller then reads :meth:`records`."""
        if not all(f.isidentifier() for f in fields):
            raise ValueError(f"not record field names: {list(fields)}")
        cols = ", ".join(f"json_extract(data, '$.{f}')" for f in fields)
        rows = self._conn().execute(f"SELECT id, {cols} FROM records ORDER BY row").fetchall()
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
            m = self._metadata_arrays()
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
        the matrix first (147 MB and ~7x the time at 100k x 384). Small pools are gathered."""
        mat = self.vectors(space)
        q = np.asarray(query, dtype=np.float32)
        # The same query over the same matrix (two spaces stored as one) is scanned once.
        key = (id(mat), q.tobytes(), None if rows is None else hash(np.asarray(rows).tobytes()))
        hit = self._score_memo.get(key)
        if hit is not None and hit[0] is mat:
            return hit[1].copy()
        if rows is None:
            out = cosine_scores(mat, q)
        elif len(rows) * _GATHER_FRACTION >= mat.shape[0]:
            out = cosine_scores(mat, q)[..., rows]
        else:
            out = cosine_scores(mat[rows], q)
        if len(self._score_memo) >= 8:
            self._score_memo.pop(next(iter(self._score_memo)), None)
        self._score_memo[key] = (mat, out)
        return out.copy()

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
        filter, a per-query subset) are always scanned exactly, which is then cheaper than the store."""
        rows = self.candidate_rows(constraints, subset, exclude)
        ids_ = self.ids
        store = self._usable_ann(space, query, rows)
        if store is not None:
            found = search_reranked(store, self.vectors(space), query, k, self.ann_params, rows)
            if found is not None:
                return Ranking([ids_[int(r)] for r in found[0]], [float(x) for x in found[1]])
        s = self.scores(query, space, rows)
        best = top_k(s, k)
        picked = best if rows is None else rows[best]
        return Ranking([ids_[int(r)] for r in picked], [float(x) for x in s[best]])

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

    def configure(self, options: IndexOptions) -> None:
        """Apply the ``indexing`` settings that shape storage and search: the snapshot's float type and the
        approximate store (``ann*``)."""
        self.snapshot_dtype = np.dtype(options.vectors_dtype)
        self.ann_mode = options.ann
        self.ann_min_rows = 1 if options.ann == "on" else options.ann_min_rows
        self.ann_params = AnnParams(nprobe=options.ann_nprobe, overfetch=options.ann_overfetch)

    def ann_current(self, space: str) -> bool:
        """Whether ``space`` has an approximate store built from the database as it is now."""
        return space in self._spaces and self.ann_store(space).matches(self._ann_identity(space))

    def _usable_ann(self, space: str, query: np.ndarray, rows: np.ndarray | None) -> AnnStore | None:
        if self.ann_mode == "off" or np.ndim(query) != 1 or space not in self._spaces:
            return None
        pool = len(self.ids) if rows is None else len(rows)
        if pool < self.ann_min_rows or not self.ann_current(space):
            return None
        return self.ann_store(space)

    def build_ann(self, spaces: Iterable[str] | None = None, force: bool = False) -> list[str]:
        """(Re)build the approximate store of each space (default: every space) unless it is current;
        returns the spaces built. ``ann_mode == "auto"`` builds only for galleries of at least
        ``ann_min_rows`` images (below that the exact scan is fast enough and exact)."""
        if self.ann_mode == "off" or (self.ann_mode == "auto" and len(self.ids) < self.ann_min_rows and not force):
            return []
        built = []
        for space in list(spaces or self._spaces):
            if force or not self.ann_current(space):
                self.ann_store(space).build(self.vectors(space), self._ann_identity(space), self.ann_params)
                built.append(space)
        return built
