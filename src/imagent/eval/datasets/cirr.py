"""CIRR (Liu et al., ICCV 2021): composed image retrieval on real-life images (NLVR2).

Files (official repository layout, or flat): ``captions/cap.rc2.<split>.json`` (entries ``pairid,
reference, target_hard, target_soft, caption, img_set{id, members, reference_rank, target_rank}``;
test1 has no targets) and ``image_splits/split.rc2.<split>.json`` (image name -> ``./dev/<name>.png``).
The ``train`` split (same format) is read for ``imagent oscar build-library cirr --split train``.

Protocol: the gallery is *every* image of the split (2,297 val, 2,315 test1) and all 4,181 val
queries are scored (no truncation). The reference is excluded from the method's ranking
(``Query.exclude``) and removed again by the metric, as CIRR's evaluation does. Recall@K counts
``target_hard``. Recall_subset@K ranks the 5 ``members`` other than the reference.

Subset mode (``subset_mode``, default on): the runner runs every query a second time *inside* its
members (``Query.candidates`` = the 5 members minus the reference, query id ``<pairid>:subset``), so a
method's own depth becomes ``min(k, 5)`` (ImageScope's stage 2 verifies all 5, X^R's k' is 5), as the
ImageScope (``--subset``: ``top_k = min(top_k, len(img_set) - 1)``) and X^R code do. Recall_subset@K and
the ``recall_subset`` server file then come from that pass, and the report says so. With
``subset_mode=false`` they come from the full-gallery ranking restricted to the members (the runner then
ranks the whole gallery so every member has a place): for a plain similarity method that is the same
order, but a re-ranking method verifies only its own top k and never looks at members below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from imagent.core.types import ImageRecord, Query
from imagent.eval import metrics as M
from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    BenchmarkOptions,
    EvalItem,
    Predictions,
    read_json,
    require_fields,
)

SUBSET_SUFFIX = ":subset"


class CIRROptions(BenchmarkOptions):
    version: str = "rc2"
    # Recall_subset from a second pass of every query inside its 5 members (the papers' code).
    subset_mode: bool = Field(True, description="Recall_subset from a second pass inside the 5 img_set members")
    # Without subset mode: Recall_subset orders the members as a full-gallery ranking does; off, the method
    # ranks only --top-k deep and members it did not rank are missing from the subset.
    subset_from_full_ranking: bool = True


class CIRR(Benchmark):
    name = "cirr"
    splits = ("val", "test1", "train")  # train: for building OSCAR's golden library
    default_split = "val"
    test_splits = ("test1",)
    Options = CIRROptions
    layout = (
        "<images-root>/dev/<name>.png (val), <images-root>/test1/<name>.png (test1), <images-root>/train/<n>/"
        "<name>.png (train): the relative paths of "
        "image_splits/split.rc2.<split>.json (NLVR2 images, e.g. the CIRR img_raw folder)"
    )

    def _caps(self, split: str) -> Path:
        v = self.options.version
        return self.find_file([f"cap.{v}.{split}.json", f"captions/cap.{v}.{split}.json"], f"CIRR {split} captions")

    def _split_file(self, split: str) -> Path:
        v = self.options.version
        return self.find_file(
            [f"split.{v}.{split}.json", f"image_splits/split.{v}.{split}.json",
             f"../image_splits/split.{v}.{split}.json"],
            f"CIRR {split} image split",
        )

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        data = read_json(self._caps(split))
        if not isinstance(data, list):
            raise BenchmarkError("CIRR captions must be a JSON list")
        items = []
        for e in data:
            require_fields(e, ["pairid", "reference", "caption", "img_set"], "CIRR entry")
            ref = str(e["reference"])
            members = [str(m) for m in e["img_set"]["members"]]
            truth: dict[str, Any] = {}
            positives: list[str] = []
            if "target_hard" in e:
                truth = {
                    "target_hard": str(e["target_hard"]),
                    "target_soft": {str(k): float(v) for k, v in (e.get("target_soft") or {}).items()},
                    "members": members,
                    "reference": ref,
                }
                positives = [str(e["target_hard"])]
            q = Query(
                text=str(e["caption"]),
                id=str(e["pairid"]),
                reference=ImageRecord(id=ref, path=""),
                exclude=[ref],
                extra={"members": members, "img_set_id": e["img_set"].get("id")},
            )
            items.append(EvalItem(query=q, truth=truth, positives=positives, group=str(e["pairid"])))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        split = self.check_split(split)
        root = self.root(images_root)
        mapping = read_json(self._split_file(split))
        rows = [{"id": str(name), "file": str((root / rel).resolve())} for name, rel in mapping.items()]
        return self.check_files(rows, root, allow_missing)

    def search_depth(self, split: str, gallery_size: int, top_k: int) -> int:
        # Without subset mode, Recall_subset needs the order of members anywhere in the gallery ranking.
        if self.options.subset_mode or not self.options.subset_from_full_ranking:
            return top_k
        return max(top_k, gallery_size)

    def subset_items(self, items: Sequence[EvalItem]) -> list[EvalItem]:
        """Subset mode: each query again, with the candidates set to its members other than the reference."""
        if not self.options.subset_mode:
            return []
        out = []
        for it in items:
            q = it.query
            ref = q.reference.id if q.reference else ""
            members = [m for m in q.extra.get("members") or [] if m != ref]
            sub = Query(text=q.text, id=f"{q.id}{SUBSET_SUFFIX}", reference=ImageRecord(id=ref, path=""),
                        candidates=members, exclude=[ref], extra={**q.extra, "subset_of": q.id})
            out.append(EvalItem(query=sub, group=it.group or q.id))
        return out

    def describe_run(self, usage: dict[str, Any] | None = None) -> dict[str, str]:
        if self.options.subset_mode:
            return {"recall_subset": "subset mode: each query ran again inside its 5 img_set members (the "
                                     "reference removed, so the method's k is min(k, 5)), as the ImageScope and "
                                     "X^R code do; recall_subset@K and the recall_subset server file come from "
                                     "that pass (query ids <pairid>:subset)"}
        return {"recall_subset": "the full-gallery ranking restricted to the img_set members (no subset pass)"}

    def record_extras(self, item: EvalItem, ranking: Sequence[str]) -> dict[str, Any]:
        members = item.query.extra.get("members") or []
        ref = item.query.reference.id if item.query.reference else ""
        return {"subset": M.restricted(M.without(ranking, [ref]), members)}

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        scored = [it for it in items if it.has_truth]
        if not scored:
            return {}
        targets = [it.truth["target_hard"] for it in scored]
        refs = [it.truth["reference"] for it in scored]
        out: dict[str, float] = {}
        if predictions.only in (None, "recall"):
            out.update(M.cirr_recall([predictions.get(it.id) for it in scored], targets, refs))
        if predictions.only in (None, "recall_subset"):
            subs = self._subset_rankings(predictions, scored)
            out.update(M.cirr_recall_subset(subs, targets, refs, [it.truth["members"] for it in scored]))
        if "recall@5" in out and "recall_subset@1" in out:
            # The "Avg." column of CIR papers: (R@5 + R_subset@1) / 2.
            out["avg(recall@5,recall_subset@1)"] = (out["recall@5"] + out["recall_subset@1"]) / 2
        return out

    @staticmethod
    def _subset_rankings(predictions: Predictions, items: Sequence[EvalItem]) -> list[list[str]]:
        """Per item, the ranking Recall_subset reads: the subset-mode pass when the predictions hold one
        (a failed pass is an empty ranking, a miss), else the stored member order, else the ranking."""
        if any(k.endswith(SUBSET_SUFFIX) for k in predictions.rankings):
            return [predictions.get(f"{it.id}{SUBSET_SUFFIX}") for it in items]
        return [predictions.subset.get(it.id, predictions.get(it.id)) for it in items]

    def score_warnings(self, predictions: Predictions, items: Sequence[EvalItem]) -> list[str]:
        """``imagent score``: Recall_subset@1-3 is exact only when a query's ranking orders at least 3 of
        its members; a plain top-50 list often holds fewer, and the missing members count as misses."""
        if predictions.only == "recall":
            return []
        scored = [it for it in items if it.has_truth]
        short = 0
        for it, ranking in zip(scored, self._subset_rankings(predictions, scored), strict=True):
            ref = it.truth["reference"]
            members = [m for m in it.truth["members"] if m != ref]
            found = M.restricted(M.without(ranking, [ref]), members)
            short += len(set(found)) < min(3, len(members))
        if not short:
            return []
        return [f"recall_subset: {short} of {len(scored)} rankings order fewer than 3 of the query's members "
                "(truncated rankings); the missing members count as misses, so recall_subset is lower than the "
                "official protocol gives. Rank inside the subset (imagent eval cirr runs subset mode) or submit "
                "a recall_subset file"]

    def parse_predictions(self, data: Any) -> Predictions:
        """Server format ``{"version": "rc2", "metric": "recall" | "recall_subset", "<pairid>": [names]}``
        (a plain ``{pairid: [names]}`` is scored with both metrics)."""
        if not isinstance(data, dict):
            raise BenchmarkError("CIRR predictions must be a JSON object")
        body = {k: v for k, v in data.items() if k not in ("version", "metric")}
        metric = data.get("metric")
        if metric not in (None, "recall", "recall_subset"):
            raise BenchmarkError(f"CIRR predictions: metric must be 'recall' or 'recall_subset', not {metric!r}")
        preds = super().parse_predictions(body)
        preds.only = metric
        if data.get("version") not in (None, self.options.version):
            preds.warnings.append(
                f"file is for CIRR version {data.get('version')!r}, annotations are {self.options.version!r}"
            )
        return preds

    def submissions(self, split: str, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, Any]:
        """Both server files: top-50 names for Recall and top-3 subset names for Recall_subset."""
        recall: dict[str, Any] = {"version": self.options.version, "metric": "recall"}
        subset: dict[str, Any] = {"version": self.options.version, "metric": "recall_subset"}
        for it in items:
            ref = it.query.reference.id if it.query.reference else ""
            recall[it.id] = M.without(predictions.get(it.id), [ref])[:50]
            ranked = predictions.rankings.get(f"{it.id}{SUBSET_SUFFIX}") or predictions.subset.get(it.id)
            if ranked is None:
                ranked = M.restricted(M.without(predictions.get(it.id), [ref]), it.query.extra.get("members") or [])
            # The server wants 3 names: pad with unranked members (annotation order) if the method ranked fewer.
            rest = [m for m in it.query.extra.get("members") or [] if m != ref and m not in ranked]
            subset[it.id] = (list(ranked) + rest)[:3]
        return {f"cirr_{split}_recall.json": recall, f"cirr_{split}_recall_subset.json": subset}
