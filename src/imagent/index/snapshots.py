"""Vector snapshots: the memory-mapped shard files a search reads, derived from the SQLite store.

Layout under ``<index>/vectors/``::

    snapshot.json           generation, index uuid, row count, sha256 of the row order, spaces, dtype, shard_rows,
                            each stored space's shard folder and rows per shard, aliases (a space whose vectors
                            equal another's is stored once, as that one)
    <space>/g<generation>-<token>/shard-00000.npy, ...   the space's rows in row order
    .write.lock             taken by snapshot writers (one at a time per index)

A snapshot is *current* when its manifest's generation, uuid, count, row-order digest and spaces match the
database; otherwise the gallery rewrites it from SQLite on first use. :func:`write_snapshot` streams the store
into a new shard folder a batch at a time and makes it current by replacing ``snapshot.json`` last, so a write
killed half-way leaves the old snapshot untouched. Legacy snapshots (``<space>.npy`` + ``ids.json``) are read as
one shard. Used by :class:`imagent.index.gallery.Gallery`; nothing here opens SQLite itself.
"""

from __future__ import annotations

import errno
import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagent.index.shards import (
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
from imagent.index.store import Reader


@dataclass(frozen=True)
class DbState:
    """What a snapshot must match: the database's generation, uuid, row order and spaces."""

    generation: int
    uuid: str
    ids: Sequence[str]
    ids_sha256: str
    spaces: dict[str, tuple[str, int]]  # name -> (model_id, dim)

    def space_list(self) -> dict[str, list[Any]]:
        return {k: [m, d] for k, (m, d) in self.spaces.items()}


def ids_digest(ids: Sequence[str]) -> str:
    """sha256 of the row order (the manifest stores this, not a million ids)."""
    joined = "\0".join(ids).encode("utf-8", "surrogatepass")  # ids hold no NUL (SQLite text)
    return hashlib.sha256(joined).hexdigest()


def _read_meta(vec_dir: Path, name: str = SNAPSHOT_FILE) -> dict[str, Any] | None:
    try:
        meta = json.loads((vec_dir / name).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def current_meta(vec_dir: Path, state: DbState) -> tuple[dict[str, Any], bool] | None:
    """The manifest that matches the database as it is now, and whether it is the legacy one
    (``ids.json`` beside one ``<space>.npy`` per space, written before shards); None when neither does."""
    spaces = state.space_list()
    meta = _read_meta(vec_dir)
    if (meta is not None and meta.get("format") == SNAPSHOT_FORMAT and meta.get("generation") == state.generation
            and meta.get("uuid") == state.uuid and meta.get("count") == len(state.ids)
            and meta.get("spaces") == spaces and meta.get("ids_sha256") == state.ids_sha256):
        return meta, False
    legacy = _read_meta(vec_dir, LEGACY_IDS_FILE)
    if (legacy is not None and legacy.get("generation") == state.generation and legacy.get("uuid") == state.uuid
            and legacy.get("ids") == list(state.ids) and legacy.get("spaces", spaces) == spaces):
        return legacy, True
    return None


def aliases(current: tuple[dict[str, Any], bool] | None) -> dict[str, str]:
    """Spaces whose snapshot is another space's (identical vectors), when the snapshot is current."""
    found = (current[0].get("aliases") or {}) if current else {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def is_current(vec_dir: Path, state: DbState) -> bool:
    """Whether every space's snapshot matches the database as it is now (nothing to rebuild)."""
    current = current_meta(vec_dir, state)
    if current is None:
        return False
    meta, legacy = current
    alias = aliases(current)
    if legacy:
        return all((vec_dir / f"{alias.get(s, s)}.npy").exists() for s in state.spaces)
    shards = meta.get("shards") or {}
    for s in state.spaces:
        entry = shards.get(alias.get(s, s))
        if not isinstance(entry, dict) or not isinstance(entry.get("rows"), list):
            return False
        if not all((vec_dir / str(entry.get("dir")) / shard_name(i)).is_file() for i in range(len(entry["rows"]))):
            return False
    return True


def open_snapshot(vec_dir: Path, state: DbState, space: str, dtype: np.dtype,
                  mapped_shards: int) -> ShardedVectors | None:
    """``space``'s current snapshot of the configured type, or None (missing, stale, damaged)."""
    current = current_meta(vec_dir, state)
    if current is None:
        return None
    meta, legacy = current
    target = aliases(current).get(space, space)
    dim = state.spaces[space][1]
    n = len(state.ids)
    try:
        if legacy:
            arr = np.load(vec_dir / f"{target}.npy", mmap_mode="r", allow_pickle=False)
            ok = arr.shape == (n, dim) and arr.dtype == dtype
            return ShardedVectors.of_array(arr) if ok else None
        entry = (meta.get("shards") or {}).get(target)
        if not isinstance(entry, dict) or meta.get("dtype") != dtype.name:
            return None
        counts = [int(c) for c in entry.get("rows", [])]
        if sum(counts) != n or ".." in Path(str(entry.get("dir"))).parts:
            return None
        return ShardedVectors.open(vec_dir / str(entry["dir"]), counts, dim, dtype, mapped_shards)
    except OSError as exc:
        if exc.errno == errno.ENOMEM:  # no room to map it (a memory cap): rewriting would not help
            raise
        return None
    except (ValueError, TypeError):
        return None


def vectors_from_db(reader: Reader, space: str, dim: int) -> np.ndarray:
    parts = list(reader.vector_batches(space, dim, WRITE_BATCH_ROWS))
    return np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)


def snapshot_lock(vec_dir: Path) -> Any:
    """The file lock snapshot writers of one index take turns on."""
    vec_dir.mkdir(exist_ok=True)
    return writer_lock(vec_dir / ".write.lock")


def write_snapshot(vec_dir: Path, reader: Reader, state: DbState, dtype: np.dtype, shard_rows: int) -> None:
    """Write every space's shards and the snapshot manifest from ``reader`` (one read transaction: records,
    vectors and generation from the same state), in bounded memory.

    Each space's shards go to a new directory (``<space>/g<generation>-<token>/``), a batch of rows at a time;
    ``snapshot.json`` naming them is replaced last: until then the old manifest names the old shards, untouched,
    and readers keep using them. Then the shards no manifest names are removed (with a legacy single-file
    snapshot). The caller holds :func:`snapshot_lock` (snapshot writers on one index take turns)."""
    stamp = f"g{state.generation}-{uuid.uuid4().hex[:8]}"
    written: dict[str, ShardedVectors] = {}
    entries: dict[str, dict[str, Any]] = {}
    # Identical spaces are stored once (caption mode embeds the same captions for `image`,
    # `caption_dual` and `caption_text` when one text model serves both roles).
    alias: dict[str, str] = {}
    for space, (_, dim) in state.spaces.items():
        rel = f"{space}/{stamp}"
        done = write_shards(vec_dir / rel, reader.vector_batches(space, dim, WRITE_BATCH_ROWS), len(state.ids),
                            dim, dtype, shard_rows, written)
        if done.alias is not None:
            alias[space] = done.alias
            continue
        entries[space] = {"dir": rel, "rows": done.counts}
        written[space] = ShardedVectors.open(vec_dir / rel, done.counts, dim, dtype, mapped_shards=1)
    written.clear()  # unmapped before the old files go
    write_json_atomic(vec_dir / SNAPSHOT_FILE, {
        "format": SNAPSHOT_FORMAT, "generation": state.generation, "uuid": state.uuid, "count": len(state.ids),
        "ids_sha256": state.ids_sha256, "spaces": state.space_list(), "dtype": dtype.name,
        "shard_rows": shard_rows, "shards": entries, "aliases": alias})
    remove_unnamed_snapshots(vec_dir, {e["dir"] for e in entries.values()})
