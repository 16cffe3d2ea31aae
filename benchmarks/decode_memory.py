"""Decode memory (imagent/core/imageio.py, imagent/core/strips.py): the peak memory and the seconds of each
decode an index pass makes, on a large PNG that is small on disk (issue 47's hostile finding: a 99.8-megapixel PNG
of 291 KB took 2.5 GB and 40 s to index) and on a large JPEG.

Each decode runs in a fresh process, which prints how far its peak resident memory (``VmHWM``) rose over the
decode and how long it took. ``ratio`` is that peak over the picture's pixel bytes (width x height x 3). The calls:

- ``probe``: what ``imagent index`` checks first (every row decoded, none kept);
- ``pixels``: the pixel model's decode (both sides at least 224 px), ``faces``: the face scan's (2,048 px on the
  long side), ``phash``: the duplicate hash's (256 px), ``encoder``: an image encoder's (1,024 px);
- ``whole``: the whole picture as RGB (:func:`~imagent.core.imageio.open_image`);
- ``before``: the whole decode as imagent did it before issue 47, for the ratio in the same run (Pillow's decode,
  then a whole-image transpose and convert).

``--index`` also indexes a folder holding only the PNG with the default offline setup (pixel model, faces) in a
fresh process, beside a folder of one small photo (models loaded, nothing large decoded), and prints both peaks
and times; ``--compare-src DIR`` does the same with another checkout's ``src`` (e.g. the main branch before this
change), alternating with this one. Run ``python benchmarks/decode_memory.py [--megapixels 99.8] [--index]`` on a
quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = str(REPO / "src")

CALLS = {"probe": "imageio.probe_file(path)", "pixels": "imageio.open_image_scaled(path, 224)",
         "faces": "imageio.open_image_scaled(path, 2048, long_side=True)",
         "phash": "imageio.open_image_scaled(path, 256)", "encoder": "imageio.open_image_scaled(path, 1024)",
         "whole": "imageio.open_image(path)",
         "before": "from PIL import Image, ImageOps\nwith Image.open(path) as im:\n    im.load()\n"
                   "    ImageOps.exif_transpose(im).convert('RGB')"}

_RUN = """
import sys, time
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
from imagent.core import imageio
path = sys.argv[1]
base, start = peak(), time.perf_counter()
{call}
print(peak() - base, time.perf_counter() - start)
"""

_INDEX = """
import sys, time
from imagent.api import Workspace
start = time.perf_counter()
ws = Workspace.from_config(sets=["index=" + sys.argv[2]])
report = ws.index(sys.argv[1])
for line in open("/proc/self/status"):
    if line.startswith("VmHWM"):
        print(int(line.split()[1]) * 1024, time.perf_counter() - start, report.added, len(report.skipped))
"""


def _env(src: str = SRC) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def make_png(path: Path, megapixels: float) -> tuple[int, int]:
    from PIL import Image, ImageDraw

    w = int((megapixels * 1e6 * 1.002) ** 0.5)
    h = int(megapixels * 1e6 / w)
    im = Image.new("RGB", (w, h), (40, 120, 200))
    draw = ImageDraw.Draw(im)
    for k in range(0, w, 500):
        draw.rectangle((k, h // 4, k + 250, h // 2), fill=(200, 60 + k % 150, 30))
    draw.ellipse((w // 3, h // 3, w // 2, h // 2), fill=(250, 250, 0))
    im.save(path, "PNG", compress_level=9)
    return w, h


def make_jpeg(path: Path, megapixels: float) -> tuple[int, int]:
    import numpy as np
    from PIL import Image

    w = int((megapixels * 1e6 * 4 / 3) ** 0.5)
    h = int(megapixels * 1e6 / w)
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8)
    Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR).save(path, "JPEG", quality=90)
    return w, h


def measure(path: Path, call: str) -> tuple[int, float]:
    out = subprocess.run([sys.executable, "-c", _RUN.replace("{call}", CALLS[call]), str(path)],
                         capture_output=True, text=True, env=_env(), timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{call} failed: {out.stderr[-2000:]}")
    peak, seconds = out.stdout.split()
    return int(peak), float(seconds)


def index_run(folder: Path, index: Path, src: str = SRC) -> str:
    out = subprocess.run([sys.executable, "-c", _INDEX, str(folder), str(index)], capture_output=True, text=True,
                         env=_env(src), timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"index failed: {out.stderr[-2000:]}")
    peak, seconds, added, skipped = out.stdout.split()
    return f"peak_mb={int(peak) / 2**20:.0f} seconds={float(seconds):.1f} added={added} skipped={skipped}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megapixels", type=float, default=99.8, help="the PNG's size")
    ap.add_argument("--jpeg-megapixels", type=float, default=48.0)
    ap.add_argument("--index", action="store_true", help="also index a folder of the PNG (default offline setup)")
    ap.add_argument("--compare-src", help="another checkout's src folder to index with too (--index)")
    ap.add_argument("--skip-decode", action="store_true", help="only the --index part")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="imagent-decode-") as tmp:
        root = Path(tmp)
        (root / "big").mkdir()
        files = {"png": (root / "big" / "large.png", make_png(root / "big" / "large.png", args.megapixels)),
                 "jpeg": (root / "large.jpg", make_jpeg(root / "large.jpg", args.jpeg_megapixels))}
        for name, (path, (w, h)) in files.items():
            print(f"file {name} size={w}x{h} megapixels={w * h / 1e6:.1f} disk_kb={path.stat().st_size / 1024:.0f} "
                  f"pixel_mb={w * h * 3 / 2**20:.0f}")
            for call in (CALLS if not args.skip_decode else ()):
                peak, seconds = measure(path, call)
                print(f"decode file={name} call={call} peak_mb={peak / 2**20:.0f} ratio={peak / (w * h * 3):.2f} "
                      f"seconds={seconds:.2f}")
        if args.index:
            from PIL import Image

            (root / "small").mkdir()
            Image.new("RGB", (640, 480), (90, 140, 60)).save(root / "small" / "one.jpg", quality=90)
            start = time.perf_counter()
            for name, src in [("this", SRC)] + ([("compare", args.compare_src)] if args.compare_src else []):
                for folder in ("small", "big"):
                    result = index_run(root / folder, root / f"index-{name}-{folder}", src)
                    print(f"index src={name} folder={'large_png' if folder == 'big' else folder} {result}")
            print(f"index total_seconds={time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
