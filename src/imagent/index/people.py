"""People: the index's faces grouped by who they are, named once, kept stable as the library grows.

Grouping (:func:`group_faces`, at the end of every face pass of ``imagent index``):

- faces already in a group stay there: a group's id never changes and is never reused, and its name (given
  with ``imagent people name``) stays with it through any re-index;
- the faces without a group are taken ``faces.group_batch`` (1,000) at a time in the order they were found; a
  face joins the group of its nearest grouped face when that face is closer than ``faces.threshold`` (0.6,
  dlib's own threshold for its ResNet descriptor: it was trained to put two faces of one person within 0.6 of
  each other); the grouped faces include those of the batches before, so a person met in batch 1 is joined in
  batch 9;
- the faces of a batch that match no one are clustered among themselves with dlib's chinese-whispers clustering
  (edges between faces closer than the threshold) and each cluster starts a new group;
- bounded: the nearest grouped face is found by streaming the grouped faces a batch at a time, so no matrix is
  larger than a batch by a batch and memory stays flat as the library grows; each batch is written in a write
  transaction of its own that lasts milliseconds, so a rename from the web or the CLI never waits on grouping.
  On a first index the result is therefore chinese whispers within each batch and nearest-face joins across
  batches, not one chinese whispers over every face (which held all faces' edges at once: 2.3 GB at 16k faces).

A user's corrections are kept: ``merge`` moves every face of some groups into one; ``split`` moves a face into a
new group (or another one) and pins it there; ``remove`` deletes a face that is nobody (a false detection, a
stranger), and its photo is not scanned again; ``forget`` deletes all face data. Groups with fewer than
``faces.min_group`` (3) faces are "tiny" and listed last; a group no person named whose detections all score below
``faces.sure_score`` (1.0) is listed after the other groups of its size class (:func:`unsure`).

:func:`people_index` is the read side for search: which photos hold which people, for the filter field
``person`` (``person = 'Anna'``, exact and case-insensitive; ``person ~ 'ann'``; ``person = 7`` a group by its
id), for GetMetadata and for each search result. It is rebuilt when the face data's version changes, so a name
given in another process (the CLI while ``imagent serve`` runs) is seen by the next search.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from imagent.core.config import FaceOptions
from imagent.index.face_store import FaceDataMissing, FaceStore, drop_empty_people, drop_face_crops
from imagent.index.store import from_sql, sql_text

DEFAULT_MIN_GROUP = 3
DEFAULT_SURE_SCORE: float = FaceOptions.model_fields["sure_score"].default
MAX_NAME_CHARS = 100
MAX_ID = 2**63 - 1  # SQLite's largest integer: a group or face id above it names nothing (and is not an error)
_ID_REF = re.compile(r"#?(\d+)")


class Gallery(Protocol):
    """What people operations read of a gallery (:class:`imagent.index.gallery.Gallery`, which draws its photos' people
    from here, so this module does not import it): its folder, its ids and their rows."""

    root: Path
    ids: list[str]

    def __contains__(self, image_id: object) -> bool: ...

    def __len__(self) -> int: ...

    def row(self, image_id: str) -> int: ...


class PeopleError(ValueError):
    """A people command that cannot be done (an unknown group or face, a name taken); the message says why."""


class UnknownPeople(PeopleError):
    """A group id, face id or name that the index does not hold."""


# --------------------------------------------------------------------------- grouping


def _descriptors(blobs: Sequence[bytes]) -> np.ndarray:
    if not blobs:
        return np.zeros((0, 128), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)


def _new_person(c: sqlite3.Connection) -> int:
    cur = c.execute("INSERT INTO people(name, name_key, created) VALUES (NULL, NULL, ?)",
                    (datetime.now(UTC).isoformat(timespec="seconds"),))
    return int(cur.lastrowid or 0)


DEFAULT_GROUP_BATCH = 1000  # faces.group_batch: new faces grouped at a time (imagent's own)


@dataclass
class Grouping:
    """What one grouping did: groups started, faces that joined a group made before their batch, batches, and the
    longest write transaction (seconds: the time another writer, a rename, may have waited)."""

    new_people: int = 0
    joined: int = 0
    batches: int = 0
    longest_write_s: float = 0.0


def group_faces(store: FaceStore, threshold: float, batch: int = DEFAULT_GROUP_BATCH) -> Grouping:
    """Put every face without a group into one (see the module doc), ``batch`` faces at a time in id order.

    Each batch is read and compared in a read transaction (WAL: writers are not held up), against the grouped faces
    streamed ``batch`` at a time, so no matrix is larger than ``batch x batch`` whatever the library's size; its
    result is written in one short write transaction of its own, so a rename or merge from the web or the CLI gets
    through between batches. A face is joined to the group its nearest face is in *at that write* (a merge meanwhile
    is followed); one the user grouped meanwhile (``split``) is left where it is."""
    from imagent.models.faces import chinese_whispers

    out = Grouping()
    batch = max(1, int(batch))
    after = 0
    while True:
        with store.read() as c:
            rows = c.execute("SELECT id, descriptor FROM faces WHERE person IS NULL AND id > ? ORDER BY id LIMIT ?",
                             (after, batch)).fetchall()
            if not rows:
                break
            ids = [int(i) for i, _ in rows]
            vecs = _descriptors([b for _, b in rows])
            nearest, dist = _nearest_grouped(c, vecs, batch)
        del rows
        near = dist < threshold
        rest = np.flatnonzero(~near)
        labels = chinese_whispers(vecs[rest], threshold)
        clusters: dict[int, list[int]] = {}
        for n, label in zip(rest.tolist(), labels, strict=True):
            clusters.setdefault(label, []).append(ids[n])
        # The largest clusters get the lowest new ids; ties in the order their first face was found.
        order = sorted(clusters.values(), key=lambda members: (-len(members), members[0]))
        joins = [(int(nearest[n]), int(nearest[n]), ids[n]) for n in np.flatnonzero(near).tolist()]
        t0 = time.perf_counter()
        with store.write() as c:
            out.joined += c.executemany(
                "UPDATE faces SET person = (SELECT person FROM faces WHERE id = ?) WHERE person IS NULL AND "
                "(SELECT person FROM faces WHERE id = ?) IS NOT NULL AND id = ?", joins).rowcount
            out.new_people += _start_groups(c, order)
        out.longest_write_s = max(out.longest_write_s, time.perf_counter() - t0)
        out.batches += 1
        after = ids[-1]
    return out


def _nearest_grouped(c: sqlite3.Connection, vecs: np.ndarray, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``vecs``: the id of its nearest grouped face and the distance to it (inf: none), the grouped
    faces read ``batch`` at a time in id order."""
    from imagent.models.faces import face_distance

    best = np.full(len(vecs), np.inf, dtype=np.float32)
    best_id = np.zeros(len(vecs), dtype=np.int64)
    rows_at = np.arange(len(vecs))
    after = 0
    while True:
        # `+person`: walk the faces by id (the primary key), not through the person index (which would sort)
        known = c.execute("SELECT id, descriptor FROM faces WHERE id > ? AND +person IS NOT NULL ORDER BY id "
                          "LIMIT ?", (after, batch)).fetchall()
        if not known:
            return best_id, best
        known_ids = np.array([int(i) for i, _ in known], dtype=np.int64)
        dist = face_distance(vecs, _descriptors([b for _, b in known]))
        j = dist.argmin(1)
        d = dist[rows_at, j]
        better = d < best
        best[better] = d[better]
        best_id[better] = known_ids[j[better]]
        after = int(known_ids[-1])


def _start_groups(c: sqlite3.Connection, clusters: list[list[int]]) -> int:
    """One new group per cluster of face ids (faces the user grouped meanwhile left out; a group that would be
    empty is not made). Returns the groups made."""
    made = 0
    for members in clusters:
        pid = _new_person(c)
        if c.executemany("UPDATE faces SET person = ? WHERE id = ? AND person IS NULL",
                         [(pid, f) for f in members]).rowcount:
            made += 1
        else:
            c.execute("DELETE FROM people WHERE id = ?", (pid,))
    return made


def count_people(c: sqlite3.Connection) -> int:
    """Groups holding at least one face."""
    return int(c.execute("SELECT COUNT(DISTINCT person) FROM faces WHERE person IS NOT NULL").fetchone()[0])


def people_count(store: FaceStore) -> int:
    try:
        with store.read() as c:
            return count_people(c)
    except FaceDataMissing:
        return 0


def has_ungrouped(store: FaceStore) -> bool:
    """Whether some face has no group yet (a killed pass stored it but did not group it)."""
    try:
        with store.read() as c:
            return c.execute("SELECT 1 FROM faces WHERE person IS NULL LIMIT 1").fetchone() is not None
    except FaceDataMissing:
        return False


# --------------------------------------------------------------------------- listing


@dataclass
class Face:
    id: int
    photo: str
    box: tuple[float, float, float, float]  # left, top, right, bottom: fractions of the upright photo
    score: float
    size: int
    person: int | None
    pinned: bool

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "photo": self.photo, "box": [round(v, 4) for v in self.box],
                "score": round(self.score, 3), "size": self.size, "person": self.person, "pinned": self.pinned}


@dataclass
class Person:
    id: int
    name: str | None
    faces: list[Face] = field(default_factory=list)
    tiny: bool = False

    @property
    def photos(self) -> list[str]:
        """The photo ids holding this person, each once, in the order their faces were found."""
        return list(dict.fromkeys(f.photo for f in self.faces))

    @property
    def label(self) -> str:
        return self.name or f"#{self.id}"


def _face(row: Sequence[Any]) -> Face:
    fid, photo, x0, y0, x1, y1, score, size, person, pinned = row
    return Face(int(fid), from_sql(photo), (x0, y0, x1, y1), float(score), int(size),
                None if person is None else int(person), bool(pinned))


_FACE_COLS = "id, photo, x0, y0, x1, y1, score, size, person, pinned"


def list_people(gallery: Gallery, min_group: int = DEFAULT_MIN_GROUP,
                sure_score: float = DEFAULT_SURE_SCORE) -> list[Person]:
    """Every group with at least one face of a photo in the index, in :func:`people_order`: tiny ones (fewer than
    ``min_group`` faces) last, unsure ones (below ``sure_score``) after the others of their size class. Named groups
    without faces are listed at the end. :class:`FaceDataMissing` when the index has no face data."""
    store = FaceStore(gallery.root)
    with store.read() as c:
        names = {int(i): n for i, n in c.execute("SELECT id, name FROM people")}
        rows = c.execute(f"SELECT {_FACE_COLS} FROM faces WHERE person IS NOT NULL ORDER BY id").fetchall()
    people: dict[int, Person] = {}
    for row in rows:
        face = _face(row)
        if face.photo not in gallery:
            continue
        pid = face.person or 0
        people.setdefault(pid, Person(pid, names.get(pid))).faces.append(face)
    for pid, name in names.items():
        if name and pid not in people:
            people[pid] = Person(pid, name)
    for p in people.values():
        p.tiny = len(p.faces) < min_group
    return sorted(people.values(), key=lambda p: people_order(p, sure_score))


def people_order(p: Person, sure_score: float = DEFAULT_SURE_SCORE) -> tuple:
    """How People lists groups: those with faces first, the tiny ones last, groups of unsure detections after
    the others (:func:`unsure`), then by size (faces) and the best detection's confidence."""
    return (not p.faces, p.tiny, unsure(p, sure_score), -len(p.faces),
            -max((f.score for f in p.faces), default=0.0), p.id)


def unsure(p: Person, sure_score: float = DEFAULT_SURE_SCORE) -> bool:
    """A group no person named made only of detections below ``sure_score`` (``faces.sure_score``): listed after
    every other group of its size class, so a named person is never below one (issue 47)."""
    return not p.name and all(f.score < sure_score for f in p.faces)


def get_person(gallery: Gallery, person: int | str) -> Person:
    """One group by id (or ``#id``) or by name (any case); :class:`PeopleError` naming the known ones."""
    people = list_people(gallery)
    text = str(person).strip()
    m = _ID_REF.fullmatch(text)
    for p in people:
        if (m and _as_id(m.group(1)) == p.id) or (p.name and p.name.casefold() == text.casefold()):
            return p
    known = ", ".join(f"{p.id}" + (f" ({p.name})" if p.name else "") for p in people[:12])
    raise UnknownPeople(f"no group {text!r} in this index; groups: {known or 'none'} (imagent people)")


@dataclass
class ScanSummary:
    """Counts over the face data: photos scanned, faces, photos with notes, groups, when they were grouped."""

    photos_scanned: int
    faces: int
    photos_with_notes: int
    people: int
    grouped_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scan_summary(gallery: Gallery) -> ScanSummary:
    """Counts over the face data (:class:`FaceDataMissing` without any)."""
    store = FaceStore(gallery.root)
    with store.read() as c:
        scans = c.execute("SELECT COUNT(*), COALESCE(SUM(faces), 0), COALESCE(SUM(note != ''), 0) FROM scans")\
            .fetchone()
        groups = count_people(c)
        grouped_at = c.execute("SELECT value FROM meta WHERE key='grouped_at'").fetchone()
    return ScanSummary(int(scans[0]), int(scans[1]), int(scans[2]), groups, grouped_at[0] if grouped_at else None)


# --------------------------------------------------------------------------- corrections


@dataclass
class Renamed:
    """A group named (``name`` None: its name taken off); ``previous`` its name before."""

    id: int
    name: str | None
    previous: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Merged:
    """Groups ``merged`` into group ``id`` (which has ``name`` now), ``faces_moved`` faces moved."""

    id: int
    name: str | None
    merged: list[int]
    faces_moved: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Moved:
    """A face split off group ``from_group`` into group ``to`` (``new_group``: made for it)."""

    face: int
    from_group: int | None
    to: int
    new_group: bool

    def to_dict(self) -> dict[str, Any]:
        return {"face": self.face, "from": self.from_group, "to": self.to, "new_group": self.new_group}


@dataclass
class FaceRemoved:
    """A face deleted (it was nobody): its photo and the group it was in."""

    face: int
    photo: str
    from_group: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"face": self.face, "photo": self.photo, "from": self.from_group}


@dataclass
class Forgotten:
    """What ``forget`` deleted: rows, files, kept face crops; ``database`` the face store that is gone, ``left``
    any of its files still there (none)."""

    faces: int
    people: int
    photos_scanned: int
    files_removed: int
    face_crops_removed: int
    database: str
    left: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_name(name: str) -> str:
    """A person's name as stored: trimmed, one line, printable, 1..100 characters, not a group reference."""
    text = " ".join(str(name).split())
    if not text:
        raise PeopleError("a name must not be empty")
    if len(text) > MAX_NAME_CHARS:
        raise PeopleError(f"a name has at most {MAX_NAME_CHARS} characters")
    if not text.isprintable():
        raise PeopleError("a name must be printable text")
    if _ID_REF.fullmatch(text):
        raise PeopleError(f"{text!r} reads as a group number (person = 7 means group 7); choose a name with letters")
    return text


def _as_id(digits: str) -> int:
    """A group or face number as written (``7``, ``#7``): 0 (no one) when it is longer than any id can be."""
    return int(digits) if len(digits) <= 19 else 0


def _shown_id(value: int) -> str:
    text = str(int(value)) if abs(int(value)).bit_length() < 4000 else "(a number too long to show)"
    return text if len(text) <= 40 else text[:20] + "…" + text[-8:]


def _require_person(c: sqlite3.Connection, pid: int) -> tuple[int, str | None]:
    row = c.execute("SELECT id, name FROM people WHERE id = ?", (int(pid),)).fetchone() \
        if 0 < int(pid) <= MAX_ID else None
    if row is None:
        raise UnknownPeople(f"no group {_shown_id(pid)} in this index (imagent people lists them)")
    return int(row[0]), row[1]


def _require_face(c: sqlite3.Connection, face_id: int) -> Face:
    row = c.execute(f"SELECT {_FACE_COLS} FROM faces WHERE id = ?", (int(face_id),)).fetchone() \
        if 0 < int(face_id) <= MAX_ID else None
    if row is None:
        raise UnknownPeople(f"no face {_shown_id(face_id)} in this index (imagent people show ID lists a group's "
                            "faces)")
    return _face(row)


def name_person(gallery: Gallery, pid: int, name: str | None) -> Renamed:
    """Give group ``pid`` a name (None or "" clears it). A name another group has is refused (merge them
    instead)."""
    text = check_name(name) if name else None
    with FaceStore(gallery.root).write() as c:
        _, previous = _require_person(c, pid)
        if text is not None:
            other = c.execute("SELECT id, name FROM people WHERE name_key = ? AND id != ?",
                              (text.casefold(), int(pid))).fetchone()
            if other is not None:
                raise PeopleError(f"group {other[0]} is already named {other[1]!r}; if they are the same person, "
                                  f"merge them: imagent people merge {other[0]} {pid}")
        c.execute("UPDATE people SET name = ?, name_key = ? WHERE id = ?",
                  (text, text.casefold() if text else None, int(pid)))
    return Renamed(int(pid), text, previous)


def merge_people(gallery: Gallery, into: int, others: Sequence[int]) -> Merged:
    """Move every face of ``others`` into ``into``; the others are deleted. ``into`` keeps its name, or takes
    the first name among the others when it has none (two different names are refused: rename one first)."""
    others = [int(o) for o in dict.fromkeys(others) if int(o) != int(into)]
    if not others:
        raise PeopleError("merge needs at least two different groups: imagent people merge INTO OTHER [OTHER ...]")
    with FaceStore(gallery.root).write() as c:
        _, name = _require_person(c, into)
        moved = 0
        for o in others:
            _, other_name = _require_person(c, o)
            if other_name and name and other_name.casefold() != name.casefold():
                raise PeopleError(f"group {into} is named {name!r} and group {o} {other_name!r}; clear one name "
                                  f"first (imagent people name {o} --clear) if they are one person")
            if other_name and not name:
                c.execute("UPDATE people SET name = NULL, name_key = NULL WHERE id = ?", (o,))
                c.execute("UPDATE people SET name = ?, name_key = ? WHERE id = ?",
                          (other_name, other_name.casefold(), int(into)))
                name = other_name
            moved += c.execute("UPDATE faces SET person = ? WHERE person = ?", (int(into), o)).rowcount
            c.execute("DELETE FROM people WHERE id = ?", (o,))
    return Merged(int(into), name, others, moved)


def split_face(gallery: Gallery, face_id: int, to: int | None = None) -> Moved:
    """Move one face out of its group: into a new group of its own, or into group ``to``. The face is pinned
    (grouping never moves it)."""
    with FaceStore(gallery.root).write() as c:
        face = _require_face(c, face_id)
        if to is None:
            target, new = _new_person(c), True
        else:
            target, _ = _require_person(c, to)
            new = False
        c.execute("UPDATE faces SET person = ?, pinned = 1 WHERE id = ?", (target, face.id))
        drop_empty_people(c)
    return Moved(face.id, face.person, target, new)


def remove_face(gallery: Gallery, face_id: int) -> FaceRemoved:
    """Delete one face (box and descriptor): it is nobody (a false detection) or nobody to keep. Its photo is
    not scanned again, so it does not come back. Its row goes first, then its kept crops (a crop being made
    meanwhile checks the face after writing and deletes itself: :mod:`imagent.library.thumbs`)."""
    with FaceStore(gallery.root).write() as c:
        face = _require_face(c, face_id)
        c.execute("DELETE FROM faces WHERE id = ?", (face.id,))
        c.execute("UPDATE scans SET faces = faces - 1 WHERE photo = ? AND faces > 0", (sql_text(face.photo),))
        drop_empty_people(c)
    drop_face_crops(gallery.root, face.id)
    return FaceRemoved(face.id, face.photo, face.person)


def forget(gallery: Gallery) -> Forgotten:
    """Delete all face data of the index (:meth:`FaceStore.forget`: rows first, then files, then the kept face
    crops). Returns what was deleted and where."""
    store = FaceStore(gallery.root)
    counts = store.forget()
    _INDEXES.pop(id(gallery), None)
    leftover = [p.name for p in store.path.parent.glob(store.path.name + "*")]
    return Forgotten(**counts, database=str(store.path), left=leftover)


def face_of(gallery: Gallery, face_id: int) -> Face:
    """One face by id, only when its photo is in the index; :class:`PeopleError` else."""
    with FaceStore(gallery.root).read() as c:
        face = _require_face(c, face_id)
    if face.photo not in gallery:
        raise UnknownPeople(f"no face {_shown_id(face_id)} in this index")
    return face


def faces_in_photo(gallery: Gallery, photo: str) -> list[Face]:
    """The faces the index holds in one photo (none without face data), in the order found."""
    try:
        with FaceStore(gallery.root).read() as c:
            rows = c.execute(f"SELECT {_FACE_COLS} FROM faces WHERE photo = ? ORDER BY id", (sql_text(photo),))\
                .fetchall()
    except FaceDataMissing:
        return []
    return [_face(r) for r in rows]


def existing_faces(gallery: Gallery, face_ids: Sequence[int]) -> set[int]:
    """Which of ``face_ids`` the index still holds (none without face data)."""
    ids = [int(i) for i in face_ids if 0 < int(i) <= MAX_ID]
    if not ids:
        return set()
    try:
        with FaceStore(gallery.root).read() as c:
            marks = ",".join("?" * len(ids))
            return {int(r[0]) for r in c.execute(f"SELECT id FROM faces WHERE id IN ({marks})", ids)}
    except FaceDataMissing:
        return set()


# --------------------------------------------------------------------------- the read side for search


class PeopleIndex:
    """Which gallery rows hold which groups (built once per state of the face data and of the gallery)."""

    def __init__(self, size: int, names: dict[int, str | None], rows: dict[int, np.ndarray],
                 by_photo: dict[str, list[int]], has_data: bool) -> None:
        self.size = size
        self.names = names
        self.rows = rows
        self.by_photo = by_photo
        self.has_data = has_data
        self.any = np.zeros(size, dtype=bool)
        for r in rows.values():
            self.any[r] = True

    def people_of(self, photo: str) -> list[dict[str, Any]]:
        """``[{"id", "name"}]`` of the groups in a photo (named ones first; name None when unnamed)."""
        pids = self.by_photo.get(photo, [])
        ordered = sorted(pids, key=lambda p: (self.names.get(p) is None, p))
        return [{"id": p, "name": self.names.get(p)} for p in ordered]

    def labels_of(self, photo: str) -> list[str]:
        """The names of a photo's people, ``#id`` for an unnamed group (what GetMetadata shows)."""
        return [d["name"] or f"#{d['id']}" for d in self.people_of(photo)]

    def match(self, op: str, value: str) -> list[int]:
        """Group ids a ``person`` comparison names: ``=``/``!=`` a whole name (any case) or a group id (``7``,
        ``#7``), ``~`` part of a name. :class:`PeopleError` when ``=`` names no one."""
        text = value.strip().casefold()
        m = _ID_REF.fullmatch(text)
        if m and op != "~":
            pid = _as_id(m.group(1))
            if pid not in self.rows:
                raise PeopleError(f"person: no group {pid} in this index (imagent people lists them)")
            return [pid]
        if op == "~":
            return [p for p, n in self.names.items() if n and text in n.casefold() and p in self.rows]
        hits = [p for p, n in self.names.items() if n and n.casefold() == text and p in self.rows]
        if not hits:
            named = sorted(n for p, n in self.names.items() if n and p in self.rows)
            shown = ", ".join(repr(n) for n in named[:20]) or "none yet (imagent people name ID NAME)"
            raise PeopleError(f"person: no one is named {value!r} in this index; named people: {shown}")
        return hits

    def mask(self, op: str, value: str) -> np.ndarray:
        """Rows where a person comparison holds. ``!=``: photos with people, none of them that one."""
        if not self.has_data:
            raise PeopleError("person: this index has no face data; `imagent index` finds faces in photo folders "
                              "(faces.mode) and `imagent people name ID NAME` names them")
        out = np.zeros(self.size, dtype=bool)
        for p in self.match(op, value):
            out[self.rows[p]] = True
        if op == "!=":
            return self.any & ~out
        return out


_INDEXES: dict[int, tuple[Any, list[str], int | None, PeopleIndex]] = {}
_INDEX_LOCK = threading.Lock()


def people_index(gallery: Gallery) -> PeopleIndex:
    """The :class:`PeopleIndex` of ``gallery`` now (cached while the face data's version and the gallery's ids
    stay the same)."""
    store = FaceStore(gallery.root)
    version = store.version()
    with _INDEX_LOCK:
        hit = _INDEXES.get(id(gallery))
        if hit is not None and hit[0]() is gallery and hit[1] is gallery.ids and hit[2] == version:
            return hit[3]
    index = _build_index(gallery, store, version)
    with _INDEX_LOCK:
        _INDEXES[id(gallery)] = (weakref.ref(gallery), gallery.ids, version, index)
    return index


def _build_index(gallery: Gallery, store: FaceStore, version: int | None) -> PeopleIndex:
    n = len(gallery)
    if version is None:
        return PeopleIndex(n, {}, {}, {}, has_data=False)
    try:
        with store.read() as c:
            names = {int(i): nm for i, nm in c.execute("SELECT id, name FROM people")}
            pairs = c.execute("SELECT DISTINCT photo, person FROM faces WHERE person IS NOT NULL").fetchall()
    except FaceDataMissing:
        return PeopleIndex(n, {}, {}, {}, has_data=False)
    rows: dict[int, list[int]] = {}
    by_photo: dict[str, list[int]] = {}
    for photo, person in pairs:
        pid = from_sql(photo)
        if pid not in gallery:
            continue
        rows.setdefault(int(person), []).append(gallery.row(pid))
        by_photo.setdefault(pid, []).append(int(person))
    arrays = {p: np.unique(np.array(r, dtype=np.int64)) for p, r in rows.items()}
    return PeopleIndex(n, names, arrays, by_photo, has_data=True)


def photo_people(gallery: Gallery, photo: str) -> list[dict[str, Any]]:
    """``[{"id", "name"}]`` of the people in one photo ([] without face data)."""
    return people_index(gallery).people_of(photo)


__all__ = ["DEFAULT_GROUP_BATCH", "DEFAULT_MIN_GROUP", "MAX_ID", "Face", "FaceRemoved", "Forgotten", "Grouping",
           "Merged", "Moved", "PeopleError", "PeopleIndex", "Person", "Renamed", "ScanSummary", "UnknownPeople",
           "check_name", "existing_faces", "face_of", "faces_in_photo", "forget", "get_person", "group_faces",
           "has_ungrouped", "list_people", "merge_people", "name_person", "people_count", "people_index",
           "photo_people", "remove_face", "scan_summary", "split_face"]
