"""Side-by-side metrics of finished runs (``imagent eval --compare RUN_A RUN_B``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from imagent.eval.runner import CONFIG, METRICS, RunError


def load_run(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / METRICS
    if not path.is_file():
        raise RunError(f"{run_dir} has no {METRICS}: not a finished eval run")
    data = json.loads(path.read_text(encoding="utf-8"))
    cfg_path = Path(run_dir) / CONFIG
    data["config"] = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    return data


def run_label(run_dir: Path, data: dict[str, Any], taken: set[str]) -> str:
    label = data.get("method") or Path(run_dir).name
    if label in taken:
        label = Path(run_dir).name
    taken.add(label)
    return label


def compare_runs(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """``{"runs": {label: {...}}, "rows": [{"metric", label: value, ..., "delta"?}], "warnings": [...]}``.

    Rows cover the final metrics, then each run's stages (``stage/<name>/<metric>``), then cost.
    With two runs a ``delta`` (second minus first) is added."""
    runs = [(Path(d), load_run(Path(d))) for d in run_dirs]
    taken: set[str] = set()
    labels = [run_label(d, data, taken) for d, data in runs]
    warnings = []
    first = runs[0][1]
    for (d, data), label in zip(runs[1:], labels[1:], strict=True):
        for key in ("benchmark", "split", "queries"):
            if data.get(key) != first.get(key):
                warnings.append(f"{label} ({d}) has {key}={data.get(key)!r}, {labels[0]} has {first.get(key)!r}")
    columns: list[dict[str, float]] = []
    for _, data in runs:
        col = dict(data.get("metrics", {}))
        for stage, ms in (data.get("stages") or {}).items():
            col.update({f"stage/{stage}/{k}": v for k, v in ms.items()})
        run = data.get("run", {})
        for k in ("seconds_per_query_mean", "model_calls_per_query", "errors"):
            if k in run:
                col[f"cost/{k}"] = run[k]
        columns.append(col)
    keys: list[str] = []
    for col in columns:
        keys += [k for k in col if k not in keys]
    rows = []
    for k in keys:
        row: dict[str, Any] = {"metric": k}
        for label, col in zip(labels, columns, strict=True):
            row[label] = col.get(k)
        if len(columns) == 2 and all(isinstance(c.get(k), (int, float)) for c in columns):
            row["delta"] = columns[1][k] - columns[0][k]
        rows.append(row)
    return {
        "runs": {label: {"run_dir": str(d), "benchmark": data.get("benchmark"), "split": data.get("split"),
                         "queries": data.get("queries")} for (d, data), label in zip(runs, labels, strict=True)},
        "rows": rows,
        "warnings": warnings,
    }


__all__ = ["compare_runs", "load_run"]
