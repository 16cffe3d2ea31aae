"""Small protocols every backend implements, and the message types they exchange.

Methods depend on these protocols only; backends register in :mod:`imagent.models.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from imagent.core.redact import redact
from imagent.core.types import ImageRecord

# --------------------------------------------------------------------------- encoders


@runtime_checkable
class TextEmbedder(Protocol):
    """Text -> L2-normalised float32 vectors of shape (n, dim)."""

    model_id: str
    dim: int

    def encode_texts(self, texts: list[str]) -> np.ndarray: ...


@runtime_checkable
class DualEncoder(Protocol):
    """A CLIP-like encoder: texts and images into one space, L2-normalised float32 rows.

    ``encode_images`` takes records (not paths) so that a caption-mode encoder can use the captions.
    ``sees_pixels`` is False for the caption-mode encoder.
    """

    model_id: str
    dim: int
    sees_pixels: bool

    def encode_texts(self, texts: list[str]) -> np.ndarray: ...

    def encode_images(self, records: list[ImageRecord]) -> np.ndarray: ...


# --------------------------------------------------------------------------- chat


@dataclass
class ImagePart:
    """An image inside a chat message. ``record`` carries the surrogate text for caption mode."""

    path: str | None = None
    record: ImageRecord | None = None
    data: bytes | None = None  # raw bytes (e.g. a tool's visual proxy not on disk)
    mime: str = "image/jpeg"
    # Text that stands in for the pixels when no record is attached (e.g. a web result's title).
    description: str | None = None

    def surrogate(self) -> str:
        """The text a model that cannot see images receives instead of this image."""
        if self.record is not None:
            return self.record.surrogate()
        return self.description or "(an image with no description)"

    def resolved_path(self) -> str | None:
        if self.path:
            return self.path
        return self.record.path if self.record is not None else None

    def content_id(self) -> str:
        """What identifies this image in a cache key: its content hash when known."""
        if self.record is not None and self.record.content_hash:
            return "sha256:" + self.record.content_hash
        if self.data is not None:
            import hashlib

            return "sha256:" + hashlib.sha256(self.data).hexdigest()
        p = self.resolved_path()
        if p and Path(p).is_file():
            from imagent.core.hashing import file_sha256

            return "sha256:" + file_sha256(p)
        return f"path:{p}"


@dataclass
class Message:
    """One chat message: role plus an ordered list of parts (strings and images).

    Native tool calling (OpenAI protocol): an assistant message may carry ``tool_calls`` (dicts
    ``{"id", "name", "arguments"}``, arguments a JSON string as the model wrote it), and a ``tool`` message
    answers one of them by ``tool_call_id`` with text only (images go in a following user message)."""

    role: str  # "system" | "user" | "assistant" | "tool"
    parts: list[str | ImagePart]
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", [text])

    @classmethod
    def user(cls, *parts: str | ImagePart) -> Message:
        return cls("user", list(parts))

    @classmethod
    def assistant(cls, text: str, tool_calls: list[dict[str, Any]] | None = None) -> Message:
        return cls("assistant", [text] if text else [], tool_calls=tool_calls or None)

    @classmethod
    def tool(cls, tool_call_id: str, text: str) -> Message:
        return cls("tool", [text], tool_call_id=tool_call_id)

    @property
    def text(self) -> str:
        return "".join(p for p in self.parts if isinstance(p, str))

    def has_images(self) -> bool:
        return any(isinstance(p, ImagePart) for p in self.parts)


@dataclass
class TokenLogprob:
    token: str
    logprob: float


@dataclass
class ChatResponse:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # For each generated position, the top alternatives (first position is what yes/no scoring reads).
    top_logprobs: list[list[TokenLogprob]] = field(default_factory=list)
    finish_reason: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    # Native tool calls the backend returned: ``{"id", "name", "arguments"}`` (arguments: a JSON string).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "top_logprobs": [[[t.token, t.logprob] for t in pos] for pos in self.top_logprobs],
            "finish_reason": self.finish_reason,
        }
        if self.tool_calls:  # only when present, so entries cached before tool calls existed stay identical
            d["tool_calls"] = [dict(c) for c in self.tool_calls]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChatResponse:
        return cls(
            text=d.get("text", ""),
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            completion_tokens=int(d.get("completion_tokens", 0)),
            top_logprobs=[[TokenLogprob(t, float(lp)) for t, lp in pos] for pos in d.get("top_logprobs", [])],
            finish_reason=d.get("finish_reason", ""),
            tool_calls=[dict(c) for c in d.get("tool_calls") or []],
        )


@dataclass
class ChatParams:
    """Generation parameters. ``json_schema`` asks for JSON output (constrained where the backend can)."""

    max_tokens: int = 512
    temperature: float | None = None  # None: the model entry's configured temperature
    json_schema: dict[str, Any] | None = None
    top_logprobs: int = 0  # > 0: return that many alternatives per generated token
    stop: list[str] = field(default_factory=list)
    repeat_penalty: float | None = None
    seed: int | None = None
    # OpenAI ``tools`` offered for native tool calling, and ``tool_choice`` ("auto" | "none" | "required").
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None
    # False: ask for at most one tool call per reply (OpenAI ``parallel_tool_calls``); None: not sent.
    parallel_tool_calls: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        # Left out when unused, so the call-cache keys of calls without tools stay what they were.
        for k in ("tools", "tool_choice", "parallel_tool_calls"):
            if d[k] is None:
                del d[k]
        return d


class ChatError(RuntimeError):
    """A chat call failed after the backend's retries (network, HTTP status, timeout).

    The message is redacted (:func:`imagent.core.redact.redact`) on construction: it often quotes a
    server's error body, and servers echo request headers, API key included."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


@runtime_checkable
class ChatModel(Protocol):
    """A chat backend. ``sees_images``: whether image parts reach the model as pixels.

    A backend may also set ``cache_tag``: a string naming whatever else changes its answers (server
    URL, request options); the call cache keys on it beside backend and model id. ``supports_tools``
    (default False when absent): the backend sends ``ChatParams.tools`` and returns native
    ``ChatResponse.tool_calls``; agents use the ``<tool_call>`` text protocol otherwise."""

    backend: str
    model_id: str
    sees_images: bool

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse: ...
