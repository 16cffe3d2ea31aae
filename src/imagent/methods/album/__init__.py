"""Album search: everything that searches one person's photo album lives here.

The album agents PhotoCraft and ImageSeeker (:mod:`~imagent.methods.album.photocraft`, registered as ``photocraft``
and ``imageseeker``), the album tools (ImageSearch, GetMetadata, FilterMetadata, ViewPhotos:
:mod:`~imagent.methods.album.tools`), the album agents' memories (:mod:`~imagent.methods.album.memory`) and skills
(:mod:`~imagent.methods.album.skills`), their prompts (``prompts/photocraft``, ``prompts/imageseeker``,
``prompts/scaffold``), the one scaffold policy applied equally to PhotoCraft and ImageSeeker
(:mod:`~imagent.methods.album.scaffold`), and imagent's own ``album`` method (a planner: one grammar-constrained
model call parses the query into a typed plan that code executes). ``agents/`` stays generic and imports nothing
from here.
"""

from __future__ import annotations

from functools import cache


@cache
def load_prompt(relative: str) -> str:
    """A prompt shipped in ``imagent/methods/album/prompts/`` (e.g. ``photocraft/system.txt``); read once per
    process (the album agents ask for theirs on every query)."""
    from importlib.resources import files

    return (files("imagent.methods.album") / "prompts" / relative).read_text(encoding="utf-8").strip()


__all__ = ["load_prompt"]
