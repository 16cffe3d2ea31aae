"""The stamps mini benchmark: text-to-image and composed queries over the 627 Tux Paint stamps.

Queries: ``queries.json`` (shipped in ``imagent/eval/data/stamps_mini/``; ``--annotations`` replaces
it); the ``train`` split is ``train.json`` beside it (33 composed queries over stamps no evaluated query
uses, for OSCAR's golden library; ``--annotations DIR`` reads ``DIR/train.json``). Each is a list of
``{"pairid", "task": "tir" | "cir", "reference": id | null, "caption", "target_hard",
"target_soft": {id: weight}}``; ``target_soft`` lists every acceptable target (weight > 0).
Gallery: every row of ``<images-root>/captions.jsonl`` (``id, file, caption, category``); in caption
mode the captions stand in for the pixels. The 627 stamps (Tux Paint, GPL-2, ``COPYRIGHT`` beside them) ship
in the same folder, so without ``--images-root`` the shipped images are used.

Captions withheld (``--set stamps.captions=withheld``): the gallery is indexed without its captions and category
tags, and its files reach the index under neutral names (``img/0001.jpg`` ..., links in the index folder), so no
word about a stamp's content comes from the benchmark's text: a photo is known by what the pixel model saw (the
pixel description its model roles read, :mod:`imagent.index.describe`, with the ``effnet-lite0`` dual encoder or an
index built with the pixel pass). The report states the track the run's search used (decisions 9 and 11: Open as
soon as a role reads labels as text).

Metrics, overall and per task: Recall@1/5/10/50 (hit = any acceptable target in the top K; for CIR the
reference is removed from the ranking, as on CIRR), mAP@5/10/25/50 (CIRCO's AP over the acceptable
targets) and NDCG@10 (binary relevance of the acceptable targets; OSCAR's Sec. 4.5 metric).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

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
    read_jsonl,
    require_fields,
)

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "stamps_mini"
RECALL_KS = (1, 5, 10, 50)
MAP_KS = (5, 10, 25, 50)


class StampsOptions(BenchmarkOptions):
    captions: Literal["given", "withheld"] = Field(
        "given", description="withheld: index the stamps without their captions, category tags and file names "
        "(what the pixel model saw is all that describes them)")


class Stamps(Benchmark):
    name = "stamps"
    splits = ("all", "tir", "cir", "train")
    default_split = "all"
    Options = StampsOptions
    layout = "<images-root>/captions.jsonl (rows: id, file, caption, category) and the files it names"

    def __init__(self, annotations=None, images_root=None, **options):
        super().__init__(annotations, images_root, **options)
        if self.images_root is None and (DATA_DIR / "captions.jsonl").is_file():
            self.images_root = DATA_DIR  # the shipped stamps

    def split_from_file(self, path):
        return "all"

    def _file(self, split: str = "all") -> Path:
        name = "train.json" if split == "train" else "queries.json"
        if self.annotations is not None:
            return self.annotations if self.annotations.is_file() else self.annotations / name
        path = DATA_DIR / name
        if not path.is_file():
            raise BenchmarkError(f"stamps: the shipped queries file {path} is missing; pass --annotations FILE")
        return path

    def queries(self, split: str | None = None) -> list[EvalItem]:
        split = self.check_split(split)
        data = read_json(self._file(split))
        if not isinstance(data, list):
            raise BenchmarkError("stamps queries must be a JSON list")
        items = []
        for e in data:
            require_fields(e, ["pairid", "task", "caption", "target_hard"], "stamps query")
            task = e["task"]
            if task not in ("tir", "cir"):
                raise BenchmarkError(f"stamps query {e['pairid']}: task must be tir or cir, not {task!r}")
            if split in ("tir", "cir") and task != split:
                continue
            ref = e.get("reference")
            if task == "cir" and not ref:
                raise BenchmarkError(f"stamps query {e['pairid']}: a cir query needs a reference")
            targets = [str(k) for k, v in (e.get("target_soft") or {}).items() if float(v) > 0]
            if str(e["target_hard"]) not in targets:
                targets.insert(0, str(e["target_hard"]))
            q = Query(
                text=str(e["caption"]),
                id=str(e["pairid"]),
                reference=ImageRecord(id=str(ref), path="") if task == "cir" else None,
                exclude=[str(ref)] if task == "cir" else [],
                extra={"task": task},
            )
            items.append(EvalItem(q, {"task": task, "targets": targets, "target_hard": str(e["target_hard"])},
                                  targets, q.id))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        self.check_split(split)
        root = self.root(images_root)
        src = root / "captions.jsonl"
        if not src.is_file():
            raise MissingImagesError(f"stamps: {src} not found.\nExpected layout: {self.layout}")
        rows = []
        for r in read_jsonl(src):
            rows.append({
                "id": str(r["id"]),
                "file": str((root / r["file"]).resolve()),
                "caption": r.get("caption", ""),
                "category": r.get("category", ""),
                "tags": [r["category"]] if r.get("category") else [],
            })
        rows = self.check_files(rows, root, allow_missing)
        if self.options.captions == "withheld":
            rows = withheld(rows, Path(work_dir) if work_dir is not None else None)
        return rows

    def index_key(self) -> dict[str, Any]:
        return {"captions": "withheld"} if self.options.captions == "withheld" else {}

    def run_usage(self, method: Any, caption_missing: bool = False) -> dict[str, Any] | None:
        from imagent.eval.datasets.disbench import derive_track

        return derive_track(method, caption_missing)

    def describe_run(self, usage: dict[str, Any] | None = None) -> dict[str, str]:
        """The captions the gallery was indexed with, and the track the run's search used (decisions 9 and 11,
        derived from what it used as for DISBench)."""
        out = {"captions": "withheld (indexed without captions, category tags or file names)"
               if self.options.captions == "withheld" else "given (each stamp's caption stands in for its pixels)"}
        if usage is not None:
            out["track"] = str(usage.get("track", "Open"))
            reasons = list(usage.get("reasons") or [])
            out["track_reason"] = "; ".join(reasons) if reasons else (
                "the search space holds only image embeddings of a pixel-seeing encoder and no text derived from "
                "the photos was used" + "".join(f" ({n})" for n in usage.get("notes") or []))
        return out

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        out: dict[str, float] = {}
        groups = {"overall": [it for it in items if it.has_truth]}
        for task in ("tir", "cir"):
            groups[task] = [it for it in groups["overall"] if it.truth["task"] == task]
        for name, sel in groups.items():
            if not sel:
                continue
            rankings = [M.without(predictions.get(it.id), it.query.exclude) for it in sel]
            targets = [it.truth["targets"] for it in sel]
            scores = M.recall_any(rankings, targets, RECALL_KS)
            scores.update(M.circo_map(rankings, targets, MAP_KS))
            scores.update(M.mean_ndcg(rankings, targets, 10))  # OSCAR Sec. 4.5 reports NDCG@10 with R@10
            out.update({f"{name}/{k}": v for k, v in scores.items()})
        return out


def withheld(rows: list[dict[str, Any]], folder: Path | None) -> list[dict[str, Any]]:
    """``rows`` without their captions and category tags, each file reached through a link named by its position
    (``<folder>/img/0001.jpg``: a camera-style name whose words the index drops), so neither a caption nor a file or
    folder name tells the index what a stamp shows. ``folder``: where the links live (the index folder, stable for
    every run that shares the index); a link that cannot be made (no symlinks) is a copy."""
    import shutil

    if folder is None:
        raise BenchmarkError("stamps captions=withheld needs a folder for the neutral file names (the index folder)")
    links = folder / "img"
    links.mkdir(parents=True, exist_ok=True)
    out = []
    for n, row in enumerate(rows, 1):
        src = Path(row["file"])
        dst = links / f"{n:04d}{src.suffix.lower()}"
        if not dst.exists() or dst.resolve() != src.resolve():
            dst.unlink(missing_ok=True)
            try:
                dst.symlink_to(src)
            except OSError:
                shutil.copyfile(src, dst)
        out.append({"id": row["id"], "file": str(dst)})
    return out
