"""Index building: the builder against a bare batched encode, and (``--ray``) every per-photo stage locally against
on a local Ray cluster of the same core count.

Default: a manifest of N rows (the stamps' images and captions, each row its own id, captions varied so no two
texts are equal) is indexed in caption mode with the offline MiniLM by ``build_index`` (file checks, image
probes and EXIF, fingerprints, SQLite transactions, the vector snapshot); the bound is
``SentenceTransformer.encode`` of the same N captions in batches of the builder's batch size. Both run in
this process with the model already loaded; the best of ``--repeats`` runs of each is kept.

    python benchmarks/index_throughput.py                 # N = 2,000
    python benchmarks/index_throughput.py --rows 5000 --images-root ../shared/data/stamps

Last line: ``index N=<rows> build_s=<s> encode_s=<s> ratio=<x>`` (goal: ratio <= 1.15).

``--ray``: a folder of ``--photos`` camera-sized photos (3000x2000 JPEGs, the shipped face photos and scikit-image's
pasted at random scales, as ``benchmarks/faces.py`` makes them) goes through each stage of the composition
(``imagent.index.parts``: the pixel model, the encoders' embedding in caption mode, faces) twice, with every model
already loaded: in this process (the local runner: what ``imagent index`` runs) and on a local Ray cluster with as
many CPUs as this machine (``--actors`` actors, a CPU each, ``--chunk`` photos a task: what ``imagent index --ray``
runs), each stage's photos a second measured by wall clock over the same photos; ray/local is the time ratio (below 1:
Ray is faster at the same cores). The two results are compared per stage (labels and visual features; every space's
vectors; face boxes and descriptors). Then both whole builds run (``Workspace.index``, as ``imagent index`` and
``imagent index --ray``: model loads, the database, the face grouping) and their indexes are compared: records and
labels, vectors, faces, and the people grouped from them (``equal=True`` per stage). The projection for 100,000 photos
multiplies the measured per-photo times (this machine; with more machines Ray's stage time divides by their number
only as far as the cluster scales: a projection, not a measurement).

    python benchmarks/index_throughput.py --ray                 # 16 photos, 2 actors, 2 photos a task
    python benchmarks/index_throughput.py --ray --photos 48

Last line: ``index_ray photos=<n> cores=<c> pixels=<local>/<ray> embed=... faces=... equal=<all equal>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import numpy as np

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.core.types import ImageRecord
from imagent.index.builder import build_index
from imagent.index.parts import IndexParts

ADJECTIVES = ["red", "blue", "green", "tiny", "huge", "old", "new", "shiny", "striped", "wooden"]


def write_manifest(path: Path, images_root: Path, rows: int) -> list[str]:
    base = [json.loads(line) for line in (images_root / "captions.jsonl").read_text().splitlines() if line.strip()]
    texts = []
    with path.open("w") as f:
        for i in range(rows):
            r = base[i % len(base)]
            text = f"{ADJECTIVES[(i // len(base)) % len(ADJECTIVES)]} {r['caption']} number {i}"
            texts.append(text)
            f.write(json.dumps({"id": f"row{i}", "file": str(images_root / r["file"]), "caption": text}) + "\n")
    return texts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--images-root", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data" / "stamps")
    ap.add_argument("--ray", action="store_true", help="every stage locally and on a local Ray cluster")
    ap.add_argument("--photos", type=int, default=16, help="--ray: camera-sized photos")
    ap.add_argument("--actors", type=int, default=2, help="--ray: actors (one CPU each)")
    ap.add_argument("--chunk", type=int, default=2, help="--ray: photos a Ray task computes")
    args = ap.parse_args(argv)
    if args.ray:
        return ray_main(args.photos, args.actors, args.chunk)
    ws = Workspace(Settings())
    text, dual = ws.text_embedder, ws.dual_encoder
    batch = ws.settings.indexing.batch_size
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        texts = write_manifest(tmp / "m.jsonl", args.images_root, args.rows)
        text.encode_texts(texts[:batch])  # warm the model
        encode_s, build_s = [], []
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            for i in range(0, len(texts), batch):
                text.encode_texts(texts[i : i + batch])
            encode_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            report = build_index(tmp / "m.jsonl", tmp / f"index{rep}", IndexParts.of(dual, text), ws.settings.indexing)
            build_s.append(time.perf_counter() - t0)
            if report.added != args.rows:
                raise SystemExit(f"indexed {report.added} of {args.rows} rows: {report.skipped[:3]}")
    b, e = min(build_s), min(encode_s)
    print(f"{args.rows} rows, batch {batch}: build {b:.2f} s ({args.rows / b:.0f} rows/s), bare encode {e:.2f} s "
          f"({args.rows / e:.0f} rows/s)")
    print(f"index N={args.rows} build_s={b:.2f} encode_s={e:.2f} ratio={b / e:.2f}")
    return 0


# --------------------------------------------------------------------------- --ray: every stage, local and on Ray


def warm(runner: Any, stage: Any, records: list[ImageRecord], actors: int) -> None:
    """Load the stage's model where it computes (on each actor: one photo a task, one task an actor)."""
    list(runner.map([stage], [[records[n % len(records)]] for n in range(actors)]))


def stage_pass(runner: Any, stage: Any, records: list[ImageRecord], chunk: int) -> tuple[float, list[Any]]:
    """Wall seconds of ``stage`` over ``records`` in ``chunk``-photo tasks, and its results in photo order."""
    t0 = time.perf_counter()
    out: list[Any] = []
    for _chunk, got in runner.map([stage], [records[i : i + chunk] for i in range(0, len(records), chunk)]):
        out.extend(got[stage.name])
    return time.perf_counter() - t0, out


def same_rows(name: str, a: list[Any], b: list[Any]) -> bool:
    """Whether two runs of a stage gave the same results (vectors to 1e-5)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if name == "pixels" and (x.labels != y.labels or not np.allclose(x.feature, y.feature, atol=1e-5)):
            return False
        if name == "embed" and (x.vectors.keys() != y.vectors.keys() or not all(
                np.allclose(x.vectors[k], y.vectors[k], atol=1e-5) for k in x.vectors)):
            return False
        if name == "faces" and (len(x.faces) != len(y.faces) or any(
                f.box != g.box or not np.allclose(f.descriptor, g.descriptor, atol=1e-5)
                for f, g in zip(x.faces, y.faces, strict=True))):
            return False
    return True


def same_builds(a: Path, b: Path) -> dict[str, bool]:
    """Two indexes compared per stage: labels and visual vectors (pixels), the encoders' spaces (embed), face boxes and
    descriptors (faces), the people grouped from them (people); records too."""
    import sqlite3

    from imagent.index.gallery import Gallery

    ga, gb = Gallery(a), Gallery(b)
    records = ga.ids == gb.ids and [r.to_dict() for r in ga.records()] == [r.to_dict() for r in gb.records()]

    def space(name: str) -> bool:
        return ga.has_space(name) and gb.has_space(name) and np.allclose(ga.vectors(name), gb.vectors(name), atol=1e-5)

    def faces(root: Path) -> tuple[list[Any], set[frozenset[int]]]:
        with sqlite3.connect(root / "faces.sqlite") as c:
            rows = c.execute("SELECT id, photo, x0, y0, x1, y1, descriptor, person FROM faces ORDER BY id").fetchall()
        people: dict[int, set[int]] = {}
        for row in rows:
            people.setdefault(row[7], set()).add(row[0])
        return rows, {frozenset(v) for v in people.values()}

    (fa, pa), (fb, pb) = faces(a), faces(b)
    same_faces = len(fa) == len(fb) and all(
        x[:6] == y[:6] and np.allclose(np.frombuffer(x[6], np.float32), np.frombuffer(y[6], np.float32), atol=1e-5)
        for x, y in zip(fa, fb, strict=True))
    embed = [s for s in ga.spaces() if s != "visual"]
    return {"records": bool(records), "pixels": bool(records) and space("visual"),
            "embed": all(space(s) for s in embed), "faces": same_faces and len(fa) > 0, "people": pa == pb}


def ray_main(photos: int, actors: int, chunk: int) -> int:
    import os

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from faces import camera_folder
    from imagent.index.distributed import ray_cluster
    from imagent.index.gallery import Gallery
    from imagent.index.parts import RayPlan, compose_index

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        folder = tmp / "photos"
        folder.mkdir()
        camera_folder(folder, photos)
        ws = Workspace(Settings(index=tmp / "index", cache_dir=tmp / "cache", cache_calls=False))
        t0 = time.perf_counter()
        with ray_cluster("local", num_cpus=cores):
            start_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            local = ws.index(folder, tmp / "local")
            local_s = time.perf_counter() - t1
            t1 = time.perf_counter()
            on_ray = ws.index(folder, tmp / "ray", ray="auto", ray_actors=actors, ray_chunk=chunk)
            ray_s = time.perf_counter() - t1
            built = same_builds(tmp / "local", tmp / "ray")
            # The stages again over the records as the builder made them (derived text, no labels yet), each timed
            # locally and on Ray one after the other, so a change in the machine's load meets both.
            stored = [ImageRecord.from_dict({**r.to_dict(), "labels": []}) for r in Gallery(tmp / "local").records()]
            recs = {"local": [ImageRecord.from_dict(r.to_dict()) for r in stored],
                    "ray": [ImageRecord.from_dict(r.to_dict()) for r in stored]}
            runs = {"local": compose_index(ws.settings, ws.parts.models),
                    "ray": compose_index(ws.settings, ray=RayPlan(actors, chunk, min(1.0, cores / actors)))}
            rates: dict[str, dict[str, float]] = {}
            rows: dict[str, dict[str, list[Any]]] = {"local": {}, "ray": {}}
            try:
                for n, stage in enumerate(runs["local"].stages):  # in order: the embedding reads the labels
                    for mode, parts in runs.items():
                        mine = parts.stages[n]
                        warm(parts.runner, mine, recs[mode], actors if mode == "ray" else 1)
                        seconds, out = stage_pass(parts.runner, mine, recs[mode],
                                                  chunk if mode == "ray" else len(stored))
                        rates.setdefault(stage.name, {})[mode] = seconds
                        rows[mode][stage.name] = out
            finally:
                for parts in runs.values():
                    parts.close()
    print(f"{photos} camera-sized photos, {cores} cores; Ray: {actors} actors, {chunk} photos a task "
          f"(cluster start {start_s:.1f} s, not counted); models loaded before timing")
    print(f"{'stage':8} {'local photos/s':>15} {'ray photos/s':>13} {'ray/local time':>15}  same results")
    line = []
    per_photo = {"local": 0.0, "ray": 0.0}
    for name, t in rates.items():
        same = same_rows(name, rows["local"][name], rows["ray"][name])
        print(f"{name:8} {photos / t['local']:15.2f} {photos / t['ray']:13.2f} {t['ray'] / t['local']:15.2f}  "
              f"equal={same and built.get(name, True)}")
        line.append(f"{name}={photos / t['local']:.2f}/{photos / t['ray']:.2f}")
        for mode in per_photo:
            per_photo[mode] += t[mode] / photos
    print(f"people   grouped in the driver after the pass                          equal={built['people']}")
    print(f"whole builds (Workspace.index, model loads and the database included): local {local_s:.1f} s, "
          f"Ray {ray_s:.1f} s ({on_ray.added} photos each, {local.faces.people} people); records equal="
          f"{built['records']}")
    for mode in ("local", "ray"):
        print(f"projection, 100,000 photos on this machine ({mode}): {100_000 * per_photo[mode] / 3600:.1f} h "
              f"(the stages' measured time a photo x 100,000)")
    print(f"projection, 100,000 photos on N machines like this one with Ray: {100_000 * per_photo['ray'] / 3600:.1f} h "
          "/ N while the cluster scales (not measured here)")
    everything = all(built.values()) and all(same_rows(n, rows["local"][n], rows["ray"][n]) for n in rates)
    print(f"index_ray photos={photos} cores={cores} {' '.join(line)} equal={everything}")
    return 0 if everything else 1


if __name__ == "__main__":
    raise SystemExit(main())
