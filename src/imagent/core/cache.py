"""One on-disk cache under every model and tool call.

Keys are sha256 digests of a canonical JSON of (namespace, backend, model, inputs, parameters);
values are JSON. Storage is SQLite (WAL) so several processes may share one cache file safely.
``get_or_compute`` holds a per-key lock so that concurrent identical requests in one process
compute once; the others wait and read the stored value.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def stable_key(*parts: Any) -> str:
    """sha256 of the canonical JSON of ``parts`` (dict keys sorted, no whitespace).

    ``surrogatepass`` lets text with lone surrogates (a file name that is not UTF-8, a model reply with
    ``"\\ud800"``) hash instead of raising; valid text encodes to the same bytes as plain UTF-8, so every
    existing key is unchanged."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _json_text(value: Any) -> str:
    """JSON for storage; text that UTF-8 cannot hold (lone surrogates) is \\u-escaped so it round-trips."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True)
    return text


class CacheError(RuntimeError):
    """The cache directory or file cannot be used (a file where the folder should be, no permission, ...).

    A user error: interfaces print its message, which names the path and the setting to change."""


def _unusable(path: Path, exc: BaseException) -> CacheError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return CacheError(
        f"cannot use the cache at {path}: {reason}. Point cache_dir elsewhere (--set cache_dir=DIR or "
        f"IMAGENT_CACHE_DIR=DIR), fix the folder's permissions, or turn the call cache off (--set cache_calls=false)"
    )


def ensure_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents) as a writable folder, or raise :class:`CacheError` saying why not."""
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # FileExistsError (a file is there), NotADirectoryError, PermissionError, ...
        raise _unusable(p, exc) from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise _unusable(p, PermissionError(13, "the folder is not writable"))
    return p


_HOST = socket.gethostname()


def _claim_owner() -> str:
    return f"{_HOST}:{os.getpid()}:{threading.get_ident()}"


def _owner_gone(owner: str) -> bool:
    """Whether a claim's owner is a process of this host that no longer runs. Owners of other hosts, and
    claims written before owners named their host, are left to their expiry."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by another user
        return False
    return False


class DiskCache:
    def __init__(self, path: str | Path | None) -> None:
        """``path=None`` gives an in-memory cache (still with per-key locks and counts).

        Raises :class:`CacheError` when the file cannot be created, opened or written."""
        self.path = Path(path).expanduser() if path else None
        self.hits = 0
        self.misses = 0
        self._memory: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._local = threading.local()
        self._listeners: list[Callable[[str, str], None]] = []
        if self.path is not None:
            ensure_dir(self.path.parent)
            try:
                c = self._conn()
                c.execute(
                    "CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, namespace TEXT, "
                    "value TEXT NOT NULL, created REAL NOT NULL)"
                )
                c.execute("CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL)")
                # Take the write lock once: a read-only file (or folder, for WAL's side files) fails here,
                # with one clear message, rather than at the first cached call in the middle of a search.
                c.execute("BEGIN IMMEDIATE")
                c.execute("ROLLBACK")
            except sqlite3.Error as exc:
                self._local.conn = None
                raise _unusable(self.path, exc) from None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            assert self.path is not None
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def _lock_for(self, key: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock

    def get(self, key: str) -> Any | None:
        if self.path is None:
            return self._memory.get(key)
        row = self._conn().execute("SELECT value FROM cache WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: Any, namespace: str = "") -> None:
        if self.path is None:
            self._memory[key] = value
            return
        self._conn().execute(
            "INSERT OR REPLACE INTO cache (key, namespace, value, created) VALUES (?,?,?,?)",
            (key, namespace, _json_text(value), time.time()),
        )

    def add_listener(self, listener: Callable[[str, str], None]) -> None:
        """Call ``listener(key, namespace)`` for every key :meth:`get_or_compute` serves or computes from now
        on (an eval run records the calls it made this way, for its reproduction pack)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str, str], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def get_or_compute(
        self, key: str, compute: Callable[[], Any], namespace: str = ""
    ) -> tuple[Any, bool]:
        """Return ``(value, was_cached)``. ``compute`` runs at most once per key at a time;
        an exception from it is not cached and propagates."""
        for listener in list(self._listeners):
            listener(key, namespace)
        with self._lock_for(key):
            value = self.get(key)
            if value is not None:
                self.hits += 1
                return value, True
            if self.path is not None and not self._claim(key):
                # Another process (a Ray worker, a second eval) is computing this key: wait for its value.
                value = self._wait_for(key)
                if value is not None:
                    self.hits += 1
                    return value, True
            self.misses += 1
            try:
                value = compute()
                self.put(key, value, namespace)
            finally:
                self._release(key)
            return value, False

    # Cross-process claims: one computation per key among every process sharing the file. A claim names
    # its owner (host, process, thread) and expires, so a process killed mid-call does not block the key for
    # ever; a claim of a process of this host that no longer runs is taken at once (a killed eval resumed
    # straight away used to wait out the whole ttl).
    claim_ttl_s = 600.0
    poll_s = 0.05

    def _claim(self, key: str) -> bool:
        """Take the key's claim; False when a live claim of another owner holds it."""
        c = self._conn()
        now = time.time()
        owner = _claim_owner()
        c.execute("BEGIN IMMEDIATE")
        try:
            row = c.execute("SELECT owner, expires FROM claims WHERE key=?", (key,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now and not _owner_gone(row[0]):
                c.execute("COMMIT")
                return False
            c.execute("INSERT OR REPLACE INTO claims (key, owner, expires) VALUES (?,?,?)",
                      (key, owner, now + self.claim_ttl_s))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return True

    def _release(self, key: str) -> None:
        if self.path is not None:
            self._conn().execute("DELETE FROM claims WHERE key=? AND owner=?", (key, _claim_owner()))

    def _wait_for(self, key: str) -> Any | None:
        """The value another process is computing, once stored; None if its claim ends without one (it
        failed or died): the caller then computes it itself, under its own claim."""
        while True:
            value = self.get(key)
            if value is not None:
                return value
            row = self._conn().execute("SELECT owner, expires FROM claims WHERE key=?", (key,)).fetchone()
            if (row is None or row[1] <= time.time() or _owner_gone(row[0])) and self._claim(key):
                return None
            time.sleep(self.poll_s)

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}

    def __len__(self) -> int:
        if self.path is None:
            return len(self._memory)
        return int(self._conn().execute("SELECT COUNT(*) FROM cache").fetchone()[0])
