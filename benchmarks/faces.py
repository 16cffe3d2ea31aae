"""Faces at index time: photos and faces a second with 1 and 2 worker processes, HOG against CNN, and how pure
the groups are on the real face test photos.

Speed: a folder of camera-sized photos is built from the shipped test photos (``tests/data/faces``: Obama and
Biden, public domain) and scikit-image's (the astronaut; a cup, a rocket and a cat without a human face): each is
pasted at a random scale onto a 3000x2000 JPEG, so decoding, scaling and detecting cost what a phone's photo does.
The face scan of ``imagent index`` (:mod:`imagent.index.faces`: decode within the pixel budget, scale to
``faces.side``, detect, 5-point landmarks, 128-d descriptors) runs over it with ``--workers`` processes (dlib holds
the GIL, so workers are processes), once with HOG at the default ``faces.side`` (2048) and once with the CNN
detector at ``--cnn-side`` 1024 (where it finds faces of the same share of a photo as HOG at 2048; at 2048 it took
~30 s a photo here) on ``--cnn-photos`` photos. Model loading is not counted (workers are started and warmed first).

Purity: the shipped photos plus mirrored, half-size and cropped copies (and the astronaut) are indexed with the
default settings (faces found and grouped as ``imagent index`` does); each face is labelled by whose photo it is
from its file name; purity = faces of each group's majority person / all faces, completeness = faces in each
person's largest group / all faces (1.0 and 1.0: one group per person, nobody mixed).

    python benchmarks/faces.py                      # 24 photos, workers 1 and 2, HOG and CNN (6 photos)
    python benchmarks/faces.py --photos 48 --cnn-photos 0
    python benchmarks/faces.py --quality            # false faces per 100 stamps, recall on real faces

``--quality`` prints one ``faces_quality`` line per setting: the defaults (the confidence floor ``faces.min_score``
and the landmark check), dlib's own (floor 0, no check), and each of the two alone.

Last line: ``faces hog_photos_per_s_1=... hog_photos_per_s_2=... cnn_photos_per_s_1=... purity=...
completeness=... groups=... people=...``. Timings on a shared machine are noisy: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from PIL import Image

from imagent.core.config import FaceOptions
from imagent.core.types import ImageRecord
from imagent.index.parts import IndexParts

FACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "faces"
PEOPLE = {"obama.jpg": "obama", "obama2.jpg": "obama", "obama3.jpg": "obama", "biden.jpg": "biden"}


def _skimage(name: str) -> Image.Image:
    import skimage.data

    return Image.fromarray(getattr(skimage.data, name)())


def sources() -> list[tuple[str, Image.Image]]:
    out = [(name, Image.open(FACES / name).convert("RGB")) for name in PEOPLE]
    out += [(f"{n}.png", _skimage(n)) for n in ("astronaut", "coffee", "rocket", "chelsea")]
    return out


def camera_folder(dest: Path, photos: int, seed: int = 0) -> list[str]:
    """``photos`` 3000x2000 JPEGs, each one source photo pasted at a random scale and place."""
    rng = random.Random(seed)
    srcs = sources()
    paths = []
    for i in range(photos):
        _name, src = srcs[i % len(srcs)]
        canvas = Image.new("RGB", (3000, 2000), tuple(rng.randrange(60, 200) for _ in range(3)))
        scale = rng.uniform(0.6, 1.0) * min(3000 / src.width, 2000 / src.height)
        im = src.resize((max(1, int(src.width * scale)), max(1, int(src.height * scale))), Image.Resampling.LANCZOS)
        canvas.paste(im, (rng.randrange(0, 3001 - im.width), rng.randrange(0, 2001 - im.height)))
        path = dest / f"IMG_{i:04d}.jpg"
        canvas.save(path, quality=90)
        paths.append(str(path))
    return paths


def scan_speed(paths: list[str], detector: str, workers: int, side: int, warm: str) -> tuple[float, float, int]:
    """``(photos/s, faces/s, faces)`` of the index's face scan over ``paths``, models loaded beforehand."""
    stage = IndexParts.of(None, None, faces=FaceOptions(detector=detector, side=side, workers=workers)).stage("faces")

    def records(files: list[str]) -> list[ImageRecord]:
        return [ImageRecord(id=str(n), path=p) for n, p in enumerate(files)]

    try:
        stage.compute(records([warm] * workers * 2), {})  # start and warm the workers (model loading is not counted)
        t0 = time.perf_counter()
        results = stage.compute(records(paths), {})
        seconds = time.perf_counter() - t0
    finally:
        stage.close()
    faces = sum(len(r.faces) for r in results)
    return len(paths) / seconds, faces / seconds, faces


def purity(work: Path) -> dict[str, float]:
    """Index the real face photos and their copies with the defaults; purity and completeness of the groups."""
    from imagent.api import Workspace
    from imagent.core.config import Settings
    from imagent.index.gallery import Gallery
    from imagent.index.people import list_people

    folder = work / "people"
    folder.mkdir()
    for name, src in sources()[:5]:  # the four shipped photos and the astronaut
        src.save(folder / Path(name).with_suffix(".jpg"), quality=92)
        src.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(folder / f"mirrored_{Path(name).stem}.jpg", quality=92)
        src.resize((src.width // 2, src.height // 2), Image.Resampling.LANCZOS).save(
            folder / f"half_{Path(name).stem}.jpg", quality=92)
        w, h = src.size
        src.crop((w // 8, 0, w - w // 8, h * 3 // 5)).save(folder / f"crop_{Path(name).stem}.jpg", quality=92)
    ws = Workspace(Settings(index=work / "index", cache_dir=work / "cache", cache_calls=False))
    ws.index(folder)
    g = Gallery(work / "index")

    def person(photo: str) -> str:
        stem = Path(g.record(photo).path).stem
        for who in ("obama", "biden", "astronaut"):
            if who in stem:
                return who
        return "?"

    groups = [[person(f.photo) for f in p.faces] for p in list_people(g)]
    total = sum(len(x) for x in groups)
    majority = sum(max(x.count(w) for w in set(x)) for x in groups if x)
    people = {w for x in groups for w in x}
    largest = sum(max((x.count(w) for x in groups), default=0) for w in people)
    return {"purity": majority / max(total, 1), "completeness": largest / max(total, 1), "faces": total,
            "groups": len(groups), "people": len(people)}


SHARED_STAMPS = Path(__file__).resolve().parents[2] / "shared" / "data" / "stamps" / "images"
MINI_STAMPS = Path(__file__).resolve().parents[1] / "src" / "imagent" / "eval" / "data" / "stamps_mini" / "images"


def real_faces(work: Path) -> list[tuple[Path, int]]:
    """The real face photos and the faces each holds: Obama x3 and Biden (tests/data/faces), scikit-image's
    astronaut (one face; her mission patch is the classic false face) and matplotlib's Grace Hopper."""
    import matplotlib.cbook

    out = [(FACES / name, 1) for name in PEOPLE]
    _skimage("astronaut").save(work / "astronaut.png")
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        Image.open(f).convert("RGB").save(work / "grace_hopper.jpg")
    return [*out, (work / "astronaut.png", 1), (work / "grace_hopper.jpg", 1)]


def detection_quality(stamps: Path, work: Path, options: FaceOptions) -> dict[str, float]:
    """False faces per 100 photos on the stamps (clip art and photos of things: no human face) and recall on the
    real face photos (a face counts when as many faces are found as the photo holds, at most that many extra)."""
    from imagent.models.faces import FaceModel

    model = FaceModel(options)
    photos = sorted(p for p in stamps.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
    false = sum(len(model.scan_file(str(p)).faces) for p in photos)
    found = wanted = extra = 0
    for path, n in real_faces(work):
        got = len(model.scan_file(str(path)).faces)
        found, wanted, extra = found + min(got, n), wanted + n, extra + max(0, got - n)
    return {"stamps": len(photos), "false_faces": false, "false_per_100": 100 * false / max(len(photos), 1),
            "recall": found / max(wanted, 1), "real_extra": extra}


def quality_main(args: argparse.Namespace) -> int:
    stamps = Path(args.stamps) if args.stamps else (SHARED_STAMPS if SHARED_STAMPS.is_dir() else MINI_STAMPS)
    base = FaceOptions()
    settings = [("default", base), ("dlib_default", base.model_copy(update={"min_score": 0.0,
                                                                            "landmark_check": False})),
                ("score_only", base.model_copy(update={"landmark_check": False})),
                ("landmarks_only", base.model_copy(update={"min_score": 0.0}))]
    with tempfile.TemporaryDirectory() as d:
        for name, opts in settings:
            q = detection_quality(stamps, Path(d), opts)
            print(f"faces_quality setting={name} min_score={opts.min_score:g} landmark_check={opts.landmark_check} "
                  f"stamps={q['stamps']} false_faces={q['false_faces']} false_per_100={q['false_per_100']:.2f} "
                  f"recall={q['recall']:.3f} real_extra={q['real_extra']}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=int, default=24, help="camera-sized photos for the HOG runs")
    ap.add_argument("--cnn-photos", type=int, default=6, help="of those, how many the CNN runs scan (0: none)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--side", type=int, default=FaceOptions().side, help="faces.side for HOG")
    ap.add_argument("--cnn-side", type=int, default=1024, help="faces.side for the CNN (2048 takes ~30 s a photo)")
    ap.add_argument("--quality", action="store_true", help="false faces per 100 stamps and recall on real faces "
                    "for the default detection settings and without the confidence floor or landmark check")
    ap.add_argument("--stamps", default=None, help="the stamps' image folder (default: ../shared's, else the mini)")
    args = ap.parse_args(argv)
    if args.quality:
        return quality_main(args)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        (work / "photos").mkdir()
        paths = camera_folder(work / "photos", args.photos)
        warm = work / "warm.png"
        Image.new("RGB", (64, 64), "grey").save(warm)
        for detector, n, side in (("hog", args.photos, args.side), ("cnn", args.cnn_photos, args.cnn_side)):
            for workers in args.workers if n else []:
                photos_s, faces_s, faces = scan_speed(paths[:n], detector, workers, side, str(warm))
                print(f"scan detector={detector} face_side={side} workers={workers} photos={n} faces={faces} "
                      f"photos_per_s={photos_s:.2f} faces_per_s={faces_s:.2f}", flush=True)
                out[f"{detector}_photos_per_s_{workers}"] = photos_s
        quality = purity(work)
        print(f"groups faces={quality['faces']} groups={quality['groups']} people={quality['people']} "
              f"purity={quality['purity']:.3f} completeness={quality['completeness']:.3f}", flush=True)
    line = " ".join(f"{k}={v:.2f}" for k, v in out.items())
    print(f"faces {line} purity={quality['purity']:.3f} completeness={quality['completeness']:.3f} "
          f"groups={quality['groups']} people={quality['people']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
