"""CIRCO (Baldrati et al., ICCV 2023): composed image retrieval with several ground truths on COCO 2017
unlabeled images (123,403).

Files: ``val.json`` / ``test.json`` (entries ``id, reference_img_id, target_img_id, relative_caption,
shared_concept, gt_img_ids, semantic_aspects``; test has no targets). Metric: mAP@5/10/25/50 over all
``gt_img_ids`` (not Recall, which only sees the one target), plus the 9 semantic-aspect mAP@10. The
reference image is not removed. Server file: ``{"<id>": [50 image ids]}``.

Option ``shared_concept`` (default off, as in the official protocol where the query is the relative
caption) adds the annotated concept the reference and targets share, through ``shared_concept_template``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from imagent.core.types import ImageRecord, Query
from imagent.eval import metrics as M
from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    BenchmarkOptions,
    EvalItem,
    MissingImagesError,
    Predictions,
    read_json,
    require_fields,
)


class CIRCOOptions(BenchmarkOptions):
    shared_concept: bool = Field(False, description="add the annotated shared concept to the query text")
    shared_concept_template: str = "{relative_caption} (the images share: {shared_concept})"


def coco_file(image_id: str | int) -> str:
    return f"{int(image_id):012d}.jpg"


class CIRCO(Benchmark):
    name = "circo"
    splits = ("val", "test")
    default_split = "val"
    test_splits = ("test",)
    Options = CIRCOOptions
    layout = (
        "<images-root>/unlabeled2017/{id:012d}.jpg (COCO 2017 unlabeled images; optionally "
        "<images-root>/annotations/image_info_unlabeled2017.json to fix the gallery list)"
    )

    def _file(self, split: str):
        return self.find_file([f"{split}.json", f"annotations/{split}.json"], f"CIRCO {split} annotations")

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        data = read_json(self._file(split))
        if not isinstance(data, list):
            raise BenchmarkError("CIRCO annotations must be a JSON list")
        items = []
        for e in data:
            require_fields(e, ["id", "reference_img_id", "relative_caption"], "CIRCO entry")
            text = str(e["relative_caption"])
            if self.options.shared_concept and e.get("shared_concept"):
                text = self.options.shared_concept_template.format(
                    relative_caption=text, shared_concept=e["shared_concept"]
                )
            truth: dict[str, Any] = {}
            positives: list[str] = []
            if e.get("gt_img_ids"):
                gts = [M.circo_id(x) for x in e["gt_img_ids"]]
                truth = {
                    "gt": gts,
                    "target": M.circo_id(e.get("target_img_id", gts[0])),
                    "aspects": list(e.get("semantic_aspects") or []),
                }
                positives = gts
            q = Query(
                text=text,
                id=M.circo_id(e["id"]),
                reference=ImageRecord(id=M.circo_id(e["reference_img_id"]), path=""),
                extra={"relative_caption": e["relative_caption"], "shared_concept": e.get("shared_concept")},
            )
            items.append(EvalItem(query=q, truth=truth, positives=positives, group=q.id))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        split = self.check_split(split)
        root = self.root(images_root)
        folder = root / "unlabeled2017"
        info = root / "annotations" / "image_info_unlabeled2017.json"
        if info.is_file():
            ids = [str(img["id"]) for img in read_json(info)["images"]]
        elif folder.is_dir():
            ids = sorted((p.stem.lstrip("0") or "0") for p in folder.glob("*.jpg"))
        else:
            ids = []
        rows = [{"id": i, "file": str((folder / coco_file(i)).resolve())} for i in ids]
        # Query images must be there whatever the listing says.
        needed: set[str] = set()
        for it in self.queries(split):
            needed.update(it.truth.get("gt", []))
            if it.query.reference is not None:
                needed.add(it.query.reference.id)
        listed = set(ids)
        needed_missing = [folder / coco_file(i) for i in sorted(needed) if i not in listed]
        if not rows and not allow_missing:
            raise MissingImagesError(
                f"circo: no images under {folder} (0 found, {len(needed)} query/ground-truth images needed, "
                f"the full gallery is 123,403).\nExpected layout: {self.layout}"
            )
        return self.check_files(rows, root, allow_missing, also_needed=needed_missing)

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        scored = [it for it in items if it.has_truth]
        if not scored:
            return {}
        rankings = [predictions.get(it.id) for it in scored]
        gts = [it.truth["gt"] for it in scored]
        out = M.circo_map(rankings, gts)
        out.update(M.circo_semantic_map10(rankings, gts, [it.truth["aspects"] for it in scored]))
        out.update(M.circo_target_recall(rankings, [it.truth["target"] for it in scored]))
        return out

    def parse_predictions(self, data: Any) -> Predictions:
        """Server format ``{"<query id>": [image ids]}``. Ids are read as the official ``evaluation.py``
        casts them (``int``): ``123``, ``123.0``, ``"123"`` and ``"000123"`` are the same image (a plain
        string comparison would score them 0). A query whose predictions repeat an image is refused, as
        the official script refuses it (AP@k could otherwise exceed 1)."""
        if not isinstance(data, dict):
            raise BenchmarkError("CIRCO predictions must be a JSON object of query id -> ranked image ids")
        out: dict[str, list[str]] = {}
        for key, ranking in data.items():
            if not isinstance(ranking, list):
                raise BenchmarkError(f"CIRCO predictions: query {key!r} maps to {type(ranking).__name__}, not a list")
            try:
                qid, ids = M.circo_id(key), [M.circo_id(x) for x in ranking]
            except ValueError as exc:
                raise BenchmarkError(f"CIRCO predictions, query {key!r}: {exc}") from None
            if M.duplicate_count(ids):
                seen: set[str] = set()
                repeated = [i for i in ids if i in seen or seen.add(i)]
                raise BenchmarkError(
                    f"CIRCO predictions: query {key!r} lists image {repeated[0]} more than once; the official "
                    "evaluation refuses duplicate predictions (give each image id once per query)")
            if qid in out:
                raise BenchmarkError(f"CIRCO predictions: query {key!r} is given twice (as {qid})")
            out[qid] = ids
        return Predictions(out)

    def submissions(self, split: str, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, Any]:
        def as_int(x: str) -> int | str:
            return int(x) if x.isdigit() else x

        return {f"circo_{split}.json": {it.id: [as_int(x) for x in predictions.get(it.id)[:50]] for it in items}}
