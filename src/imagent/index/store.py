"""The index's SQLite store: schema, connections, read and write transactions.

``records.sqlite`` is the source of truth of an index: records (JSON of :class:`ImageRecord`), per-record
float32 vectors per space, declared spaces, skipped inputs and a small ``meta`` table (generation, uuid).
Nothing outside this module holds a raw :class:`sqlite3.Connection`: readers get a :class:`Reader` (one
consistent read transaction), writers a :class:`Writer` from :meth:`Store.transaction` (``BEGIN IMMEDIATE``,
committed on exit, rolled back on an exception). Every record write bumps the generation in the same
transaction, so derived data (vector snapshots, approximate stores) can tell it is stale.

Keys and paths that are not valid UTF-8 (surrogate escapes from ``os.listdir``) are stored as their exact
``surrogatepass`` bytes and read back unchanged.

Use it through :class:`imagent.index.gallery.Gallery`, which adds the loaded view and search.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.types import ImageRecord

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
CREATE TABLE IF NOT EXISTS phash (content TEXT PRIMARY KEY, hash TEXT NOT NULL);  -- perceptual hashes (hex)
-- which per-photo stage (imagent/index/stages.py) ran on which record, at which version
CREATE TABLE IF NOT EXISTS stage_runs (
    stage TEXT NOT NULL, id TEXT NOT NULL, version TEXT NOT NULL, PRIMARY KEY (stage, id)
);
"""

# Rows read from SQLite per batch when vectors are streamed into a snapshot.
READ_BATCH_ROWS = 8192


class SpaceConflict(ValueError):
    """A space exists already with another model or dimension: ``(model_id, dim)`` stored."""

    def __init__(self, model_id: str, dim: int) -> None:
        super().__init__(f"space holds {model_id} (dim {dim})")
        self.model_id, self.dim = model_id, dim


def sql_text(s: str) -> str | bytes:
    """A key or path as SQLite can store it. Text with lone surrogates (a file name that is not UTF-8, as
    ``os.listdir`` decodes it) is stored as its ``surrogatepass`` bytes: exact and reversible, so the file still
    opens and the next run finds the same key; valid text is stored as text, unchanged."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def from_sql(value: str | bytes | None) -> str:
    """Inverse of :func:`sql_text`."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value or ""


class Reader:
    """Reads inside one transaction (a consistent state of the database)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def meta(self, key: str, default: str | None = None) -> str | None:
        row = self._c.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def record_rows(self) -> list[tuple[str, str]]:
        """``(id, record JSON)`` in row order."""
        return [(r[0], r[1]) for r in self._c.execute("SELECT id, data FROM records ORDER BY row")]

    def spaces(self) -> list[tuple[str, str, int]]:
        """``(name, model_id, dim)`` of every declared space."""
        return [(n, m, int(d)) for n, m, d in self._c.execute("SELECT name, model_id, dim FROM spaces")]

    def vector_batches(self, space: str, dim: int, batch_rows: int = READ_BATCH_ROWS) -> Iterator[np.ndarray]:
        """``space``'s vectors in row order, ``batch_rows`` float32 rows at a time (zeros for a record without
        one)."""
        cur = self._c.execute("SELECT v.vec FROM records r LEFT JOIN vectors v ON v.space = ? AND v.id = r.id "
                              "ORDER BY r.row", (space,))
        while blobs := [b for (b,) in cur.fetchmany(batch_rows)]:
            if all(b is not None and len(b) == 4 * dim for b in blobs):
                yield np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim)
                continue
            out = np.zeros((len(blobs), dim), dtype=np.float32)
            for j, blob in enumerate(blobs):
                if blob is not None:
                    out[j] = np.frombuffer(blob, dtype=np.float32)  # a wrong length raises, as it should
            yield out


class Writer(Reader):
    """Writes inside the caller's transaction (see :meth:`Store.transaction`)."""

    def bump_generation(self) -> None:
        self._c.execute(
            "INSERT INTO meta(key, value) VALUES('generation', '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def set_meta(self, key: str, value: str) -> None:
        self._c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))

    def ensure_space(self, space: str, model_id: str, dim: int) -> bool:
        """Declare a space; True when it is new. Raises :class:`SpaceConflict` for another model or dim."""
        row = self._c.execute("SELECT model_id, dim FROM spaces WHERE name=?", (space,)).fetchone()
        if row is None:
            self._c.execute("INSERT INTO spaces(name, model_id, dim) VALUES (?,?,?)", (space, model_id, dim))
            return True
        if (row[0], row[1]) != (model_id, dim):
            raise SpaceConflict(row[0], row[1])
        return False

    def put_vectors(self, image_id: str, vectors: dict[str, np.ndarray]) -> None:
        for space, vec in vectors.items():
            v = np.asarray(vec, dtype=np.float32).reshape(-1)
            self._c.execute("INSERT OR REPLACE INTO vectors(space, id, vec) VALUES (?,?,?)",
                            (space, image_id, v.tobytes()))
        if vectors:
            self.bump_generation()

    def upsert(self, record: ImageRecord, source_key: str, fingerprint: str,
               vectors: dict[str, np.ndarray]) -> None:
        c = self._c
        existing = c.execute("SELECT row FROM records WHERE id=?", (record.id,)).fetchone()
        if existing is None:
            row = int(c.execute("SELECT COALESCE(MAX(row), -1) + 1 FROM records").fetchone()[0])
        else:
            row = int(existing[0])
        c.execute(
            "INSERT OR REPLACE INTO records(id, row, path, source_key, fingerprint, data) VALUES (?,?,?,?,?,?)",
            (record.id, row, sql_text(record.path), sql_text(source_key), fingerprint,
             json.dumps(record.to_dict())),  # ensure_ascii: surrogates in the JSON are \\u-escaped
        )
        c.execute("DELETE FROM skipped WHERE source_key=?", (sql_text(source_key),))
        for space, vec in vectors.items():
            v = np.asarray(vec, dtype=np.float32).reshape(-1)
            c.execute("INSERT OR REPLACE INTO vectors(space, id, vec) VALUES (?,?,?)", (space, record.id, v.tobytes()))
        self.bump_generation()

    def update_record(self, record: ImageRecord) -> None:
        """Replace a stored record's data (same id, row, key and fingerprint; vectors untouched)."""
        self._c.execute("UPDATE records SET data=? WHERE id=?", (json.dumps(record.to_dict()), record.id))
        self.bump_generation()

    def remove(self, ids: Sequence[str]) -> None:
        for i in ids:
            self._c.execute("DELETE FROM records WHERE id=?", (i,))
            self._c.execute("DELETE FROM vectors WHERE id=?", (i,))
            self._c.execute("DELETE FROM stage_runs WHERE id=?", (i,))
        if ids:
            self.bump_generation()

    def drop_vectors(self, space: str, ids: Sequence[str]) -> None:
        """Delete ``ids``' vectors in ``space`` (stale: the stage that fills it computes them again)."""
        self._c.executemany("DELETE FROM vectors WHERE space=? AND id=?", [(space, i) for i in ids])
        if ids:
            self.bump_generation()

    def mark_stage(self, stage: str, ids: Sequence[str], version: str) -> None:
        """Record that ``stage`` ran on ``ids`` at ``version`` (derived bookkeeping: no generation bump)."""
        self._c.executemany("INSERT OR REPLACE INTO stage_runs(stage, id, version) VALUES (?,?,?)",
                            [(stage, i, version) for i in ids])

    def mark_skipped(self, source_key: str, path: str, reason: str) -> None:
        self._c.execute("INSERT OR REPLACE INTO skipped(source_key, path, reason) VALUES (?,?,?)",
                        (sql_text(source_key), sql_text(path), sql_text(reason)))

    def forget_skipped(self, source_keys: Iterable[str]) -> None:
        self._c.executemany("DELETE FROM skipped WHERE source_key=?", [(sql_text(k),) for k in source_keys])


class _Tx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> Writer:
        self.conn.execute("BEGIN IMMEDIATE")
        return Writer(self.conn)

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


class Store:
    """One index database; a connection per thread (WAL, synchronous=FULL)."""

    def __init__(self, db_path: Path) -> None:
        self.path = db_path
        self._local = threading.local()
        conn = self._conn()
        conn.executescript(SCHEMA)
        if conn.execute("SELECT 1 FROM meta WHERE key='uuid'").fetchone() is None:
            # Only written once, so opening an existing index stays a read.
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('uuid', ?)", (uuid.uuid4().hex,))

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
        return conn

    def transaction(self) -> _Tx:
        """``with store.transaction() as w:`` a :class:`Writer`; committed on exit, rolled back on error."""
        return _Tx(self._conn())

    @contextmanager
    def read(self) -> Iterator[Reader]:
        """One read transaction (or the transaction already open on this thread's connection)."""
        c = self._conn()
        if c.in_transaction:
            yield Reader(c)
            return
        c.execute("BEGIN")
        try:
            yield Reader(c)
        finally:
            c.execute("COMMIT")

    def meta(self, key: str, default: str | None = None) -> str | None:
        return Reader(self._conn()).meta(key, default)

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as w:
            w.set_meta(key, value)

    def meta_with_prefix(self, prefix: str) -> dict[str, str]:
        """Every ``meta`` entry whose key starts with ``prefix``."""
        rows = self._conn().execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?", (len(prefix), prefix))
        return dict(rows.fetchall())

    def skipped(self) -> list[tuple[str, str]]:
        return [(from_sql(p) or from_sql(k), from_sql(r))
                for k, p, r in self._conn().execute("SELECT source_key, path, reason FROM skipped")]

    def skipped_keys(self) -> list[str]:
        return [from_sql(k) for (k,) in self._conn().execute("SELECT source_key FROM skipped")]

    def fingerprints(self) -> dict[str, tuple[str, str]]:
        return {from_sql(k): (i, f)
                for i, k, f in self._conn().execute("SELECT id, source_key, fingerprint FROM records")}

    def missing_vectors(self, spaces: Iterable[str]) -> dict[str, list[str]]:
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

    def stage_pending(self, stage: str, version: str) -> list[str]:
        """Ids of the records ``stage`` has not run on at ``version``, in row order."""
        return [i for (i,) in self._conn().execute(
            "SELECT r.id FROM records r LEFT JOIN stage_runs s ON s.stage = ? AND s.id = r.id "
            "WHERE s.version IS NULL OR s.version != ? ORDER BY r.row", (stage, version))]

    def seed_stage(self, stage: str, version: str, space: str) -> None:
        """Count the records with a vector in ``space`` as run by ``stage`` at ``version`` (indexes from before
        runs were recorded: the space was that stage's marker); once (meta ``seeded:<stage>``)."""
        with self.transaction() as w:
            w._c.execute("INSERT OR IGNORE INTO stage_runs(stage, id, version) SELECT ?, id, ? FROM vectors "
                         "WHERE space = ?", (stage, version, space))
            w.set_meta(f"seeded:{stage}", "1")

    def phashes(self) -> dict[str, int]:
        """content hash -> 64-bit perceptual hash (:mod:`imagent.index.duplicates`)."""
        return {k: int(h, 16) for k, h in self._conn().execute("SELECT content, hash FROM phash")}

    def put_phashes(self, hashes: dict[str, int]) -> None:
        """Store perceptual hashes; derived data, so the generation is not bumped (no snapshot is stale)."""
        with self.transaction() as w:
            w._c.executemany("INSERT OR REPLACE INTO phash(content, hash) VALUES (?, ?)",
                             [(k, f"{h:016x}") for k, h in hashes.items()])

    def json_columns(self, fields: Sequence[str]) -> list[tuple[Any, ...]]:
        """``(id, field values...)`` per record in row order, read by SQLite's JSON functions."""
        if not all(f.isidentifier() for f in fields):
            raise ValueError(f"not record field names: {list(fields)}")
        cols = ", ".join(f"json_extract(data, '$.{f}')" for f in fields)
        return self._conn().execute(f"SELECT id, {cols} FROM records ORDER BY row").fetchall()
