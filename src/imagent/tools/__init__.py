"""Tools agents call (image search, image edit), behind small protocols, through one cache-first wrapper.

Configuration (none by default: every tool is opt-in)::

    [tools.search]                       # the name a method asks for (TaCIR: "search", "edit")
    backend = "exemplar"                 # offline: a folder or imagent index of titled images
    options = { source = "~/exemplars" }

    [tools.edit]
    backend = "openai"                   # or "diffusers" (local GPU)
    options = { model = "gpt-image-1" }

Web search backends: ``google`` (keys in ``$GOOGLE_API_KEY`` / ``$GOOGLE_CSE_ID``) and ``brave``
(``$BRAVE_API_KEY``). See :mod:`imagent.tools.registry` for the list and each backend's ``Options``.
"""

from __future__ import annotations

from typing import Any

from imagent.tools.base import (
    EditInput,
    ImageEditTool,
    ImageSearchTool,
    Provenance,
    ToolError,
    ToolImage,
    ToolRejected,
)
from imagent.tools.cached import CachedTool, as_cached


def build_tools(settings: Any, cache: Any, text_embedder: Any = None) -> dict[str, CachedTool]:
    """The tools configured in ``settings.tools``, each wrapped cache-first.

    Files go under ``<settings.cache_dir>/tools``; results are keyed in ``cache`` (the call cache;
    with ``cache_calls = false`` an in-memory cache still deduplicates concurrent identical calls).
    Backends that need the network or a GPU are only contacted when a method calls them."""
    from imagent.core.config import ConfigError
    from imagent.tools.registry import build_tool

    entries = getattr(settings, "tools", None) or {}
    out: dict[str, CachedTool] = {}
    for name, entry in entries.items():
        try:
            tool = build_tool(entry.backend, entry.options, settings=settings, text_embedder=text_embedder)
        except ConfigError:
            raise
        except Exception as exc:  # unknown backend, invalid options: one clear configuration error
            raise ConfigError(f"tools.{name}: {exc}") from exc
        out[name] = CachedTool(tool, cache, settings.cache_dir / "tools", name=name)
    return out


__all__ = [
    "CachedTool",
    "EditInput",
    "ImageEditTool",
    "ImageSearchTool",
    "Provenance",
    "ToolError",
    "ToolImage",
    "ToolRejected",
    "as_cached",
    "build_tools",
]
