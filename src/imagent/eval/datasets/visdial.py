"""VisDial chat-based retrieval, PlugIR protocol (Lee et al., 2024; ChatIR's setting).

Files: ``VisDial_v1.0_queries_val.json`` (2,064 entries ``img`` and ``dialog``: the caption then 10
``"question? answer"`` strings) and the corpus ``Search_Space_val_50k.json`` (50,000 relative image
paths). Each dialogue gives 11 queries, one per round ``r`` = 0..10; round ``r`` sees the caption and
the first ``r`` question/answer turns.

Round indexing, as the official ChatIR ``eval.py`` (``Queries.__getitem__``, ``cumulative_hits_per_round``)
that PlugIR reuses:

- the query at round ``r`` is ``", ".join(dialog[:r + 1])`` (``dialog_length = r``; round 0 = the caption
  alone). Methods without chat support get exactly this text; chat methods get ``Query.text = dialog[0]``
  and ``Query.dialogue`` = turns 1..r (each split at its first ``?`` into question and answer, so
  ``"question answer"`` is the original string);
- ``rank_r`` is the target's 0-based position in round ``r``'s ranking; a hit is ``rank_r < K``;
- ``Hits@K(r) = 100 * mean over dialogues of 1[min over r' <= r of rank_r' < K]`` (cumulative: a
  dialogue found at any round so far stays found; the official first-hitting-time computation), and
  ``Recall@K(r)`` is that round alone. K in 1/5/10 (ChatIR prints Hits@10).
- The official code divides by all dialogues (every dialogue has all 11 rounds); here a round is averaged
  over the dialogues that have it, the same number on a complete run.

The ImageScope script runs only rounds 1..10 and accumulates its hits from round 1; this loader also
scores round 0 (the caption), as PlugIR and ChatIR do, so its Hits@K(r) counts a target found at round 0.

Query ids are ``<dialogue index>:<round>``; gallery ids are the corpus paths' file stems (unique in the
50k search space).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from imagent.core.types import DialogueTurn, Query
from imagent.eval import metrics as M
from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    BenchmarkOptions,
    EvalItem,
    Predictions,
    read_json,
)


class VisDialOptions(BenchmarkOptions):
    rounds: int = Field(11, ge=1, le=11, description="rounds per dialogue (round 0 = caption only)")
    separator: str = ", "


def split_turn(text: str) -> DialogueTurn:
    """``"is it daytime? i don't see windows"`` -> question up to the first ``?``, the rest the answer."""
    q, mark, a = text.partition("?")
    if not mark:
        return DialogueTurn(question=text.strip(), answer="")
    return DialogueTurn(question=(q + "?").strip(), answer=a.strip())


class VisDial(Benchmark):
    name = "visdial"
    splits = ("val",)
    default_split = "val"
    Options = VisDialOptions
    layout = "<images-root>/<path from Search_Space_val_50k.json>, e.g. <images-root>/unlabeled2017/000000000008.jpg"

    def _queries_file(self) -> Path:
        return self.find_file(["VisDial_v1.0_queries_val.json", "dialogues/VisDial_v1.0_queries_val.json"],
                              "VisDial queries")

    def _corpus(self) -> list[str]:
        path = self.find_file(["Search_Space_val_50k.json", "Protocol/Search_Space_val_50k.json"], "VisDial corpus")
        return [str(p) for p in read_json(path)]

    def queries(self, split: str | None = None) -> list[EvalItem]:
        self.check_split(split)
        data = read_json(self._queries_file())
        if not isinstance(data, list):
            raise BenchmarkError("VisDial queries must be a JSON list")
        items = []
        for d, e in enumerate(data):
            dialog = [str(x) for x in e["dialog"]]
            target = Path(e["img"]).stem
            for r in range(min(self.options.rounds, len(dialog))):
                q = Query(
                    text=dialog[0],
                    id=f"{d}:{r}",
                    dialogue=[split_turn(t) for t in dialog[1 : r + 1]],
                    extra={"dialog": d, "round": r, "plugir_text": self.options.separator.join(dialog[: r + 1])},
                )
                items.append(EvalItem(q, {"target": target, "dialog": d, "round": r}, [target], str(d)))
        return items

    def adapt_query(self, item: EvalItem, method_tasks: Iterable[str]) -> Query:
        q = item.query
        if "chat" in set(method_tasks) or not q.dialogue:
            return q
        return Query(text=q.extra["plugir_text"], id=q.id, extra=dict(q.extra))

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        self.check_split(split)
        root = self.root(images_root)
        rows = [{"id": Path(p).stem, "file": str((root / p).resolve())} for p in self._corpus()]
        return self.check_files(rows, root, allow_missing)

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        scored = [it for it in items if it.has_truth]
        by_dialog: dict[int, dict[int, list[str]]] = {}
        targets: dict[int, str] = {}
        for it in scored:
            d, r = it.truth["dialog"], it.truth["round"]
            targets[d] = it.truth["target"]
            by_dialog.setdefault(d, {})[r] = predictions.get(it.id)
        order = sorted(by_dialog)
        rounds: list[list[list[str] | None]] = []
        for d in order:
            n = max(by_dialog[d]) + 1
            rounds.append([by_dialog[d].get(r) for r in range(n)])
        return M.visdial_hits(rounds, [targets[d] for d in order])

    def parse_predictions(self, data: Any) -> Predictions:
        """``{"<dialogue>:<round>": [ids]}``, or ``{"<dialogue>": [[ids of round 0], [round 1], ...]}``."""
        if not isinstance(data, dict):
            raise BenchmarkError("VisDial predictions must be a JSON object")
        flat: dict[str, Any] = {}
        for k, v in data.items():
            if isinstance(v, list) and v and all(isinstance(x, list) for x in v):
                for r, ranking in enumerate(v):
                    flat[f"{k}:{r}"] = ranking
            else:
                flat[str(k)] = v
        preds = super().parse_predictions(flat)
        # Ids given as corpus paths are mapped to their stems (the gallery ids).
        preds.rankings = {k: [Path(x).stem for x in v] for k, v in preds.rankings.items()}
        return preds
