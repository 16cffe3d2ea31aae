"""Backend registry: config entries -> backend instances.

Built-in backends are named here by import path (one :class:`~imagent.core.registry.Registry` per kind:
chat, dual, text, ocr) and imported only when used, so the base install does not need torch, transformers,
open_clip or llama-cpp-python until a config asks for them. Third-party backends register with
:func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from imagent.core.config import ChatModelConfig, EncoderConfig, OcrOptions
from imagent.core.registry import Registry


class BackendError(ValueError):
    pass


# kind -> backend name -> "module:factory" (or a callable after registration)
_BUILT_IN: dict[str, dict[str, str]] = {
    "chat": {
        "openai": "imagent.models.chat_openai:OpenAIChatModel.from_config",
        "llama.cpp": "imagent.models.chat_llamacpp:LlamaCppChatModel.from_config",
        "scripted": "imagent.models.chat_scripted:ScriptedChatModel.from_config",
    },
    "dual": {
        "hf": "imagent.models.encoders:HFDualEncoder.from_config",
        "open_clip": "imagent.models.encoders:OpenCLIPDualEncoder.from_config",
        "caption": "imagent.models.encoders:CaptionDualEncoder.from_config",
        "effnet-lite0": "imagent.models.pixels:PixelDualEncoder.from_config",
        "effnet-lite1": "imagent.models.pixels:PixelDualEncoder.from_config",
        "effnet-lite2": "imagent.models.pixels:PixelDualEncoder.from_config",
    },
    "text": {
        "sentence-transformers": "imagent.models.encoders:SentenceTransformerEmbedder.from_config",
    },
    # Text in photos (``[ocr]``): a TextReader (imagent.models.ocr) from OcrOptions.
    "ocr": {
        "rapidocr": "imagent.models.ocr:RapidOCRReader.from_config",
    },
}
_BACKENDS: dict[str, Registry[Callable[..., Any]]] = {
    kind: Registry(f"{kind} backend", entries, error=BackendError) for kind, entries in _BUILT_IN.items()
}


def _registry(kind: str) -> Registry[Callable[..., Any]]:
    if kind not in _BACKENDS:
        _BACKENDS[kind] = Registry(f"{kind} backend", error=BackendError)
    return _BACKENDS[kind]


def register(kind: str, name: str, factory: Callable[..., Any]) -> None:
    """Register a backend factory: ``factory(config, **kw) -> instance``."""
    _registry(kind).register(name, factory)


def backends(kind: str) -> list[str]:
    return _registry(kind).names()


def _resolve(kind: str, name: str) -> Callable[..., Any]:
    return _registry(kind).lookup(name)


def build_chat_model(config: ChatModelConfig, **kw: Any) -> Any:
    return _resolve("chat", config.backend)(config, **kw)


def build_text_embedder(config: EncoderConfig, **kw: Any) -> Any:
    return _resolve("text", config.backend)(config, **kw)


def build_dual_encoder(config: EncoderConfig, **kw: Any) -> Any:
    """``kw`` may carry ``text_embedder`` (the caption-mode encoder reuses it)."""
    return _resolve("dual", config.backend)(config, **kw)


def build_text_reader(options: OcrOptions, **kw: Any) -> Any:
    """The OCR model ``options.model`` names (a :class:`~imagent.models.ocr.TextReader`); ``kw`` may carry
    ``max_pixels`` and ``max_bytes`` (the index's decode limits)."""
    return _resolve("ocr", options.model)(options, **kw)


def text_reader_version(options: OcrOptions) -> str:
    """``options.model``'s version for ``options`` (what its output depends on: files, settings), without loading
    it: its class's ``version_for``."""
    factory = _resolve("ocr", options.model)
    cls = getattr(factory, "__self__", factory)
    return str(cls.version_for(options))


def _backend_class(kind: str, config: EncoderConfig) -> Any:
    """The class behind ``config``'s backend (its ``from_config``'s class; importing its module is cheap), or
    None for a third-party factory that is not a class method."""
    try:
        factory = _resolve(kind, config.backend)
    except BackendError:
        return None
    return getattr(factory, "__self__", factory if isinstance(factory, type) else None)


def model_id_for(kind: str, config: EncoderConfig, text_config: EncoderConfig | None = None) -> str | None:
    """The ``model_id`` the backend will report once loaded, from its config alone: each encoder class says
    (``config_model_id``); ``None`` when only loading can tell (a backend without it).

    Lets ``imagent index`` compare an index's encoders with the configured ones without loading a model
    (a load costs seconds; a run that finds nothing new should not pay it); a wrong answer is still caught
    when vectors are written."""
    cls = _backend_class(kind, config)
    fn = getattr(cls, "config_model_id", None)
    return fn(config, text_config) if fn is not None else None


def sees_pixels_for(kind: str, config: EncoderConfig) -> bool | None:
    """Whether the encoder this config builds sees pixels, from its class (None: only loading tells); a text
    embedder never does."""
    if kind == "text":
        return False
    seen = getattr(_backend_class(kind, config), "sees_pixels", None)
    return bool(seen) if seen is not None else None
