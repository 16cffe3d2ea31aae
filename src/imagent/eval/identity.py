"""A run's identity: everything that changes its results, hashed into the run's id and folder name.

The identity holds the benchmark, split and loader options, the queries run (which ones, chosen how: limit,
sample, seed, and a digest of their text and targets, so an edited annotation file is another run), the
method with its resolved parameters, the ranking depth, the resolved settings (models, encoders, indexing),
the images root and the index, and for an album agent the scaffold profile it runs (``scaffold``: none or small,
resolved from ``auto`` by the agent's backend: :func:`run_scaffold`). Paths of caches, log levels and worker counts
are not in it: they do not change what a run computes.

Two runs with the same identity share a folder (the second resumes the first); any difference gives another
folder, and a ``--run-dir`` that holds a run of another identity is refused with the difference named
(:func:`check_same_run`). Also here: how ``--limit`` chooses its queries (:func:`select_items`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from imagent.core.config import MOVED_INDEXING_KEYS
from imagent.eval.datasets.base import EvalItem
from imagent.eval.records import RunError, json_default

# Settings that do not change what a run computes (where things live, logging): left out of the identity.
NOT_IN_IDENTITY = {"index", "cache_dir", "log_level", "cache_calls", "data_dir"}
SAMPLES = ("stratified", "first")


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved run configuration (:func:`imagent.eval.runner.resolve_config`) that decides its
    results."""
    core = {k: config.get(k) for k in ("benchmark", "split", "bench_options", "method", "top_k", "selection",
                                       "images", "index")}
    settings = _flat_indexing({k: v for k, v in (config.get("settings") or {}).items() if k not in NOT_IN_IDENTITY})
    settings.pop("methods", None)  # the chosen method's resolved params are in core["method"]
    if not settings.get("encoders"):
        settings.pop("encoders", None)
    core["settings"] = settings
    scaffold = run_scaffold(config)
    if scaffold is not None:  # only the album agents have one (other methods' ids stay as they were)
        core["scaffold"] = scaffold
    return core


def _flat_indexing(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings with ``[faces]``, ``[ann]`` and ``[places]`` written back under ``[indexing]`` by their old keys
    (:data:`~imagent.core.config.MOVED_INDEXING_KEYS`): one form for configurations saved before and after those
    sections, so a run's id does not change with where a key lives."""
    moved = [(old, section, new) for old, (section, new) in MOVED_INDEXING_KEYS.items()
             if isinstance(settings.get(section), dict)]
    if not moved:
        return settings
    out = {**settings, "indexing": dict(settings.get("indexing") or {})}
    for old, section, new in moved:
        if new in out[section]:
            out["indexing"][old] = out[section][new]
    for section in {section for _, section, _ in moved}:
        out.pop(section)
    return out


def run_scaffold(config: dict[str, Any]) -> str | None:
    """The scaffold profile (``none`` or ``small``) a run of an album agent uses, resolved from its method
    parameters and settings; None for a method without one (decision 10: every run records it)."""
    from imagent.methods.album.scaffold import scaffold_from_settings

    params = (config.get("method") or {}).get("params") or {}
    return scaffold_from_settings(params, config.get("settings") or {})


def run_id(config: dict[str, Any]) -> str:
    """12 hex digits of the identity's SHA-256: the run's id."""
    blob = json.dumps(identity(config), sort_keys=True, default=json_default)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: value}


def differences(old: dict[str, Any], new: dict[str, Any], limit: int = 8) -> list[str]:
    """``key: old -> new`` for each identity field that differs (dotted keys), at most ``limit``."""
    a, b = flatten(identity(old)), flatten(identity(new))

    def show(v: Any) -> str:
        s = json.dumps(v, default=json_default) if not isinstance(v, str) else v
        return s if len(s) <= 60 else s[:57] + "..."

    diff = [f"{k}: {show(a.get(k, '(none)'))} -> {show(b.get(k, '(none)'))}"
            for k in sorted(set(a) | set(b)) if a.get(k, "\0") != b.get(k, "\0")]
    return diff[:limit] + ([f"and {len(diff) - limit} more"] if len(diff) > limit else [])


def check_same_run(run_dir: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse to resume ``run_dir`` (whose config.json is ``old``) with the configuration ``new`` unless both
    have the same identity; the error names every difference."""
    if run_id(old) == run_id(new):
        return
    diff = differences(old, new)
    raise RunError(
        f"{run_dir} holds run {old.get('run_id') or old.get('fingerprint') or '?'} with a different configuration "
        f"(differs in: {'; '.join(diff) or 'the version of its identity'}); resuming would mix results. "
        "Leave out --run-dir (each configuration gets its own folder), use another one, or delete that directory."
    )


def queries_digest(items: Sequence[EvalItem]) -> str:
    """SHA-256 (16 hex digits) of the selected queries' ids, text, reference and targets, in order."""
    h = hashlib.sha256()
    for it in items:
        ref = it.query.reference.id if it.query.reference is not None else ""
        h.update(json.dumps([it.id, it.group, it.query.text, ref, list(it.positives)],
                            default=json_default).encode())
    return h.hexdigest()[:16]


def folder_name(config: dict[str, Any], rid: str) -> str:
    """``<benchmark>-<split>-<method>[-n<limit>]-<run id>``: readable, and unique per identity."""
    sel = config.get("selection") or {}
    n = f"-n{sel['limit']}" if sel.get("limit") else ""
    return f"{config['benchmark']}-{config['split']}-{config['method']['name']}{n}-{rid[:8]}"


# --------------------------------------------------------------------------- which queries --limit runs


def select_items(items: Sequence[EvalItem], limit: int | None, sample: str = "stratified", seed: int = 0,
                 stratum: Callable[[EvalItem], str] | None = None) -> list[EvalItem]:
    """The queries a run with ``--limit`` takes, counted in groups (a dialogue's rounds stay together).

    ``first``: the first ``limit`` groups. ``stratified`` (the default): ``limit`` groups drawn with a seeded
    generator from each stratum (a benchmark's query kind: task, event type, category) in proportion to its
    size, every stratum getting at least one while ``limit`` allows; kept in the benchmark's order."""
    if sample not in SAMPLES:
        raise RunError(f"--sample must be one of {', '.join(SAMPLES)}, not {sample!r}")
    if limit is None:
        return list(items)
    groups: dict[str, list[EvalItem]] = {}
    for it in items:
        groups.setdefault(it.group or it.id, []).append(it)
    order = list(groups)
    if limit >= len(order):
        return list(items)
    if sample == "first" or stratum is None:
        keep = set(order[:limit])
    else:
        strata: dict[str, list[str]] = {}
        for g in order:
            strata.setdefault(str(stratum(groups[g][0])), []).append(g)
        quota = _allocate({s: len(v) for s, v in strata.items()}, limit)
        rng = random.Random(seed)
        keep = set()
        for s in sorted(strata):
            keep.update(rng.sample(strata[s], quota[s]))
    return [it for g in order if g in keep for it in groups[g]]


def _allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Split ``n`` over strata in proportion to their sizes (largest remainders), at least one each while
    ``n`` allows, never more than a stratum holds."""
    total = sum(sizes.values())
    names = sorted(sizes, key=lambda s: (-sizes[s], s))
    quota = {s: 0 for s in names}
    if n >= len(names):
        for s in names:
            quota[s] = 1
    else:
        for s in names[:n]:
            quota[s] = 1
        return quota
    left = n - sum(quota.values())
    exact = {s: left * sizes[s] / total for s in names}
    for s in names:
        quota[s] += min(int(exact[s]), sizes[s] - quota[s])
    while sum(quota.values()) < n:
        room = [s for s in names if quota[s] < sizes[s]]
        s = max(room, key=lambda s: (exact[s] - int(exact[s]), sizes[s] - quota[s]))
        quota[s] += 1
        exact[s] = int(exact[s])  # its remainder is used
    return quota


__all__ = ["NOT_IN_IDENTITY", "SAMPLES", "check_same_run", "differences", "flatten", "folder_name", "identity",
           "queries_digest", "run_id", "run_scaffold", "select_items"]
