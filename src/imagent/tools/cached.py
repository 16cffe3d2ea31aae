"""The cache-first wrapper every tool goes through (TaCIR Algorithms 2 and 3).

- Keys: a hash of the query (search) or of the input image's content plus the instruction (edit),
  together with the backend's identity (endpoint, folder, model) so two backends never share answers.
- A hit returns the stored result with zero backend calls. A miss calls the backend once, under the
  cache's per-key lock (:meth:`DiskCache.get_or_compute`), so concurrent identical requests in one
  process make one call and the others read its result.
- Every image is verified (complete, allowed format, size caps) and written under
  ``<files_dir>/<sha[:2]>/<sha>.<ext>``; the cache value is JSON: paths, titles and provenance.
- Failures and rejections raise :class:`ToolError` and are never cached (the next query may retry);
  every call, hit or failure, is recorded in the open trace step as a ``tool`` call.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

from imagent.core.cache import DiskCache, stable_key
from imagent.core.trace import CallRecord, record_call
from imagent.tools.base import (
    EditInput,
    ToolError,
    ToolImage,
    ToolRejected,
    input_content_id,
)
from imagent.tools.download import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, verify_image_bytes

# Bump when the meaning of a cached tool result changes.
TOOL_CACHE_VERSION = 1
_EXT = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif", "image/bmp": ".bmp"}


class CachedTool:
    """Wraps one search or edit backend; exposes the same protocol (``search`` or ``edit``)."""

    def __init__(
        self,
        tool: Any,
        cache: DiskCache | None,
        files_dir: str | Path,
        name: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        if getattr(tool, "kind", None) not in {"search", "edit"}:
            raise TypeError(f"not a tool (kind must be 'search' or 'edit'): {tool!r}")
        self.inner = tool
        self.kind: str = tool.kind
        self.backend: str = tool.backend
        self.name = name or self.kind
        # No cache configured: an in-memory one still gives per-key locks (one call per identical request).
        self.cache = cache if cache is not None else DiskCache(None)
        self.files_dir = Path(files_dir).expanduser()
        self.max_bytes = max_bytes
        self.max_pixels = max_pixels

    def identity(self) -> str:
        return str(self.inner.identity())

    def __repr__(self) -> str:
        return f"CachedTool({self.name!r}, {self.identity()})"

    # ------------------------------------------------------------------ protocol
    def search(self, query: str, n: int = 1) -> list[ToolImage]:
        if self.kind != "search":
            raise ToolError(f"tool {self.name!r} ({self.backend}) is an {self.kind} tool, not a search tool")
        query = " ".join(str(query).split())
        if not query:
            self._refuse(ToolRejected("empty search query"))
        key = stable_key("tool.search", TOOL_CACHE_VERSION, self.identity(), query, int(n))

        def compute() -> dict[str, Any]:
            results = list(self.inner.search(query, n))[:n]
            kept, reasons = [], []
            for r in results:
                try:
                    kept.append(self._persist(r))
                except ToolRejected as exc:
                    reasons.append(str(exc))
            if not kept:
                why = f" ({'; '.join(reasons[:3])})" if reasons else ""
                raise ToolRejected(f"no usable image for the query{why}")
            return {"images": [k.to_dict() for k in kept], "query": query}

        return self._run(key, compute, detail=query)

    def edit(self, image: EditInput, instruction: str) -> ToolImage:
        if self.kind != "edit":
            raise ToolError(f"tool {self.name!r} ({self.backend}) is a {self.kind} tool, not an edit tool")
        instruction = " ".join(str(instruction).split())
        if not instruction:
            self._refuse(ToolRejected("empty edit instruction"))
        try:
            content = input_content_id(image)
        except (ToolError, OSError) as exc:
            self._refuse(exc if isinstance(exc, ToolError) else ToolError(f"cannot read the image to edit: {exc}"))
        key = stable_key("tool.edit", TOOL_CACHE_VERSION, self.identity(), content, instruction)

        def compute() -> dict[str, Any]:
            out = self._persist(self.inner.edit(image, instruction))
            out.provenance.extra.setdefault("input", content)
            out.provenance.extra.setdefault("instruction", instruction)
            return {"images": [out.to_dict()], "instruction": instruction, "input": content}

        return self._run(key, compute, detail=instruction)[0]

    # ------------------------------------------------------------------ plumbing
    def _refuse(self, exc: ToolError) -> NoReturn:
        """A call refused before reaching the backend is still a recorded (failed) tool call."""
        record_call(CallRecord("tool", self.name, self.identity(), 0.0, error=str(exc)[:500]))
        raise exc

    def _run(self, key: str, compute: Any, detail: str) -> list[ToolImage]:
        t0 = time.perf_counter()

        def guarded() -> dict[str, Any]:
            try:
                return compute()
            except ToolError:
                raise
            except Exception as exc:  # a backend bug or an unexpected library error is a failed call too
                raise ToolError(f"{type(exc).__name__}: {exc}") from exc

        try:
            value, cached = self.cache.get_or_compute(key, guarded, namespace=f"tool.{self.kind}")
            images = [ToolImage.from_dict(d) for d in value.get("images", [])]
            if cached and not all(im.path and Path(im.path).is_file() for im in images):
                # The cache database outlived its files (a cleaned folder): call again and re-store.
                value, cached = guarded(), False
                self.cache.put(key, value, namespace=f"tool.{self.kind}")
                images = [ToolImage.from_dict(d) for d in value.get("images", [])]
        except ToolError as exc:
            record_call(CallRecord("tool", self.name, self.identity(), time.perf_counter() - t0,
                                   error=str(exc)[:500]))
            raise
        for im in images:
            im.cached = cached
        record_call(CallRecord("tool", self.name, self.identity(), time.perf_counter() - t0, cached=cached))
        return images

    def _persist(self, image: ToolImage) -> ToolImage:
        """Verify a backend's image and store it content-addressed; return the stored form."""
        try:
            data = image.read_bytes()
        except OSError as exc:
            raise ToolRejected(f"cannot read the tool image: {exc}") from None
        checked = verify_image_bytes(data, self.max_bytes, self.max_pixels)
        sha = hashlib.sha256(data).hexdigest()
        target = self.files_dir / sha[:2] / f"{sha}{_EXT.get(checked.mime, '.img')}"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)  # atomic: readers never see half a file
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return ToolImage(provenance=image.provenance, path=str(target), title=image.title,
                         description=image.description, mime=checked.mime, sha256=sha,
                         width=checked.width, height=checked.height)


def default_files_dir() -> Path:
    """Where tool files go when no cache directory is given (a per-user temp folder)."""
    return Path(tempfile.gettempdir()) / f"imagent-tools-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def as_cached(tool: Any, name: str | None = None) -> CachedTool:
    """``tool`` itself if already wrapped, else wrapped with an in-memory cache (so traces, checks and
    per-key locks hold for tools handed in directly through the Python API)."""
    if isinstance(tool, CachedTool):
        return tool
    return CachedTool(tool, None, default_files_dir(), name=name)


__all__ = ["TOOL_CACHE_VERSION", "CachedTool", "as_cached", "default_files_dir"]
