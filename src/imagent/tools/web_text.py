"""Web *text* search for agents (PhotoCraft's ``WebSearch`` tool): titles, URLs and snippets.

The agent asks the web about entities the album cannot resolve ("the glass item first made in 1753");
results are supporting context only, quoted as data (sanitised, never obeyed). Two backends reuse the
image-search plumbing of :mod:`imagent.tools.web_search` (key from the environment, redaction, HTTP client):

- ``brave``: ``GET {base_url}/res/v1/web/search?q=Q&count=N`` with ``X-Subscription-Token: $BRAVE_API_KEY``;
  results in ``web.results[]`` with ``title``, ``url``, ``description``;
- ``google``: ``GET {base_url}/customsearch/v1?key=$GOOGLE_API_KEY&cx=$GOOGLE_CSE_ID&q=Q&num=N``;
  results in ``items[]`` with ``title``, ``link``, ``snippet``.

:func:`web_text_search_from_env` picks the first backend whose keys are set, or None (the agent then
is not offered the tool and its prompt says so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from imagent.tools.base import ToolError, safe_text
from imagent.tools.web_search import BraveImageSearch, BraveOptions, GoogleImageSearch, GoogleOptions

SNIPPET_CHARS = 300


@dataclass(frozen=True)
class WebResult:
    """One web result, its text made safe to quote in a prompt."""

    title: str
    url: str
    snippet: str

    def to_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


def _result(title: Any, url: Any, snippet: Any) -> WebResult:
    return WebResult(safe_text(str(title or "")), safe_text(str(url or ""), 300),
                     safe_text(str(snippet or ""), SNIPPET_CHARS))


@runtime_checkable
class WebTextSearch(Protocol):
    backend: ClassVar[str]

    def identity(self) -> str:
        """What makes two instances answer differently (endpoint, engine id): part of cache keys."""
        ...

    def search_text(self, query: str, n: int = 5) -> list[WebResult]: ...


class BraveWebSearch(BraveImageSearch):
    """Brave Web Search API (same key and client as Brave image search)."""

    kind: ClassVar[str] = "web"

    def identity(self) -> str:
        return f"brave-web:{self.base_url}"

    def search_text(self, query: str, n: int = 5) -> list[WebResult]:
        key = self.api_key()
        params = {"q": query, "count": max(1, min(20, n)),
                  "safesearch": "strict" if self.options.safe_search else "off"}
        headers = {"Accept": "application/json", "X-Subscription-Token": key}
        data = self._get_json(f"{self.base_url}/res/v1/web/search", params, headers, key)
        web = data.get("web") if isinstance(data, dict) else None
        rows = web.get("results") if isinstance(web, dict) else None
        return [_result(r.get("title"), r.get("url"), r.get("description"))
                for r in rows or [] if isinstance(r, dict)][:n]


class GoogleWebSearch(GoogleImageSearch):
    """Google Programmable Search (web results; the engine id in ``$GOOGLE_CSE_ID``)."""

    kind: ClassVar[str] = "web"

    def identity(self) -> str:
        return "google-web:" + super().identity().removeprefix("google:")

    def search_text(self, query: str, n: int = 5) -> list[WebResult]:
        opts: GoogleOptions = self.options  # type: ignore[assignment]
        cx = (opts.cx or os.environ.get(opts.cx_env, "")).strip()
        if not cx:
            raise ToolError(f"google web search needs a search engine id (option cx or ${opts.cx_env})")
        key = self.api_key()
        params = {"key": key, "cx": cx, "q": query, "num": max(1, min(10, n)),
                  "safe": "active" if opts.safe_search else "off"}
        data = self._get_json(f"{self.base_url}/customsearch/v1", params, None, key)
        items = data.get("items") if isinstance(data, dict) else None
        return [_result(it.get("title"), it.get("link"), it.get("snippet"))
                for it in items or [] if isinstance(it, dict)][:n]


def web_text_search_from_env(environ: Mapping[str, str] | None = None) -> WebTextSearch | None:
    """Brave when ``$BRAVE_API_KEY`` is set, else Google when ``$GOOGLE_API_KEY`` and ``$GOOGLE_CSE_ID``
    are, else None (no web search in this session)."""
    env = os.environ if environ is None else environ
    if env.get("BRAVE_API_KEY", "").strip():
        return BraveWebSearch(BraveOptions())
    if env.get("GOOGLE_API_KEY", "").strip() and env.get("GOOGLE_CSE_ID", "").strip():
        return GoogleWebSearch(GoogleOptions())
    return None


__all__ = ["BraveWebSearch", "GoogleWebSearch", "WebResult", "WebTextSearch", "web_text_search_from_env"]
