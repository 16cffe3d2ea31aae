"""A photo's file as the index recorded it: read only when it is still that file.

The path comes from the index, never from a request. A photo is served (to the web page, to a thumbnail, to a face
crop) only when its file is a regular file whose size and modification time are the ones indexed and, when the index
holds the content hash, whose bytes hash to it. One copy of these checks, for every reader.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

from imagent.core.imageio import is_image_name
from imagent.core.types import ImageRecord

# "size:mtime_ns:..." as the folder and manifest indexer writes a file's fingerprint (index/builder.py)
_FINGERPRINT = re.compile(r"^(\d+):(\d+):")


class PhotoGone(FileNotFoundError):
    """The photo's file is not on disk (moved, deleted, a folder unmounted)."""


class PhotoChanged(Exception):
    """The file on disk is no longer the one the index recorded (replaced, edited, a symlink swapped in)."""


def _differs(fingerprint: str | None, st: os.stat_result) -> bool:
    match = _FINGERPRINT.match(fingerprint or "")
    return bool(match) and (int(match.group(1)) != st.st_size or int(match.group(2)) != st.st_mtime_ns)


def read_indexed_file(record: ImageRecord, fingerprint: str | None, max_bytes: int) -> bytes:
    """The bytes of ``record``'s file, only if it is still the file that was indexed.

    The file must be a regular file; when the index recorded its size and mtime they must match; when it recorded
    the content hash, the bytes are hashed and must match it. So a file replaced, or a symlink swapped in pointing
    out of the library (to ``~/.ssh/id_rsa``, say), is refused until it is indexed again. The bytes hashed are the
    bytes returned: nothing can change between the check and the reply. :class:`PhotoGone` or
    :class:`PhotoChanged` otherwise (their messages name no path)."""
    if not record.path:
        raise PhotoGone("no file recorded")
    if not record.content_hash and not is_image_name(record.path):
        raise PhotoChanged("not an image file name and no content hash to check it by")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in must not block the worker
    try:
        fd = os.open(record.path, flags)
    except OSError as exc:
        raise PhotoGone(exc.strerror or "cannot open") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PhotoChanged("not a regular file")
        if _differs(fingerprint, st):
            raise PhotoChanged("its size or modification time differs from the index")
        if st.st_size > max_bytes:
            raise PhotoChanged("larger than the indexing limit")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PhotoChanged("larger than the indexing limit")
    if record.content_hash and hashlib.sha256(data).hexdigest() != record.content_hash:
        raise PhotoChanged("its content differs from the index")
    return data


def check_unchanged(record: ImageRecord, fingerprint: str | None) -> None:
    """The checks of :func:`read_indexed_file` that need no read (a regular file, its size and modification time
    as indexed): what a kept thumbnail or face crop is served after. :class:`PhotoGone` or :class:`PhotoChanged`."""
    try:
        st = os.stat(record.path)
    except OSError as exc:
        raise PhotoGone(exc.strerror or "cannot stat") from None
    if not stat.S_ISREG(st.st_mode):
        raise PhotoChanged("not a regular file")
    if _differs(fingerprint, st):
        raise PhotoChanged("its size or modification time differs from the index")


__all__ = ["PhotoChanged", "PhotoGone", "check_unchanged", "read_indexed_file"]
