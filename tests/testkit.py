"""Test helpers several test files share (``from testkit import ...``; the root conftest puts this folder on
``sys.path``). Fixtures live in the conftest files; plain functions and stand-in classes live here.

Stand-ins are for tests of mechanics (indexing, storage, files, processes) where what a vector means does not
matter: every real-model test uses the real models of ../shared/models/README.md."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent


def hash_vectors(texts: list[str], dim: int) -> np.ndarray:
    """Unit vectors seeded by each text's sha256: the same text always gets the same vector."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for n, t in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(dim)
        out[n] = v / np.linalg.norm(v)
    return out


class TinyEmbedder:
    """A deterministic stand-in text encoder (:func:`hash_vectors`) for tests about indexing mechanics, where a
    model load would only cost time."""

    def __init__(self, model_id: str = "tiny-8", dim: int = 8) -> None:
        self.model_id, self.dim = model_id, dim

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return hash_vectors(texts, self.dim)


class CaptionModeEncoder(TinyEmbedder):
    """:class:`TinyEmbedder` as a dual encoder in caption mode: an image is its caption."""

    sees_pixels = False

    def encode_images(self, records: list[Any]) -> np.ndarray:
        return self.encode_texts([r.caption for r in records])


def eval_app() -> Any:
    """A Typer app with ``imagent eval`` (and ``score``, ``pack``, ``replay``) registered, as the CLI has it."""
    import typer

    from imagent.cli import eval_cmd

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test app"""

    app.add_typer(eval_cmd.app)  # as imagent.cli.main adds it
    return app


def run_in_threads(work: Callable[[], Any], n: int) -> list[BaseException]:
    """Run ``work`` in ``n`` threads at once; the exceptions they raised (none: ``[]``)."""
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler], poll_interval: float = 0.5) -> Iterator[str]:
    """A real HTTP server with ``handler`` on a free 127.0.0.1 port, in a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caption_index(root: Path, captions: dict[str, str], dual: Any, text: Any) -> Any:
    """A gallery index at ``root`` of records with only ids and captions (their files do not exist)."""
    from imagent.core.types import ImageRecord
    from imagent.index.embedding import gallery_from_records

    records = [ImageRecord(id=i, path=f"/nonexistent/{i}.jpg", captions=[c]) for i, c in captions.items()]
    return gallery_from_records(str(root), records, dual, text)


def chromium_path() -> str:
    """The Chromium the browser tests drive (``IMAGENT_CHROMIUM``, else the one on the PATH)."""
    path = os.environ.get("IMAGENT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium); CI installs it")
    return path


def wait_until(check: Callable[[], Any], timeout_s: float = 20.0) -> None:
    """Poll ``check()`` from Python: the page's CSP forbids the eval that ``page.wait_for_function`` uses."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting for the page"
        time.sleep(0.1)


# ----------------------------------------------------------------------------- two people, two trips

KYOTO = (35.0116, 135.7681)
LISBON = (38.7223, -9.1393)
FACES = TESTS / "data" / "faces"
# file -> (source, city, time): Barack (Obama's photos) twice in Kyoto and once in Lisbon, Joe (Biden's photo, and it
# mirrored) once in each, and photos without a face (scikit-image's rocket, astronaut, coffee).
TRIPS: dict[str, tuple[str, tuple[float, float], datetime]] = {
    "IMG_0001.jpg": ("obama.jpg", KYOTO, datetime(2023, 4, 10, 9, 30)),
    "IMG_0002.jpg": ("obama2.jpg", KYOTO, datetime(2023, 4, 11, 15, 0)),
    "IMG_0003.jpg": ("biden_mirrored", KYOTO, datetime(2023, 4, 11, 16, 0)),
    "IMG_0004.jpg": ("rocket", KYOTO, datetime(2023, 4, 12, 10, 0)),
    "IMG_0005.jpg": ("astronaut", KYOTO, datetime(2023, 4, 12, 11, 0)),
    "IMG_0006.jpg": ("obama3.jpg", LISBON, datetime(2024, 7, 1, 10, 0)),
    "IMG_0007.jpg": ("biden.jpg", LISBON, datetime(2024, 7, 2, 12, 0)),
    "IMG_0008.jpg": ("coffee", LISBON, datetime(2024, 7, 3, 8, 45)),
}


def trips_folder(dest: Path, geo_photo: Callable[..., Path]) -> Path:
    """:data:`TRIPS` written to ``dest`` as camera JPEGs with EXIF date and GPS (``geo_photo``: the root conftest's
    fixture of that name)."""
    import skimage.data
    from PIL import Image

    src = dest.parent / "sources"
    src.mkdir(parents=True, exist_ok=True)
    for name in ("rocket", "astronaut", "coffee"):
        Image.fromarray(getattr(skimage.data, name)()).save(src / f"{name}.png")
    with Image.open(FACES / "biden.jpg") as im:
        im.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(src / "biden_mirrored.png")
    for file, (source, gps, taken) in TRIPS.items():
        geo_photo(FACES / source if source.endswith(".jpg") else src / f"{source}.png", dest / file, taken, gps)
    return dest


def name_trip_people(gallery: Any) -> dict[str, int]:
    """Names the face group of IMG_0001 "Barack" and that of IMG_0007 "Joe"; returns name -> group id."""
    from imagent.index.people import list_people, name_person

    out = {}
    for p in list_people(gallery):
        files = {Path(gallery.record(i).path).name for i in p.photos}
        for name, file in (("Barack", "IMG_0001.jpg"), ("Joe", "IMG_0007.jpg")):
            if file in files:
                name_person(gallery, p.id, name)
                out[name] = p.id
    return out


# --------------------------------------------------------------------------- text in photos (OCR)

SHARED = Path(os.environ.get("IMAGENT_SHARED", TESTS.parents[1] / "shared"))
SIGNS = {"sign_sintra.jpg": ["SINTRA"], "sign_cafe.jpg": ["Cafe Sol"], "sign_platform.jpg": ["Platform 9"]}


def sign_photo(path: Path, lines: list[str], background: str = "chelsea", size: tuple[int, int] = (1024, 768),
               angle: float = 6.0) -> Path:
    """A photo of a sign: ``lines`` in dark letters on a pale plate (a font matplotlib ships), turned ``angle``
    degrees, pasted on one of scikit-image's photos (``background``: chelsea, coffee, astronaut, rocket...), as a
    JPEG."""
    import matplotlib
    import skimage.data as sd
    from PIL import Image, ImageDraw, ImageFont, ImageOps

    font = ImageFont.truetype(str(Path(matplotlib.__file__).parent / "mpl-data/fonts/ttf/DejaVuSans-Bold.ttf"), 64)
    width = max(int(font.getlength(line)) for line in lines) + 60
    plate = Image.new("RGBA", (width, 90 * len(lines) + 40), (235, 230, 210, 255))
    d = ImageDraw.Draw(plate)
    for n, line in enumerate(lines):
        d.text((30, 20 + 90 * n), line, font=font, fill=(30, 30, 80, 255))
    plate = plate.rotate(angle, expand=True, resample=Image.Resampling.BICUBIC)
    photo = ImageOps.fit(Image.fromarray(getattr(sd, background)()).convert("RGB"), size)
    photo.paste(plate, (size[0] // 5, size[1] // 3), plate)
    path.parent.mkdir(parents=True, exist_ok=True)
    photo.save(path, "JPEG", quality=88)
    return path


def signs_among_stamps(folder: Path, stamps: int = 50) -> dict[str, Path]:
    """``folder`` with the first ``stamps`` shipped stamps (../shared/data/stamps, as they are) and three photos of
    rendered signs (:data:`SIGNS`: "SINTRA", "Cafe Sol", "Platform 9", each on another background); returns file
    name -> path of the signs."""
    images = sorted((SHARED / "data" / "stamps" / "images").glob("*.jpg"))[:stamps]
    assert len(images) == stamps, f"test data missing: {SHARED / 'data' / 'stamps'}"
    folder.mkdir(parents=True, exist_ok=True)
    for p in images:
        shutil.copyfile(p, folder / p.name)
    return {name: sign_photo(folder / name, lines, background)
            for (name, lines), background in zip(SIGNS.items(), ("chelsea", "coffee", "rocket"), strict=True)}
