"""The face pass of ``imagent index``: find the faces of new photos, store them, group them into people.

:func:`update_faces` runs in :func:`imagent.index.builder.build_index` after the records are stored (and the
snapshot written, so a kill here leaves a searchable index):

- which photos: ``indexing.faces = "auto"`` (the default) looks at photos indexed from folders (a photo library)
  and not at manifests (benchmark galleries and datasets, which stay fast to index); ``"on"`` at every photo;
  ``"off"`` at none;
- incremental and resumable: a photo is scanned once per content; scans are committed a batch at a time
  (``indexing.batch_size``), so a killed run keeps its finished batches and the next run goes on with the rest
  (as the record build does); scans and faces of photos gone from the index are dropped;
- each photo within the pixel budget (``indexing.max_pixels``), scaled to ``face_side``, faces under
  ``face_min_size`` px dropped, at most ``face_max_per_photo`` kept (:mod:`imagent.models.faces`); a photo
  that cannot be read, is too small or holds too many faces gets a note and the pass goes on;
- ``face_workers`` > 1 scans in that many worker processes (dlib holds the GIL, so threads would not help);
- then the faces without a group are grouped (:func:`imagent.index.people.assign_new_faces`).

The storage is :mod:`imagent.index.face_store` (``faces.sqlite`` in the index folder).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagent.core.config import IndexOptions
from imagent.core.text import display_path
from imagent.index.face_store import FaceStore, drop_empty_people, drop_photos, put_scan
from imagent.index.people import assign_new_faces, count_people, has_ungrouped, people_count

Progress = Callable[[int, int, str], None]


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
    notes: list[tuple[str, str]] = field(default_factory=list)  # (photo, note)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "scanned": self.scanned, "faces": self.faces,
                "photos_with_faces": self.with_faces, "new_people": self.new_people, "joined": self.joined,
                "dropped": self.dropped, "people": self.people,
                "notes": [{"path": p, "note": n} for p, n in self.notes], "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        """One line for the CLI ("" when the pass did not run)."""
        if self.status == "unavailable":
            return f"faces: not looked for ({self.reason}); set indexing.faces = \"off\" to silence this"
        if self.status != "done":
            return ""
        if not self.scanned:
            return f"faces: no new photos to look at; {self.people} people (imagent people)"
        return (f"faces: {self.scanned} photos looked at, {self.faces} faces in {self.with_faces} of them; "
                f"{self.new_people} new people, {self.joined} faces joined known people; {self.people} people in "
                f"all (imagent people)")


def face_params(options: IndexOptions) -> Any:
    from imagent.models.faces import FaceParams

    return FaceParams(detector=options.face_detector, upsample=options.face_upsample, side=options.face_side,
                      min_size=options.face_min_size, max_faces=options.face_max_per_photo,
                      min_score=options.face_min_score,
                      max_pixels=options.max_pixels, max_file_bytes=options.max_file_bytes)


def _pending(gallery: Any, scanned: dict[str, str], everything: bool) -> list[tuple[str, str, str]]:
    """``(photo id, content, path)`` of the photos to scan, in row order: not scanned yet or changed since. Only
    photos indexed from folders (source keys ``file:...``) unless ``everything``."""
    keys = {i: k for k, (i, _) in gallery.fingerprints().items()}
    cols = gallery.metadata_columns(["content_hash"])  # hex: read by SQLite (a path may not be UTF-8)
    hashes = cols[0] if cols is not None else [r.content_hash for r in gallery.records()]
    out = []
    for photo, content in zip(gallery.ids, hashes, strict=True):
        if not (everything or keys.get(photo, "").startswith("file:")):
            continue
        content = content or f"id:{photo}"
        if scanned.get(photo) != content:
            path = gallery.record(photo).path
            if path:
                out.append((photo, content, path))
    return out


class FaceScanner:
    """Scans photos in this process, or in ``workers`` worker processes (models loaded once each)."""

    def __init__(self, params: Any, workers: int) -> None:
        self.params = params
        self.workers = workers
        self.model: Any = None
        self.pool: Any = None

    def __enter__(self) -> FaceScanner:
        if self.workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            from imagent.models.faces import worker_init

            # spawn: a forked copy of a process that has torch's threads running can hang
            self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=worker_init, initargs=(self.params,))
        else:
            from imagent.models.faces import FaceModel

            self.model = FaceModel(self.params)
        return self

    def scan(self, paths: Sequence[str]) -> list[Any]:
        if self.pool is not None:
            from imagent.models.faces import worker_scan

            return list(self.pool.map(worker_scan, paths))
        return [self.model.scan_file(p) for p in paths]

    def __exit__(self, *_: Any) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def faces_wanted(options: IndexOptions, source_is_folder: bool) -> tuple[bool, bool, str]:
    """``(run the pass, every photo, why not)`` for a build of a folder (or a manifest) source."""
    if options.faces == "off":
        return False, False, "indexing.faces = \"off\""
    if options.faces == "on":
        return True, True, ""
    if not source_is_folder:
        return False, False, "indexing.faces = \"auto\" looks at photos of folders, not of manifests"
    return True, False, ""


def update_faces(gallery: Any, options: IndexOptions, source_is_folder: bool,
                 progress: Progress | None = None) -> FacesReport:
    """The face pass (see the module doc). Never raises for a photo; a missing face model is reported as
    ``status = "unavailable"`` (and raises only when ``indexing.faces = "on"`` asked for faces explicitly)."""
    from imagent.models.faces import FaceModelError, available

    t0 = time.perf_counter()
    report = FacesReport()
    run, everything, why = faces_wanted(options, source_is_folder)
    store = FaceStore(gallery.root)
    if not run:
        report.status, report.reason = ("off" if options.faces == "off" else "skipped"), why
        return report
    scanned = store.scanned()
    ids = set(gallery.ids)
    gone = [p for p in scanned if p not in ids]
    todo = _pending(gallery, scanned, everything)
    if not todo and not gone and store.exists():
        report.status = "done"
        if has_ungrouped(store):  # faces a killed run left without a group
            with store.write() as c:
                report.new_people, report.joined = assign_new_faces(c, options.face_threshold)
        report.people = people_count(store)
        report.seconds = time.perf_counter() - t0
        return report
    params = face_params(options)
    if todo:
        missing = available()
        if missing:
            if options.faces == "on":
                raise FaceModelError(missing)
            report.status, report.reason = "unavailable", missing
            return report
    report.status = "done"
    with store.write(create=True) as c:
        if gone:
            drop_photos(c, gone)
            report.dropped = len(gone)
    total = len(todo)
    done = 0
    if todo:
        batch = max(1, options.batch_size)
        with FaceScanner(params, options.face_workers) as scanner:
            for start in range(0, total, batch):
                chunk = todo[start : start + batch]
                results = scanner.scan([path for _, _, path in chunk])
                with store.write(create=True) as c:
                    for (photo, content, path), res in zip(chunk, results, strict=True):
                        if res.note:
                            report.notes.append((display_path(path), res.note))
                        if res.error:
                            continue  # not stored: the next run tries again
                        n = put_scan(c, photo, content, params.model_id, res)
                        report.scanned += 1
                        report.faces += n
                        report.with_faces += bool(n)
                done += len(chunk)
                if progress is not None:
                    progress(done, total, f"faces: {Path(chunk[-1][2]).name}")
    with store.write(create=True) as c:
        drop_empty_people(c)  # groups whose faces went with a changed photo's old content
        report.new_people, report.joined = assign_new_faces(c, options.face_threshold)
        c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('grouped_at', ?)",
                  (datetime.now(UTC).isoformat(timespec="seconds"),))
        report.people = count_people(c)
    report.seconds = time.perf_counter() - t0
    return report


def source_is_folder(source: str | Path) -> bool:
    return os.path.isdir(Path(source).expanduser())


__all__ = ["FaceScanner", "FacesReport", "faces_wanted", "source_is_folder", "update_faces"]
