"""Image editing through an OpenAI-compatible ``POST {base_url}/images/edits`` (the paper's default
editor is OpenAI's ``gpt-image-1``).

The request is ``multipart/form-data`` with ``model``, ``prompt`` (the edit instruction), ``n=1``,
``image`` (the input re-encoded as PNG) and the optional ``size``/``quality``. The answer's
``data[0].b64_json`` is decoded (``data[0].url``, which older models return, is downloaded with the
same limits as search results) and verified as an image. The key comes from ``$OPENAI_API_KEY``
(configurable); it is sent only in the Authorization header and never written to traces.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import threading
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from imagent.core.redact import register_secret
from imagent.tools.base import EditInput, Provenance, ToolError, ToolImage, ToolRejected, input_bytes, input_text
from imagent.tools.download import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, fetch_image, verify_image_bytes


class OpenAIEditOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "gpt-image-1"
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    size: str | None = Field(None, description='e.g. "1024x1024"; the API default when unset')
    quality: str | None = Field(None, description='gpt-image-1: "low" | "medium" | "high"')
    timeout_s: float = Field(180.0, gt=0)
    max_bytes: int = Field(DEFAULT_MAX_BYTES * 3, ge=1)
    max_pixels: int = Field(DEFAULT_MAX_PIXELS, ge=1)
    max_input_side: int = Field(1536, ge=64, description="the input is downscaled to this longest side first")
    allow_private_hosts: bool = Field(False, description="when the API answers with a URL: allow private hosts")
    extra_fields: dict[str, str] = Field(default_factory=dict, description="more form fields sent as they are")


class OpenAIImageEditTool:
    kind: ClassVar[str] = "edit"
    backend: ClassVar[str] = "openai"
    Options = OpenAIEditOptions

    def __init__(self, options: OpenAIEditOptions | None = None) -> None:
        self.options = options or OpenAIEditOptions()
        self.base_url = self.options.base_url.rstrip("/")
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_options(cls, options: dict[str, Any], **_: Any) -> OpenAIImageEditTool:
        return cls(OpenAIEditOptions.model_validate(options))

    def identity(self) -> str:
        o = self.options
        return f"openai-edit:{self.base_url}:{o.model}:{o.size or ''}:{o.quality or ''}"

    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.options.timeout_s)
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _png(self, data: bytes) -> bytes:
        """The input as a verified PNG no larger than ``max_input_side`` (what every edits endpoint takes)."""
        from imagent.core.imageio import ImageLoadError, image_from_bytes

        try:
            im = image_from_bytes(data, self.options.max_pixels)
        except ImageLoadError as exc:
            raise ToolError(f"the image to edit is not usable: {exc}") from None
        side = self.options.max_input_side
        if max(im.size) > side:
            im.thumbnail((side, side))
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        return buf.getvalue()

    def edit(self, image: EditInput, instruction: str) -> ToolImage:
        o = self.options
        key = os.environ.get(o.api_key_env, "").strip()
        register_secret(key)  # masked in every error and trace from now on
        if not key:
            raise ToolError(f"the openai edit backend needs an API key in ${o.api_key_env}")
        png = self._png(input_bytes(image))
        fields: dict[str, str] = {"model": o.model, "prompt": instruction, "n": "1", **o.extra_fields}
        if o.size:
            fields["size"] = o.size
        if o.quality:
            fields["quality"] = o.quality
        try:
            resp = self.client.post(f"{self.base_url}/images/edits", data=fields,
                                    files={"image": ("image.png", png, "image/png")},
                                    headers={"Authorization": f"Bearer {key}"}, follow_redirects=False)
        except httpx.HTTPError as exc:
            raise ToolError(f"image edit request failed: {type(exc).__name__}: {exc}".replace(key, "***")) from None
        if resp.status_code != 200:
            raise ToolError(f"image edit answered HTTP {resp.status_code}: {resp.text[:300]}".replace(key, "***"))
        try:
            body = resp.json()
            item = body["data"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ToolError("image edit answer has no data[0]") from None
        if isinstance(item, dict) and item.get("b64_json"):
            try:
                data = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError):
                raise ToolRejected("image edit answer is not valid base64") from None
            checked = verify_image_bytes(data, o.max_bytes, o.max_pixels)
            source = f"{o.model}@{self.base_url}"
        elif isinstance(item, dict) and item.get("url"):
            checked = fetch_image(self.client, str(item["url"]), max_bytes=o.max_bytes, max_pixels=o.max_pixels,
                                  allow_private_hosts=o.allow_private_hosts)
            source = checked.url
        else:
            raise ToolError("image edit answer has neither b64_json nor url")
        revised = item.get("revised_prompt") if isinstance(item, dict) else None
        return ToolImage(
            provenance=Provenance(self.backend, source=source,
                                  extra={"model": o.model, **({"revised_prompt": revised} if revised else {})}),
            data=checked.data, mime=checked.mime, width=checked.width, height=checked.height,
            description=f"{input_text(image)}, edited: {instruction}",
        )


__all__ = ["OpenAIEditOptions", "OpenAIImageEditTool"]
