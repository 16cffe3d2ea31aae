"""Content hashing: stable ids and cache keys from file bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def bytes_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def short_id(content_hash: str) -> str:
    """The default record id: the first 16 hex digits of the content hash."""
    return content_hash[:16]
