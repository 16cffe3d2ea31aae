"""Duplicate groups: exact copies (same bytes) and near-duplicates (the same picture re-encoded or resized).

``imagent duplicates`` lists them; ``imagent search --collapse-duplicates`` keeps one photo per group in the
results. Nothing is ever deleted or changed on disk.

- **Exact copies** share a content hash (sha256 of the file). A folder build indexes the first copy and lists
  the others as skipped ("same image as ..."); they are found again here by hashing those files, and records of
  a manifest that name the same bytes under two ids are grouped too.
- **Near-duplicates** have perceptual hashes (``imagehash.phash``: 64 bits from the image's low frequencies,
  robust to re-encoding and resizing) at most ``duplicate_max_distance`` bits apart, confirmed where the index
  sees pixels by a cosine in one space, with that space's floor: the pixel model's ``visual`` features
  (:mod:`imagent.index.pixels`) when the index has them, at least ``duplicate_min_visual``; else image vectors
  from an encoder that sees pixels, at least ``duplicate_min_cosine``. Each floor sits just above what unrelated
  photos reach in its space, measured with true copies (re-encoded, a half and a quarter of the size, cropped,
  EXIF-rotated, HEIC) and look-alikes in ``benchmarks/duplicates.py`` (docs/photos.md has the numbers): the hash
  keeps two birds of one kind and burst frames apart; no floor in either space tells a copy from a look-alike that
  hashes alike (one dreidel with another letter, one picture in other colours) without losing the copies.
  Hashes are computed once per file content and kept in the index (table ``phash``; no generation bump, so no
  snapshot is rewritten); pairs are compared blockwise with numpy's popcount.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagent.core.config import IndexOptions
from imagent.core.imageio import ImageLoadError, open_image_scaled
from imagent.core.types import ImageRecord
from imagent.index.gallery import SPACE_IMAGE, Gallery
from imagent.index.pixels import SPACE_VISUAL

_BLOCK = 2048


@dataclass
class Member:
    id: str | None  # None: a file the index skipped as an exact copy of another
    path: str
    size: int | None
    taken: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "size": self.size, "taken": self.taken}


@dataclass
class Group:
    kind: str  # "exact" | "near"
    members: list[Member] = field(default_factory=list)
    max_distance: int = 0  # the largest perceptual-hash distance inside the group (near)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_distance": self.max_distance, "members": [m.to_dict() for m in self.members]}


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _member(rec: ImageRecord) -> Member:
    return Member(rec.id, rec.path, _size(rec.path), rec.taken_time.isoformat() if rec.taken_time else None)


# pHash looks at a 32x32 grey thumbnail: the image is decoded no larger than this a side (a 100-MP photo is not
# held whole), far above what the thumbnail's own downscaling smooths away.
HASH_SIDE = 256


def perceptual_hash(path: str, options: IndexOptions) -> int | None:
    """The 64-bit pHash of the image at ``path`` (None when it cannot be read)."""
    import imagehash

    try:
        with open_image_scaled(path, HASH_SIDE, options.max_pixels, options.max_file_bytes) as im:
            return int(str(imagehash.phash(im.convert("L"))), 16)
    except (ImageLoadError, OSError, ValueError):
        return None


def perceptual_hashes(gallery: Gallery, options: IndexOptions) -> dict[str, int]:
    """id -> pHash for every record whose file can be read; missing hashes are computed and stored."""
    stored = gallery.phashes()
    out: dict[str, int] = {}
    new: dict[str, int] = {}
    for rec in gallery.records():
        key = rec.content_hash or f"id:{rec.id}"
        h = stored.get(key)
        if h is None:
            h = perceptual_hash(rec.path, options) if rec.path else None
            if h is None:
                continue
            new[key] = h
        out[rec.id] = h
    if new:
        gallery.put_phashes(new)
    return out


def _sha256(path: str) -> str | None:
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None


def exact_groups(gallery: Gallery) -> list[Group]:
    """Records sharing a content hash, with the files the build skipped as identical to one of them."""
    by_hash: dict[str, list[Member]] = {}
    for rec in gallery.records():
        if rec.content_hash:
            by_hash.setdefault(rec.content_hash, []).append(_member(rec))
    for path, reason in gallery.skipped():
        if "identical content" not in reason:
            continue
        h = _sha256(path)
        if h is not None and h in by_hash:
            by_hash[h].append(Member(None, path, _size(path), None))
    return [Group("exact", ms) for ms in by_hash.values() if len(ms) > 1]


def _near_pairs(hashes: np.ndarray, max_distance: int) -> Iterable[tuple[int, int, int]]:
    """``(i, j, distance)`` for i < j with at most ``max_distance`` differing bits."""
    n = len(hashes)
    for start in range(0, n, _BLOCK):
        block = hashes[start : start + _BLOCK]
        dist = np.bitwise_count(block[:, None] ^ hashes[None, :])
        ii, jj = np.nonzero(dist <= max_distance)
        for i, j in zip(ii.tolist(), jj.tolist(), strict=True):
            if start + i < j:
                yield start + i, j, int(dist[i, j])


def _pixel_space(gallery: Gallery) -> str | None:
    """The space that confirms a near pair: the pixel model's visual features when the index has them, else the
    image space when its vectors come from an encoder that sees pixels (not caption mode)."""
    if gallery.has_space(SPACE_VISUAL):
        return SPACE_VISUAL
    info = gallery.spaces().get(SPACE_IMAGE)
    return SPACE_IMAGE if info is not None and not info.model_id.startswith("caption:") else None


def min_cosine(space: str | None, options: IndexOptions) -> float:
    """The cosine a near pair must reach in ``space`` (each space has its own scale: see the module's doc)."""
    return options.duplicate_min_visual if space == SPACE_VISUAL else options.duplicate_min_cosine


def near_groups(gallery: Gallery, options: IndexOptions) -> list[Group]:
    """Near-duplicate groups (connected pairs; see the module doc). Exact copies are not repeated here."""
    hashes = perceptual_hashes(gallery, options)
    ids = [i for i in gallery.ids if i in hashes]
    if len(ids) < 2:
        return []
    arr = np.array([hashes[i] for i in ids], dtype=np.uint64)
    space = _pixel_space(gallery)
    floor = min_cosine(space, options)
    parent = list(range(len(ids)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    worst: dict[int, int] = {}
    content = [gallery.record(i).content_hash for i in ids]
    for i, j, d in _near_pairs(arr, options.duplicate_max_distance):
        if content[i] and content[i] == content[j]:
            continue  # an exact copy: listed as such
        if space is not None:
            cos = float(np.dot(gallery.vector(space, ids[i]), gallery.vector(space, ids[j])))
            if cos < floor:
                continue
        a, b = root(i), root(j)
        if a != b:
            parent[b] = a
            worst[a] = max(worst.get(a, 0), worst.pop(b, 0), d)
        else:
            worst[a] = max(worst.get(a, 0), d)
    members: dict[int, list[int]] = {}
    for k in range(len(ids)):
        members.setdefault(root(k), []).append(k)
    return [Group("near", [_member(gallery.record(ids[k])) for k in ks], worst.get(r, 0))
            for r, ks in members.items() if len(ks) > 1]


def duplicate_groups(gallery: Gallery, options: IndexOptions | None = None) -> list[Group]:
    """Every duplicate group of the gallery: exact copies first, then near-duplicates; members in row order."""
    options = options or IndexOptions()
    return exact_groups(gallery) + near_groups(gallery, options)


def collapse(ids: Sequence[str], groups: Sequence[Group]) -> tuple[list[int], int]:
    """Positions of ``ids`` to keep when only the first (best ranked) photo of each group stays, and how many
    were dropped."""
    group_of: dict[str, int] = {}
    for n, g in enumerate(groups):
        for m in g.members:
            if m.id is not None:
                group_of[m.id] = n
    seen: set[int] = set()
    keep = []
    for pos, i in enumerate(ids):
        g = group_of.get(i)
        if g is not None:
            if g in seen:
                continue
            seen.add(g)
        keep.append(pos)
    return keep, len(ids) - len(keep)
