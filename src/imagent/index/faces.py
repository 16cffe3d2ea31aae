"""The face pass of ``imagent index`` as a per-photo stage (:class:`FaceStage`): find the faces of new photos, store
them, group them into people.

It is not inline (:mod:`imagent.index.stages`): :func:`imagent.index.builder.build_index` runs it after the records
are stored and the snapshot written, so a kill here leaves a searchable index:

- which photos: ``faces.mode = "auto"`` (the default) looks at photos indexed from folders (a photo library)
  and not at manifests (benchmark galleries and datasets, which stay fast to index); ``"on"`` at every photo;
  ``"off"`` at none;
- incremental and resumable: a photo is scanned once per content and face model (its version: detector, scale,
  sizes; another one scans the photos again); scans are committed a chunk at a time (``indexing.batch_size``), so
  a killed run keeps its finished chunks and the next run goes on with the rest, with no face stored twice; scans
  and faces of photos gone from the index are dropped;
- each photo within the pixel budget (``indexing.max_pixels``), scaled to ``faces.side``, faces under
  ``faces.min_size`` px dropped, at most ``faces.max_per_photo`` kept (:mod:`imagent.models.faces`); a photo
  that cannot be read, is too small or holds too many faces gets a note and the pass goes on;
- the scans run where the build's runner computes: here (``faces.workers`` > 1: in that many worker processes;
  dlib holds the GIL, so threads would not help; they end with this process, and a chunk whose worker died is
  scanned again in new ones a bounded number of times, then its photos get a note: :mod:`imagent.core.workers`)
  or on Ray actors, results committed here in photo order;
- then the faces without a group are grouped, here, a batch at a time (:func:`imagent.index.people.group_faces`).

The storage is :mod:`imagent.index.face_store` (``faces.sqlite`` in the index folder).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagent.core.config import FaceOptions
from imagent.core.text import display_path, plural
from imagent.core.types import ImageRecord
from imagent.core.workers import WORKER_DIED, SpawnPool
from imagent.index.face_store import FaceStore, drop_empty_people, drop_photos, put_scan
from imagent.index.people import group_faces, has_ungrouped, people_count
from imagent.index.stages import Stage, Todo

if TYPE_CHECKING:
    from imagent.index.gallery import Gallery
    from imagent.index.store import Writer


# --------------------------------------------------------------------------- the index pass


@dataclass
class FacesReport:
    """What the face pass of one ``imagent index`` did (``IndexReport.faces``)."""

    status: str = "off"  # done | off | skipped (auto, nothing to look at) | unavailable (models missing)
    reason: str = ""
    scanned: int = 0  # photos looked at by this run
    faces: int = 0  # faces those photos hold
    with_faces: int = 0  # of those photos, how many hold a face
    new_people: int = 0  # groups started by this run
    joined: int = 0  # new faces that joined an existing group
    dropped: int = 0  # scans of photos gone from the index, removed
    pending: int = 0  # photos left for the next run (only after an interruption)
    people: int = 0  # groups in the index after the run
    worker_restarts: int = 0  # times the worker processes were started again after one died
    notes: list[tuple[str, str]] = field(default_factory=list)  # (photo, note)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "scanned": self.scanned, "faces": self.faces,
                "photos_with_faces": self.with_faces, "new_people": self.new_people, "joined": self.joined,
                "dropped": self.dropped, "people": self.people, "worker_restarts": self.worker_restarts,
                "notes": [{"path": p, "note": n} for p, n in self.notes], "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        """One line for the CLI ("" when the pass did not run)."""
        if self.status == "unavailable":
            return f"faces: not looked for ({self.reason}); set faces.mode = \"off\" to silence this"
        if self.status != "done":
            return ""
        if not self.scanned:
            looked = (f"none of {plural(len(self.notes), 'photo')} could be looked at (see the notes; the next run "
                      "tries again)") if self.notes else "no new photos to look at"
            return f"faces: {looked}; {plural(self.people, 'person', 'people')} (imagent people)"
        restarts = (f"; a worker process died, {plural(self.worker_restarts, 'restart')}" if self.worker_restarts
                    else "")
        return (f"faces: {self.scanned} photos looked at, {self.faces} faces in {self.with_faces} of them; "
                f"{self.new_people} new people, {self.joined} faces joined known people; {self.people} people in "
                f"all (imagent people){restarts}")


def _pending(gallery: Gallery, scans: dict[str, tuple[str, str]], everything: bool, model_id: str) -> list[str]:
    """Ids of the photos to scan, in row order: not scanned yet, changed since, or scanned by another face model.
    Only photos indexed from folders (source keys ``file:...``) unless ``everything``."""
    keys = {i: k for k, (i, _) in gallery.fingerprints().items()}
    cols = gallery.metadata_columns(["content_hash"])  # hex: read by SQLite (a path may not be UTF-8)
    hashes = cols[0] if cols is not None else [r.content_hash for r in gallery.records()]
    out = []
    for photo, content in zip(gallery.ids, hashes, strict=True):
        if not (everything or keys.get(photo, "").startswith("file:")):
            continue
        if scans.get(photo) != (content or f"id:{photo}", model_id) and gallery.record(photo).path:
            out.append(photo)
    return out


def faces_wanted(options: FaceOptions, source_is_folder: bool) -> tuple[bool, bool, str]:
    """``(run the pass, every photo, why not)`` for a build of a folder (or a manifest) source."""
    if options.mode == "off":
        return False, False, "faces.mode = \"off\""
    if options.mode == "on":
        return True, True, ""
    if not source_is_folder:
        return False, False, "faces.mode = \"auto\" looks at photos of folders, not of manifests"
    return True, False, ""


class FaceStage(Stage):
    """Faces as a stage (see the module doc). ``load_model`` makes the :class:`~imagent.models.faces.FaceModel` (a
    picklable factory: worker processes make theirs with it); ``workers`` > 1 scans in that many processes here."""

    name = "faces"
    needs = "pixels"
    stores = ("faces.sqlite: scans, face boxes and descriptors; people after grouping",)
    inline = False
    tracked = False  # the scans are its marker: photo, content and model

    def __init__(self, options: FaceOptions, load_model: Callable[[], Any], workers: int = 1) -> None:
        from imagent.models.faces import face_model_id

        self.options = options
        self.model_id = face_model_id(options)
        self._load_model = load_model
        self._model: Any = None
        self._pool: SpawnPool | None = None
        self.workers = workers
        self.report = FacesReport()
        self._todo: list[str] | None = None
        self._gone: list[str] = []
        self._fresh = False
        self._t0 = 0.0

    @property
    def version(self) -> str:
        return self.model_id

    # ------------------------------------------------------------------ compute (here, in workers or on Ray)
    def compute(self, records: list[ImageRecord], earlier: Any, part: tuple[str, ...] = ()) -> list[Any]:
        paths = [r.path for r in records]
        if self.workers > 1:
            pool = self._workers()
            before = pool.restarts
            out = pool.map(_scan_in_worker, paths)
            self.report.worker_restarts += pool.restarts - before
            return [_died(pool.retries) if res is WORKER_DIED else res for res in out]
        if self._model is None:
            self._model = self._load_model()
        return [self._model.scan_file(p) for p in paths]

    def _workers(self) -> SpawnPool:
        """The worker processes (:class:`~imagent.core.workers.SpawnPool`: they end with this process, and a chunk
        whose worker died is scanned again in new ones, up to ``faces.worker_retries`` times)."""
        if self._pool is None:
            from imagent.models.faces import worker_init

            self._pool = SpawnPool(self.workers, worker_init, (self._load_model,), retries=self.options.worker_retries)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # ------------------------------------------------------------------ the driver: which photos, store, group
    def begin(self, gallery: Gallery, from_folder: bool) -> bool:
        """Whether the pass runs (``faces.mode``, the source); drops the scans of photos gone from the index. A
        missing face model is ``status = "unavailable"`` (raised only when ``faces.mode = "on"`` asked for faces)."""
        from imagent.models.faces import FaceModelError, available

        self._t0 = time.perf_counter()
        self.report = report = FacesReport()
        run, everything, why = faces_wanted(self.options, from_folder)
        if not run:
            report.status, report.reason = ("off" if self.options.mode == "off" else "skipped"), why
            return False
        store = FaceStore(gallery.root)
        scans = store.scans()
        ids = set(gallery.ids)
        self._gone = [p for p in scans if p not in ids]
        self._todo = _pending(gallery, scans, everything, self.model_id)
        self._fresh = not self._todo and not self._gone and store.exists()
        if self._todo:
            missing = available()
            if missing:
                if self.options.mode == "on":
                    raise FaceModelError(missing)
                report.status, report.reason = "unavailable", missing
                return False
        report.status = "done"
        if self._gone:
            with store.write(create=True) as c:
                drop_photos(c, self._gone)
            report.dropped = len(self._gone)
        return True

    def todo(self, gallery: Gallery) -> list[Todo]:
        ids = self._todo if self._todo is not None else _pending(gallery, FaceStore(gallery.root).scans(), True,
                                                                   self.model_id)
        return [Todo(ids)] if ids else []

    def put(self, c: Writer, gallery: Gallery, records: Any, out: Any, part: tuple[str, ...] = ()) -> None:
        raise TypeError("faces are stored in faces.sqlite, not in the records' transaction (FaceStage.commit)")

    def commit(self, gallery: Gallery, records: Any, out: Any, part: tuple[str, ...] = ()) -> None:
        """One chunk's scans and faces in one transaction of the face store (a photo that could not be read is not
        stored: the next run tries again)."""
        report = self.report
        with FaceStore(gallery.root).write(create=True) as c:
            for rec, res in zip(records, out, strict=True):
                if res.note:
                    report.notes.append((display_path(rec.path), res.note))
                if res.error:
                    continue
                n = put_scan(c, rec.id, rec.content_hash or f"id:{rec.id}", self.model_id, res)
                report.scanned += 1
                report.faces += n
                report.with_faces += bool(n)

    def finish(self, gallery: Gallery) -> None:
        """Group the faces without a group (a killed run's too) into people, a batch at a time, each batch its own
        short write (:func:`imagent.index.people.group_faces`)."""
        report = self.report
        store = FaceStore(gallery.root)
        if not self._fresh:
            with store.write(create=True) as c:
                drop_empty_people(c)  # groups whose faces went with a changed photo's old content
        if not self._fresh or has_ungrouped(store):  # fresh: nothing scanned or dropped, only a killed run's faces
            grouped = group_faces(store, self.options.threshold, self.options.group_batch)
            report.new_people, report.joined = grouped.new_people, grouped.joined
        if not self._fresh:
            with store.write() as c:
                c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('grouped_at', ?)",
                          (datetime.now(UTC).isoformat(timespec="seconds"),))
        report.people = people_count(store)
        report.seconds = time.perf_counter() - self._t0
        self._todo = None


def _died(retries: int) -> Any:
    """The result of a photo whose worker process died on each of its ``retries + 1`` tries: a note, and not
    stored (the next run scans it again)."""
    from imagent.models.faces import FileFaces

    return FileFaces(note=f"face scan failed: its worker process died {retries + 1} times (the next imagent index "
                     "tries again)", error=True)


def _scan_in_worker(path: str) -> Any:
    from imagent.models.faces import worker_scan

    return worker_scan(path)


def source_is_folder(source: str | Path) -> bool:
    return os.path.isdir(Path(source).expanduser())


__all__ = ["FaceStage", "FacesReport", "faces_wanted", "source_is_folder"]
