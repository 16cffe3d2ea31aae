"""The per-photo passes of an index build: one small interface (:class:`Stage`) and how stages run.

A stage is one pass over photos: the encoders' embedding (:class:`~imagent.index.embedding.EmbedStage`), the pixel
model (:class:`~imagent.index.pixels.PixelStage`), faces (:class:`~imagent.index.faces.FaceStage`). It says

- ``name``; ``needs``: what its compute reads (``"pixels"``: it opens the image files; ``"records"``: the
  records' fields only); ``stores``: what it writes (shown in the docs and ``imagent index --json``);
- ``version``: the identity of its output (model ids and the parameters that shape it). A stored photo run at
  another version is run again by the next build; one run at this version is skipped;
- ``inline``: True when it runs with each batch of new records, in the transaction that stores them (its output
  lives in the index's database); False when it runs after the records and the snapshot (faces, in their store).

Its work has two halves: :meth:`Stage.compute` (records in, one picklable result per record out; nothing stored:
it runs in this process or on a Ray actor) and :meth:`Stage.put` (stores the results inside the caller's
transaction, in the driver). A stage sees the results of the stages before it in the same chunk (``earlier``) and
the record fields they set (:meth:`Stage.apply`: the pixel model's labels, read by caption mode's ConSE vectors).

Which stored photos a stage still owes (:meth:`Stage.todo`): by default those without a run of it at its version in
the index's ``stage_runs`` table, which :meth:`Stage.commit` writes in the transaction that stores the results, so
a killed run resumes at the first photo not committed. A stage whose output is its own marker overrides
:meth:`Stage.todo` (embedding: the spaces a record lacks; faces: their scans, with content and model).

Runners compute chunks: :class:`LocalRunner` in this process; :class:`imagent.index.distributed.RayRunner` on Ray
actors, results in input order. :func:`catch_up` runs one stage over the stored photos it owes, chunk by chunk,
committing each chunk as it comes back. Adding a pass is one module (a :class:`Stage` subclass and its factory)
and one line in :data:`imagent.index.parts.STAGES`; docs/architecture.md shows how.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from imagent.core.types import ImageRecord

if TYPE_CHECKING:
    from imagent.index.gallery import Gallery
    from imagent.index.store import Writer

Needs = Literal["pixels", "records"]
Progress = Callable[[int, int, str], None]
Outputs = dict[str, list[Any]]  # stage name -> one result per record


@dataclass
class PendingRecord:
    """A new or changed record to store, with its input's source key and fingerprint."""

    record: ImageRecord
    source_key: str
    fingerprint: str


@dataclass(frozen=True)
class Todo:
    """Stored photos a stage owes work: their ids (row order) and, for a stage that stores several things, which
    of them (``part``: the embedding's spaces a record lacks; empty: all it stores)."""

    ids: list[str]
    part: tuple[str, ...] = ()


class Stage:
    """One per-photo pass of an index build (see the module doc). Subclasses set the class attributes and
    implement :attr:`version`, :meth:`compute` and :meth:`put`; the rest has defaults."""

    name: ClassVar[str]
    needs: ClassVar[Needs] = "pixels"
    stores: ClassVar[tuple[str, ...]] = ()
    inline: ClassVar[bool] = True
    tracked: ClassVar[bool] = True  # runs are recorded in ``stage_runs``; False: the output is its own marker

    @property
    def version(self) -> str:
        raise NotImplementedError

    def check(self, gallery: Gallery) -> None:
        """Refuse an index this stage cannot extend (another model in a space it fills); before anything runs."""

    def compute(self, records: list[ImageRecord], earlier: Mapping[str, list[Any]], part: tuple[str, ...] = ()
                ) -> list[Any]:
        """One result per record (picklable: it may come back from a Ray actor); stores nothing."""
        raise NotImplementedError

    def apply(self, records: Sequence[ImageRecord], out: Sequence[Any]) -> None:
        """Set what the results change on the records themselves (the pixel model's labels); idempotent."""

    def put(self, c: Writer, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[Any],
            part: tuple[str, ...] = ()) -> None:
        """Store the results inside the caller's transaction (new records: stored in it just before)."""
        raise NotImplementedError

    def todo(self, gallery: Gallery) -> list[Todo]:
        """The stored photos this stage owes: never run, or run at another version."""
        ids = gallery.stage_pending(self.name, self.version)
        return [Todo(ids)] if ids else []

    def commit(self, gallery: Gallery, records: Sequence[ImageRecord], out: Sequence[Any],
               part: tuple[str, ...] = ()) -> None:
        """Store the results for stored ``records`` (a :func:`catch_up` chunk) in one transaction, with their runs."""
        with gallery.transaction() as c:
            self.put(c, gallery, records, out, part)
            if self.tracked:
                c.mark_stage(self.name, [r.id for r in records], self.version)

    def begin(self, gallery: Gallery, from_folder: bool) -> bool:
        """Before a stage that is not inline catches up: whether it runs for this build (``from_folder``: the source
        is a folder, not a manifest)."""
        return True

    def finish(self, gallery: Gallery) -> None:
        """After it caught up (grouping faces into people); never for a stage :meth:`begin` turned down."""

    def notes(self) -> list[str]:
        """Warnings for the build report (files it could not read ...), gathered in the driver."""
        return []

    def close(self) -> None:
        """Let go of what :meth:`compute` started (worker processes)."""


def run_chain(stages: Sequence[Stage], records: list[ImageRecord], part: tuple[str, ...] = (),
              seconds: dict[str, float] | None = None) -> Outputs:
    """Compute ``stages`` in order over one chunk, each seeing the results (and record fields) of the ones before;
    adds each stage's compute time to ``seconds``."""
    out: Outputs = {}
    for stage in stages:
        t0 = time.perf_counter()
        out[stage.name] = stage.compute(records, out, part)
        stage.apply(records, out[stage.name])
        if seconds is not None:
            seconds[stage.name] = seconds.get(stage.name, 0.0) + time.perf_counter() - t0
    return out


@dataclass
class RunStats:
    """Photos and compute seconds per stage (on Ray: the actors' own compute time, summed)."""

    photos: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, names: Iterable[str], n: int, seconds: Mapping[str, float]) -> None:
        for name in names:
            self.photos[name] = self.photos.get(name, 0) + n
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds.get(name, 0.0)

    def of(self, name: str) -> dict[str, Any]:
        n, s = self.photos.get(name, 0), self.seconds.get(name, 0.0)
        return {"photos": n, "seconds": round(s, 3), "photos_per_s": round(n / s, 2) if s > 0 and n else None}


class Runner(Protocol):
    """Where stages compute: :class:`LocalRunner` (this process) or a Ray actor pool. :meth:`map` yields each
    chunk's results in input order, with every stage's :meth:`Stage.apply` done on the chunk's records here."""

    stats: RunStats
    chunk_size: int | None  # photos a compute call takes (None: a whole batch at once)

    def map(self, stages: Sequence[Stage], chunks: Iterable[list[ImageRecord]], part: tuple[str, ...] = ()
            ) -> Iterator[tuple[list[ImageRecord], Outputs]]: ...

    def close(self) -> None: ...


class LocalRunner:
    """Computes every chunk in this process, one after the other."""

    def __init__(self) -> None:
        self.stats = RunStats()
        self.chunk_size: int | None = None

    def map(self, stages: Sequence[Stage], chunks: Iterable[list[ImageRecord]], part: tuple[str, ...] = ()
            ) -> Iterator[tuple[list[ImageRecord], Outputs]]:
        for chunk in chunks:
            seconds: dict[str, float] = {}
            out = run_chain(stages, chunk, part, seconds)
            self.stats.add([s.name for s in stages], len(chunk), seconds)
            yield chunk, out

    def close(self) -> None:
        pass


def compute_all(runner: Runner, stages: Sequence[Stage], records: list[ImageRecord], part: tuple[str, ...] = ()
                ) -> Outputs:
    """``stages`` over ``records`` in the runner's chunks (spread over its workers), results joined."""
    out: Outputs = {s.name: [] for s in stages}
    if not records:
        return out
    size = max(1, runner.chunk_size or len(records))
    chunks = (records[i : i + size] for i in range(0, len(records), size))
    for _, got in runner.map(stages, chunks, part):
        for name, rows in got.items():
            out[name].extend(rows)
    return out


def store_new(gallery: Gallery, stages: Sequence[Stage], runner: Runner, pending: Sequence[PendingRecord]
              ) -> None:
    """Store a batch of new (or changed) records with the results of the inline ``stages`` in one transaction, all
    or nothing: the records first, then each stage's results and runs."""
    if not pending:
        return
    records = [p.record for p in pending]
    out = compute_all(runner, stages, records)
    with gallery.transaction() as c:
        for p in pending:
            gallery.upsert(c, p.record, p.source_key, p.fingerprint, {})
        for stage in stages:
            stage.put(c, gallery, records, out[stage.name])
            if stage.tracked:
                c.mark_stage(stage.name, [r.id for r in records], stage.version)


def catch_up(gallery: Gallery, stage: Stage, runner: Runner, batch_size: int, progress: Progress | None = None,
             todo: Sequence[Todo] | None = None) -> int:
    """Run ``stage`` over the stored photos it owes (``todo``, default :meth:`Stage.todo`), ``batch_size`` a chunk,
    committing each chunk as its results come back, in order. Returns how many photos it ran on."""
    jobs = stage.todo(gallery) if todo is None else list(todo)
    total = sum(len(j.ids) for j in jobs)
    if not total:
        return 0
    gallery.reload()
    done = 0
    for job in jobs:
        # Copies: a stage may set fields on them (labels) before they are stored; the gallery's stay as loaded.
        chunks = ([ImageRecord.from_dict(r.to_dict()) for r in gallery.records(job.ids[i : i + batch_size])]
                  for i in range(0, len(job.ids), batch_size))
        for chunk, out in runner.map([stage], chunks, job.part):
            stage.commit(gallery, chunk, out[stage.name], job.part)
            done += len(chunk)
            if progress is not None:
                progress(done, total, f"{stage.name}: {chunk[-1].path}")
    gallery.reload()
    return total


def run_after(gallery: Gallery, stage: Stage, runner: Runner, batch_size: int, from_folder: bool,
              progress: Progress | None = None) -> bool:
    """A stage that runs after the records (not inline: faces) over an index: :meth:`Stage.begin`, :func:`catch_up`,
    :meth:`Stage.finish`. Returns whether it ran (``begin`` may turn it down for this source)."""
    if not stage.begin(gallery, from_folder):
        return False
    catch_up(gallery, stage, runner, batch_size, progress)
    stage.finish(gallery)
    return True


__all__ = ["LocalRunner", "Needs", "Outputs", "PendingRecord", "RunStats", "Runner", "Stage", "Todo", "catch_up",
           "compute_all", "run_after", "run_chain", "store_new"]
