"""``faces.sqlite``: where an index keeps its faces and people (nothing about a face is written anywhere else).

Tables::

    scans   one row per photo looked at: photo id, its content hash, the face model, faces kept and found,
            a note (too small, faces left out, the cap reached)
    faces   one row per face: id (never reused), photo id, box (fractions of the upright photo), detector
            score, size in pixels, the 128-d descriptor (float32), person, pinned (a user put it there)
    people  one row per group: id (never reused), name (unique, any case), when it was made
    meta    version: bumped by every write, so readers (filters, the web server) see changes at once

The file is apart from ``records.sqlite`` so that ``imagent people forget`` can delete every face, box and
descriptor by deleting one database (its rows are erased with ``secure_delete`` and the file vacuumed first, then
it is removed), and the records, vectors and search are not touched. Readers open it read-only and never create
it: an index without face data simply has no people. The pass that fills it is :mod:`imagent.index.faces`; the
groups are :mod:`imagent.index.people`.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.text import display_path
from imagent.index.store import from_sql, sql_text

FACES_DB = "faces.sqlite"
FACE_THUMBS = "face-thumbnails"  # the web's face crops, cached (imagent.server.people); face data like the rest

SCHEMA = """
CREATE TABLE IF NOT EXISTS scans (
    photo TEXT PRIMARY KEY, content TEXT NOT NULL, model TEXT NOT NULL, faces INTEGER NOT NULL,
    found INTEGER NOT NULL, width INTEGER, height INTEGER, note TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS faces (
    id INTEGER PRIMARY KEY AUTOINCREMENT, photo TEXT NOT NULL, x0 REAL NOT NULL, y0 REAL NOT NULL,
    x1 REAL NOT NULL, y1 REAL NOT NULL, score REAL NOT NULL, size INTEGER NOT NULL, descriptor BLOB NOT NULL,
    person INTEGER, pinned INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS faces_photo ON faces(photo);
CREATE INDEX IF NOT EXISTS faces_person ON faces(person);
CREATE TABLE IF NOT EXISTS people (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, name_key TEXT UNIQUE, created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class FaceDataMissing(LookupError):
    """The index holds no face data (never scanned, or forgotten)."""


def faces_path(index_root: str | Path) -> Path:
    return Path(index_root).expanduser() / FACES_DB


def face_crop_key(face_id: int, digest: str) -> str:
    """The cache name of face ``face_id``'s crops (``digest``: of its photo's content and its box)."""
    return f"f{int(face_id)}-{digest[:24]}"


def drop_face_crops(index_root: str | Path, face_id: int) -> int:
    """Delete the cached crops of one face (every size); returns how many."""
    n = 0
    for f in (Path(index_root).expanduser() / FACE_THUMBS).glob(f"*/*/{face_crop_key(face_id, '')}*.jpg"):
        with contextlib.suppress(OSError):
            f.unlink()
            n += 1
    return n


class FaceStore:
    """``faces.sqlite`` of one index. Every operation opens its own connection (no handle outlives it, so a
    ``forget`` in another process is seen by the next read); deletions overwrite the freed pages
    (``secure_delete``)."""

    def __init__(self, index_root: str | Path) -> None:
        self.path = faces_path(index_root)

    def exists(self) -> bool:
        return self.path.is_file()

    def _connect(self, create: bool) -> sqlite3.Connection:
        if not create and not self.path.is_file():
            raise FaceDataMissing(f"no face data in {display_path(self.path.parent)}")
        try:
            return self._open(create)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            aside = self.set_aside()
            note = (f"the face data of {display_path(self.path.parent)} was damaged ({exc}); set aside as "
                    f"{aside.name}")
            if not create:
                raise FaceDataMissing(f"{note}: the next `imagent index` finds the faces again") from None
            return self._open(create)  # the index pass starts a new store in its place

    def _open(self, create: bool) -> sqlite3.Connection:
        mode = "rwc" if create else "rw"
        conn = sqlite3.connect(f"file:{self.path}?mode={mode}", uri=True, timeout=60, isolation_level=None)
        try:
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            if create:
                conn.executescript(SCHEMA)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "faces" not in tables:  # an empty file (a foreign one fails the line above)
                raise sqlite3.DatabaseError("no faces table in it")
        except BaseException:
            conn.close()
            raise
        return conn

    def set_aside(self) -> Path:
        """Move a damaged ``faces.sqlite`` (and its journal files) to ``faces.sqlite.damaged-N``, never deleted:
        a person's names and marks may still be read from it."""
        n = 1
        while (aside := self.path.with_name(f"{self.path.name}.damaged-{n}")).exists():
            n += 1
        self.path.rename(aside)
        for suffix in ("-wal", "-shm"):
            extra = self.path.with_name(self.path.name + suffix)
            if extra.exists():
                extra.rename(aside.with_name(aside.name + suffix))
        return aside

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction; :class:`FaceDataMissing` when there is no face data."""
        try:
            conn = self._connect(create=False)
        except sqlite3.OperationalError as exc:
            raise FaceDataMissing(f"no face data in {display_path(self.path.parent)} ({exc})") from None
        try:
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        finally:
            conn.close()

    @contextlib.contextmanager
    def write(self, create: bool = False) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``), committed on exit and rolled back on an error; the
        version is bumped. Only the index pass creates the database (``create``)."""
        try:
            conn = self._connect(create=create)
        except sqlite3.OperationalError as exc:
            raise FaceDataMissing(f"no face data in {display_path(self.path.parent)} ({exc})") from None
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("INSERT INTO meta(key, value) VALUES('version', '1') ON CONFLICT(key) "
                             "DO UPDATE SET value = CAST(value AS INTEGER) + 1")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def version(self) -> int | None:
        """The write counter (None: no face data). Cheap enough to read before every filter."""
        try:
            with self.read() as c:
                row = c.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        except FaceDataMissing:
            return None
        return int(row[0]) if row else 0

    def scanned(self) -> dict[str, str]:
        """photo id -> the content it was scanned at."""
        try:
            with self.read() as c:
                return {from_sql(p): v for p, v in c.execute("SELECT photo, content FROM scans")}
        except FaceDataMissing:
            return {}

    def scans(self) -> dict[str, tuple[str, str]]:
        """photo id -> (the content it was scanned at, the face model that scanned it)."""
        try:
            with self.read() as c:
                return {from_sql(p): (v, m) for p, v, m in c.execute("SELECT photo, content, model FROM scans")}
        except FaceDataMissing:
            return {}

    def forget(self) -> dict[str, int]:
        """Delete every face, box, descriptor, person and scan: rows erased (freed pages overwritten), the
        database vacuumed and checkpointed, then its files removed, and the web's cached face crops
        (:data:`FACE_THUMBS`). Returns what was deleted."""
        counts = {"faces": 0, "people": 0, "photos_scanned": 0, "files_removed": 0, "face_crops_removed": 0}
        if self.exists():
            with contextlib.suppress(FaceDataMissing), self.write() as c:
                counts["faces"] = c.execute("SELECT COUNT(*) FROM faces").fetchone()[0]
                counts["people"] = c.execute("SELECT COUNT(*) FROM people").fetchone()[0]
                counts["photos_scanned"] = c.execute("SELECT COUNT(*) FROM scans").fetchone()[0]
                for table in ("faces", "people", "scans", "meta"):
                    c.execute(f"DELETE FROM {table}")
            with contextlib.suppress(sqlite3.Error, FaceDataMissing):
                conn = self._connect(create=False)
                try:
                    conn.execute("VACUUM")
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    conn.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            p = Path(f"{self.path}{suffix}")
            if p.exists():
                p.unlink()
                counts["files_removed"] += 1
        crops = self.path.parent / FACE_THUMBS
        if crops.is_dir():
            counts["face_crops_removed"] = sum(1 for f in crops.rglob("*") if f.is_file())
            shutil.rmtree(crops)
        return counts


def put_scan(c: sqlite3.Connection, photo: str, content: str, model: str, result: Any) -> int:
    """Store one photo's scan and its faces (replacing an earlier scan of it); returns the faces stored."""
    key = sql_text(photo)
    c.execute("DELETE FROM faces WHERE photo = ?", (key,))
    c.execute("INSERT OR REPLACE INTO scans(photo, content, model, faces, found, width, height, note) "
              "VALUES (?,?,?,?,?,?,?,?)",
              (key, content, model, len(result.faces), result.found, result.width, result.height, result.note))
    c.executemany("INSERT INTO faces(photo, x0, y0, x1, y1, score, size, descriptor) VALUES (?,?,?,?,?,?,?,?)",
                  [(key, *map(float, f.box), float(f.score), int(f.size),
                    np.asarray(f.descriptor, dtype=np.float32).tobytes()) for f in result.faces])
    return len(result.faces)


def drop_photos(c: sqlite3.Connection, photos: Sequence[str]) -> None:
    """Scans and faces of photos gone from the index; groups left without a face and without a name go too
    (a named one stays: new photos of that person may come back to it through :meth:`people.assign`)."""
    for p in photos:
        c.execute("DELETE FROM faces WHERE photo = ?", (sql_text(p),))
        c.execute("DELETE FROM scans WHERE photo = ?", (sql_text(p),))
    drop_empty_people(c)


def drop_empty_people(c: sqlite3.Connection) -> None:
    c.execute("DELETE FROM people WHERE name IS NULL AND id NOT IN (SELECT DISTINCT person FROM faces "
              "WHERE person IS NOT NULL)")


__all__ = ["FACES_DB", "FaceDataMissing", "FaceStore", "drop_empty_people", "drop_photos", "faces_path", "put_scan"]
