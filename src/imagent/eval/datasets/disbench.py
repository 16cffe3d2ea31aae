"""DISBench (Deng et al., 2026): deep image search in personal photo collections (YFCC100M).

Layout: ``queries.jsonl`` (``query_id, user_id, query, answer[photo ids], event_type``
intra-event | inter-event), ``metadata/<user>.jsonl`` (``photo_id, metadata{taken_time "YYYY-MM-DD
HH:MM:SS", longitude, latitude, accuracy, address, capturedevice}``) and ``images/<user>/<photo_id>.jpg``.

Each user's photos form that user's gallery: one index holds every user's photos under the id
``<user>/<photo_id>`` and each query's ``candidates`` are its user's photos. The task returns a *set*:
the whole returned list is the answer (or its first ``answer_top_k`` ids when that option is set), and
EM / F1 are averaged per query, overall and per event type.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from imagent.core.types import Query
from imagent.eval import metrics as M
from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    BenchmarkOptions,
    EvalItem,
    Predictions,
    read_jsonl,
    require_fields,
)


class DISBenchOptions(BenchmarkOptions):
    answer_top_k: int | None = Field(None, ge=1, description="score only the first k returned ids as the set")


def _float(x: Any) -> float | None:
    try:
        return None if x in (None, "") else float(x)
    except (TypeError, ValueError):
        return None


class DISBench(Benchmark):
    name = "disbench"
    splits = ("all", "intra", "inter")
    default_split = "all"
    Options = DISBenchOptions
    layout = "<images-root>/images/<user_id>/<photo_id>.jpg, with metadata/<user_id>.jsonl and queries.jsonl"

    def split_from_file(self, path):
        return "all"

    def _root_dir(self) -> Path:
        return self.find_file(["queries.jsonl"], "DISBench queries.jsonl").parent

    def _metadata(self, user: str) -> list[dict[str, Any]]:
        path = self._root_dir() / "metadata" / f"{user}.jsonl"
        if not path.is_file() and self.images_root is not None:
            path = self.images_root / "metadata" / f"{user}.jsonl"
        if not path.is_file():
            raise BenchmarkError(f"disbench: no metadata for user {user} ({path})")
        return read_jsonl(path)

    def users(self) -> list[str]:
        dirs = [self._root_dir() / "metadata"] + ([self.images_root / "metadata"] if self.images_root else [])
        for d in dirs:
            if d.is_dir():
                return sorted(p.stem for p in d.glob("*.jsonl"))
        return []

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        rows = read_jsonl(self._root_dir() / "queries.jsonl")
        have_meta = bool(self.users())
        cache: dict[str, list[str]] = {}
        items = []
        for e in rows:
            require_fields(e, ["query_id", "user_id", "query"], "DISBench query")
            etype = str(e.get("event_type", ""))
            if split != "all" and not etype.startswith(split):
                continue
            user = str(e["user_id"])
            if have_meta and user not in cache:
                cache[user] = [f"{user}/{m['photo_id']}" for m in self._metadata(user)]
            answers = [f"{user}/{a}" for a in e.get("answer") or []]
            q = Query(text=str(e["query"]), id=str(e["query_id"]), candidates=cache.get(user),
                      extra={"user_id": user, "event_type": etype})
            truth = {"answer": answers, "event_type": etype, "user": user} if "answer" in e else {}
            items.append(EvalItem(q, truth, answers, q.id))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        self.check_split(split)
        root = self.root(images_root)
        rows = []
        for user in self.users():
            for m in self._metadata(user):
                meta = m.get("metadata") or {}
                t = meta.get("taken_time")
                taken = None
                if t:
                    try:
                        taken = datetime.strptime(str(t), "%Y-%m-%d %H:%M:%S").isoformat()
                    except ValueError:
                        taken = None
                rows.append({
                    "id": f"{user}/{m['photo_id']}",
                    "file": str((root / "images" / user / f"{m['photo_id']}.jpg").resolve()),
                    "taken_time": taken,
                    "latitude": _float(meta.get("latitude")),
                    "longitude": _float(meta.get("longitude")),
                    "address": meta.get("address") or None,
                    # Unknown manifest columns land in record.extra.
                    "user_id": user,
                    "photo_id": str(m["photo_id"]),
                    "accuracy": meta.get("accuracy"),
                    "capturedevice": meta.get("capturedevice"),
                })
        if not rows:
            raise BenchmarkError(f"disbench: no metadata/<user>.jsonl files found.\nExpected layout: {self.layout}")
        return self.check_files(rows, root, allow_missing)

    def answer_set(self, item: EvalItem, ranking: Sequence[str]) -> list[str]:
        user = item.query.extra.get("user_id", "")
        ids = [x if "/" in x else f"{user}/{x}" for x in ranking]
        k = self.options.answer_top_k
        return ids[:k] if k else ids

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        scored = [it for it in items if it.has_truth]
        if not scored:
            return {}
        return M.disbench_scores(
            [self.answer_set(it, predictions.get(it.id)) for it in scored],
            [it.truth["answer"] for it in scored],
            [it.truth["event_type"] for it in scored],
        )

    def curve(self, predictions, items, ks):
        fixed = Predictions({it.id: self.answer_set(it, predictions.get(it.id)) for it in items})
        return super().curve(fixed, items, ks)
