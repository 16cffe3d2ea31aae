"""One on-disk cache under every model and tool call.

Keys are sha256 digests of a canonical JSON of (namespace, backend, model, inputs, parameters);
values are JSON. Storage is SQLite (WAL) so several processes may share one cache file safely.
``get_or_compute`` holds a per-key lock so that concurrent identical requests in one process
compute once; the others wait and read the stored value.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def stable_key(*parts: Any) -> str:
    """sha256 of the canonical JSON of ``parts`` (dict keys sorted, no whitespace)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class DiskCache:
    def __init__(self, path: str | Path | None) -> None:
        """``path=None`` gives an in-memory cache (still with per-key locks and counts)."""
        self.path = Path(path).expanduser() if path else None
        self.hits = 0
        self.misses = 0
        self._memory: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._local = threading.local()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as c:
                c.execute(
                    "CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, namespace TEXT, "
                    "value TEXT NOT NULL, created REAL NOT NULL)"
                )

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
            (key, namespace, json.dumps(value, ensure_ascii=False), time.time()),
        )

    def get_or_compute(
        self, key: str, compute: Callable[[], Any], namespace: str = ""
    ) -> tuple[Any, bool]:
        """Return ``(value, was_cached)``. ``compute`` runs at most once per key at a time;
        an exception from it is not cached and propagates."""
        with self._lock_for(key):
            value = self.get(key)
            if value is not None:
                self.hits += 1
                return value, True
            self.misses += 1
            value = compute()
            self.put(key, value, namespace)
            return value, False

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}

    def __len__(self) -> int:
        if self.path is None:
            return len(self._memory)
        return int(self._conn().execute("SELECT COUNT(*) FROM cache").fetchone()[0])
