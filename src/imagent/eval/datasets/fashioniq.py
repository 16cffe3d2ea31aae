"""FashionIQ (Wu et al., CVPR 2021): composed retrieval of dresses, shirts and tops/tees.

Files: ``cap.<category>.val.json`` (entries ``candidate, target, captions[2]``) and
``split.<category>.val.json`` (the category's gallery, a list of image names); the official layout puts
them under ``captions/`` and ``image_splits/``. Protocol: each category is ranked over its own gallery,
the reference is *not* masked, R@10/R@50 per category and their mean over categories.

Caption joining (option ``caption_join``), since each query has two relative captions:

- ``and`` (default): ``c1.strip('.? ') + " and " + c2.strip('.? ')``, the common zero-shot choice;
- ``clip4cir``: ``c1.strip('.?, ').capitalize() + " and " + c2.strip('.?, ')`` (CLIP4Cir / SEARLE);
- ``first`` / ``second``: one caption only;
- ``concat``: ``c1.strip('.? ') + ". " + c2.strip('.? ')``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

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
    unique,
)

CATEGORIES = ("dress", "shirt", "toptee")


class FashionIQOptions(BenchmarkOptions):
    caption_join: Literal["and", "clip4cir", "first", "second", "concat"] = Field(
        "and", description="how the two relative captions become one query text")
    annotation_split: str = "val"
    image_ext: str = "png"


def join_captions(c1: str, c2: str, mode: str) -> str:
    if mode == "and":
        return c1.strip(".? ") + " and " + c2.strip(".? ")
    if mode == "clip4cir":
        return c1.strip(".?, ").capitalize() + " and " + c2.strip(".?, ")
    if mode == "first":
        return c1
    if mode == "second":
        return c2
    if mode == "concat":
        return c1.strip(".? ") + ". " + c2.strip(".? ")
    raise BenchmarkError(f"unknown caption_join {mode!r}")


class FashionIQ(Benchmark):
    name = "fashioniq"
    splits = (*CATEGORIES, "all")
    default_split = "all"
    Options = FashionIQOptions
    layout = "<images-root>/images/<image name>.png (set --set fashioniq.image_ext=jpg for .jpg copies)"
    setup_notes = ("the public FashionIQ image copies lack some images (the original Amazon links are gone): "
                   "--allow-missing runs on the images found, and the report counts the queries left out")

    def categories(self, split: str) -> tuple[str, ...]:
        return CATEGORIES if split == "all" else (split,)

    def split_from_file(self, path):
        for c in CATEGORIES:
            if f".{c}." in path.name:
                return c
        return None

    def _caps(self, cat: str):
        s = self.options.annotation_split
        return self.find_file([f"cap.{cat}.{s}.json", f"captions/cap.{cat}.{s}.json"], f"FashionIQ {cat} captions")

    def _gallery(self, cat: str) -> list[str]:
        s = self.options.annotation_split
        path = self.find_file(
            [f"split.{cat}.{s}.json", f"image_splits/split.{cat}.{s}.json", f"../image_splits/split.{cat}.{s}.json"],
            f"FashionIQ {cat} image split",
        )
        return [str(x) for x in read_json(path)]

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        items = []
        for cat in self.categories(split):
            # Categories share one index under "all": each query ranks its own category's gallery.
            candidates = self._gallery(cat) if split == "all" else None
            data = read_json(self._caps(cat))
            for i, e in enumerate(data):
                require_fields(e, ["candidate", "captions"], "FashionIQ entry")
                caps = [str(c) for c in e["captions"]] + ["", ""]
                q = Query(
                    text=join_captions(caps[0], caps[1], self.options.caption_join),
                    id=f"{cat}:{i}",
                    reference=ImageRecord(id=str(e["candidate"]), path=""),
                    candidates=candidates,
                    extra={"category": cat, "captions": caps[:2]},
                )
                truth = {"target": str(e["target"]), "category": cat} if e.get("target") else {}
                items.append(EvalItem(query=q, truth=truth, positives=[str(e["target"])] if truth else [], group=q.id))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        split = self.check_split(split)
        root = self.root(images_root)
        names = unique(n for cat in self.categories(split) for n in self._gallery(cat))
        rows = [{"id": n, "file": str((root / "images" / f"{n}.{self.options.image_ext}").resolve())} for n in names]
        refs = {it.query.reference.id for it in self.queries(split) if it.query.reference} - set(names)
        extra = [root / "images" / f"{n}.{self.options.image_ext}" for n in sorted(refs)]
        rows += [{"id": p.stem, "file": str(p.resolve())} for p in extra if p.is_file()]
        return self.check_files(rows, root, allow_missing, also_needed=[p for p in extra if not p.is_file()])

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        per: dict[str, dict[str, float]] = {}
        for cat in CATEGORIES:
            sel = [it for it in items if it.has_truth and it.truth["category"] == cat]
            if sel:
                per[cat] = M.fashioniq_recall(
                    [self.scoring_ranking(predictions, it) for it in sel], [it.truth["target"] for it in sel]
                )
        out = {f"{c}/{k}": v for c, d in per.items() for k, v in d.items()}
        if per:
            out.update({f"average/{k}": v for k, v in M.fashioniq_average(per).items()})
        return out
