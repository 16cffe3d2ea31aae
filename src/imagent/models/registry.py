"""Backend registry: config entries -> backend instances.

Built-in backends are named here by import path and imported only when used, so the base install
does not need torch, transformers, open_clip or llama-cpp-python until a config asks for them.
Third-party backends register with :func:`register`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from imagent.core.config import ChatModelConfig, EncoderConfig

# kind -> backend name -> "module:factory" (or a callable after registration)
_BACKENDS: dict[str, dict[str, str | Callable[..., Any]]] = {
    "chat": {
        "openai": "imagent.models.chat_openai:OpenAIChatModel.from_config",
        "llama.cpp": "imagent.models.chat_llamacpp:LlamaCppChatModel.from_config",
        "scripted": "imagent.models.chat_scripted:ScriptedChatModel.from_config",
    },
    "dual": {
        "hf": "imagent.models.encoders:HFDualEncoder.from_config",
        "open_clip": "imagent.models.encoders:OpenCLIPDualEncoder.from_config",
        "caption": "imagent.models.encoders:CaptionDualEncoder.from_config",
    },
    "text": {
        "sentence-transformers": "imagent.models.encoders:SentenceTransformerEmbedder.from_config",
    },
}


class BackendError(ValueError):
    pass


def register(kind: str, name: str, factory: Callable[..., Any]) -> None:
    """Register a backend factory: ``factory(config, **kw) -> instance``."""
    _BACKENDS.setdefault(kind, {})[name] = factory


def backends(kind: str) -> list[str]:
    return sorted(_BACKENDS.get(kind, {}))


def _resolve(kind: str, name: str) -> Callable[..., Any]:
    entry = _BACKENDS.get(kind, {}).get(name)
    if entry is None:
        raise BackendError(f"unknown {kind} backend {name!r}; known: {', '.join(backends(kind))}")
    if callable(entry):
        return entry
    module, _, attr = entry.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def build_chat_model(config: ChatModelConfig, **kw: Any) -> Any:
    return _resolve("chat", config.backend)(config, **kw)


def build_text_embedder(config: EncoderConfig, **kw: Any) -> Any:
    return _resolve("text", config.backend)(config, **kw)


def build_dual_encoder(config: EncoderConfig, **kw: Any) -> Any:
    """``kw`` may carry ``text_embedder`` (the caption-mode encoder reuses it)."""
    return _resolve("dual", config.backend)(config, **kw)


def model_id_for(kind: str, config: EncoderConfig, text_config: EncoderConfig | None = None) -> str | None:
    """The ``model_id`` the backend will report once loaded, from its config alone; ``None`` when only
    loading can tell (a registered third-party backend).

    Lets ``imagent index`` compare an index's encoders with the configured ones without loading a model
    (a load costs seconds; a run that finds nothing new should not pay it). Must mirror the classes in
    :mod:`imagent.models.encoders`; a wrong answer is still caught when vectors are written."""
    if kind == "text" and config.backend == "sentence-transformers":
        return config.model
    if kind == "dual":
        if config.backend == "caption":
            # Caption mode encodes with its own model, else the text embedder's (Workspace shares it).
            return f"caption:{config.model or (text_config.model if text_config else '')}"
        if config.backend == "hf":
            return config.model
        if config.backend == "open_clip":
            return f"{config.model}:{config.pretrained}" if config.pretrained else config.model
    return None


def sees_pixels_for(kind: str, config: EncoderConfig) -> bool | None:
    """Whether the encoder this config builds sees pixels, from the config alone (None: only loading tells).
    A text embedder never does; of the dual backends, only caption mode does not."""
    if kind == "text":
        return False
    return {"caption": False, "hf": True, "open_clip": True}.get(config.backend)
