"""The gallery index: records in SQLite, vectors per named space, search with filters.

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
  ``[encoders.<name>]`` (a dual encoder gives the first two, a text embedder the third): :func:`encoder_space`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import threading
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.config import IndexOptions
from imagent.core.types import ImageRecord, MetadataConstraints, Ranking
from imagent.index.ann import DEFAULT_MIN_ROWS, AnnParams, AnnRecallWarning, AnnStore, search_pool
from imagent.index.scoring import haversine_km, top_k
from imagent.index.shards import (
    DEFAULT_SHARD_ROWS,
    LEGACY_IDS_FILE,
    SNAPSHOT_FILE,
    SNAPSHOT_FORMAT,
    WRITE_BATCH_ROWS,
    ShardedVectors,
    remove_unnamed_snapshots,
    shard_name,
    write_json_atomic,
    write_shards,
    writer_lock,
)

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
        # Rows per shard file of the next snapshot written; shards a search keeps mapped (0: all).
        self.shard_rows: int = DEFAULT_SHARD_ROWS
        self.mapped_shards: int = 0
        self.ann_min_rows: int = DEFAULT_MIN_ROWS
        self.ann_params = AnnParams()
        self.ann_notes: list[str] = []  # warnings of the last build_ann (a calibration short of its target)
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
        self._ids_sha: str | None = None
        self._vectors: dict[str, ShardedVectors] = {}
        self._score_memo: dict[tuple[Any, ...], tuple[ShardedVectors, np.ndarray, np.ndarray | None]] = {}
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
            target = self._snapshot_aliases().get(space)
            # A space stored as another's (identical vectors): the very same shards, so scores are shared.
            sv = self.vector_shards(target) if target in self._spaces else self._load_snapshot(space)
            self._vectors[space] = sv
        return sv

    def _ids_digest(self) -> str:
        """sha256 of the row order (the manifest stores this, not a million ids)."""
        if self._ids_sha is None:
            joined = "\0".join(self.ids).encode("utf-8", "surrogatepass")  # ids hold no NUL (SQLite text)
            self._ids_sha = hashlib.sha256(joined).hexdigest()
        return self._ids_sha

    def _snapshot_meta(self, name: str = SNAPSHOT_FILE) -> dict[str, Any] | None:
        try:
            meta = json.loads((self.root / "vectors" / name).read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def _current_meta(self) -> tuple[dict[str, Any], bool] | None:
        """The manifest that matches the database as it is now, and whether it is the legacy one
        (``ids.json`` beside one ``<space>.npy`` per space, written before shards); None when neither does."""
        spaces = {k: [v.model_id, v.dim] for k, v in self._spaces.items()}
        meta = self._snapshot_meta()
        if (meta is not None and meta.get("format") == SNAPSHOT_FORMAT and meta.get("generation") == self.generation()
                and meta.get("uuid") == self.uuid() and meta.get("count") == len(self.ids)
                and meta.get("spaces") == spaces and meta.get("ids_sha256") == self._ids_digest()):
            return meta, False
        legacy = self._snapshot_meta(LEGACY_IDS_FILE)
        if (legacy is not None and legacy.get("generation") == self.generation() and legacy.get("uuid") == self.uuid()
                and legacy.get("ids") == self.ids and legacy.get("spaces", spaces) == spaces):
            return legacy, True
        return None

    def _snapshot_aliases(self) -> dict[str, str]:
        """Spaces whose snapshot is another space's (identical vectors), when the snapshot is current."""
        current = self._current_meta()
        aliases = (current[0].get("aliases") or {}) if current else {}
        return {k: v for k, v in aliases.items() if isinstance(k, str) and isinstance(v, str)}

    def snapshot_is_current(self) -> bool:
        """Whether every space's snapshot matches the database as it is now (nothing to rebuild)."""
        current = self._current_meta()
        if current is None:
            return False
        meta, legacy = current
        aliases = self._snapshot_aliases()
        vec_dir = self.root / "vectors"
        if legacy:
            return all((vec_dir / f"{aliases.get(s, s)}.npy").exists() for s in self._spaces)
        shards = meta.get("shards") or {}
        for s in self._spaces:
            entry = shards.get(aliases.get(s, s))
            if not isinstance(entry, dict) or not isinstance(entry.get("rows"), list):
                return False
            if not all((vec_dir / str(entry.get("dir")) / shard_name(i)).is_file() for i in range(len(entry["rows"]))):
                return False
        return True

    def _open_snapshot(self, space: str) -> ShardedVectors | None:
        """``space``'s current snapshot of the configured type, or None (missing, stale, damaged)."""
        current = self._current_meta()
        if current is None:
            return None
        meta, legacy = current
        target = self._snapshot_aliases().get(space, space)
        dim = self._spaces[space].dim
        vec_dir = self.root / "vectors"
        try:
            if legacy:
                arr = np.load(vec_dir / f"{target}.npy", mmap_mode="r", allow_pickle=False)
                ok = arr.shape == (len(self.ids), dim) and arr.dtype == self.snapshot_dtype
                return ShardedVectors.of_array(arr) if ok else None
            entry = (meta.get("shards") or {}).get(target)
            if not isinstance(entry, dict) or meta.get("dtype") != self.snapshot_dtype.name:
                return None
            counts = [int(c) for c in entry.get("rows", [])]
            if sum(counts) != len(self.ids) or ".." in Path(str(entry.get("dir"))).parts:
                return None
            return ShardedVectors.open(vec_dir / str(entry["dir"]), counts, dim, self.snapshot_dtype,
                                       self.mapped_shards)
        except OSError as exc:
            if exc.errno == errno.ENOMEM:  # no room to map it (a memory cap): rewriting would not help
                raise
            return None
        except (ValueError, TypeError):
            return None

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
            self._load()
            return ShardedVectors.of_array(self._vectors_from_db(space).astype(self.snapshot_dtype, copy=False))
        sv = self._open_snapshot(space)  # the fresh snapshot may store this space as an alias of an identical one
        if sv is None:
            raise GalleryError(f"the vector snapshot at {self.root / 'vectors'} cannot be read back after writing it")
        return sv

    def _vector_batches(self, c: sqlite3.Connection, space: str) -> Iterator[np.ndarray]:
        """``space``'s vectors in row order, :data:`WRITE_BATCH_ROWS` float32 rows at a time (zeros for a
        record without one), read in the caller's transaction."""
        dim = self._spaces[space].dim
        cur = c.execute("SELECT v.vec FROM records r LEFT JOIN vectors v ON v.space = ? AND v.id = r.id "
                        "ORDER BY r.row", (space,))
        while blobs := [b for (b,) in cur.fetchmany(WRITE_BATCH_ROWS)]:
            if all(b is not None and len(b) == 4 * dim for b in blobs):
                yield np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim)
                continue
            out = np.zeros((len(blobs), dim), dtype=np.float32)
            for j, blob in enumerate(blobs):
                if blob is not None:
                    out[j] = np.frombuffer(blob, dtype=np.float32)  # a wrong length raises, as it should
            yield out

    def _vectors_from_db(self, space: str) -> np.ndarray:
        parts = list(self._vector_batches(self._conn(), space))
        return np.concatenate(parts) if parts else np.zeros((0, self._spaces[space].dim), dtype=np.float32)

    def write_snapshot(self) -> None:
        """Rewrite every space's shards and the snapshot manifest from SQLite, in bounded memory.

        Records, vectors and generation are read in one read transaction, so a writer committing
        meanwhile (another process) cannot make the snapshot mix two states under one generation.
        Each space's shards go to a new directory (``vectors/<space>/g<generation>-<token>/``), a batch of
        rows at a time; ``snapshot.json`` naming them is replaced last: until then the old manifest names the
        old shards, untouched, and readers keep using them. Then the shards no manifest names are removed
        (with a legacy single-file snapshot). Snapshot writers on one index take turns (a file lock)."""
        vec_dir = self.root / "vectors"
        vec_dir.mkdir(exist_ok=True)
        with writer_lock(vec_dir / ".write.lock"):
            c = self._conn()
            c.execute("BEGIN")
            try:
                self._load_from(c)
                generation = int(self._meta("generation", "0") or 0)
                index_uuid = self._meta("uuid", "") or ""
                stamp = f"g{generation}-{uuid.uuid4().hex[:8]}"
                written: dict[str, ShardedVectors] = {}
                entries: dict[str, dict[str, Any]] = {}
                # Identical spaces are stored once (caption mode embeds the same captions for `image`,
                # `caption_dual` and `caption_text` when one text model serves both roles).
                aliases: dict[str, str] = {}
                for space, info in self._spaces.items():
                    rel = f"{space}/{stamp}"
                    done = write_shards(vec_dir / rel, self._vector_batches(c, space), len(self.ids), info.dim,
                                        self.snapshot_dtype, self.shard_rows, written)
                    if done.alias is not None:
                        aliases[space] = done.alias
                        continue
                    entries[space] = {"dir": rel, "rows": done.counts}
                    written[space] = ShardedVectors.open(vec_dir / rel, done.counts, info.dim, self.snapshot_dtype,
                                                         mapped_shards=1)
            finally:
                c.execute("COMMIT")
            written.clear()  # unmapped before the old files go
            spaces = {k: [v.model_id, v.dim] for k, v in self._spaces.items()}
            write_json_atomic(vec_dir / SNAPSHOT_FILE, {
                "format": SNAPSHOT_FORMAT, "generation": generation, "uuid": index_uuid, "count": len(self.ids),
                "ids_sha256": self._ids_digest(), "spaces": spaces, "dtype": self.snapshot_dtype.name,
                "shard_rows": self.shard_rows, "shards": entries, "aliases": aliases})
            remove_unnamed_snapshots(vec_dir, {e["dir"] for e in entries.values()})
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

    def missing_vectors(self, spaces: Iterable[str]) -> dict[str, list[str]]:
        """space -> ids of the records (in row order) that have no vector in it: records stored before the
        space was added (or by a run killed while adding it). Reads SQLite only (no model, no snapshot)."""
        c = self._conn()
        out: dict[str, list[str]] = {}
        records = c.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        for space in spaces:
            # Vectors belong to stored records (removals delete them), so a full count means none is missing:
            # the common case, read from the (space, id) index without a join.
            if c.execute("SELECT COUNT(*) FROM vectors WHERE space = ?", (space,)).fetchone()[0] >= records:
                continue
            ids = [i for (i,) in c.execute(
                "SELECT r.id FROM records r WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE v.space = ? AND "
                "v.id = r.id) ORDER BY r.row", (space,))]
            if ids:
                out[space] = ids
        return out

    def put_vectors(self, c: sqlite3.Connection, image_id: str, vectors: dict[str, np.ndarray]) -> None:
        """Store vectors of an existing record (spaces added to the index later) inside the caller's
        transaction; the record and its other spaces stay as they are."""
        for space, vec in vectors.items():
            v = np.asarray(vec, dtype=np.float32).reshape(-1)
            c.execute("INSERT OR REPLACE INTO vectors(space, id, vec) VALUES (?,?,?)", (space, image_id, v.tobytes()))
        if vectors:
            self._bump_generation(c)

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

    def configure(self, options: IndexOptions) -> None:
        """Apply the ``indexing`` settings that shape storage and search: the snapshot's float type and the
        approximate store (``ann*``), the shard size of the next snapshot and how many shards stay mapped."""
        self.snapshot_dtype = np.dtype(options.vectors_dtype)
        self.shard_rows = options.shard_rows
        if options.mapped_shards != self.mapped_shards:
            self.mapped_shards = options.mapped_shards
            self._vectors, self._score_memo = {}, {}
        self.ann_mode = options.ann
        self.ann_min_rows = 1 if options.ann == "on" else options.ann_min_rows
        self.ann_params = AnnParams.of(options)

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
