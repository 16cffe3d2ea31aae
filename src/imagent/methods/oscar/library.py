"""OSCAR's golden library: optimal trajectories of training queries, keyed by their problem context (Sec. 3.5).

**Build** (offline, needs ground truth): for each training query, the rewriter's positive/negative queries,
every retriever x query retrieved once at ``k_max`` and sliced at each truncation (the atomic retrievals), then
both MIPs (:mod:`imagent.tools.oscar_mip`). The Stage II plan becomes a trajectory: one tool call per selected
retrieval (tool, rewritten query, ``top_k`` = its truncation; positives first) and the set operations
``positive = UNION(positives)``, ``negative = INTERSECT(negatives)``, ``final = DIFFERENCE(positive, negative)``
(just ``final = UNION(...)`` when no negative is selected), with both objective values and the set sizes.

**Key**: the text embedder's vector of the problem context, the modification followed by the reference
caption (the paper uses Qwen3-Embedding-8B and Qwen3-VL-32B captions; here the configured text embedder and
the stored caption). Entries record the embedder; an entry made with another embedder is re-embedded from its
stored context text when loaded, so a library survives a change of embedder.

**Store**: one JSON object per line, appended and fsync'ed per query, so an interrupted build resumes
where it stopped (entries already present, by key, are skipped; a torn last line is ignored). Queries whose
targets no atomic retrieval reaches yield no trajectory (nothing golden to show) and are counted, not stored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.inputs import jsonl_objects
from imagent.core.types import Query
from imagent.methods.base import MethodContext
from imagent.methods.oscar.atomic import (
    Retrievers,
    atomic_retrievals,
    problem_context,
    reference_caption,
    rewrite,
    search_queries,
)
from imagent.methods.oscar.config import OscarConfig
from imagent.tools.oscar_mip import MipInstance, MipPlan, solve

LIBRARY_VERSION = 1


@dataclass
class LibraryEntry:
    key: str  # "<benchmark>/<split>/<query id>"
    context: str
    embedding: list[float]
    embedder: str
    modification: str
    reference_caption: str
    rewrites: dict[str, list[str]]
    calls: list[dict[str, Any]]  # {"name": tool, "arguments": {"query", "top_k"}, "polarity"}
    steps: list[dict[str, Any]]  # set_operation steps
    stage1: dict[str, Any]
    stage2: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)
    task: str = "cir"  # "cir" (a reference and a modification) or "tir" (a description only, Sec. 4.5)
    version: int = LIBRARY_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LibraryEntry:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def optimal(self) -> bool:
        """Both MIPs proved optimal (False: a time limit stopped HiGHS; the trajectory is not golden)."""
        return bool(self.stage1.get("optimal", True)) and bool(self.stage2.get("optimal", True))

    def tool_map(self, offered: dict[str, Any]) -> dict[str, str]:
        """Each tool this entry calls -> the offered tool a demonstration shows instead: itself when offered,
        else the first offered tool of the same kind (``embedding_*`` / ``caption_*``, or the offered spec's
        ``kind``), else the first offered tool. A case never teaches a tool the planner cannot call."""
        out: dict[str, str] = {}
        names = list(offered)
        for c in self.calls:
            tool = c["name"]
            if tool in out:
                continue
            if tool in offered or not names:
                out[tool] = tool
                continue
            kind = "embedding" if tool.startswith("embedding") else "caption"
            same = [n for n in names if getattr(offered[n], "kind", "") == kind or n.startswith(kind)]
            out[tool] = (same or names)[0]
        return out

    def demonstration(self, offered: dict[str, Any] | None = None, protocol: str = "text") -> str:
        """The entry as an in-context case: the query, then its optimal plan written as the planner must write
        it (``protocol``: ``<tool_call>`` blocks, or the JSON protocol's one object). With ``offered``, tools the
        current config lacks are shown as offered ones (:meth:`tool_map`)."""
        from imagent.methods.oscar.planner import write_plan

        mapping = self.tool_map(offered) if offered else {}
        if self.task == "tir":
            lines = [f"Query: {self.modification}"]
        else:
            lines = [f"Modification query: {self.modification}",
                     f"Reference image caption: {self.reference_caption or '(none)'}"]
        calls = [{"tool": mapping.get(c["name"], c["name"]), "query": c["arguments"]["query"],
                  "top_k": c["arguments"]["top_k"]} for c in self.calls]
        lines.append(write_plan(calls, self.steps, "json" if protocol == "json" else "text"))
        s = self.stats
        if s:
            lines.append(f"(Optimal plan found offline: it keeps {s.get('targets_kept', 0)} of {s.get('targets', 0)} "
                         f"target images among {s.get('final_size', 0)} candidates.)")
        return "\n".join(lines)


def trajectory(inst: MipInstance, plan: MipPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Stage II plan as tool calls and set-operation steps (named, operands by call index)."""
    calls: list[dict[str, Any]] = []
    for pol, ids in (("+", plan.stage2.positive), ("-", plan.stage2.negative)):
        for n in inst.by_id(ids):
            r = inst.retrievals[n]
            calls.append({"name": r.tool, "arguments": {"query": r.query, "top_k": r.k}, "polarity": pol})
    npos = len(plan.stage2.positive)
    pos_idx, neg_idx = list(range(npos)), list(range(npos, len(calls)))
    if neg_idx:
        steps = [{"name": "positive", "op": "UNION", "operands": pos_idx},
                 {"name": "negative", "op": "INTERSECT", "operands": neg_idx},
                 {"name": "final", "op": "DIFFERENCE", "operands": ["positive", "negative"]}]
    else:
        steps = [{"name": "final", "op": "UNION", "operands": pos_idx}]
    return calls, steps


class GoldenLibrary:
    """The JSONL store: load, append (resumable), and nearest-context search."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._entries: list[LibraryEntry] | None = None
        self._matrix: tuple[str, np.ndarray] | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def entries(self) -> list[LibraryEntry]:
        if self._entries is None:
            out: dict[str, LibraryEntry] = {}
            for raw in jsonl_objects(self.path):  # a torn last line after a kill: that query is built again
                try:
                    entry = LibraryEntry.from_dict(raw)
                except (TypeError, KeyError, ValueError):
                    continue
                out[entry.key] = entry
            self._entries = list(out.values())
        return self._entries

    def tasks(self) -> set[str]:
        return {e.task for e in self.entries()}

    def keys(self) -> set[str]:
        return {e.key for e in self.entries()}

    def append(self, entry: LibraryEntry) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.is_file() else b""
        with open(self.path, "ab") as f:
            if data and not data.endswith(b"\n"):  # a torn line from a kill: start on a fresh line
                f.write(b"\n")
            f.write((json.dumps(entry.to_dict(), ensure_ascii=False) + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        if self._entries is not None:
            self._entries = [e for e in self._entries if e.key != entry.key] + [entry]
        self._matrix = None

    def _vectors(self, embedder: Any) -> np.ndarray:
        if self._matrix is None or self._matrix[0] != embedder.model_id:
            entries = self.entries()
            rows = np.zeros((len(entries), embedder.dim), dtype=np.float32)
            stale = [n for n, e in enumerate(entries)
                     if e.embedder != embedder.model_id or len(e.embedding) != embedder.dim]
            for n, e in enumerate(entries):
                if n not in stale:
                    rows[n] = np.asarray(e.embedding, dtype=np.float32)
            if stale:
                rows[stale] = embedder.encode_texts([entries[n].context for n in stale])
            self._matrix = (embedder.model_id, rows)
        return self._matrix[1]

    def nearest(self, context: str, embedder: Any, m: int, exclude: Iterable[str] = (), task: str | None = None
                ) -> list[tuple[LibraryEntry, float]]:
        """The ``m`` entries whose context is most similar (cosine) to ``context``; ties keep file order.
        ``exclude``: keys never returned; ``task``: only entries of that task (``cir`` / ``tir``)."""
        entries = self.entries()
        if not entries or m <= 0:
            return []
        q = np.asarray(embedder.encode_texts([context])[0], dtype=np.float32)
        sims = self._vectors(embedder) @ q
        skip = set(exclude)
        skip |= {e.key for e in entries if task is not None and e.task != task}
        order = sorted(range(len(entries)), key=lambda n: -float(sims[n]))
        return [(entries[n], float(sims[n])) for n in order if entries[n].key not in skip][:m]


@dataclass
class BuildReport:
    added: int = 0
    already: int = 0
    no_target: int = 0  # targets outside the gallery, or reached by no atomic retrieval
    non_optimal: int = 0  # added, but a time limit stopped HiGHS before it proved optimality (marked in the entry)
    rewriter_failed: int = 0  # added from the composed query alone: the rewriter's output was unusable
    errors: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    mip_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def build_entry(ctx: MethodContext, cfg: OscarConfig, key: str, query: Query, targets: list[str]
                ) -> tuple[LibraryEntry | None, str]:
    """One training query's optimal trajectory, or (None, reason) when it has none."""
    t0 = time.perf_counter()
    caption = reference_caption(ctx, query)
    tir = query.reference is None  # Sec. 4.5: a text-to-image query, no reference
    rewrites = rewrite(ctx, cfg, query.text, caption, tir=tir)
    retrievers = Retrievers(ctx, cfg.retrievers, query)
    atomic = atomic_retrievals(retrievers, cfg, search_queries(cfg, query.text, caption, rewrites))
    pool = retrievers.pool_ids()
    in_pool = set(pool)
    positives = [t for t in dict.fromkeys(targets) if t in in_pool]
    if not positives:
        return None, "no target in the gallery"
    inst = MipInstance(pool, positives, atomic, cfg.weights())
    plan = solve(inst, cfg.mip_time_limit_s)
    if plan.stage2.kept_positives == 0:
        return None, "no atomic retrieval reaches a target"
    calls, steps = trajectory(inst, plan)
    context = problem_context(query.text, caption)
    details = plan.details()
    entry = LibraryEntry(
        key=key, context=context, embedding=[round(float(x), 6) for x in ctx.text.encode_texts([context])[0]],
        embedder=ctx.text.model_id, modification=query.text, reference_caption=caption,
        rewrites={"positive": rewrites.positive, "negative": rewrites.negative}, calls=calls, steps=steps,
        task="tir" if tir else "cir",
        stage1={**plan.to_dict()["stage1"], "optimal": details["stage1"]["optimal"]},
        stage2={**plan.to_dict()["stage2"], "optimal": details["stage2"]["optimal"]},
        stats={"targets": len(positives), "targets_kept": plan.stage2.kept_positives, "final_size": len(plan.final),
               "universe": plan.stage2.universe, "removed_by_difference": plan.stage2.removed,
               "atomic_retrievals": len(atomic), "families": len(atomic) // max(1, len(cfg.truncations)),
               "mip_seconds": round(plan.stage1.seconds + plan.stage2.seconds, 4),
               "seconds": round(time.perf_counter() - t0, 3), "rewriter_ok": rewrites.ok},
    )
    return entry, ""


def build_library(ctx: MethodContext, cfg: OscarConfig, items: Iterable[tuple[str, Query, list[str]]],
                  library: GoldenLibrary, progress: Callable[[int, str], None] | None = None) -> BuildReport:
    """Add every ``(key, query, targets)`` not yet in ``library`` (resumable). ``progress(done, key)``
    is called after each item."""
    cfg = cfg.for_context(ctx)  # left at its default, the tools include the extra encoders' spaces
    report = BuildReport()
    t0 = time.perf_counter()
    have = library.keys()
    for done, (key, query, targets) in enumerate(items, 1):
        if key in have:
            report.already += 1
        else:
            try:
                entry, _reason = build_entry(ctx, cfg, key, query, targets)
            except Exception as exc:  # one bad query must not end a long build; it is retried next time
                report.errors.append((key, f"{type(exc).__name__}: {exc}"))
                entry = None
                _reason = "error"
            if entry is not None:
                library.append(entry)
                report.added += 1
                report.non_optimal += not entry.optimal
                report.rewriter_failed += not entry.stats.get("rewriter_ok", True)
                report.mip_seconds += entry.stats["mip_seconds"]
            elif _reason != "error":
                report.no_target += 1
        if progress is not None:
            progress(done, key)
    report.seconds = time.perf_counter() - t0
    return report


__all__ = ["BuildReport", "GoldenLibrary", "LibraryEntry", "build_entry", "build_library", "trajectory"]
