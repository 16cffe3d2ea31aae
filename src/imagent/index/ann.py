"""Approximate nearest-neighbour search beside the exact scan (FAISS, inner product on unit vectors).

Why FAISS: it is the library the large-scale retrieval tools build on (clip-retrieval's autofaiss, the
papers' own galleries), runs on the CPU from a PyPI wheel (``faiss-cpu``) and on GPUs where a GPU build is
installed, and searches under an id filter (``IDSelector``) without a second pass.

The store is an inverted-file index with 8-bit scalar-quantised vectors (``IVF<nlist>,SQ8``): a quarter of
the float32 memory, and a search scans ``nprobe / nlist`` of the gallery. Quantised scores only *choose*
candidates: :meth:`Gallery.search` over-fetches and re-ranks them exactly with the stored vectors, so the
scores a method sees are the exact cosines, as from the scan.

On disk, per vector space: ``ann/<space>.faiss`` and ``ann/<space>.json`` naming the index's uuid, the
generation and row count it was built at and the space's model. A store whose generation, uuid, row count or
model does not match the database is never used (the exact scan answers) until it is rebuilt, which
``imagent index`` does at the end of a build that changed anything (``indexing.ann``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from imagent.index.scoring import cosine_scores, top_k
from imagent.index.shards import ShardedVectors


class AnnUnavailable(RuntimeError):
    """FAISS is not installed (``pip install faiss-cpu``)."""


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
    """How the store is built and searched. ``nlist=None``: about 4 * sqrt(N) lists (FAISS's rule of thumb,
    capped so that every list gets enough training points); ``nprobe``: lists scanned per query;
    ``overfetch``: candidates fetched per wanted result before the exact re-rank."""

    nlist: int | None = None
    nprobe: int = 32
    overfetch: int = 4
    train_size: int = 65_536
    threads: int | None = None

    def lists_for(self, n: int) -> int:
        if self.nlist:
            return max(1, min(self.nlist, n))
        return max(1, min(int(4 * math.sqrt(n)), n // 39, 16_384))


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

    # ------------------------------------------------------------------ build
    def build(self, vectors: np.ndarray | ShardedVectors, identity: dict[str, Any],
              params: AnnParams | None = None) -> None:
        """Train and fill the index from ``vectors`` (rows = gallery rows), then write it atomically:
        the sidecar naming the identity is replaced last, so a killed build leaves a store that does not match.
        Rows are read a sample (training) and a block of 65,536 (adding) at a time, so a sharded snapshot
        larger than memory is never read whole."""
        faiss = _faiss()
        params = params or AnnParams()
        if params.threads:
            faiss.omp_set_num_threads(params.threads)
        n, d = vectors.shape
        nlist = params.lists_for(n)
        index = faiss.index_factory(d, f"IVF{nlist},SQ8", faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample_rows = np.sort(rng.choice(n, size=min(n, max(params.train_size, 39 * nlist)), replace=False))
        index.train(np.ascontiguousarray(vectors[sample_rows], dtype=np.float32))
        for start in range(0, n, 65_536):
            index.add(np.ascontiguousarray(vectors[start : start + 65_536], dtype=np.float32))
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.meta_path.exists():
            self.meta_path.unlink()  # the old identity goes first: a half-written store never matches
        tmp = self.dir / f".{self.space}.faiss.tmp"
        faiss.write_index(index, str(tmp))
        os.replace(tmp, self.index_path)
        meta = {**identity, "nlist": nlist, "factory": f"IVF{nlist},SQ8"}
        tmp_meta = self.dir / f".{self.space}.json.tmp"
        tmp_meta.write_text(json.dumps(meta))
        os.replace(tmp_meta, self.meta_path)
        self._index, self._meta = index, meta

    # ------------------------------------------------------------------ search
    def _loaded(self) -> Any:
        if self._index is None:
            self._index = _faiss().read_index(str(self.index_path))
        return self._index

    def candidates(self, query: np.ndarray, k: int, params: AnnParams, allowed: np.ndarray | None = None) -> np.ndarray:
        """Up to ``k`` candidate rows for one query (d,), best first by quantised score; ``allowed``: a boolean
        mask of the rows a filter keeps (searched inside FAISS with an id selector)."""
        faiss = _faiss()
        index = self._loaded()
        q = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        kwargs: dict[str, Any] = {"nprobe": min(params.nprobe, index.nlist)}
        if allowed is not None:
            bits = np.packbits(allowed.astype(np.uint8), bitorder="little")
            kwargs["sel"] = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        sp = faiss.SearchParametersIVF(**kwargs)
        _scores, ids = index.search(q, k, params=sp)
        found = ids[0]
        return found[found >= 0].astype(np.int64)


def search_reranked(store: AnnStore, matrix: np.ndarray | ShardedVectors, query: np.ndarray, k: int,
                    params: AnnParams, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-``k`` rows of ``matrix`` for ``query`` among ``rows`` (None: all): the store proposes
    ``k * overfetch`` candidates inside the filter and they are re-ranked by their exact cosine. Returns
    ``(rows, scores)`` best first, or None when the store found fewer than the pool allows (the caller
    scans exactly then)."""
    n = matrix.shape[0]
    allowed = None
    if rows is not None:
        allowed = np.zeros(n, dtype=bool)
        allowed[rows] = True
    if rows is not None and len(rows) < n:
        # A filter keeps a fraction f of the rows: probe about 1/f times more lists, so that as many
        # allowed candidates are seen as an unfiltered search sees (recall holds under the filter).
        params = replace(params, nprobe=min(1 << 30, math.ceil(params.nprobe * n / max(1, len(rows)))))
    cand = store.candidates(query, k * params.overfetch, params, allowed)
    if len(cand) < min(k, n if rows is None else len(rows)):
        return None
    cand = np.sort(cand)  # equal scores keep row order, as in the scan
    s = cosine_scores(matrix[cand], query)
    best = top_k(s, k)
    return cand[best], s[best]
