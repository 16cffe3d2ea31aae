"""Tools agents call (image search, image edit, ...), behind protocols with a cache-first wrapper."""

from __future__ import annotations

from typing import Any


def build_tools(settings: Any, cache: Any) -> dict[str, Any]:
    """Tools configured in ``settings`` (none by default)."""
    return {}
