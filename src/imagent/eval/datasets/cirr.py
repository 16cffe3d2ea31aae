"""CIRR (Liu et al., ICCV 2021): composed image retrieval on real-life images (NLVR2).

Files (official repository layout, or flat): ``captions/cap.rc2.<split>.json`` (entries ``pairid,
reference, target_hard, target_soft, caption, img_set{id, members, reference_rank, target_rank}``;
test1 has no targets) and ``image_splits/split.rc2.<split>.json`` (image name -> ``./dev/<name>.png``).

Protocol: the gallery is *every* image of the split (2,297 val, 2,315 test1) and all 4,181 val
queries are scored (no truncation). The reference is excluded from the method's ranking
(``Query.exclude``) and removed again by the metric, as CIRR's evaluation does. Recall@K counts
``target_hard``. Recall_subset@K ranks the 5 ``members`` other than the reference; the runner asks the
method for a full-gallery ranking so the subset order is the official one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


class CIRROptions(BenchmarkOptions):
    version: str = "rc2"
    # Recall_subset orders the members as a full-gallery ranking does (the official computation); off,
    # the method ranks only --top-k deep and members it did not rank are missing from the subset.
    subset_from_full_ranking: bool = True


class CIRR(Benchmark):
    name = "cirr"
    splits = ("val", "test1")
    default_split = "val"
    test_splits = ("test1",)
    Options = CIRROptions
    layout = (
        "<images-root>/dev/<name>.png (val) and <images-root>/test1/<name>.png (test1): the relative paths of "
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
        # Recall_subset needs the order of members that may sit anywhere in the gallery ranking.
        return max(top_k, gallery_size) if self.options.subset_from_full_ranking else top_k

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
            subs = [predictions.subset.get(it.id, predictions.get(it.id)) for it in scored]
            out.update(M.cirr_recall_subset(subs, targets, refs, [it.truth["members"] for it in scored]))
        if "recall@5" in out and "recall_subset@1" in out:
            # The "Avg." column of CIR papers: (R@5 + R_subset@1) / 2.
            out["avg(recall@5,recall_subset@1)"] = (out["recall@5"] + out["recall_subset@1"]) / 2
        return out

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
            ranked = predictions.subset.get(it.id)
            if ranked is None:
                ranked = M.restricted(M.without(predictions.get(it.id), [ref]), it.query.extra.get("members") or [])
            # The server wants 3 names: pad with unranked members (annotation order) if the method ranked fewer.
            rest = [m for m in it.query.extra.get("members") or [] if m != ref and m not in ranked]
            subset[it.id] = (list(ranked) + rest)[:3]
        return {f"cirr_{split}_recall.json": recall, f"cirr_{split}_recall_subset.json": subset}
