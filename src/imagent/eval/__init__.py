"""Evaluation: official benchmark loaders and metrics, a resumable runner, reports and server files.

>>> from imagent.eval import score_file, run_eval, RunSpec
>>> score_file("circo", "val.json", "submission_val.json")["metrics"]["map@10"]
>>> run_eval(Workspace.from_config(), RunSpec("stamps", "caption", images_root=..., limit=4))

Modules: :mod:`~imagent.eval.datasets` (one loader per benchmark family), :mod:`~imagent.eval.metrics`
(pure official metrics), :mod:`~imagent.eval.runner` (orchestrates a run), :mod:`~imagent.eval.records` (the
run folder's files: :class:`RunRecord`, results log, atomic writes), :mod:`~imagent.eval.identity` (what makes
two runs the same), :mod:`~imagent.eval.worker` (answers one query), :mod:`~imagent.eval.report`,
:mod:`~imagent.eval.submission`, :mod:`~imagent.eval.compare`, :mod:`~imagent.eval.scoring`.
"""

from __future__ import annotations

from imagent.eval.datasets import BENCHMARKS, Benchmark, BenchmarkError, EvalItem, MissingImagesError, load_benchmark
from imagent.eval.runner import RunError, RunSpec, RunSummary, run_eval
from imagent.eval.scoring import score_file

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "BenchmarkError",
    "EvalItem",
    "MissingImagesError",
    "RunError",
    "RunSpec",
    "RunSummary",
    "load_benchmark",
    "run_eval",
    "score_file",
]
