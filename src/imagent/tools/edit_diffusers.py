"""Local image editing with diffusers, for users with a GPU (``pip install 'imagent[edit]'``).

Two pipelines, both as the TaCIR paper uses or ablates them:

- ``instruct-pix2pix`` (default, ``timbrooks/instruct-pix2pix``): instruction-following editing; the
  edit instruction is the prompt, ``image_guidance_scale`` keeps it close to the input;
- ``sdxl-turbo`` (``stabilityai/sdxl-turbo``, the paper's fast alternative, ablation 7): image-to-image
  with the instruction as prompt, 1-4 steps, no classifier-free guidance (``guidance_scale=0``);
  ``steps * strength`` must be at least 1.

torch and diffusers are imported when the first edit runs; the pipeline loads once and is shared.
Calls are serialised by a lock (a pipeline is not thread-safe). ``model`` may be a hub id or a local
directory; ``local_files_only`` (default true) keeps it from reaching a model hub at run time.

Not exercised by the test suite (no weights can be had offline); the code follows the diffusers
documentation for ``StableDiffusionInstructPix2PixPipeline`` and ``AutoPipelineForImage2Image``.
"""

from __future__ import annotations

import io
import threading
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from imagent.tools.base import EditInput, Provenance, ToolError, ToolImage, input_bytes, input_text

_DEFAULT_MODELS = {"instruct-pix2pix": "timbrooks/instruct-pix2pix", "sdxl-turbo": "stabilityai/sdxl-turbo"}


class DiffusersEditOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pipeline: Literal["instruct-pix2pix", "sdxl-turbo"] = "instruct-pix2pix"
    model: str | None = Field(None, description="hub id or local path; default per pipeline")
    device: str = "cuda"
    dtype: Literal["float16", "bfloat16", "float32"] = "float16"
    steps: int | None = Field(None, ge=1, description="default: 20 (instruct-pix2pix), 2 (sdxl-turbo)")
    guidance_scale: float | None = Field(None, ge=0, description="default: 7.5 (instruct-pix2pix), 0 (sdxl-turbo)")
    image_guidance_scale: float = Field(1.5, ge=0, description="instruct-pix2pix only")
    strength: float = Field(0.5, gt=0, le=1, description="sdxl-turbo only")
    resolution: int = Field(512, ge=64, description="the input is resized so its longest side is this (multiple of 8)")
    seed: int = 0
    local_files_only: bool = True


class DiffusersImageEditTool:
    kind: ClassVar[str] = "edit"
    backend: ClassVar[str] = "diffusers"
    Options = DiffusersEditOptions

    def __init__(self, options: DiffusersEditOptions | None = None) -> None:
        self.options = options or DiffusersEditOptions()
        self.model = self.options.model or _DEFAULT_MODELS[self.options.pipeline]
        self._pipe: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_options(cls, options: dict[str, Any], **_: Any) -> DiffusersImageEditTool:
        return cls(DiffusersEditOptions.model_validate(options))

    def identity(self) -> str:
        o = self.options
        return (f"diffusers:{o.pipeline}:{self.model}:steps={self._steps()}:g={self._guidance()}:"
                f"ig={o.image_guidance_scale}:s={o.strength}:r={o.resolution}:seed={o.seed}")

    def _steps(self) -> int:
        return self.options.steps or (20 if self.options.pipeline == "instruct-pix2pix" else 2)

    def _guidance(self) -> float:
        if self.options.guidance_scale is not None:
            return self.options.guidance_scale
        return 7.5 if self.options.pipeline == "instruct-pix2pix" else 0.0

    def _load(self) -> Any:
        if self._pipe is not None:
            return self._pipe
        try:
            import torch
            from diffusers import AutoPipelineForImage2Image, StableDiffusionInstructPix2PixPipeline
        except ImportError as exc:
            raise ToolError("the diffusers edit backend needs torch and diffusers "
                            "(pip install 'imagent[edit]')") from exc
        o = self.options
        dtype = getattr(torch, o.dtype)
        cls = StableDiffusionInstructPix2PixPipeline if o.pipeline == "instruct-pix2pix" else AutoPipelineForImage2Image
        kwargs: dict[str, Any] = {"torch_dtype": dtype, "local_files_only": o.local_files_only}
        if o.pipeline == "instruct-pix2pix":
            kwargs["safety_checker"] = None  # the editor's output is only ever embedded, never shown as is
        try:
            pipe = cls.from_pretrained(self.model, **kwargs)
            pipe = pipe.to(o.device)
        except Exception as exc:
            raise ToolError(f"cannot load diffusers model {self.model!r}: {type(exc).__name__}: {exc}") from exc
        pipe.set_progress_bar_config(disable=True)
        self._pipe = pipe
        return pipe

    def edit(self, image: EditInput, instruction: str) -> ToolImage:
        from imagent.core.imageio import ImageLoadError, image_from_bytes

        try:
            src = image_from_bytes(input_bytes(image))
        except ImageLoadError as exc:
            raise ToolError(f"the image to edit is not usable: {exc}") from None
        o = self.options
        # Latent diffusion needs sides that are multiples of 8; keep the aspect ratio.
        scale = o.resolution / max(src.size)
        w, h = (max(8, round(d * scale / 8) * 8) for d in src.size)
        src = src.resize((w, h))
        with self._lock:
            pipe = self._load()
            import torch

            generator = torch.Generator(device="cpu").manual_seed(o.seed)
            try:
                if o.pipeline == "instruct-pix2pix":
                    result = pipe(prompt=instruction, image=src, num_inference_steps=self._steps(),
                                  guidance_scale=self._guidance(), image_guidance_scale=o.image_guidance_scale,
                                  generator=generator)
                else:
                    result = pipe(prompt=instruction, image=src, num_inference_steps=self._steps(),
                                  strength=o.strength, guidance_scale=self._guidance(), generator=generator)
            except Exception as exc:
                raise ToolError(f"diffusers edit failed: {type(exc).__name__}: {exc}") from exc
        out = result.images[0]
        buf = io.BytesIO()
        out.save(buf, format="PNG")
        return ToolImage(provenance=Provenance(self.backend, source=self.model, extra={"pipeline": o.pipeline}),
                         data=buf.getvalue(), mime="image/png", width=out.width, height=out.height,
                         description=f"{input_text(image)}, edited: {instruction}")


__all__ = ["DiffusersEditOptions", "DiffusersImageEditTool"]
