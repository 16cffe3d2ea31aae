"""``imagent score``: official metrics of a predictions file against annotations, no images needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagent.core.inputs import InputFileError, parse_json, read_text_file
from imagent.eval import metrics as M
from imagent.eval.datasets import BenchmarkError, load_benchmark

MAX_PREDICTIONS_BYTES = 512 * 1024 * 1024  # CIRR's test server takes 5 MB; 100x the largest benchmark's file
MAX_PREDICTIONS_DEPTH = 16  # {query: [ids]} or {query: {"ranking": [...]}}: a few levels


def score_file(benchmark: str, annotations: str | Path, predictions: str | Path, split: str | None = None,
               partial: bool = False, **options: Any) -> dict[str, Any]:
    """Score ``predictions`` (the benchmark's server format, or ``{query id: [ranked ids]}``).

    Every annotated query of the split must have a prediction, as the official scripts require;
    ``partial=True`` scores only the predicted queries instead. Unknown query ids are an error
    (usually the wrong split or file)."""
    ann = Path(annotations).expanduser()
    if not ann.exists():
        raise BenchmarkError(f"annotations not found: {ann}")
    bench = load_benchmark(benchmark, ann, **options)
    if split is None and ann.is_file():
        split = bench.split_from_file(ann)
    split = bench.check_split(split)
    try:  # a regular file under the cap, duplicate query ids refused, nesting bounded (core.inputs)
        text = read_text_file(predictions, "predictions file", MAX_PREDICTIONS_BYTES)
        data = parse_json(text, f"predictions file {predictions}", max_depth=MAX_PREDICTIONS_DEPTH)
    except InputFileError as exc:
        raise BenchmarkError(str(exc)) from None
    preds = bench.parse_predictions(data)
    items = [it for it in bench.queries(split) if it.has_truth]
    if not items:
        raise BenchmarkError(f"{bench.name} {split}: these annotations have no ground truth (a test split?)")
    known = {it.id for it in items}
    unknown = [q for q in preds.rankings if q not in known]
    if unknown:
        raise BenchmarkError(
            f"{len(unknown)} predicted query id(s) are not in the {bench.name} {split} annotations "
            f"(e.g. {', '.join(unknown[:5])}); wrong split or file?"
        )
    missing = [it.id for it in items if it.id not in preds.rankings]
    warnings = list(preds.warnings)
    if missing:
        if not partial:
            raise BenchmarkError(
                f"predictions cover {len(items) - len(missing)} of {len(items)} queries (missing e.g. "
                f"{', '.join(missing[:5])}); the official scripts score every query. "
                "Use --partial to score only the predicted ones."
            )
        items = [it for it in items if it.id in preds.rankings]
        warnings.append(f"partial: scored {len(items)} predicted queries, {len(missing)} not predicted")
    warnings += bench.score_warnings(preds, items)
    dups = sum(1 for it in items if M.duplicate_count(preds.get(it.id)))
    if dups:
        warnings.append(f"{dups} ranking(s) repeat an id; scored as given, as the official code does")
    return {
        "benchmark": bench.name,
        "split": split,
        "queries": len(items),
        "metrics": bench.metrics(preds, items),
        "warnings": warnings,
    }


__all__ = ["score_file"]
