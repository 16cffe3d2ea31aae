"""Web image search backends: Google Programmable Search (the paper's default) and Brave Image Search.

Both take their key from an environment variable and have a configurable ``base_url`` (tests point
it at a local server). The API's answer is JSON; each result's image is then downloaded through
:func:`imagent.tools.download.fetch_image` (http/https only, host checks, redirect limit, streamed
byte cap, content type, full decode). Results whose download is refused are skipped, up to
``download_attempts`` candidates. Titles and page URLs are kept as data (provenance), never obeyed.

- ``google``: ``GET {base_url}/customsearch/v1?key=K&cx=CX&q=Q&searchType=image&num=N``
  (https://developers.google.com/custom-search/v1/reference/rest/v1/cse/list); results in ``items[]``
  with ``link`` (the image), ``title``, ``displayLink``, ``image.contextLink``. Needs a search engine id
  (``cx`` option or ``$GOOGLE_CSE_ID``) with image search enabled, and ``$GOOGLE_API_KEY``.
- ``brave``: ``GET {base_url}/res/v1/images/search?q=Q&count=N`` with header ``X-Subscription-Token``
  (https://api-dashboard.search.brave.com/app/documentation/image-search); results in ``results[]`` with
  ``properties.url`` (the image), ``title``, ``url`` (the page), ``source``. Key: ``$BRAVE_API_KEY``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from imagent.core.redact import register_env_names, register_secret
from imagent.tools.base import Provenance, ToolError, ToolImage, ToolRejected
from imagent.tools.download import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, fetch_image


class WebSearchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base_url: str = ""
    api_key_env: str = ""
    timeout_s: float = Field(20.0, gt=0)
    max_bytes: int = Field(DEFAULT_MAX_BYTES, ge=1, description="largest image downloaded")
    max_pixels: int = Field(DEFAULT_MAX_PIXELS, ge=1)
    max_redirects: int = Field(3, ge=0)
    download_attempts: int = Field(3, ge=1, description="results tried, in order, until n images download")
    allow_private_hosts: bool = Field(False, description="allow image URLs on private/loopback addresses")
    safe_search: bool = True
    user_agent: str = "imagent (image retrieval research toolkit)"


class GoogleOptions(WebSearchOptions):
    base_url: str = "https://www.googleapis.com"
    api_key_env: str = "GOOGLE_API_KEY"
    cx: str | None = Field(None, description="Programmable Search Engine id; default $GOOGLE_CSE_ID")
    cx_env: str = "GOOGLE_CSE_ID"


class BraveOptions(WebSearchOptions):
    base_url: str = "https://api.search.brave.com"
    api_key_env: str = "BRAVE_API_KEY"


class WebImageSearch:
    """Shared part: key lookup, the HTTP client, and downloading results in order."""

    kind: ClassVar[str] = "search"
    backend: ClassVar[str] = ""
    Options: ClassVar[type[WebSearchOptions]] = WebSearchOptions

    def __init__(self, options: WebSearchOptions) -> None:
        self.options = options
        self.base_url = options.base_url.rstrip("/")
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_options(cls, options: dict[str, Any], **_: Any) -> WebImageSearch:
        return cls(cls.Options.model_validate(options))

    def identity(self) -> str:
        return f"{self.backend}:{self.base_url}"

    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.options.timeout_s,
                                            headers={"User-Agent": self.options.user_agent})
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def api_key(self) -> str:
        register_env_names([self.options.api_key_env])  # masked in every error and trace from now on
        key = os.environ.get(self.options.api_key_env, "").strip()
        if not key:
            raise ToolError(f"{self.backend} image search needs an API key in ${self.options.api_key_env}")
        return key

    def _get_json(self, url: str, params: dict[str, Any], headers: dict[str, str] | None, secret: str) -> Any:
        register_secret(secret)  # in the URL or a header: ToolError redacts it from every message
        try:
            resp = self.client.get(url, params=params, headers=headers or {}, follow_redirects=False)
        except httpx.HTTPError as exc:
            raise ToolError(f"{self.backend} search request failed: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise ToolError(f"{self.backend} search answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            return resp.json()
        except ValueError:
            raise ToolError(f"{self.backend} search did not answer JSON") from None

    def candidates(self, query: str, count: int) -> list[dict[str, Any]]:
        """The API's results as ``{"image_url", "title", "page", "source"}``, best first."""
        raise NotImplementedError

    def search(self, query: str, n: int = 1) -> list[ToolImage]:
        found = self.candidates(query, max(n, self.options.download_attempts))
        out: list[ToolImage] = []
        reasons: list[str] = []
        for c in found[: max(n, self.options.download_attempts)]:
            if len(out) >= n:
                break
            url = str(c.get("image_url") or "")
            if not url:
                continue
            try:
                img = fetch_image(self.client, url, max_bytes=self.options.max_bytes,
                                  max_pixels=self.options.max_pixels, max_redirects=self.options.max_redirects,
                                  allow_private_hosts=self.options.allow_private_hosts)
            except ToolRejected as exc:
                reasons.append(str(exc))
                continue
            out.append(ToolImage(
                provenance=Provenance(self.backend, source=img.url, page=c.get("page") or None,
                                      extra={"domain": c.get("source") or "", "query": query}),
                data=img.data, title=str(c.get("title") or ""), mime=img.mime, width=img.width, height=img.height,
            ))
        if not out and reasons:
            raise ToolRejected(f"no result could be downloaded ({'; '.join(reasons[:3])})")
        return out


class GoogleImageSearch(WebImageSearch):
    backend: ClassVar[str] = "google"
    Options: ClassVar[type[WebSearchOptions]] = GoogleOptions

    def identity(self) -> str:
        opts: GoogleOptions = self.options  # type: ignore[assignment]
        cx = opts.cx or os.environ.get(opts.cx_env, "")
        return f"google:{self.base_url}:{cx}"

    def candidates(self, query: str, count: int) -> list[dict[str, Any]]:
        opts: GoogleOptions = self.options  # type: ignore[assignment]
        cx = (opts.cx or os.environ.get(opts.cx_env, "")).strip()
        if not cx:
            raise ToolError(f"google image search needs a search engine id (option cx or ${opts.cx_env})")
        key = self.api_key()
        params = {"key": key, "cx": cx, "q": query, "searchType": "image",
                  "num": max(1, min(10, count)), "safe": "active" if opts.safe_search else "off"}
        data = self._get_json(f"{self.base_url}/customsearch/v1", params, None, key)
        items = data.get("items") if isinstance(data, dict) else None
        out = []
        for it in items or []:
            if not isinstance(it, dict):
                continue
            image = it.get("image") if isinstance(it.get("image"), dict) else {}
            out.append({"image_url": it.get("link"), "title": it.get("title"),
                        "page": image.get("contextLink"), "source": it.get("displayLink")})
        return out


class BraveImageSearch(WebImageSearch):
    backend: ClassVar[str] = "brave"
    Options: ClassVar[type[WebSearchOptions]] = BraveOptions

    def candidates(self, query: str, count: int) -> list[dict[str, Any]]:
        params = {"q": query, "count": max(1, min(100, count)),
                  "safesearch": "strict" if self.options.safe_search else "off"}
        key = self.api_key()
        headers = {"Accept": "application/json", "X-Subscription-Token": key}
        data = self._get_json(f"{self.base_url}/res/v1/images/search", params, headers, key)
        results = data.get("results") if isinstance(data, dict) else None
        out = []
        for r in results or []:
            if not isinstance(r, dict):
                continue
            props = r.get("properties") if isinstance(r.get("properties"), dict) else {}
            out.append({"image_url": props.get("url"), "title": r.get("title"), "page": r.get("url"),
                        "source": r.get("source")})
        return out


__all__ = ["BraveImageSearch", "BraveOptions", "GoogleImageSearch", "GoogleOptions", "WebImageSearch"]
