"""Reference images uploaded from the page: verified, kept privately for a while, then deleted.

An upload is the raw file bytes (``POST /api/uploads``, the body capped by ``server.max_upload_bytes``).
It must be sent as ``image/...`` (:mod:`imagent.server.security`) and decode completely as an image
through :func:`imagent.core.imageio.verify_image_bytes` (the same allow-list and bomb checks as indexing,
under the server's own budget: ``server.max_upload_pixels`` and ``server.max_upload_decode_bytes``; a JPEG
is verified at 1/8 scale) before it is kept. Nothing decoded is kept, and the freed memory is handed back
to the system, so the server's size returns to where it was after each upload. Kept means: a file in a
private folder (0700) of the server's temporary area, named by a random id (never by the client's file
name), readable only by the server's user (0600). The id is what a later search names as its
``reference_upload``; no route serves an upload back (the page previews the file it already has), so
another visitor cannot see it.
Uploads expire after ``server.upload_ttl_s`` and the folder is removed when the server stops.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from imagent.core.imageio import ImageLoadError, release_memory, verify_image_bytes
from imagent.core.types import ImageRecord
from imagent.index.gallery import Gallery

MAX_KEPT = 64  # uploads held at once; the oldest goes first


@dataclass
class Upload:
    id: str
    path: Path
    created: float
    width: int
    height: int


class UploadStore:
    def __init__(self, ttl_s: float, max_pixels: int, max_decode_bytes: int = 256 * 1024 * 1024) -> None:
        self.ttl_s = ttl_s
        self.max_pixels = max_pixels
        self.max_decode_bytes = max_decode_bytes
        self._root: Path | None = None  # made at the first upload: a server (or test app) without uploads leaves none
        self._items: dict[str, Upload] = {}
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The private folder (mode 0700) the uploads live in; removed by :meth:`close`, else when the store is
        collected or the process exits (a server stopped without its shutdown hook)."""
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="imagent-uploads-"))
                self._cleanup = weakref.finalize(self, shutil.rmtree, self._root, True)
            return self._root

    def add(self, data: bytes) -> Upload:
        """Verify ``data`` as an image and keep it. Raises :class:`ImageLoadError` with the reason."""
        if not data:
            raise ImageLoadError("empty upload (0 bytes)")
        # Decodes the whole file (a broken one is refused here) under the pixel and memory budget.
        image = verify_image_bytes(data, self.max_pixels, self.max_decode_bytes)
        upload_id = secrets.token_urlsafe(16)
        path = self.root / f"{upload_id}.img"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        item = Upload(upload_id, path, time.monotonic(), image.width, image.height)
        with self._lock:
            self._expire()
            self._items[upload_id] = item
            while len(self._items) > MAX_KEPT:
                self._drop(min(self._items.values(), key=lambda u: u.created).id)
        return item

    def get(self, upload_id: str) -> Upload | None:
        with self._lock:
            self._expire()
            return self._items.get(upload_id)

    def record(self, upload: Upload, gallery: Gallery) -> ImageRecord:
        """The search's reference: the gallery's record when the upload is a gallery image, else a
        transient record (content-hash id, EXIF time and place, no caption) built the way indexing does."""
        from imagent.index.builder import record_for_file

        try:
            return record_for_file(upload.path, gallery)
        finally:
            release_memory()  # the probe decoded the file once more

    def _expire(self) -> None:
        now = time.monotonic()
        for u in [u for u in self._items.values() if now - u.created > self.ttl_s]:
            self._drop(u.id)

    def _drop(self, upload_id: str) -> None:
        item = self._items.pop(upload_id, None)
        if item is not None:
            item.path.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            self._items.clear()
            if self._root is not None:
                self._cleanup()
