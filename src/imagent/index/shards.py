"""A vector space's snapshot as memory-mapped shards: write it in bounded memory, scan it shard by shard.

One space's rows (aligned with the gallery's ids) live in consecutive ``.npy`` files of ``shard_rows`` rows
each (the last one shorter), in a directory named by the write (``vectors/<space>/g<generation>-<token>/``).

Why shards and not one file:

- writing: rows go from SQLite to disk one batch at a time, so writing the snapshot of a gallery larger than
  RAM needs about one batch of memory, not the gallery (one ``.npy`` had to be built in memory first);
- searching: a scan reads shard by shard and keeps each shard's top-k, merged at the end, so it never builds
  an (N, d) array (nor N scores), and with ``mapped_shards`` it keeps only that many shards mapped, bounding the
  address space and resident memory a search needs however large the gallery is;
- replacing: a new snapshot goes to a new directory and becomes current when the manifest naming it is
  replaced (one ``os.replace``); a write killed half-way leaves the old snapshot, still named, untouched.

Scores equal the one-array scan to the last bit: ``shard_rows`` is a multiple of :data:`SHARD_ALIGN`, so each
row meets the same BLAS kernel (they unroll over a few rows) as it would in one array, and gathered pools
are scored in blocks of that size. Ties keep row order, as :func:`imagent.index.scoring.top_k` does.
A scan large enough for several threads (the BLAS policy of :mod:`imagent.index.scoring`) scans groups of
shards in parallel, one BLAS thread each: as many thread wake-ups per query as one threaded BLAS call on one
array, where a threaded call per shard would cost one each (a scheduler tick apiece on a busy machine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from imagent.index.scoring import cosine_scores, scan_threads, top_k

# 131,072 rows (256 MiB at 512 float32 dimensions): a gallery the size of CIRCO's (123,403 images) stays one
# shard, so it is scanned exactly as one array (one BLAS call), and a million images make 8 shards.
DEFAULT_SHARD_ROWS = 131_072
# Shard sizes are multiples of this: BLAS kernels unroll over up to 16 rows, and a row's score must not
# depend on where its shard starts.
SHARD_ALIGN = 64
# A candidate pool of at least 1/GATHER_FRACTION of the gallery is scored by scanning every row and
# indexing the scores (no copy of the matrix); smaller pools gather their rows first.
GATHER_FRACTION = 4
# Rows read from SQLite (and written) per batch: the writer's working memory is about this many rows.
WRITE_BATCH_ROWS = 8_192
_T = TypeVar("_T")
# One part of a scan: where its scores go, the rows to score, which of them to keep (see ShardedVectors._parts).
_Part = tuple[slice | np.ndarray, Callable[[], np.ndarray], np.ndarray | None]


def take_last(scores: np.ndarray, rows: Any) -> np.ndarray:
    """``scores[..., rows]``: the same array, gathered by ``np.take`` for integer rows (on a (q, n) array
    several times faster than the fancy index, measured 0.11 ms against 0.89 ms for 2 x 100,000)."""
    idx = np.asarray(rows)
    return np.take(scores, idx, axis=-1) if idx.dtype.kind in "iu" else scores[..., rows]


def shard_name(i: int) -> str:
    return f"shard-{i:05d}.npy"


class ShardedVectors:
    """The (N, d) rows of one vector space as consecutive shards (memory-mapped files or in-memory arrays).

    It offers what the gallery's search path needs without building an (N, d) array: :meth:`scores`,
    :meth:`top_k`, :meth:`take` (rows by number, copied), ``shape``/``dtype`` and indexing by a row, a slice
    or an array of rows (for the approximate store's training and re-ranking). :meth:`array` gives the whole
    matrix for callers that need one: the memory map itself when there is one shard, a copy otherwise.

    ``mapped_shards``: how many shard files stay memory-mapped between uses (least recently used ones are
    unmapped first); 0 keeps every shard mapped (the fastest repeated scans)."""

    def __init__(self, sources: Sequence[np.ndarray | Path], counts: Sequence[int], dim: int, dtype: np.dtype,
                 mapped_shards: int = 0) -> None:
        if len(sources) != len(counts):
            raise ValueError("one row count per shard")
        self._sources = list(sources)
        self.counts = [int(c) for c in counts]
        self.starts = np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]).astype(np.int64)
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self.shape = (int(self.starts[-1]), self.dim)
        self.mapped_shards = int(mapped_shards)
        self._mapped: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._whole: np.ndarray | None = None

    @classmethod
    def of_array(cls, array: np.ndarray) -> ShardedVectors:
        """One in-memory (or memory-mapped) array as a one-shard set."""
        return cls([array], [array.shape[0]], array.shape[1], array.dtype)

    @classmethod
    def open(cls, directory: Path, counts: Sequence[int], dim: int, dtype: np.dtype,
             mapped_shards: int = 0) -> ShardedVectors:
        """The shards a manifest names; every file is opened once now, so a missing or damaged one (or one whose
        shape or type is not what the manifest says) raises here, not in the middle of a search."""
        out = cls([directory / shard_name(i) for i in range(len(counts))], counts, dim, dtype, mapped_shards)
        for i in range(out.num_shards):
            out.shard(i)
        return out

    # ------------------------------------------------------------------ shards
    @property
    def num_shards(self) -> int:
        return len(self._sources)

    def __len__(self) -> int:
        return self.shape[0]

    def shard(self, i: int) -> np.ndarray:
        """Shard ``i``'s rows (a read-only memory map for a file), mapped now if it is not."""
        src = self._sources[i]
        if isinstance(src, np.ndarray):
            return src
        with self._lock:
            arr = self._mapped.get(i)
            if arr is not None:
                self._mapped.move_to_end(i)
                return arr
            while self.mapped_shards and len(self._mapped) >= self.mapped_shards:
                self._mapped.popitem(last=False)  # unmapped first (once no caller holds a view of it)
        arr = np.load(src, mmap_mode="r", allow_pickle=False)
        if arr.shape != (self.counts[i], self.dim) or arr.dtype != self.dtype:
            raise ValueError(f"{src} holds {arr.shape} {arr.dtype}, not ({self.counts[i]}, {self.dim}) {self.dtype}")
        with self._lock:
            self._mapped[i] = arr
            while self.mapped_shards and len(self._mapped) > self.mapped_shards:  # another thread mapped one
                self._mapped.popitem(last=False)
        return arr

    def mapped(self) -> int:
        """How many shard files are memory-mapped now."""
        with self._lock:
            return len(self._mapped)

    def array(self) -> np.ndarray:
        """The whole (N, d) matrix: the one shard itself, or (several shards) a copy made once and kept."""
        if self.num_shards == 1:
            return self.shard(0)
        with self._lock:
            whole = self._whole
        if whole is None:
            whole = np.empty(self.shape, dtype=self.dtype)
            for i in range(self.num_shards):
                whole[self.starts[i] : self.starts[i + 1]] = self.shard(i)
            with self._lock:
                self._whole = whole
        return whole

    def _shard_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, rows, side="right") - 1

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Rows by number (any order, repeats allowed) as a new (len(rows), d) array of the stored type."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"row out of range for {self.shape[0]} rows")
        if self.num_shards == 1:
            return self.shard(0)[rows]
        out = np.empty((rows.shape[0], self.dim), dtype=self.dtype)
        which = self._shard_of(rows)
        for i in np.unique(which):
            sel = which == i
            out[sel] = self.shard(int(i))[rows[sel] - self.starts[i]]
        return out

    def _range(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop``: a view when they lie in one shard, else a copy."""
        if stop <= start:
            return np.empty((0, self.dim), dtype=self.dtype)
        i, j = (int(x) for x in self._shard_of(np.array([start, max(start, stop - 1)])))
        if i == j:
            return self.shard(i)[start - self.starts[i] : stop - self.starts[i]]
        out = np.empty((stop - start, self.dim), dtype=self.dtype)
        for s in range(i, j + 1):
            lo, hi = max(start, int(self.starts[s])), min(stop, int(self.starts[s + 1]))
            out[lo - start : hi - start] = self.shard(s)[lo - self.starts[s] : hi - self.starts[s]]
        return out

    def __getitem__(self, key: int | slice | np.ndarray | Sequence[int]) -> np.ndarray:
        """A row (a view), a slice of rows or an array of row numbers (copies when shards are crossed)."""
        if self.num_shards == 1:
            return self.shard(0)[key]
        if isinstance(key, (int, np.integer)):
            r = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= r < self.shape[0]:
                raise IndexError(f"row {key} out of range for {self.shape[0]} rows")
            i = int(self._shard_of(np.array([r]))[0])
            return self.shard(i)[r - self.starts[i]]
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self.take(np.arange(start, stop, step))
            return self._range(start, max(start, stop))
        return self.take(np.asarray(key))

    def chunks(self) -> Iterable[tuple[int, np.ndarray]]:
        """``(first row, shard)`` for every shard, in row order."""
        for i in range(self.num_shards):
            yield int(self.starts[i]), self.shard(i)

    # ------------------------------------------------------------------ scans
    def _gather_block(self) -> int:
        return self.counts[0] if self.num_shards > 1 else max(1, self.shape[0])

    def _run(self, tasks: Sequence[Callable[[int], _T]], elements: int) -> list[_T]:
        """Run ``task(scan_elements)`` for each task, results in order. A scan big enough for several threads
        (:func:`~imagent.index.scoring.scan_threads`) runs contiguous groups of tasks at once, each on one
        BLAS thread: one thread wake-up per scan, as one array's threaded BLAS call costs, not one per shard
        (on a busy machine each costs a scheduler tick, ~4 ms here), and the per-shard top-k runs in parallel."""
        threads = min(scan_threads(elements), len(tasks))
        if self.mapped_shards:  # each thread maps the shard it scans: no more at once than may stay mapped
            threads = min(threads, self.mapped_shards)
        if threads <= 1:
            return [task(elements) for task in tasks]

        def group(ids: list[int]) -> list[_T]:
            return [tasks[i](0) for i in ids]

        groups = [g.tolist() for g in np.array_split(np.arange(len(tasks)), threads)]
        futures = [_pool().submit(group, g) for g in groups[1:]]
        out = group(groups[0])
        for f in futures:
            out.extend(f.result())
        return out

    def _parts(self, rows: np.ndarray | None) -> tuple[list[_Part], int]:
        """What one scan reads, in position order, and its size in matrix entries: ``(positions, matrix part,
        local rows or None)`` per shard (every row, or the shard's rows of a large pool: scanned whole, then
        indexed) or per gathered block of a small pool. ``positions`` (a slice where they are consecutive)
        index the result: row numbers, or indices into ``rows``."""
        n = self.shape[0]
        parts: list[_Part] = []
        if rows is None:
            for i in range(self.num_shards):
                parts.append((slice(int(self.starts[i]), int(self.starts[i + 1])), partial(self.shard, i), None))
            return parts, n * self.dim
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) * GATHER_FRACTION >= n:
            ascending = bool(np.all(rows[1:] >= rows[:-1]))
            order = None if ascending else np.argsort(rows, kind="stable")
            sorted_rows = rows if order is None else rows[order]
            for i in range(self.num_shards):
                lo, hi = (int(x) for x in np.searchsorted(sorted_rows, [self.starts[i], self.starts[i + 1]]))
                if hi > lo:
                    positions = slice(lo, hi) if order is None else order[lo:hi]
                    parts.append((positions, partial(self.shard, i), sorted_rows[lo:hi] - self.starts[i]))
            return parts, n * self.dim
        block = self._gather_block()
        for b in range(0, len(rows), block):
            parts.append((slice(b, min(b + block, len(rows))), partial(self.take, rows[b : b + block]), None))
        return parts, len(rows) * self.dim

    @staticmethod
    def _score(part: Callable[[], np.ndarray], local: np.ndarray | None, q: np.ndarray, elements: int) -> np.ndarray:
        s = cosine_scores(part(), q, elements)
        return s if local is None else take_last(s, local)

    def scores(self, query: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Cosine of ``query`` (d,) or (q, d) with every row, or with ``rows`` (in their order).

        A pool that covers much of the gallery is scored by scanning every shard and indexing the scores;
        gathering ``mat[rows]`` would copy most of the matrix first. Small pools are gathered, a block of
        shard size at a time."""
        q = np.asarray(query, dtype=np.float32)
        n = self.shape[0]
        if self.num_shards == 1:
            mat = self.shard(0)
            if rows is None:
                return cosine_scores(mat, q)
            if len(rows) * GATHER_FRACTION >= n:
                return take_last(cosine_scores(mat, q), rows)
            return cosine_scores(mat[rows], q)
        parts, elements = self._parts(rows)
        out = np.empty((*q.shape[:-1], n if rows is None else len(rows)), dtype=np.float32)

        def fill(positions: slice | np.ndarray, part: Callable[[], np.ndarray], local: np.ndarray | None,
                 scan_elements: int) -> None:
            out[..., positions] = self._score(part, local, q, scan_elements)

        self._run([partial(fill, *p) for p in parts], elements)
        return out

    def top_k(self, query: np.ndarray, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of every row (or of ``rows``, sorted ascending) for one query (d,):
        ``(positions, scores)`` best first, where a position is a row number, or an index into ``rows``.

        Each shard (or gathered block) keeps its own top ``k`` (``argpartition``), in position order; the
        survivors are merged by one more top-k, so equal scores still keep the lowest position, and no
        gallery-sized array of scores is built."""
        q = np.asarray(query, dtype=np.float32)
        if q.ndim != 1:
            raise ValueError("top_k takes one query vector")
        parts, elements = self._parts(rows)

        def best_of(positions: slice | np.ndarray, part: Callable[[], np.ndarray], local: np.ndarray | None,
                    scan_elements: int) -> tuple[np.ndarray, np.ndarray]:
            s = self._score(part, local, q, scan_elements)
            best = np.sort(top_k(s, k))
            return (positions.start + best if isinstance(positions, slice) else positions[best]), s[best]

        found = self._run([partial(best_of, *p) for p in parts], elements)
        if not found:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        positions = np.concatenate([p for p, _ in found])
        s = np.concatenate([v for _, v in found])
        best = top_k(s, k)
        return positions[best], s[best]


_POOL: dict[int, ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads sharded scans share (one per core), started on first use in each process (a forked child
    has none of its parent's threads, so it must not wait on its parent's pool)."""
    with _POOL_LOCK:
        pool = _POOL.get(os.getpid())
        if pool is None:
            _POOL.clear()
            pool = _POOL[os.getpid()] = ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                                           thread_name_prefix="imagent-scan")
        return pool


@dataclass
class WrittenSpace:
    """What :func:`write_shards` did: the rows per shard, or the space whose identical shards stand for it."""

    counts: list[int]
    alias: str | None = None


def write_shards(directory: Path, batches: Iterable[np.ndarray], total: int, dim: int, dtype: np.dtype,
                 shard_rows: int, compare: dict[str, ShardedVectors] | None = None) -> WrittenSpace:
    """Stream ``total`` rows, arriving in float32 ``batches`` in row order, into ``directory/shard-*.npy``.

    Memory: one batch (each shard is written sequentially, never held). When every row equals, as stored
    (``dtype``), the rows of one of the ``compare`` spaces, the files are removed again and that space is
    returned as the alias (identical spaces stored once). Kept files are flushed to disk (``fsync``); the
    caller makes them current by naming them in its manifest."""
    if shard_rows <= 0 or shard_rows % SHARD_ALIGN:
        raise ValueError(f"shard_rows must be a positive multiple of {SHARD_ALIGN}, not {shard_rows}")
    dtype = np.dtype(dtype)
    directory.mkdir(parents=True, exist_ok=True)
    equal = {k: v for k, v in (compare or {}).items() if v.shape == (total, dim) and v.dtype == dtype}
    counts: list[int] = []
    paths: list[Path] = []
    f = None
    left_in_shard = 0
    pos = 0
    try:
        for batch in batches:
            b = np.ascontiguousarray(np.asarray(batch, dtype=np.float32).astype(dtype, copy=False))
            if b.ndim != 2 or b.shape[1] != dim or pos + b.shape[0] > total:
                raise ValueError(f"batch of shape {b.shape} does not fit {total} rows of dim {dim} at row {pos}")
            for name in [k for k, v in equal.items() if not np.array_equal(v[pos : pos + b.shape[0]], b)]:
                del equal[name]
            done = 0
            while done < b.shape[0]:
                if left_in_shard == 0:
                    if f is not None:
                        f.close()
                    rows = min(shard_rows, total - pos - done)
                    paths.append(directory / shard_name(len(counts)))
                    counts.append(rows)
                    f = open(paths[-1], "wb")  # noqa: SIM115 - closed when the shard is full (or on error)
                    np.lib.format.write_array_header_1_0(
                        f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (rows, dim)})
                    left_in_shard = rows
                take = min(left_in_shard, b.shape[0] - done)
                f.write(b[done : done + take].tobytes())
                done += take
                left_in_shard -= take
            pos += b.shape[0]
    finally:
        if f is not None:
            f.close()
    if pos != total:
        raise ValueError(f"{pos} rows arrived for a snapshot of {total}")
    if equal:
        shutil.rmtree(directory, ignore_errors=True)
        return WrittenSpace([], alias=next(iter(equal)))
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return WrittenSpace(counts)


# ---------------------------------------------------------------------- the snapshot directory
SNAPSHOT_FILE = "snapshot.json"  # the manifest naming the current shards; replaced last by a write
SNAPSHOT_FORMAT = 2
LEGACY_IDS_FILE = "ids.json"  # format 1: one vectors/<space>.npy per space, described by ids.json
_STAMP = re.compile(r"g\d+-[0-9a-f]{8}")


@contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing) while the block runs: snapshot writers of one index,
    in any process or thread, take turns, so none removes the shards another is still writing."""
    with open(path, "a") as f:
        try:
            import fcntl
        except ImportError:  # no flock (Windows): writers are not serialised there
            yield
            return
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``path`` through a temp file, flushed to disk, then ``os.replace``: readers see the old or the
    new file, never a part of one, also after a power cut."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # a platform that cannot open a directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_unnamed_snapshots(vec_dir: Path, keep: set[str]) -> None:
    """Remove the shard directories (``<space>/g<generation>-<token>``) not in ``keep`` (older snapshots,
    writes killed half-way) and the files of a legacy single-file snapshot. A process that still maps an
    old shard keeps reading it (POSIX keeps a removed file's data while it is open)."""
    for space_dir in vec_dir.iterdir():
        if not space_dir.is_dir():
            continue
        for d in space_dir.iterdir():
            if d.is_dir() and _STAMP.fullmatch(d.name) and f"{space_dir.name}/{d.name}" not in keep:
                shutil.rmtree(d, ignore_errors=True)
        if not any(space_dir.iterdir()):
            space_dir.rmdir()
    for f in [vec_dir / LEGACY_IDS_FILE, *vec_dir.glob("*.npy"), *vec_dir.glob(".*.tmp")]:
        f.unlink(missing_ok=True)
