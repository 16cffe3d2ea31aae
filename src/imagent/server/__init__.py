"""The web UI (``imagent serve``): a page that runs searches and shows every step of the trace."""

from imagent.server.app import create_app, serve

__all__ = ["create_app", "serve"]
