"""The web UI (``imagent serve``): a page that runs searches and shows every step of the trace.

The names are imported lazily: :mod:`imagent.server.discovery` is read by the CLI's ``search`` before
anything heavy (FastAPI, the models) is imported."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from imagent.server import app

        return getattr(app, name)
    raise AttributeError(name)
