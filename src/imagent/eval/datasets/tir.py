"""Flickr30K and MSCOCO text-to-image retrieval on the Karpathy splits (1,000 / 5,000 test images,
5 captions each; every caption is one query whose ground truth is its image).

Two JSON formats are read:

- Karpathy's ``dataset_flickr30k.json`` / ``dataset_coco.json``: ``{"images": [{"filename", "split",
  "sentences": [{"raw", "sentid"}], "filepath"? (COCO: val2014), "cocoid"?}]}``; query ids are ``sentid``;
- the ALBEF/BLIP files ``flickr30k_test.json`` / ``coco_karpathy_test.json``: ``[{"image": "<relative
  path>", "caption": [...]}]``; query ids are ``<image index>_<caption index>``.

Gallery ids are the image file stems. Metrics: R@1/5/10 (``100 * |{q: rank < K}| / |Q|``) and NDCG@10
(one relevant image per query; OSCAR Sec. 4.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from imagent.core.types import Query
from imagent.eval import metrics as M
from imagent.eval.datasets.base import Benchmark, BenchmarkError, EvalItem, Predictions, read_json


class _KarpathyTIR(Benchmark):
    splits = ("test", "val")
    default_split = "test"
    karpathy_file: str
    blip_files: ClassVar[dict[str, str]]
    default_folder: str

    def _source(self, split: str) -> Path:
        names = [self.karpathy_file, f"annotations/{self.karpathy_file}"]
        if split in self.blip_files:
            names += [self.blip_files[split], f"annotations/{self.blip_files[split]}"]
        return self.find_file(names, f"{self.name} {split} annotations (Karpathy JSON)")

    def _images(self, split: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
        """(gallery id, path relative to the images root, [(query id, caption)]) per image."""
        data = read_json(self._source(split))
        out = []
        if isinstance(data, dict) and "images" in data:
            for img in data["images"]:
                if img.get("split") != split and not (split == "train" and img.get("split") == "restval"):
                    continue
                rel = f"{img['filepath']}/{img['filename']}" if img.get("filepath") else img["filename"]
                sents = [
                    (str(s.get("sentid", f"{img['filename']}_{j}")), s["raw"]) for j, s in enumerate(img["sentences"])
                ]
                out.append((Path(img["filename"]).stem, rel, sents))
        elif isinstance(data, list):
            for i, row in enumerate(data):
                caps = row["caption"] if isinstance(row["caption"], list) else [row["caption"]]
                out.append((Path(row["image"]).stem, row["image"], [(f"{i}_{j}", c) for j, c in enumerate(caps)]))
        else:
            raise BenchmarkError(f"{self.name}: unrecognised annotation format")
        if not out:
            raise BenchmarkError(f"{self.name}: no images of split {split!r} in the annotation file")
        return out

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        items = []
        for gid, _rel, sents in self._images(split):
            for qid, text in sents:
                items.append(EvalItem(Query(text=text.strip(), id=qid), {"target": gid}, [gid], qid))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        split = self.check_split(split)
        root = self.root(images_root)
        rows = []
        for gid, rel, _ in self._images(split):
            path = root / rel
            if not path.is_file() and (root / self.default_folder / rel).is_file():
                path = root / self.default_folder / rel
            rows.append({"id": gid, "file": str(path.resolve())})
        return self.check_files(rows, root, allow_missing)

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        scored = [it for it in items if it.has_truth]
        if not scored:
            return {}
        rankings = [predictions.get(it.id) for it in scored]
        out = M.tir_recall(rankings, [it.truth["target"] for it in scored])
        out.update(M.mean_ndcg(rankings, [[it.truth["target"]] for it in scored], 10))  # OSCAR Sec. 4.5
        return out


class Flickr30K(_KarpathyTIR):
    name = "flickr30k"
    karpathy_file = "dataset_flickr30k.json"
    blip_files: ClassVar[dict[str, str]] = {"test": "flickr30k_test.json", "val": "flickr30k_val.json"}
    default_folder = "flickr30k-images"
    layout = "<images-root>/flickr30k-images/<filename>.jpg (or <images-root>/<filename>.jpg)"


class MSCOCO(_KarpathyTIR):
    name = "mscoco"
    karpathy_file = "dataset_coco.json"
    blip_files: ClassVar[dict[str, str]] = {"test": "coco_karpathy_test.json", "val": "coco_karpathy_val.json"}
    default_folder = "."
    layout = "<images-root>/val2014/COCO_val2014_<id>.jpg (Karpathy 'filepath/filename')"


