"""Tool backend registry: ``[tools.<name>]`` entries -> tool instances.

Built-in backends are named by import path and imported only when used (the diffusers backend
needs torch and diffusers; nothing else does). Each backend class has an ``Options`` pydantic model
that validates the entry's ``options`` and a ``from_options(options, **context)`` constructor.
Third-party backends register with :func:`register`. The names live in one
:class:`~imagent.core.registry.Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from imagent.core.registry import Registry


class ToolBackendError(ValueError):
    pass


# backend name -> "module:Class" (or a factory after registration)
_BACKENDS: Registry[Any] = Registry("tool backend", {
    # image search
    "exemplar": "imagent.tools.exemplar:ExemplarSearchTool",
    "google": "imagent.tools.web_search:GoogleImageSearch",
    "brave": "imagent.tools.web_search:BraveImageSearch",
    # image edit
    "openai": "imagent.tools.edit_openai:OpenAIImageEditTool",
    "diffusers": "imagent.tools.edit_diffusers:DiffusersImageEditTool",
}, error=ToolBackendError)


def register(name: str, factory: Callable[..., Any]) -> None:
    """Register a backend: ``factory(options: dict, **context) -> tool`` (a class with ``from_options`` works)."""
    _BACKENDS.register(name, factory)


def backends() -> list[str]:
    return _BACKENDS.names()


def resolve(name: str) -> Any:
    return _BACKENDS.lookup(name)


def build_tool(backend: str, options: dict[str, Any] | None = None, **context: Any) -> Any:
    """One tool from a backend name and its options (validated by the backend's ``Options``).

    ``context`` carries shared parts a backend may use (``settings``, ``text_embedder``)."""
    factory = resolve(backend)
    if hasattr(factory, "from_options"):
        return factory.from_options(dict(options or {}), **context)
    return factory(dict(options or {}), **context)


__all__ = ["ToolBackendError", "backends", "build_tool", "register", "resolve"]
