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

    python benchmarks/faces.py --grouping 10000,50000   # grouping at scale: seconds, peak memory, purity

``--grouping`` groups synthetic descriptors (no model, no photos) in the real face store in a temporary folder, as
the face pass of ``imagent index`` does (:func:`imagent.index.people.group_faces`, ``--group-batch`` faces at a
time, default ``faces.group_batch``): the faces are stored (load), grouped (a first index: every face new), then 1%
more faces of the same people are added and grouped (the next index), each step in a fresh Python process so that
its peak RSS (``ru_maxrss``: Python, numpy, dlib and SQLite included) is that step's own.

The descriptors are clustered like a family's library: ``--identities`` (300) people, 128-d centres about 0.9 apart
(two people's dlib descriptors lie 0.7-1.0 apart), one in ten with a look-alike 0.5-0.7 from another (siblings:
their faces come closer than the threshold now and then), face counts per person falling as 1/rank (a few people
in most photos), each face its person's centre plus noise (one person's faces 0.3-0.5 apart, within dlib's 0.6),
and ``--strangers`` (15%) of the faces people seen once. Purity = faces of each group's majority person / all
faces; completeness = faces in each person's largest group / all faces (a person split over batches lowers it).

Each size prints ``grouping faces=N batch=B load_s=... seconds=... peak_mb=... purity=... completeness=...
groups=... people=... batches=... longest_write_s=... add_faces=... add_seconds=... add_peak_mb=...``
(``longest_write_s``: the longest write transaction, what a rename may have waited).

``--quality`` prints one ``faces_quality`` line per setting: the defaults (the confidence floor ``faces.min_score``
and the landmark check), dlib's own (floor 0, no check), and each of the two alone.

Last line: ``faces hog_photos_per_s_1=... hog_photos_per_s_2=... cnn_photos_per_s_1=... purity=...
completeness=... groups=... people=...``. Timings on a shared machine are noisy: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import numpy as np
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


def synthetic_faces(n: int, identities: int, strangers: float, seed: int) -> tuple[list[str], np.ndarray]:
    """``n`` synthetic descriptors clustered like a library's faces (see the module doc) and each one's person
    (``"p<k>"``, a stranger ``"s<k>"``)."""
    rng = np.random.default_rng(seed)
    make = np.random.default_rng(7)
    centres = make.normal(0, 0.9 / 16, (identities, 128))  # ~0.9 apart (sqrt(2 * 128) * s)
    for k in range(1, identities, 10):  # one person in ten has a look-alike (a sibling): 0.5-0.7 from another
        step = make.normal(0, 1, 128)
        centres[k] = centres[k - 1] + step / np.linalg.norm(step) * make.uniform(0.5, 0.7)
    spread = np.random.default_rng(8).uniform(0.019, 0.031, identities)  # one person's faces 0.3-0.5 apart
    weights = 1.0 / np.arange(1, identities + 1)
    who = rng.choice(identities, size=n, p=weights / weights.sum())
    vecs = centres[who] + rng.normal(0, 1, (n, 128)) * spread[who, None]
    names = [f"p{k}" for k in who]
    for i in np.flatnonzero(rng.random(n) < strangers).tolist():
        vecs[i] = rng.normal(0, 0.9 / 16, 128)
        names[i] = f"s{seed}-{i}"
    return names, vecs.astype(np.float32)


def _store_faces(store: Any, names: list[str], vecs: np.ndarray, start: int) -> None:
    """One photo per face, stored as the face pass stores a scan (:func:`put_scan`), 2,000 photos a transaction."""
    from types import SimpleNamespace

    from imagent.index.face_store import put_scan

    for at in range(0, len(names), 2000):
        with store.write(create=True) as c:
            for k in range(at, min(at + 2000, len(names))):
                face = SimpleNamespace(box=(0.4, 0.3, 0.6, 0.6), score=1.5, size=120, descriptor=vecs[k])
                put_scan(c, f"{names[k]}/{start + k}", "synthetic", "synthetic",
                         SimpleNamespace(faces=[face], found=1, width=4000, height=3000, note=""))


def _group_quality(store: Any) -> dict[str, float]:
    from collections import Counter

    with store.read() as c:
        pairs = Counter((int(p), photo.split("/")[0]) for p, photo in c.execute("SELECT person, photo FROM faces"))
    total = sum(pairs.values())
    majority: dict[int, int] = {}
    largest: dict[str, int] = {}
    for (group, person), n in pairs.items():
        majority[group] = max(majority.get(group, 0), n)
        largest[person] = max(largest.get(person, 0), n)
    return {"purity": sum(majority.values()) / total, "completeness": sum(largest.values()) / total,
            "groups": len(majority), "people": len(largest)}


def grouping_child(args: argparse.Namespace) -> int:
    """One step of one size in this (fresh) process, on the face store in ``--dir``: ``load`` stores the synthetic
    faces, ``group`` groups them (a first index), ``add`` stores 1% more and groups them (the next index). One JSON
    line: the step's seconds and this process's peak RSS."""
    from imagent.index.face_store import FaceStore
    from imagent.index.people import group_faces

    n, step = args.grouping_child, args.step
    store = FaceStore(args.dir)
    extra = max(1, n // 100)
    t0 = time.perf_counter()
    if step != "group":
        start, count = (0, n) if step == "load" else (n, extra)
        for at in range(0, count, 10000):  # made and stored 10,000 at a time
            names, vecs = synthetic_faces(min(10000, count - at), args.identities, args.strangers, seed=start + at)
            _store_faces(store, names, vecs, start + at)
    out: dict[str, Any] = {}
    if step != "load":
        done = group_faces(store, FaceOptions().threshold, args.group_batch)
        out = {"batches": done.batches, "longest_write_s": done.longest_write_s, "joined": done.joined,
               "new_groups": done.new_people, **(_group_quality(store) if step == "group" else {"faces": extra})}
    out |= {"seconds": time.perf_counter() - t0, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(out))
    return 0


def grouping_main(args: argparse.Namespace) -> int:
    """Each size's load, grouping and addition each in a fresh process (its peak RSS is that step's own); one line
    per size."""
    for n in [int(x) for x in args.grouping.split(",") if x.strip()]:
        r: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            for step in ("load", "group", "add"):
                cmd = [sys.executable, __file__, "--grouping-child", str(n), "--step", step, "--dir", d,
                       "--group-batch", str(args.group_batch), "--identities", str(args.identities),
                       "--strangers", str(args.strangers)]
                done = subprocess.run(cmd, check=True, capture_output=True, text=True)
                r[step] = json.loads(done.stdout.strip().splitlines()[-1])
            load, group, add = r["load"], r["group"], r["add"]
        print(f"grouping faces={n} batch={args.group_batch} load_s={load['seconds']:.1f} "
              f"seconds={group['seconds']:.1f} peak_mb={group['peak_mb']:.0f} purity={group['purity']:.4f} "
              f"completeness={group['completeness']:.4f} groups={group['groups']} people={group['people']} "
              f"batches={group['batches']} longest_write_s={max(group['longest_write_s'], add['longest_write_s']):.3f} "
              f"add_faces={add['faces']} add_seconds={add['seconds']:.2f} add_peak_mb={add['peak_mb']:.0f} "
              f"add_joined={add['joined']} add_new_groups={add['new_groups']} load_peak_mb={load['peak_mb']:.0f} "
              f"total_s={time.perf_counter() - t0:.1f}", flush=True)
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
    ap.add_argument("--grouping", default=None, help="grouping at these numbers of synthetic faces (10000,50000)")
    ap.add_argument("--group-batch", type=int, default=FaceOptions().group_batch, help="faces.group_batch")
    ap.add_argument("--identities", type=int, default=300, help="people in the synthetic faces")
    ap.add_argument("--strangers", type=float, default=0.15, help="share of synthetic faces of people seen once")
    ap.add_argument("--grouping-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--step", choices=("load", "group", "add"), default="load", help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.grouping_child:
        return grouping_child(args)
    if args.grouping:
        return grouping_main(args)
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
