"""What every agent tool speaks: the image a tool returns, its provenance, the two protocols and
the errors a failed or rejected call raises.

A tool is small: ``ImageSearchTool.search(query, n) -> list[ToolImage]`` and
``ImageEditTool.edit(image, instruction) -> ToolImage``. Backends only produce images; the
cache-first wrapper (:mod:`imagent.tools.cached`) verifies them, persists them under the cache
directory, records the call in the trace and deduplicates concurrent identical calls.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from imagent.core.redact import redact
from imagent.core.text import clean_text
from imagent.core.types import ImageRecord
from imagent.models.base import ImagePart

# The longest title or description a tool result may carry into a prompt.
MAX_TITLE_CHARS = 200


class ToolError(RuntimeError):
    """A tool call failed (network, HTTP status, missing key, backend error). Never cached.

    The message is redacted on construction (:func:`imagent.core.redact.redact`): it may quote a service's
    reply or a request URL, and so an API key."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class ToolRejected(ToolError):
    """A tool produced something that is not an acceptable image (too large, not an image, no result)."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Provenance:
    """Where a tool image comes from: kept with the cached file and shown in traces."""

    backend: str  # registry name of the backend that produced it ("google", "exemplar", "openai", ...)
    source: str  # the image's URL, file path, or the model that generated it
    time: str = field(default_factory=utc_now)  # when it was produced (UTC, ISO 8601)
    page: str | None = None  # the web page the image was found on (search results)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Tool results enter here (web JSON may hold "\ud800"): no lone surrogate reaches a trace or cache.
        self.source = clean_text(self.source)
        self.page = clean_text(self.page) if self.page is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "source": self.source, "time": self.time, "page": self.page,
                "extra": dict(self.extra)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Provenance:
        return cls(backend=str(d.get("backend", "")), source=str(d.get("source", "")),
                   time=str(d.get("time", "")), page=d.get("page"), extra=dict(d.get("extra") or {}))


@dataclass
class ToolImage:
    """One image a tool returned: bytes or a path, a title/description, and its provenance.

    ``title`` and ``description`` are data from outside (a web page's title, an edit instruction):
    they are sanitised on the way into prompts and never treated as instructions."""

    provenance: Provenance
    data: bytes | None = None
    path: str | None = None
    title: str = ""
    description: str = ""
    mime: str = "image/jpeg"
    sha256: str = ""
    width: int | None = None
    height: int | None = None
    # Set by the cache-first wrapper: True when this result was served from the cache.
    cached: bool = False

    def __post_init__(self) -> None:
        # Tool results enter here: a web title with a lone surrogate must not crash a prompt, cache or trace.
        self.title = clean_text(self.title)
        self.description = clean_text(self.description)

    def read_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        if self.path:
            return Path(self.path).read_bytes()
        raise ToolRejected("tool image has neither bytes nor a path")

    def content_hash(self) -> str:
        if not self.sha256:
            self.sha256 = hashlib.sha256(self.read_bytes()).hexdigest()
        return self.sha256

    def text(self) -> str:
        """The words that stand for this image when pixels cannot be used (caption mode)."""
        return safe_text(self.title or self.description)

    def image_part(self) -> ImagePart:
        """This image as a chat message part; its sanitised text is the caption-mode surrogate."""
        return ImagePart(path=self.path, data=None if self.path else self.data, mime=self.mime,
                         description=self.text() or None)

    def record(self) -> ImageRecord:
        """An :class:`ImageRecord` for encoders (pixel encoders read ``path``; caption mode its caption)."""
        sha = self.content_hash() if (self.data is not None or self.path) else ""
        return ImageRecord(id=f"tool:{sha[:16]}", path=self.path or "", content_hash=sha,
                           captions=[self.text()] if self.text() else [], width=self.width, height=self.height)

    def summary(self) -> dict[str, Any]:
        """What traces show: no bytes."""
        return {"title": self.text(), "source": self.provenance.source, "page": self.provenance.page,
                "backend": self.provenance.backend, "path": self.path, "sha256": self.sha256,
                "cached": self.cached}

    def to_dict(self) -> dict[str, Any]:
        """JSON form kept in the tool cache (the bytes live in the file at ``path``)."""
        return {"path": self.path, "title": self.title, "description": self.description, "mime": self.mime,
                "sha256": self.sha256, "width": self.width, "height": self.height,
                "provenance": self.provenance.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolImage:
        return cls(provenance=Provenance.from_dict(d.get("provenance") or {}), path=d.get("path"),
                   title=str(d.get("title") or ""), description=str(d.get("description") or ""),
                   mime=str(d.get("mime") or "image/jpeg"), sha256=str(d.get("sha256") or ""),
                   width=d.get("width"), height=d.get("height"))


# What an edit tool accepts: a chat image part, a gallery record, or a previous tool image.
EditInput = ImagePart | ImageRecord | ToolImage


def input_bytes(image: EditInput) -> bytes:
    """The bytes of an edit tool's input image (raises :class:`ToolError` when there are none)."""
    if isinstance(image, ToolImage):
        return image.read_bytes()
    if isinstance(image, ImagePart) and image.data is not None:
        return image.data
    path = image.resolved_path() if isinstance(image, ImagePart) else image.path
    if not path:
        raise ToolError("the image to edit has no file")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read the image to edit ({path}): {exc.strerror or exc}") from None


def input_content_id(image: EditInput) -> str:
    """What identifies an edit input in a cache key: the sha256 of its content."""
    if isinstance(image, ImageRecord) and image.content_hash:
        return "sha256:" + image.content_hash
    if isinstance(image, ToolImage) and image.sha256:
        return "sha256:" + image.sha256
    return "sha256:" + hashlib.sha256(input_bytes(image)).hexdigest()


def input_text(image: EditInput) -> str:
    """The caption-mode surrogate of an edit input (used to describe the edited image in words)."""
    if isinstance(image, ToolImage):
        return image.text()
    if isinstance(image, ImagePart):
        return image.surrogate()
    return image.surrogate()


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe_text(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    """Outside text made safe to quote in a prompt: normalised, control characters and markup
    brackets removed (so a title cannot open or close our ``<search>``/``<edit>`` tags, a JSON object
    or an ``[Image ...]`` surrogate), double quotes made single, whitespace collapsed, length capped."""
    text = unicodedata.normalize("NFKC", str(text or ""))
    text = _CONTROL.sub(" ", text)
    text = re.sub(r"[<>{}`\[\]]", " ", text)
    text = text.replace('"', "'")  # a quoted title cannot end its own quotation
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


@runtime_checkable
class ImageSearchTool(Protocol):
    """Find images for a text query. ``n`` results at most, best first; may return fewer."""

    kind: ClassVar[str]  # "search"
    backend: ClassVar[str]

    def identity(self) -> str:
        """What makes two instances give different answers (endpoint, folder, model): part of cache keys."""
        ...

    def search(self, query: str, n: int = 1) -> list[ToolImage]: ...


@runtime_checkable
class ImageEditTool(Protocol):
    """Edit an image by a natural-language instruction; one image out."""

    kind: ClassVar[str]  # "edit"
    backend: ClassVar[str]

    def identity(self) -> str: ...

    def edit(self, image: EditInput, instruction: str) -> ToolImage: ...


__all__ = [
    "MAX_TITLE_CHARS",
    "EditInput",
    "ImageEditTool",
    "ImageSearchTool",
    "Provenance",
    "ToolError",
    "ToolImage",
    "ToolRejected",
    "input_bytes",
    "input_content_id",
    "input_text",
    "safe_text",
    "utc_now",
]
