"""GeneCIS (Vaze et al., CVPR 2023): conditional similarity on per-query galleries.

Files: ``<task>.json`` for the tasks ``change_object``, ``focus_object`` (COCO val2017 ids under
``val_image_id``) and ``change_attribute``, ``focus_attribute`` (Visual Genome boxes: ``image_id`` and
``instance_bbox`` [x, y, w, h]). Each entry: ``reference, target, condition, gallery[...]``.

Protocol (GeneCIS ``eval_functions.validate``): the scored gallery is ``[target] + gallery`` (target at
index 0), R@1/2/3. As in the official loaders, only entries whose gallery has the modal length are kept.
The query text is the condition through ``condition_template``. Attribute crops follow the official
loader: the box dilated by 0.7 of its size (left/top moved out by 0.7*w/h, width/height x1.7, clipped
to the image) and padded to a square with black; crops are written under the run directory.

Ids: COCO images are their numeric id; VG crops are ``vg<image_id>_<x>_<y>_<w>_<h>``. One
``change_object`` entry lists its target in the gallery too: candidates are de-duplicated, so that
image is one candidate (the official position-based code would see a tie).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.types import ImageRecord, Query
from imagent.eval import metrics as M
from imagent.eval.datasets.base import (
    Benchmark,
    BenchmarkError,
    BenchmarkOptions,
    EvalItem,
    Predictions,
    read_json,
    unique,
)

TASKS = ("change_object", "focus_object", "change_attribute", "focus_attribute")
DILATION = 0.7


class GeneCISOptions(BenchmarkOptions):
    condition_template: str = "{condition}"
    keep_modal_gallery_only: bool = True


def image_key(entry: dict[str, Any]) -> str:
    if "val_image_id" in entry:
        return str(entry["val_image_id"])
    if "image_id" in entry:
        box = entry.get("instance_bbox") or entry.get("bbox")
        if box is None:
            raise BenchmarkError("GeneCIS attribute entry without instance_bbox")
        return "vg" + str(entry["image_id"]) + "_" + "_".join(f"{float(v):g}" for v in box)
    raise BenchmarkError(f"GeneCIS image entry without val_image_id or image_id: {entry}")


def dilated_box(box: Sequence[float], width: int, height: int) -> tuple[float, float, float, float]:
    """The official crop window: move out by 0.7 of the box size, grow to 1.7x, clip to the image."""
    x, y, w, h = (float(v) for v in box)
    left, top = max(0.0, x - DILATION * w), max(0.0, y - DILATION * h)
    right, bottom = min(float(width), left + (1 + DILATION) * w), min(float(height), top + (1 + DILATION) * h)
    return left, top, right, bottom


def write_crop(src: Path, box: Sequence[float], dst: Path) -> None:
    from PIL import Image

    from imagent.core.imageio import ALLOWED_FORMATS

    with Image.open(src, formats=ALLOWED_FORMATS) as im:  # no parser outside the allow-list (EPS -> Ghostscript)
        crop = im.crop(dilated_box(box, im.width, im.height))
        side = max(crop.width, crop.height)
        if crop.mode not in ("RGB", "L"):
            crop = crop.convert("RGB")
        square = Image.new(crop.mode, (side, side), 0 if crop.mode == "L" else (0, 0, 0))
        # Centred paste, as the official expand2square does.
        square.paste(crop, ((side - crop.width) // 2, (side - crop.height) // 2))
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(".tmp.png")
        square.save(tmp, format="PNG")
        tmp.replace(dst)


class GeneCIS(Benchmark):
    name = "genecis"
    splits = (*TASKS, "all")
    default_split = "all"
    Options = GeneCISOptions
    layout = (
        "object tasks: <images-root>/val2017/{id:012d}.jpg (COCO val2017); attribute tasks: "
        "<images-root>/VG_100K/<image_id>.jpg (Visual Genome, VG_100K_2 also searched)"
    )

    def tasks(self, split: str) -> list[str]:
        if split != "all":
            return [split]
        found = []
        for t in TASKS:
            try:
                self.find_file([f"{t}.json"], t)
                found.append(t)
            except BenchmarkError:
                continue
        if not found:
            raise BenchmarkError("genecis: no task file (change_object.json, ...) found; pass --annotations DIR")
        return found

    def _entries(self, task: str) -> list[dict[str, Any]]:
        data = read_json(self.find_file([f"{task}.json", f"genecis/{task}.json"], f"GeneCIS {task}"))
        if not isinstance(data, list):
            raise BenchmarkError(f"GeneCIS {task} must be a JSON list")
        if self.options.keep_modal_gallery_only and data:
            modal = Counter(len(e["gallery"]) for e in data).most_common(1)[0][0]
            data = [e for e in data if len(e["gallery"]) == modal]
        return data

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        items = []
        for task in self.tasks(split):
            for i, e in enumerate(self._entries(task)):
                target = image_key(e["target"])
                cands = unique([target] + [image_key(g) for g in e["gallery"]])
                q = Query(
                    text=self.options.condition_template.format(condition=e["condition"]),
                    id=f"{task}:{i}",
                    reference=ImageRecord(id=image_key(e["reference"]), path=""),
                    candidates=cands,
                    extra={"task": task, "condition": e["condition"]},
                )
                items.append(EvalItem(q, {"target": target, "task": task}, [target], q.id))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        split = self.check_split(split)
        root = self.root(images_root)
        rows: dict[str, dict[str, Any]] = {}
        for task in self.tasks(split):
            for e in self._entries(task):
                for entry in [e["reference"], e["target"], *e["gallery"]]:
                    key = image_key(entry)
                    if key in rows:
                        continue
                    if "val_image_id" in entry:
                        rows[key] = {"id": key, "file": str((root / "val2017" / f"{int(key):012d}.jpg").resolve())}
                    else:
                        src = root / "VG_100K" / f"{entry['image_id']}.jpg"
                        if not src.is_file() and (root / "VG_100K_2" / src.name).is_file():
                            src = root / "VG_100K_2" / src.name
                        if not src.is_file():
                            # Reported as missing under its Visual Genome path, the file the user must provide.
                            rows[key] = {"id": key, "file": str(src.resolve())}
                            continue
                        dst = Path(work_dir or root) / "genecis_crops" / f"{key}.png"
                        if not dst.is_file():
                            write_crop(src, entry.get("instance_bbox") or entry.get("bbox"), dst)
                        rows[key] = {"id": key, "file": str(dst.resolve())}
        return self.check_files(list(rows.values()), root, allow_missing)

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        out: dict[str, float] = {}
        per_task: dict[str, dict[str, float]] = {}
        for task in TASKS:
            sel = [it for it in items if it.has_truth and it.truth["task"] == task]
            if sel:
                per_task[task] = M.genecis_recall(
                    [predictions.get(it.id) for it in sel],
                    [it.truth["target"] for it in sel],
                    [it.query.candidates or [] for it in sel],
                )
        for task, d in per_task.items():
            out.update({f"{task}/{k}": v for k, v in d.items()})
        if len(per_task) > 1:
            for k in M.GENECIS_KS:
                out[f"average/recall@{k}"] = float(np.mean([d[f"recall@{k}"] for d in per_task.values()]))
        return out
