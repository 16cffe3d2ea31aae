"""What every benchmark loader gives the runner and the ``score`` command.

A :class:`Benchmark` reads a benchmark's official annotation files and turns them into
:class:`EvalItem` s (a :class:`~imagent.core.types.Query` plus its ground truth), lists the rows of its
gallery for the index builder (images under the user's ``--images-root``), parses prediction files in
the benchmark's server format, scores rankings with the official metric and writes test-server files.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from imagent.core.types import Query
from imagent.eval import metrics as M


class BenchmarkError(ValueError):
    """Annotations missing or malformed, an unknown split, a predictions file that does not fit."""


class MissingImagesError(BenchmarkError):
    """Images the benchmark needs are not under ``--images-root``."""


@dataclass
class EvalItem:
    """One query of a benchmark with its ground truth.

    ``truth`` holds the benchmark's own labels (empty on test splits, whose labels are private);
    ``positives`` are the gallery ids that count as correct for the generic recall-at-k curve;
    ``group`` ties items that ``--limit`` keeps or drops together (the rounds of one dialogue).
    """

    query: Query
    truth: dict[str, Any] = field(default_factory=dict)
    positives: list[str] = field(default_factory=list)
    group: str = ""

    @property
    def id(self) -> str:
        return self.query.id

    @property
    def has_truth(self) -> bool:
        return bool(self.truth)


@dataclass
class Predictions:
    """Rankings to score, by query id.

    ``subset``: CIRR only, the query's ``img_set`` members in the order a full-gallery ranking put
    them (the runner stores it because a top-50 list may hold fewer than 3 members).
    ``only``: CIRR server files say which metric they are for (``recall`` or ``recall_subset``).
    ``sets``: answer sets of set-valued methods (``Result.answer_set``), scored apart from the ranking
    by set-valued benchmarks (DISBench).
    """

    rankings: dict[str, list[str]]
    subset: dict[str, list[str]] = field(default_factory=dict)
    only: str | None = None
    warnings: list[str] = field(default_factory=list)
    sets: dict[str, list[str]] = field(default_factory=dict)

    def get(self, qid: str) -> list[str]:
        return self.rankings.get(qid, [])


class BenchmarkOptions(BaseModel):
    """Loader options (``--set <benchmark>.<key>=value``). Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class Benchmark(ABC):
    """Base of every loader. Subclasses set ``name``, ``splits``, ``default_split``, ``Options``,
    ``layout`` (the expected image layout, shown when images are missing) and implement the
    abstract methods."""

    name: ClassVar[str]
    splits: ClassVar[tuple[str, ...]]
    default_split: ClassVar[str]
    Options: ClassVar[type[BenchmarkOptions]] = BenchmarkOptions
    layout: ClassVar[str] = ""
    # Known gaps of the benchmark's public files, said by ``imagent eval BENCH --check``.
    setup_notes: ClassVar[str] = ""
    # Splits whose labels are private: the runner writes server files and no metrics.
    test_splits: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        annotations: str | Path | None = None,
        images_root: str | Path | None = None,
        **options: Any,
    ) -> None:
        self.annotations = Path(annotations).expanduser() if annotations else None
        self.images_root = Path(images_root).expanduser() if images_root else None
        try:
            self.options = self.Options.model_validate(options)
        except Exception as exc:
            raise BenchmarkError(f"invalid {self.name} option: {exc}") from exc

    # ------------------------------------------------------------------ annotations
    def check_split(self, split: str | None) -> str:
        split = split or self.default_split
        if split not in self.splits:
            raise BenchmarkError(f"{self.name} has no split {split!r}; splits: {', '.join(self.splits)}")
        return split

    def split_from_file(self, path: Path) -> str | None:
        """The split an annotation file belongs to, read from its name (``score`` uses it)."""
        stem = path.name.lower()
        for s in sorted(self.splits, key=len, reverse=True):
            if f".{s}." in stem or stem.startswith(f"{s}.") or stem.endswith(f".{s}") or stem == f"{s}.json":
                return s
        return None

    def search_dirs(self) -> list[Path]:
        """Where annotation files are looked for: ``--annotations`` (a file's folder, or the folder),
        then the images root and its parent (many datasets ship labels beside the images)."""
        out: list[Path] = []
        if self.annotations is not None:
            out.append(self.annotations.parent if self.annotations.is_file() else self.annotations)
        if self.images_root is not None:
            out += [self.images_root, self.images_root.parent]
        return out

    def find_file(self, names: Sequence[str], what: str) -> Path:
        """The first existing ``dir/name`` over :meth:`search_dirs` (``--annotations FILE`` wins when
        its name is one of ``names``)."""
        if self.annotations is not None and self.annotations.is_file() and self.annotations.name in {
            Path(n).name for n in names
        }:
            return self.annotations
        tried: list[str] = []
        for d in self.search_dirs():
            for n in names:
                p = d / n
                tried.append(str(p))
                if p.is_file():
                    return p
        hint = "pass --annotations FILE or DIR" if self.annotations is None else f"looked in {tried[:6]}"
        raise BenchmarkError(f"{self.name}: cannot find {what} ({' or '.join(dict.fromkeys(names))}); {hint}")

    @abstractmethod
    def queries(self, split: str | None = None) -> list[EvalItem]:
        """Every query of the split, in annotation order."""

    # ------------------------------------------------------------------ gallery
    @abstractmethod
    def gallery_manifest(self, split: str | None = None, images_root: str | Path | None = None,
                         work_dir: str | Path | None = None, allow_missing: bool = False) -> list[dict[str, Any]]:
        """Rows for the index builder (``id``, ``file`` absolute, optional ``caption``, metadata).
        Raises :class:`MissingImagesError` with counts and the expected layout when images are missing
        (``allow_missing`` keeps the rows whose files exist instead)."""

    def index_key(self) -> dict[str, Any]:
        """Loader options that change the gallery's index (stamps' ``captions=withheld``), so that the shared index
        folder of a benchmark differs with them (:func:`imagent.eval.indexing.shared_index_dir`); none by default."""
        return {}

    def root(self, images_root: str | Path | None) -> Path:
        root = Path(images_root).expanduser() if images_root else self.images_root
        if root is None:
            raise MissingImagesError(
                f"{self.name}: running a method needs the benchmark images; pass --images-root DIR.\n"
                f"Expected layout: {self.layout}"
            )
        if not root.is_dir():
            raise MissingImagesError(
                f"{self.name}: --images-root {root} is not a folder.\nExpected layout: {self.layout}"
            )
        return root

    def check_files(self, rows: list[dict[str, Any]], root: Path, allow_missing: bool,
                    also_needed: Iterable[Path] = ()) -> list[dict[str, Any]]:
        """Keep the rows whose ``file`` exists; one clear error (counts, examples, layout) otherwise."""
        present = [r for r in rows if Path(r["file"]).is_file()]
        missing = [r for r in rows if not Path(r["file"]).is_file()]
        also_needed = list(also_needed)
        extra_missing = [p for p in also_needed if not Path(p).is_file()]
        # What the last check found (``imagent eval BENCH --check`` reports it).
        self.file_check = {"root": str(root), "gallery": len(rows), "gallery_present": len(present),
                           "gallery_missing": [str(r["file"]) for r in missing],
                           "query_images_missing": [str(p) for p in extra_missing]}
        if (missing or extra_missing) and not allow_missing:
            examples = [str(Path(r["file"])) for r in missing[:3]] + [str(p) for p in extra_missing[:3]]
            total = len(rows) + len(list(also_needed))
            raise MissingImagesError(
                f"{self.name}: {len(present)} of {len(rows)} gallery images found under {root}, "
                f"{len(missing)} missing"
                + (f" (and {len(extra_missing)} query images)" if extra_missing else "")
                + f"; e.g. {', '.join(examples)}.\nExpected layout: {self.layout}\n"
                f"(--allow-missing indexes the {len(present)} found and drops the rest; {total} needed in all)"
            )
        return present

    # ------------------------------------------------------------------ running
    def search_depth(self, split: str, gallery_size: int, top_k: int) -> int:
        """How deep the runner asks the method to rank (CIRR needs the whole gallery for its subset metric)."""
        return top_k

    def stratum(self, item: EvalItem) -> str:
        """The kind of query ``item`` is, for ``--limit``'s stratified sample: the task, event type or
        category in its labels or query (one stratum when there is none)."""
        extra = item.query.extra or {}
        for key in ("task", "event_type", "category"):
            value = (item.truth or {}).get(key) or extra.get(key)
            if value:
                return str(value)
        return ""

    def record_extras(self, item: EvalItem, ranking: Sequence[str]) -> dict[str, Any]:
        """Benchmark-specific data the runner stores beside the top-k ids (CIRR: ranked subset)."""
        return {}

    def subset_items(self, items: Sequence[EvalItem]) -> list[EvalItem]:
        """Extra queries the runner runs after ``items`` and :meth:`metrics` reads through the
        predictions (CIRR's subset mode: each query again inside its members); none by default."""
        return []

    def score_warnings(self, predictions: Predictions, items: Sequence[EvalItem]) -> list[str]:
        """What ``imagent score`` must say about a predictions file beyond its metrics (CIRR: rankings
        too short for Recall_subset)."""
        return []

    def outcome_score(self, item: EvalItem, ranking: Sequence[str], answer_set: Sequence[str] | None) -> float | None:
        """How well one answer scored, in [0, 1], for methods that learn from outcomes (PhotoCraft distils a
        skill when DISBench's F1 exceeds its threshold); None: this benchmark gives no per-query score."""
        return None

    def run_usage(self, method: Any, caption_missing: bool = False) -> dict[str, Any] | None:
        """What a run's search used that this benchmark's report must state (DISBench: the derived track), from
        the method built over the run's index; the runner stores it with the run. None: nothing to record."""
        return None

    def describe_run(self, usage: dict[str, Any] | None = None) -> dict[str, str]:
        """Facts about how this run is scored that the report states (DISBench: its track, derived from
        ``usage``, what :meth:`run_usage` recorded)."""
        return {}

    def query_table(self, items: Sequence[EvalItem], records: dict[str, Any]) -> list[dict[str, Any]]:
        """Rows of a per-query table for the report (empty: no such table)."""
        return []

    def adapt_query(self, item: EvalItem, method_tasks: Iterable[str]) -> Query:
        """The query as the method receives it (VisDial folds the dialogue for non-chat methods)."""
        return item.query

    # ------------------------------------------------------------------ scoring
    @abstractmethod
    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        """Official metrics (percentages) over the items that have ground truth."""

    def set_scores(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, dict[str, float]] | None:
        """A set-valued benchmark's mean set precision, recall and F1 (x100) with the number of queries, overall
        and per query kind (what its report plots instead of recall@k); None for a ranking benchmark."""
        return None

    def curve(self, predictions: Predictions, items: Sequence[EvalItem], ks: Sequence[int]) -> dict[str, float]:
        """Generic recall-at-k (any positive in the top k, excluded ids removed) for the report's plot."""
        scored = [it for it in items if it.positives]
        rankings = [self.scoring_ranking(predictions, it) for it in scored]
        return M.recall_any(rankings, [it.positives for it in scored], ks, [it.query.exclude for it in scored])

    def scoring_ranking(self, predictions: Predictions, item: EvalItem) -> list[str]:
        """The ranking a metric sees for one item (restricted to the item's candidates when it has them)."""
        ranking = predictions.get(item.id)
        if item.query.candidates is not None:
            ranking = M.restricted(ranking, item.query.candidates)
        return ranking

    def parse_predictions(self, data: Any) -> Predictions:
        """A predictions file: ``{query id: [ranked gallery ids]}`` (benchmarks with a server format
        override this)."""
        if not isinstance(data, dict):
            raise BenchmarkError(f"{self.name} predictions must be a JSON object of query id -> ranked ids")
        out: dict[str, list[str]] = {}
        for k, v in data.items():
            if not isinstance(v, list):
                raise BenchmarkError(f"{self.name} predictions: query {k!r} maps to {type(v).__name__}, not a list")
            out[str(k)] = [str(x) for x in v]
        return Predictions(out)

    def submissions(self, split: str, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, Any]:
        """Server files to write (file name -> JSON object); none by default."""
        return {}


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchmarkError(f"file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"{path} is not valid JSON: {exc}") from exc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BenchmarkError(f"file not found: {path}") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BenchmarkError(f"{path}:{n} is not valid JSON: {exc}") from exc
    return rows


def unique(ids: Iterable[str]) -> list[str]:
    """Ids in first-seen order without repeats."""
    return list(dict.fromkeys(ids))


def require_fields(entry: Mapping[str, Any], fields: Sequence[str], where: str) -> None:
    missing = [f for f in fields if f not in entry]
    if missing:
        raise BenchmarkError(f"{where}: missing field(s) {', '.join(missing)} (is this the right annotation file?)")
