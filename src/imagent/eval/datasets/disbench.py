"""DISBench (Deng et al., 2026): deep image search in personal photo collections (YFCC100M).

Layout: ``queries.jsonl`` (``query_id, user_id, query, answer[photo ids], event_type``
intra-event | inter-event), ``metadata/<user>.jsonl`` (``photo_id, metadata{taken_time "YYYY-MM-DD
HH:MM:SS", longitude, latitude, accuracy, address, capturedevice}``) and ``images/<user>/<photo_id>.jpg``.

Each user's photos form that user's gallery: one index holds every user's photos under the id
``<user>/<photo_id>`` and each query's ``candidates`` are its user's photos (the album an agent's tools
see). The task returns a *set*: a method's ``Result.answer_set`` when it gives one (PhotoCraft,
ImageSeeker), else the whole returned list (or its first ``answer_top_k`` ids when that option is
set); EM / F1 (:func:`imagent.eval.metrics.set_f1`, the official ``evaluate.py`` rules, empty sets
included) are averaged per query, overall and per event type.

Tracks (DISBench leaderboard; decision 9): **Standard** means the agent's search space holds only image
embeddings from an encoder that sees pixels and no text derived from the photos (captions, file-name words,
places) was used; anything else is **Open**. The track is *derived* from what the run used
(:func:`derive_track`: the method's search spaces and their encoders, captions in the index, a
``caption_missing`` captioner, a blind model shown photos as text), never from the presence of a file, and
the report says why. imagent reads an optional sidecar ``captions/<user>.jsonl`` (rows ``{"photo_id",
"caption"}``) beside ``metadata/``: the ``track`` option decides whether it is read (``auto``: when it exists;
``standard``: never; ``open``: yes) and what the run aims for; the reported track is the derived one (Open when
``open`` was asked for).

ImageSeeker, the benchmark's own baseline, is a reconstruction here (decision 8: its authors' code could not be
read); every DISBench report says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

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
    track: Literal["auto", "standard", "open"] = Field(
        "auto", description="the track the run aims for: standard ignores the captions sidecar; open reads it; "
        "auto reads it when captions/<user>.jsonl exists. The reported track is derived from what the run used")


def _float(x: Any) -> float | None:
    try:
        return None if x in (None, "") else float(x)
    except (TypeError, ValueError):
        return None


IMAGESEEKER_NOTE = ("ImageSeeker (the DISBench baseline) is a reconstruction: its authors' code could not be read; "
                    "it is PhotoCraft's tools, turn budget and answer format with all three memories off, plus "
                    "free-form context compression, and a prompt of our own words (docs/faithfulness.md, decision 8)")


def derive_track(method: Any, caption_missing: bool = False) -> dict[str, Any]:
    """The DISBench track of a run of ``method`` (a built :class:`~imagent.methods.base.Method` over the run's
    index), by decision 9: ``{"track": "Standard" | "Open", "reasons": [...], "spaces": {...}}``. Standard only
    when every space the method searches is an image space whose encoder sees pixels, no photo of the index
    has a caption (given or a captioner's), the index was not built with ``caption_missing``, and no role
    reads the photos it is shown as text (captions, derived file-name words) instead of pixels."""
    from imagent.index.gallery import SPACE_IMAGE, split_space

    gallery = method.ctx.gallery
    reasons: list[str] = []
    spaces = method.search_spaces()
    info = gallery.spaces()
    described: dict[str, str] = {}
    if spaces is None:
        reasons.append(f"the method {method.name!r} does not state which vector spaces it searches")
    elif not spaces:
        reasons.append(f"the method {method.name!r} searches no vector space of the index")
    for space in spaces or []:
        model_id = info[space].model_id if space in info else "?"
        try:
            sees = bool(getattr(method.ctx.encoder_for(space), "sees_pixels", False))
        except Exception:  # an extra encoder that is not configured: it cannot be shown to see pixels
            sees = False
        described[space] = model_id
        if split_space(space)[0] != SPACE_IMAGE:
            reasons.append(f"its search space {space!r} holds text embeddings ({model_id}) of captions or of words "
                           "derived from file names, dates and places")
        elif not sees or model_id.startswith("caption:"):
            reasons.append(f"its search space {space!r} is embedded by {model_id}, which reads captions or words "
                           "derived from file names, dates and places, not pixels")
    records = list(gallery.records())
    captioned = [r for r in records if r.has_caption]
    by_captioner = sum(1 for r in captioned if r.caption_source.startswith("captioner:"))
    derived = sum(1 for r in records if not r.has_caption and not r.description and r.derived_text)
    if captioned:
        reasons.append(f"{len(captioned)} of {len(records)} photos of the index have captions "
                       f"({by_captioner} written by a captioner, {len(captioned) - by_captioner} given)")
    if caption_missing:
        reasons.append("the index was built with caption_missing on (a captioner describes uncaptioned photos)")
    read_as_labels = sum(1 for r in records if not r.has_caption and r.description)  # pixel descriptions (decision 11)
    if captioned or derived or read_as_labels:
        for role in method.text_readers():
            reasons.append(f"the {role} role's model cannot see pixels: photos reach it as text (captions, what the "
                           f"pixel model saw as words (class labels: decision 11) for {read_as_labels} photos, or "
                           f"words derived from file names, dates and places for {derived} photos)")
    # Decision 11: class labels stored as text and searched (the album tools' metadata and label filter, or a
    # caption-mode image space whose captionless photos are ConSE vectors of their stored labels) are text derived
    # from the photos; ConSE vectors from the pixel model's own pass (effnet-lite0) are image embeddings.
    labelled = sum(1 for r in records if r.labels)
    notes: list[str] = []
    if labelled:
        offered = bool(getattr(gallery, "labels_as_text", True))
        agent = hasattr(method, "album")  # the album agents' tools: GetMetadata shows labels, FilterMetadata `label`
        if offered and agent:
            reasons.append(f"{labelled} photos carry class labels stored as text, which the album tools show "
                           "(GetMetadata) and filter by (label ~ ...); pixels.labels_as_text = false keeps them out")
        else:
            why = "kept out of its tools (pixels.labels_as_text = false)" if agent else "not searched by the method"
            notes.append(f"{labelled} photos carry class labels stored as text, {why}: the search space holds "
                         "only vectors computed from pixels")
    return {"track": "Open" if reasons else "Standard", "reasons": reasons, "spaces": described,
            "method": method.name, "notes": notes}


class DISBench(Benchmark):
    name = "disbench"
    splits = ("all", "intra", "inter")
    default_split = "all"
    Options = DISBenchOptions
    layout = "<images-root>/images/<user_id>/<photo_id>.jpg, with metadata/<user_id>.jsonl and queries.jsonl"

    def __init__(self, annotations=None, images_root=None, **options: Any) -> None:
        super().__init__(annotations, images_root, **options)
        if self.options.track == "auto":
            try:
                has_captions = bool(self._caption_files())
            except BenchmarkError:  # no queries.jsonl yet: the error comes where it is needed
                has_captions = False
            self.options.track = "open" if has_captions else "standard"

    def split_from_file(self, path):
        return "all"

    def _caption_files(self) -> dict[str, Path]:
        """``captions/<user>.jsonl`` sidecars by user (beside ``metadata/``)."""
        dirs = [self._root_dir() / "captions"] + ([self.images_root / "captions"] if self.images_root else [])
        for d in dirs:
            if d.is_dir():
                return {p.stem: p for p in sorted(d.glob("*.jsonl"))}
        return {}

    def _captions(self, user: str) -> dict[str, str]:
        """A user's sidecar captions by photo id; empty in the Standard track or without a sidecar."""
        if self.options.track != "open":
            return {}
        path = self._caption_files().get(user)
        if path is None:
            return {}
        out: dict[str, str] = {}
        for row in read_jsonl(path):
            require_fields(row, ["photo_id", "caption"], f"DISBench caption ({path})")
            if str(row["caption"]).strip():
                out[str(row["photo_id"])] = str(row["caption"]).strip()
        return out

    def run_usage(self, method: Any, caption_missing: bool = False) -> dict[str, Any] | None:
        return derive_track(method, caption_missing)

    def describe_run(self, usage: dict[str, Any] | None = None) -> dict[str, str]:
        """The track and why (from ``usage``: :func:`derive_track`'s record of what the run used; without it
        the track is unknown), the captions sidecar, and, for an ImageSeeker run, what ImageSeeker is here."""
        files = self._caption_files() if self.options.track == "open" else {}
        captions = (f"captions sidecar for {len(files)} user(s) ({', '.join(sorted(files))})" if files
                    else "no captions sidecar used")
        out: dict[str, str] = {}
        if usage is None:
            out["track"] = "unknown (the run did not record what its search used)"
        else:
            track, reasons = str(usage.get("track", "Open")), list(usage.get("reasons") or [])
            if self.options.track == "open" and track == "Standard":
                track, reasons = "Open", ["the run asked for the Open track (track=open)"]
            out["track"] = track
            out["track_reason"] = ("; ".join(reasons) if reasons else
                                   "the search space holds only image embeddings of a pixel-seeing encoder and no "
                                   "text derived from the photos was used"
                                   + "".join(f" ({n})" for n in usage.get("notes") or []))
            if self.options.track == "standard" and track == "Open":
                out["track_requested"] = "Standard (track=standard), but the run used what the Open track allows"
        out["captions"] = captions
        if usage is None or usage.get("method") == "imageseeker":  # only where the run is (or may be) ImageSeeker
            out["imageseeker"] = IMAGESEEKER_NOTE
        return out

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
            extra = {"user_id": user, "event_type": etype}
            if e.get("question"):  # one question asked in several wordings (imagent's generated albums)
                extra["question"] = str(e["question"])
            q = Query(text=str(e["query"]), id=str(e["query_id"]), candidates=cache.get(user), extra=extra)
            truth = {"answer": answers, "event_type": etype, "user": user} if "answer" in e else {}
            if truth and "question" in extra:
                truth["question"] = extra["question"]
            # a question's wordings are one group: --limit keeps or drops them together
            items.append(EvalItem(q, truth, answers, extra.get("question") or q.id))
        return items

    def gallery_manifest(self, split=None, images_root=None, work_dir=None, allow_missing=False):
        self.check_split(split)
        root = self.root(images_root)
        rows = []
        for user in self.users():
            captions = self._captions(user)
            for m in self._metadata(user):
                meta = m.get("metadata") or {}
                t = meta.get("taken_time")
                taken = None
                if t:
                    try:
                        taken = datetime.strptime(str(t), "%Y-%m-%d %H:%M:%S").isoformat()
                    except ValueError:
                        taken = None
                row: dict[str, Any] = {
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
                    "device": meta.get("capturedevice") or None,
                }
                if str(m["photo_id"]) in captions:
                    row["caption"] = captions[str(m["photo_id"])]
                rows.append(row)
        if not rows:
            raise BenchmarkError(f"disbench: no metadata/<user>.jsonl files found.\nExpected layout: {self.layout}")
        return self.check_files(rows, root, allow_missing)

    def answer_set(self, item: EvalItem, ranking: Sequence[str]) -> list[str]:
        user = item.query.extra.get("user_id", "")
        ids = [x if "/" in x else f"{user}/{x}" for x in ranking]
        k = self.options.answer_top_k
        return ids[:k] if k else ids

    def predicted_set(self, item: EvalItem, predictions: Predictions) -> list[str]:
        """The set scored for ``item``: the method's own answer set when it gave one, else the ranking's."""
        if item.id in predictions.sets:
            user = item.query.extra.get("user_id", "")
            return [x if "/" in x else f"{user}/{x}" for x in predictions.sets[item.id]]
        return self.answer_set(item, predictions.get(item.id))

    def outcome_score(self, item: EvalItem, ranking: Sequence[str], answer_set: Sequence[str] | None) -> float | None:
        """The episode's set F1 (0-1): what PhotoCraft's skill distillation compares with theta_conf."""
        if not item.has_truth:
            return None
        preds = Predictions({item.id: list(ranking)}, sets={item.id: list(answer_set)} if answer_set is not None
                            else {})
        return M.set_f1(self.predicted_set(item, preds), item.truth["answer"])

    def metrics(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, float]:
        scored = [it for it in items if it.has_truth]
        if not scored:
            return {}
        predicted = [self.predicted_set(it, predictions) for it in scored]
        out = M.disbench_scores(predicted, [it.truth["answer"] for it in scored],
                                [it.truth["event_type"] for it in scored])
        if any("question" in it.truth for it in scored):  # several wordings of one question: the worst and best
            out.update(M.wording_scores([M.set_f1(p, it.truth["answer"]) for p, it in zip(predicted, scored,
                                                                                         strict=True)],
                                        [str(it.truth.get("question") or it.id) for it in scored]))
        return out

    def set_scores(self, predictions: Predictions, items: Sequence[EvalItem]) -> dict[str, dict[str, float]]:
        groups: dict[str, list[tuple[float, float, float]]] = {"overall": []}
        for it in items:
            if not it.has_truth or (it.id not in predictions.rankings and it.id not in predictions.sets):
                continue
            pred, gold = self.predicted_set(it, predictions), it.truth["answer"]
            row = (*M.set_precision_recall(pred, gold), M.set_f1(pred, gold))
            groups["overall"].append(row)
            groups.setdefault(str(it.truth.get("event_type") or "other"), []).append(row)
        return {g: {"precision": 100 * sum(r[0] for r in rows) / len(rows),
                    "recall": 100 * sum(r[1] for r in rows) / len(rows),
                    "f1": 100 * sum(r[2] for r in rows) / len(rows), "queries": len(rows)}
                for g, rows in groups.items() if rows}

    def curve(self, predictions, items, ks):
        fixed = Predictions({it.id: self.answer_set(it, predictions.get(it.id)) for it in items})
        return super().curve(fixed, items, ks)

    def query_table(self, items: Sequence[EvalItem], records: dict[str, Any]) -> list[dict[str, Any]]:
        """Per query: the result's source (the agent's own answer, a fallback, an error), event type, EM, F1, set
        sizes, and what the search cost: agent turns (the method's own count), tool calls, tokens, seconds (the trace's
        per-step totals)."""
        from imagent.eval.behaviour import record_source
        from imagent.eval.records import predictions_from_results

        preds = predictions_from_results(records)
        rows = []
        for it in items:
            rec = records.get(it.id)
            if rec is None or not it.has_truth:
                continue
            steps = rec.steps
            pred = [] if rec.error else self.predicted_set(it, preds)
            gold = it.truth["answer"]
            rows.append({
                "qid": it.id,
                "source": record_source(rec),
                "event_type": it.truth.get("event_type", ""),
                "em": 100 * M.set_exact_match(pred, gold),
                "f1": 100 * M.set_f1(pred, gold),
                "predicted": len(set(pred)),
                "gold": len(set(gold)),
                # who chose the answer (decision 10): model, code or mixed, and the share equal to a code-made list
                "origin": rec.answer_origin or "",
                "code_share": (round(100 * float(rec.code_selected_share), 1)
                               if rec.code_selected_share is not None else None),
                "turns": int(rec.counts.get("turns", 0)),  # the agent's own count (Result.counts)
                "tool_calls": sum(int(s.get("tool_calls", 0) or 0) for s in steps),
                "tokens": sum(int(s.get("prompt_tokens", 0) or 0) + int(s.get("completion_tokens", 0) or 0)
                              for s in steps),
                "seconds": float(rec.seconds or 0.0),
                "error": rec.error,
            })
        return rows
