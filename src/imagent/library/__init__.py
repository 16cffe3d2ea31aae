"""The photo library: one index seen as a library of photos (cards, days, thumbnails), people (face groups and their
corrections, face crops) and duplicates, behind one service with typed inputs and outputs.

:class:`~imagent.library.service.LibraryService` is what the web routes (:mod:`imagent.server`) and the CLI commands
(:mod:`imagent.cli`) call; it stands on :class:`imagent.api.Workspace` (its settings and its galleries), so it sits
above ``api`` and below ``cli`` and ``server`` (``tests/test_layers.py``).
"""

from imagent.library.files import PhotoChanged, PhotoGone
from imagent.library.service import CannotShow, LibraryService, UnknownPhoto, photo_card, record_json

__all__ = ["CannotShow", "LibraryService", "PhotoChanged", "PhotoGone", "UnknownPhoto", "photo_card", "record_json"]
