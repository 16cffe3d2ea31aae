"""Approximate nearest-neighbour search beside the exact scan (FAISS, inner product on unit vectors).

Why FAISS: it is the library the large-scale retrieval tools build on (clip-retrieval's autofaiss, the
papers' own galleries), runs on the CPU from a PyPI wheel (``faiss-cpu``) and on GPUs where a GPU build is
installed, and searches under an id filter (``IDSelector``) without a second pass.

The store is an inverted-file index with 8-bit scalar-quantised vectors (``IVF<nlist>,SQ8``): a quarter of
the float32 memory, and a search scans ``nprobe / nlist`` of the gallery. Quantised scores only *choose*
candidates: every search over-fetches ``k * overfetch`` of them and re-ranks them exactly with the stored
vectors, so the scores a method sees are the exact cosines, as from the scan.

One decision, one function: :func:`search_pool` is what :meth:`Gallery.search` runs for every query, and what
``benchmarks/search_scan.py`` measures. It uses the store only when it matches the database (identity), the
query is one vector and the pool the filters leave has at least ``min_rows`` rows (``ann.min_rows``):
the store then proposes candidates inside the filter (a FAISS id selector) and they are re-ranked exactly. In
every other case, and when the store returns fewer candidates than the pool allows, the exact scan over the
pool answers (small pools: a tight date filter, a per-query subset).

Calibration (autofaiss-style, at build time): how many lists a query must probe depends on the data (on
well-separated clusters a few lists hold a point's neighbours; where neighbours sit barely above the rest
they are spread over many), so a fixed ``nprobe`` is either slow on easy data or wrong on hard data. After the
store is filled, :meth:`AnnStore.calibrate` measures recall@``k`` (k = 50) of the whole search path
(store candidates, exact re-rank) on ``calibration_queries`` (256) held-out queries and picks the smallest
``nprobe`` whose mean recall reaches ``target_recall`` (``ann.target_recall``, 0.95): doubling from
the floor ``ann.nprobe``, then bisecting to within an eighth.

The queries are stored rows that were not in k-means' training sample, asked leave-one-out (the row itself is
removed from both the exact and the approximate answer). Why stored rows and not perturbed ones: a
perturbation's size is a guess about the query distribution that the index cannot know, while stored rows are
the data's own neighbourhoods, the structure the inverted lists exploit, and leaving the row out removes the
one answer that is trivially found. Measured on the benchmark's clustered data (200,000 x 512), the
recall-vs-nprobe curve of these queries lies within 0.01 of that of queries perturbed like the benchmark's (a
stored row plus noise of norm 0.6) on the default spread, and 0.01-0.03 above it on the hard spread (1.5),
where it is the optimistic side. Queries from another distribution (a text query against image vectors sits
further from every stored point) can need more lists: raise ``ann.target_recall`` or ``ann.nprobe`` for them.
The exact top-k of the calibration queries is one pass over the matrix in blocks of 65,536 rows (all queries
at once: a matrix product), so calibrating costs a few exact scans' worth of time, not one per query.

Filters: a filter keeping a fraction f of the rows leaves the store fewer allowed rows per list, and its top-k
reaches further out (about the unfiltered top-k/f), so probing ``nprobe / f`` lists (as many allowed rows seen
as unfiltered) is not enough where neighbourhoods are small: measured on clustered test data, recall@50 fell
to 0.67 under a 20% filter with that rule alone. Calibration therefore also measures random filters keeping
1/2, 1/4, ... of the rows down to ``min_rows / N`` (the smallest pool the store answers; at most down to 1/16),
each from where the ``nprobe / f`` rule starts, and a search probes the larger of the rule and the calibrated
counts interpolated linearly between the two nearest fractions (below the last, its count scaled by 1/f).
A filter that removes a few rows (the reference image of a composed query) costs about the unfiltered count.

``nprobe`` is capped at ``max_probe_fraction`` (a quarter) of the lists (filtered: that over f): if the target
is not met there, the store keeps the cap, records ``capped`` and its measured recall, and
:meth:`Gallery.build_ann` warns (:class:`AnnRecallWarning`, and :attr:`Gallery.ann_notes` for the build
report): the store is still faster than the scan, but misses more than asked; ``ann.mode = "off"`` gives
exact search, a larger ``ann.nprobe`` buys recall. ``ann.nprobe`` is a floor: calibration starts there and a
search never probes fewer lists, so raising it is the override (it also lifts the cap); ``ann.target_recall =
0`` turns calibration off and searches probe exactly ``ann.nprobe`` lists (``/ f`` under a filter).

On disk, per vector space: ``ann/<space>.faiss`` and ``ann/<space>.json`` naming the index's uuid, the
generation and row count it was built at and the space's model, plus the calibration: ``nprobe``, ``recall``,
``capped``, ``nprobe_cap``, ``curve`` (recall at each nprobe tried), ``filtered`` (the same per filter
fraction), ``recall_k``, ``calibration_queries``, the settings it was made for (``target_recall``,
``nprobe_floor``, ``overfetch``, ``calibrated_min_rows``) and ``build_seconds`` / ``calibration_seconds``.
A store whose generation, uuid, row count or model does not match the database is never used (the exact scan
answers) until it is rebuilt, which ``imagent index`` does at the end of a build that changed anything
(``ann.mode``); a store calibrated for other settings is recalibrated there (no rebuild). A sidecar from
before calibration (no ``nprobe``) still loads: its searches probe ``ann.nprobe`` lists (scaled by 1/f under a
filter), as they did, until the next ``imagent index`` calibrates it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from imagent.index.scoring import cosine_scores, top_k
from imagent.index.shards import ShardedVectors, write_json_atomic

if TYPE_CHECKING:
    from imagent.core.config import AnnOptions

# Below this many rows in a search's pool the exact scan answers (``ann.min_rows``'s default).
DEFAULT_MIN_ROWS = 200_000
# Rows read per block when the store is filled and when the calibration queries' exact answers are computed.
BLOCK_ROWS = 65_536
# The smallest filter fraction calibration measures (a search under a smaller one scales that one's count).
MIN_FILTER_FRACTION = 1 / 16


class AnnUnavailable(RuntimeError):
    """FAISS is not installed (``pip install faiss-cpu``)."""


class AnnRecallWarning(UserWarning):
    """A store's calibration did not reach the target recall within the probe cap."""


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # an optional extra
        raise AnnUnavailable("approximate search needs FAISS: pip install 'imagent[ann]' (faiss-cpu)") from exc
    return faiss


def available() -> bool:
    try:
        _faiss()
    except AnnUnavailable:
        return False
    return True


@dataclass(frozen=True)
class AnnParams:
    """How the store is built, calibrated and searched.

    ``nlist=None``: about 4 * sqrt(N) lists (FAISS's rule of thumb, capped so that every list gets enough
    training points); ``nprobe``: the floor of lists scanned per query (``ann.nprobe``; exactly this
    many when ``target_recall`` is 0); ``overfetch``: candidates fetched per wanted result before the exact
    re-rank; ``target_recall``: the mean recall@``calibration_k`` calibration aims at
    (``ann.target_recall``); ``calibration_queries``: held-out queries it measures on;
    ``max_probe_fraction``: the most of the lists calibration may choose to probe (unfiltered; a filter keeping
    a fraction f may probe 1/f times that); ``min_rows``: pools smaller than this are scanned exactly
    (``ann.min_rows``; 1 with ``ann.mode = "on"``), so calibration covers filters down to it."""

    nlist: int | None = None
    nprobe: int = 32
    overfetch: int = 4
    target_recall: float = 0.95
    calibration_queries: int = 256
    calibration_k: int = 50
    max_probe_fraction: float = 0.25
    min_rows: int = DEFAULT_MIN_ROWS
    train_size: int = 65_536
    threads: int | None = None

    @classmethod
    def of(cls, options: AnnOptions) -> AnnParams:
        """The parameters the ``[ann]`` settings give."""
        return cls(nprobe=options.nprobe, overfetch=options.overfetch, target_recall=options.target_recall,
                   min_rows=1 if options.mode == "on" else options.min_rows)

    def lists_for(self, n: int) -> int:
        if self.nlist:
            return max(1, min(self.nlist, n))
        return max(1, min(int(4 * math.sqrt(n)), n // 39, 16_384))


def _rerank(matrix: np.ndarray | ShardedVectors, query: np.ndarray, cand: np.ndarray,
            k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-``k`` of candidate rows ``cand``: ``(rows, cosines)`` best first, ties in row order."""
    cand = np.sort(cand)  # equal scores keep row order, as in the scan
    s = cosine_scores(matrix[cand], query)
    best = top_k(s, k)
    return cand[best], s[best]


def _exact_neighbours(vectors: np.ndarray | ShardedVectors, queries: np.ndarray, query_rows: np.ndarray,
                      k: int, allowed: list[np.ndarray | None]) -> list[np.ndarray]:
    """For each mask of ``allowed`` (None: every row), the exact top-``k`` rows (unordered) among the rows it
    keeps for each of ``queries`` (q, d), each query's own row (``query_rows``) left out: one pass over
    ``vectors`` in blocks (a matrix product for all queries), a running top-k per query and mask."""
    n = vectors.shape[0]
    nq = len(queries)
    best_s = [np.full((nq, k), -np.inf, dtype=np.float32) for _ in allowed]
    best_i = [np.full((nq, k), -1, dtype=np.int64) for _ in allowed]
    for start in range(0, n, BLOCK_ROWS):
        block = np.asarray(vectors[start : start + BLOCK_ROWS])
        s = cosine_scores(block, queries).reshape(nq, len(block))
        inside = np.flatnonzero((query_rows >= start) & (query_rows < start + len(block)))
        s[inside, query_rows[inside] - start] = -np.inf
        for level, keep in enumerate(allowed):
            cols = None if keep is None else np.flatnonzero(keep[start : start + len(block)])
            sub = s if cols is None else s[:, cols]
            if sub.shape[1] == 0:
                continue
            kk = min(k, sub.shape[1])
            part = np.argpartition(-sub, kk - 1, axis=1)[:, :kk]
            found = part + start if cols is None else cols[part] + start
            cs = np.concatenate([best_s[level], np.take_along_axis(sub, part, 1)], axis=1)
            ci = np.concatenate([best_i[level], found], axis=1)
            top = np.argpartition(-cs, k - 1, axis=1)[:, :k]
            best_s[level], best_i[level] = np.take_along_axis(cs, top, 1), np.take_along_axis(ci, top, 1)
    return best_i


def _filter_levels(n: int, min_rows: int, k: int) -> list[float]:
    """The filter fractions calibration measures: 1/2, 1/4, ... while above ``min_rows / n``, then that
    fraction itself (smaller pools are scanned exactly), at most down to 1/16 (a search below the last scales its
    count), none that keeps fewer than 4 * k rows, and none when no filtered pool reaches ``min_rows``."""
    if min_rows >= n:
        return []
    lowest = max(min_rows / n, MIN_FILTER_FRACTION)
    out: list[float] = []
    f = 0.5
    while f > lowest and n * f >= 4 * k:
        out.append(f)
        f /= 2
    if n * lowest >= 4 * k and lowest < 1:
        out.append(round(lowest, 6))
    return out


def _smallest_nprobe(recall: Callable[[int], float], start: int, cap: int,
                     target: float) -> tuple[int, float, dict[str, float]]:
    """The smallest probe count in ``[start, cap]`` whose ``recall`` reaches ``target`` (doubling from
    ``start``, then bisecting to within an eighth), or ``cap`` when none does: ``(nprobe, its recall, every
    recall measured)``. Recall grows with the lists probed (each probe's lists include the previous ones)."""
    curve: dict[int, float] = {}

    def at(p: int) -> float:
        if p not in curve:
            curve[p] = recall(p)
        return curve[p]

    lo, hi = 0, start  # lo: the largest count known to miss the target (0: none measured)
    while at(hi) < target and hi < cap:
        lo, hi = hi, min(cap, 2 * hi)
    if lo and at(hi) >= target:
        while hi - lo > max(1, lo // 8):
            mid = (lo + hi) // 2
            if at(mid) >= target:
                hi = mid
            else:
                lo = mid
    return int(hi), curve[hi], {str(p): round(r, 4) for p, r in sorted(curve.items())}


def _calibration_settings(params: AnnParams) -> dict[str, Any]:
    """The settings a calibration depends on, as the sidecar records them."""
    return {"target_recall": params.target_recall, "nprobe_floor": params.nprobe, "overfetch": params.overfetch,
            "calibrated_min_rows": params.min_rows}


class AnnStore:
    """One vector space's FAISS index in ``<index>/ann/``."""

    def __init__(self, root: Path, space: str) -> None:
        self.dir = Path(root) / "ann"
        self.space = space
        self.index_path = self.dir / f"{space}.faiss"
        self.meta_path = self.dir / f"{space}.json"
        self._index: Any = None
        self._meta: dict[str, Any] | None = None

    # ------------------------------------------------------------------ identity
    def meta(self) -> dict[str, Any] | None:
        if self._meta is None and self.meta_path.is_file():
            try:
                data = json.loads(self.meta_path.read_text())
                self._meta = data if isinstance(data, dict) else None
            except (OSError, ValueError):
                self._meta = None
        return self._meta

    def matches(self, identity: dict[str, Any]) -> bool:
        """Whether the store was built from exactly the database state ``identity`` describes."""
        meta = self.meta()
        return meta is not None and all(meta.get(k) == v for k, v in identity.items()) and self.index_path.is_file()

    def calibrated_for(self, params: AnnParams) -> bool:
        """Whether the sidecar's calibration was made with ``params``' target, floor, over-fetch and
        threshold (the filters it covers)."""
        meta = self.meta() or {}
        return all(meta.get(key) == value for key, value in _calibration_settings(params).items())

    def nprobe_for(self, params: AnnParams, fraction: float = 1.0) -> int:
        """Lists a search probes when its filter keeps ``fraction`` of the rows (1: no filter).

        Unfiltered: the calibrated count, never below the floor ``params.nprobe`` (the floor alone when
        calibration is off, ``target_recall`` 0, or the sidecar has none: a store from before calibration).
        Filtered: that count times ``1 / fraction`` (as many allowed rows seen as unfiltered), and at least what
        calibration measured under random filters of the nearest fractions (interpolated linearly between two
        of them; below the smallest, its count scaled by the fraction)."""
        meta = self.meta() or {}
        cal = meta.get("nprobe")
        calibrated = params.target_recall > 0 and isinstance(cal, int) and cal >= 1
        base = max(params.nprobe, cal) if calibrated else params.nprobe
        if fraction >= 1:
            return base
        fraction = max(fraction, 1e-9)
        nprobe = math.ceil(base / fraction)
        levels = [(1.0, base)]
        if calibrated:
            levels += sorted(((float(e["fraction"]), int(e["nprobe"])) for e in meta.get("filtered") or []
                              if isinstance(e, dict) and isinstance(e.get("nprobe"), int)
                              and isinstance(e.get("fraction"), (int, float)) and 0 < e["fraction"] < 1), reverse=True)
        lower = [(f, p) for f, p in levels if f < fraction]
        f_hi, p_hi = min(((f, p) for f, p in levels if f >= fraction), key=lambda fp: fp[0])
        if lower:
            # Linear in the fraction: the count needed tends to rise in steps (the filtered top-k reaching
            # into the next clusters), and a line between two measured points lies above such a curve where
            # a geometric or 1/f interpolation fell below it (measured on clustered test data).
            f_lo, p_lo = lower[0]
            measured = p_hi + (p_lo - p_hi) * (f_hi - fraction) / (f_hi - f_lo)
        else:
            measured = p_hi * f_hi / fraction
        return min(1 << 30, max(nprobe, math.ceil(measured - 1e-9)))

    # ------------------------------------------------------------------ build
    def build(self, vectors: np.ndarray | ShardedVectors, identity: dict[str, Any],
              params: AnnParams | None = None) -> dict[str, Any]:
        """Train and fill the index from ``vectors`` (rows = gallery rows), calibrate ``nprobe``
        (:meth:`calibrate`), then write it atomically: the sidecar naming the identity is replaced last, so a
        killed build leaves a store that does not match. Rows are read a sample (training) and a block of
        65,536 (adding, calibrating) at a time, so a sharded snapshot larger than memory is never read whole.
        Returns the sidecar."""
        faiss = _faiss()
        t0 = time.perf_counter()
        params = params or AnnParams()
        if params.threads:
            faiss.omp_set_num_threads(params.threads)
        n, d = vectors.shape
        nlist = params.lists_for(n)
        index = faiss.index_factory(d, f"IVF{nlist},SQ8", faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample_rows = np.sort(rng.choice(n, size=min(n, max(params.train_size, 39 * nlist)), replace=False))
        index.train(np.ascontiguousarray(vectors[sample_rows], dtype=np.float32))
        for start in range(0, n, BLOCK_ROWS):
            index.add(np.ascontiguousarray(vectors[start : start + BLOCK_ROWS], dtype=np.float32))
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.meta_path.exists():
            self.meta_path.unlink()  # the old identity goes first: a half-written store never matches
        self._meta = None
        tmp = self.dir / f".{self.space}.faiss.tmp"
        faiss.write_index(index, str(tmp))
        os.replace(tmp, self.index_path)
        self._index = index
        t_cal = time.perf_counter()
        calibration = self.calibrate(vectors, params, exclude=sample_rows)
        meta = {**identity, "nlist": nlist, "factory": f"IVF{nlist},SQ8", **calibration,
                "build_seconds": round(t_cal - t0, 1), "calibration_seconds": round(time.perf_counter() - t_cal, 1)}
        write_json_atomic(self.meta_path, meta)
        self._meta = meta
        return meta

    def recalibrate(self, vectors: np.ndarray | ShardedVectors, params: AnnParams) -> dict[str, Any]:
        """Calibrate a built store again (another target, floor or over-fetch) and rewrite its sidecar; the
        index and its identity stay. Returns the sidecar."""
        old = dict(self.meta() or {})
        for key in _CALIBRATION_KEYS:
            old.pop(key, None)
        t0 = time.perf_counter()
        meta = {**old, **self.calibrate(vectors, params), "calibration_seconds": round(time.perf_counter() - t0, 1)}
        write_json_atomic(self.meta_path, meta)
        self._meta = meta
        return meta

    def calibrate(self, vectors: np.ndarray | ShardedVectors, params: AnnParams,
                  exclude: np.ndarray | None = None) -> dict[str, Any]:
        """The smallest ``nprobe`` (from the floor ``params.nprobe``, at most ``max_probe_fraction`` of the
        lists) whose mean recall@k over held-out queries reaches ``params.target_recall``, measured through the
        search path (``k * overfetch`` candidates, exact re-rank); then the same under random filters keeping
        1/2, 1/4, ... of the rows, down to the smallest pool the store answers (``params.min_rows``, at most
        down to 1/16), each starting from what :meth:`nprobe_for` would probe there. Queries: stored rows
        outside ``exclude`` (k-means' training sample) where enough are left, asked leave-one-out.
        Returns the sidecar's calibration fields; with ``target_recall`` 0 only the settings (searches then
        probe the floor)."""
        index = self._loaded()
        n = vectors.shape[0]
        nlist = int(index.nlist)
        out: dict[str, Any] = dict(_calibration_settings(params))
        k = min(params.calibration_k, n - 1)
        if params.target_recall <= 0 or k < 1:
            return out
        rng = np.random.default_rng(1)
        pool = np.arange(n)
        if exclude is not None and n - len(exclude) >= params.calibration_queries:
            pool = np.setdiff1d(pool, exclude, assume_unique=True)
        query_rows = np.sort(rng.choice(pool, size=min(params.calibration_queries, len(pool)), replace=False))
        queries = np.ascontiguousarray(vectors[query_rows], dtype=np.float32)
        # Nested random filters: level f keeps the rows whose draw is below f.
        fractions = _filter_levels(n, params.min_rows, k)
        draws = np.random.default_rng(2).random(n)
        allowed = [None, *(draws < f for f in fractions)]
        truths = _exact_neighbours(vectors, queries, query_rows, k, allowed)
        faiss = _faiss()
        fetch = k * params.overfetch

        def measure(keep: np.ndarray | None, truth: np.ndarray, nprobe: int) -> float:
            kwargs: dict[str, Any] = {"nprobe": nprobe}
            if keep is not None:
                bits = np.packbits(keep.astype(np.uint8), bitorder="little")
                kwargs["sel"] = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
            _s, ids = index.search(queries, fetch + 1, params=faiss.SearchParametersIVF(**kwargs))
            hits = 0
            for i, row in enumerate(query_rows):
                # Fewer than k found (a search would fall back to the scan) count what they hold: a count
                # that leaves the store short of candidates is not one it should answer with.
                cand = ids[i][(ids[i] >= 0) & (ids[i] != row)][:fetch]
                hits += np.intersect1d(_rerank(vectors, queries[i], cand, k)[0], truth[i]).size
            return hits / (len(query_rows) * k)

        cap = max(1, min(nlist, math.ceil(nlist * params.max_probe_fraction)))
        floor = max(1, min(params.nprobe, nlist))
        nprobe, recall, curve = _smallest_nprobe(lambda p: measure(None, truths[0], p), floor,
                                                 max(floor, cap), params.target_recall)
        out.update({"nprobe": nprobe, "recall": round(recall, 4), "recall_k": k,
                    "calibration_queries": len(query_rows), "nprobe_cap": max(floor, cap),
                    "capped": bool(recall < params.target_recall), "curve": curve})
        filtered = []
        previous = nprobe
        for f, keep, truth in zip(fractions, allowed[1:], truths[1:], strict=True):
            start = min(nlist, max(previous, math.ceil(max(params.nprobe, nprobe) / f)))
            level_cap = max(start, min(nlist, math.ceil(cap / f)))
            p_f, r_f, c_f = _smallest_nprobe(partial(measure, keep, truth), start, level_cap, params.target_recall)
            filtered.append({"fraction": f, "nprobe": p_f, "recall": round(r_f, 4),
                             "capped": bool(r_f < params.target_recall), "curve": c_f})
            previous = p_f
        out["filtered"] = filtered
        return out

    def calibration_note(self) -> str:
        """A warning when the calibration missed its target ("" otherwise)."""
        meta = self.meta() or {}
        target = meta.get("target_recall")
        short = [f"recall@{meta.get('recall_k')} {meta.get('recall'):.3f} at nprobe {meta.get('nprobe')} (the cap, "
                 f"{meta.get('nprobe_cap')} of {meta.get('nlist')} lists)"] if meta.get("capped") else []
        short += [f"{e['recall']:.3f} at nprobe {e['nprobe']} under a filter keeping {e['fraction']:g} of the rows"
                  for e in meta.get("filtered") or [] if isinstance(e, dict) and e.get("capped")]
        if not short:
            return ""
        return (f"approximate store for {self.space}: {'; '.join(short)}: below the target recall {target}; "
                f'raise ann.nprobe for more recall, or set ann.mode = "off" for exact search')

    # ------------------------------------------------------------------ search
    def _loaded(self) -> Any:
        if self._index is None:
            self._index = _faiss().read_index(str(self.index_path))
        return self._index

    def candidates(self, query: np.ndarray, k: int, nprobe: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """Up to ``k`` candidate rows for one query (d,), best first by quantised score, probing ``nprobe``
        lists; ``allowed``: a boolean mask of the rows a filter keeps (searched inside FAISS with an id
        selector)."""
        faiss = _faiss()
        index = self._loaded()
        q = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        kwargs: dict[str, Any] = {"nprobe": max(1, min(int(nprobe), index.nlist))}
        if allowed is not None:
            bits = np.packbits(allowed.astype(np.uint8), bitorder="little")
            kwargs["sel"] = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        sp = faiss.SearchParametersIVF(**kwargs)
        _scores, ids = index.search(q, k, params=sp)
        found = ids[0]
        return found[found >= 0].astype(np.int64)


_CALIBRATION_KEYS = ("target_recall", "nprobe_floor", "overfetch", "calibrated_min_rows", "nprobe", "recall",
                     "recall_k", "calibration_queries", "nprobe_cap", "capped", "curve", "filtered")


def search_reranked(store: AnnStore, matrix: np.ndarray | ShardedVectors, query: np.ndarray, k: int,
                    params: AnnParams, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-``k`` rows of ``matrix`` for ``query`` among ``rows`` (None: all): the store proposes
    ``k * overfetch`` candidates inside the filter, probing its calibrated ``nprobe`` scaled by the filter,
    and they are re-ranked by their exact cosine. Returns ``(rows, scores)`` best first, or None when the store
    found fewer than the pool allows or would probe every list (the caller scans exactly then)."""
    n = matrix.shape[0]
    allowed = None
    fraction = 1.0
    if rows is not None and len(rows) < n:
        allowed = np.zeros(n, dtype=bool)
        allowed[rows] = True
        fraction = len(rows) / n
    # A filter keeping a fraction f of the rows probes at least 1/f times the lists (as many allowed candidates
    # seen as unfiltered), and at least what calibration measured under filters that size.
    nprobe = store.nprobe_for(params, fraction)
    nlist = (store.meta() or {}).get("nlist")
    if fraction < 1 and isinstance(nlist, int) and nprobe >= nlist > store.nprobe_for(params):
        # The filter raised the probes to every list: the store would read all its rows, inside the filter or
        # not, with nothing saved; the exact scan of the pool is exact and was faster (1M x 512, a 25% filter
        # calibrated to all 4,000 lists, alternately in one run: the store 45 ms, the exact scan 31 ms). A store
        # set to probe every list anyway (``ann.nprobe`` >= its lists) is the user's choice and answers.
        return None
    cand = store.candidates(query, k * params.overfetch, nprobe, allowed)
    if len(cand) < min(k, n if rows is None else len(rows)):
        return None
    return _rerank(matrix, query, cand, k)


def exact_top_k(matrix: np.ndarray | ShardedVectors, query: np.ndarray, k: int,
                rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact scan: top-``k`` ``(rows, cosines)`` of ``matrix`` (or of the pool ``rows``) for ``query``, best
    first, ties in row order. Several shards are scanned shard by shard with a running top-k; one array (or
    shard) is scored whole (a large pool) or gathered (a small one), then cut to the top k."""
    mat = matrix if isinstance(matrix, ShardedVectors) else ShardedVectors.of_array(matrix)
    if mat.num_shards > 1 and np.ndim(query) == 1:
        pos, scores = mat.top_k(query, k, rows)
    else:
        s = mat.scores(query, rows)
        pos = top_k(s, k)
        scores = s[pos]
    return (pos if rows is None else rows[pos]), scores


class PoolResult(NamedTuple):
    """What :func:`search_pool` found: rows best first, their exact cosines, and the path that answered:
    ``"ann"`` (the store, re-ranked), ``"exact"`` (the scan) or ``"exact-fallback"`` (the store found too
    few inside the filter, or would have probed every list: the scan answered)."""

    rows: np.ndarray
    scores: np.ndarray
    path: str


def search_pool(matrix: np.ndarray | ShardedVectors, query: np.ndarray, k: int, rows: np.ndarray | None = None,
                store: AnnStore | None = None, identity: dict[str, Any] | None = None,
                params: AnnParams | None = None, min_rows: int | None = None,
                exact: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None) -> PoolResult:
    """Top-``k`` of ``query`` among ``rows`` (None: every row): the decision every gallery search makes.

    The store answers (candidates inside the filter, re-ranked exactly, :func:`search_reranked`) when there is
    one, it matches ``identity`` (the database state it must have been built from; ``None``: any completed
    build), the query is one vector and the pool has at least ``min_rows`` rows (None: ``params.min_rows``);
    otherwise, or when the store found fewer than the pool allows or would probe every list, the exact scan:
    ``exact()`` when given (the gallery's, which memoises scores), else :func:`exact_top_k`."""
    params = params or AnnParams()
    min_rows = params.min_rows if min_rows is None else min_rows
    pool = matrix.shape[0] if rows is None else len(rows)
    path = "exact"
    if store is not None and np.ndim(query) == 1 and pool >= min_rows and store.matches(identity or {}):
        found = search_reranked(store, matrix, query, k, params, rows)
        if found is not None:
            return PoolResult(found[0], found[1], "ann")
        path = "exact-fallback"
    got = exact() if exact is not None else exact_top_k(matrix, query, k, rows)
    return PoolResult(got[0], got[1], path)
