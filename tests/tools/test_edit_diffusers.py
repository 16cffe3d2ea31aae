"""The diffusers edit backend's plumbing with a stand-in ``diffusers`` module (no weights can be had
offline): what is loaded, with which arguments it is called, and what comes back. The real pipelines
are not exercised here."""

from __future__ import annotations

import sys
import types

import pytest

from imagent.core.types import ImageRecord
from imagent.tools import ToolError
from imagent.tools.edit_diffusers import DiffusersImageEditTool


class FakePipe:
    loaded: list[tuple[str, dict]] = []  # noqa: RUF012 (test spy)
    calls: list[dict] = []  # noqa: RUF012

    @classmethod
    def from_pretrained(cls, model, **kwargs):
        cls.loaded.append((model, kwargs))
        return cls()

    def to(self, device):
        self.device = device
        return self

    def set_progress_bar_config(self, **_):
        pass

    def __call__(self, **kwargs):
        from PIL import Image

        FakePipe.calls.append(kwargs)
        return types.SimpleNamespace(images=[Image.new("RGB", kwargs["image"].size, (0, 128, 255))])


@pytest.fixture
def fake_diffusers(monkeypatch):
    pytest.importorskip("torch")
    FakePipe.loaded.clear()
    FakePipe.calls.clear()
    module = types.ModuleType("diffusers")
    module.StableDiffusionInstructPix2PixPipeline = FakePipe
    module.AutoPipelineForImage2Image = FakePipe
    monkeypatch.setitem(sys.modules, "diffusers", module)
    return FakePipe


def test_instruct_pix2pix_plumbing(fake_diffusers, tmp_path, img):
    src = tmp_path / "ref.jpg"
    src.write_bytes(img.jpeg(size=(300, 100)))
    tool = DiffusersImageEditTool.from_options({"device": "cpu", "dtype": "float32"})
    out = tool.edit(ImageRecord(id="r", path=str(src), captions=["A blue bar."]), "make it orange")
    [(model, kwargs)] = fake_diffusers.loaded
    assert model == "timbrooks/instruct-pix2pix" and kwargs["local_files_only"] is True
    [call] = fake_diffusers.calls
    assert call["prompt"] == "make it orange" and call["num_inference_steps"] == 20
    assert call["guidance_scale"] == 7.5 and call["image_guidance_scale"] == 1.5
    assert call["image"].size == (512, 168)  # longest side 512, both sides multiples of 8
    assert out.mime == "image/png" and out.data.startswith(b"\x89PNG") and (out.width, out.height) == (512, 168)
    assert out.description == "A blue bar., edited: make it orange"
    tool.edit(ImageRecord(id="r", path=str(src)), "again")
    assert len(fake_diffusers.loaded) == 1  # loaded once


def test_sdxl_turbo_plumbing_and_errors(fake_diffusers, tmp_path, img):
    src = tmp_path / "ref.png"
    src.write_bytes(img.png(size=(64, 64)))
    tool = DiffusersImageEditTool.from_options({"pipeline": "sdxl-turbo", "device": "cpu", "dtype": "float32"})
    tool.edit(ImageRecord(id="r", path=str(src)), "make it a watercolour")
    [call] = fake_diffusers.calls
    assert call["num_inference_steps"] == 2 and call["strength"] == 0.5 and call["guidance_scale"] == 0.0
    assert fake_diffusers.loaded[0][0] == "stabilityai/sdxl-turbo"
    with pytest.raises(ToolError, match="not usable"):
        bad = tmp_path / "bad.png"
        bad.write_bytes(b"nope")
        tool.edit(ImageRecord(id="b", path=str(bad)), "x")
