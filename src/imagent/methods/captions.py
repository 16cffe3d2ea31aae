"""Gallery captions where a paper's formula reads them, and the caps on model output fields.

ImageScope's text-to-text term (Eq. 7, weight tau) and X^R's caption terms cos(C_*, C_a) and its textual
question agent A_t^q read the *captions* of the gallery images. On an index without captions those terms
score against empty text (or against words from file names): tau in {0, 0.15, 0.9} then gives the same
ranking and the numbers no longer measure the paper's method, with nothing to say so. So a method that
reads gallery captions checks the index first (:func:`check_captions`, called from ``Method.preflight``
before any model call):

- **no image of the pool has a caption, and the pixel model has not seen them either** ->
  :class:`MissingCaptionsError`, naming the three fixes (caption with a model that sees pixels, import captions,
  or ``allow_missing_captions=true``);
- **no image of the pool has a caption, but the pixel model labelled them** (a camera folder, a benchmark with its
  captions withheld) -> the method runs on the pixel descriptions (:mod:`imagent.index.describe`: the caption
  space embeds them, the roles read them), and the ``checks`` step, the CLI and the eval report say so: the
  numbers are the method's over labels as text (decision 11: Open), not the paper's over captions
  (docs/faithfulness.md);
- ``allow_missing_captions=true`` -> the method runs, and the first trace step (``checks``), the CLI and
  the eval report say that the captions were missing;
- **some images lack a caption** -> the method runs, with a note giving the count (a captioner that
  failed on a few files should not stop a benchmark run, but the reader must know).

Only a real caption counts (``ImageRecord.has_caption``: given in a manifest, imported, or written by a
captioner): ``derived_text`` (folder and file-name words, date, place) is a search surrogate, not a
description of the pixels.

Output bounds (:func:`capped_fields`): JSON schemas bound every string and list so that constrained
decoding (a grammar, a server's structured output) stops a small model looping inside one. The bounds are
set far above what a GPT-4-class model writes for the field, and decisions are parsed from the whole field.
A value *longer* than its bound is kept whole and noted by :mod:`imagent.models.json_output`; a value
*exactly* at its bound was most likely stopped there by the decoder, and :func:`note_capped` notes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from imagent.index.gallery import Gallery, GalleryError
from imagent.methods.base import MethodConfig


class MissingCaptionsError(GalleryError):
    """A method that reads gallery captions was asked to run on an index without any."""


class CaptionsConfig(MethodConfig):
    """Config of a method whose formula reads gallery captions."""

    allow_missing_captions: bool = Field(
        False, description="run even when no gallery image has a caption (the trace and the report say so)")


def caption_coverage(gallery: Gallery, ids: Iterable[str] | None = None) -> tuple[int, int]:
    """``(images with a real caption, images)`` over ``ids`` (default: the whole gallery)."""
    if ids is None:
        return gallery.caption_coverage()  # cached per load of the index
    records = gallery.records([i for i in ids if i in gallery])
    return sum(1 for r in records if r.has_caption), len(records)


def pixel_described(gallery: Gallery, ids: Iterable[str] | None = None, sample: int = 200) -> bool:
    """Whether the pool's photos went through the pixel model (their labels are what a pixel description is built
    from): at least nine in ten of the first ``sample`` of them carry labels."""
    pool = list(gallery.ids if ids is None else ids)[:sample]
    records = gallery.records([i for i in pool if i in gallery])
    return bool(records) and sum(1 for r in records if r.labels) >= 0.9 * len(records)


def check_captions(gallery: Gallery, method: str, uses: list[str], allow: bool,
                   ids: Iterable[str] | None = None) -> list[str]:
    """Refuse (:class:`MissingCaptionsError`) or warn when the gallery lacks the captions ``uses`` read.

    ``uses`` names the parts of the method that read captions (empty: nothing to check). Returns the
    warnings to show (the method's trace notes them in its ``checks`` step)."""
    if not uses:
        return []
    with_caption, total = caption_coverage(gallery, ids)
    if total == 0 or with_caption == total:
        return []
    what = "; ".join(uses)
    if with_caption == 0:
        if not allow and pixel_described(gallery, ids):
            return [f"no captions: none of the {total} gallery images has one, so {what} read the pixel model's "
                    "descriptions of the photos (labels as text: Open track); these results do not measure the "
                    "paper's method over captions"]
        if not allow:
            raise MissingCaptionsError(
                f"{method} reads gallery captions ({what}), but none of the {total} images in this index has a "
                "caption (words from file names do not count). Either index with a captioner that sees pixels "
                "(`imagent index DIR --caption-missing` with a vision model as the captioner role), or import "
                "captions (`imagent index DIR --captions FILE`), or run anyway with "
                f"`--set {method}.allow_missing_captions=true` (the trace and the eval report then say so)."
            )
        return [f"allow_missing_captions: none of the {total} gallery images has a caption, so {what} "
                "scored against empty text; these results do not measure the paper's method"]
    return [f"{total - with_caption} of {total} gallery images have no caption: {what} saw empty text for them"]


def capped_fields(value: Any, schema: dict[str, Any], path: str = "", counts: frozenset[str] = frozenset()
                  ) -> list[str]:
    """Fields of a parsed JSON ``value`` whose length is exactly the schema's bound (``maxLength`` of a
    string, ``maxItems`` of a list): constrained decoding most likely stopped them there. Lists whose bound
    is the count the prompt asks for (X^R's ``questions``) are named in ``counts`` and not reported.
    ``["step2[0] (1000 chars)", ...]``."""
    out: list[str] = []
    if isinstance(value, str):
        cap = schema.get("maxLength")
        if cap is not None and len(value) == cap:
            out.append(f"{path or 'value'} ({cap} chars)")
    elif isinstance(value, list):
        cap = schema.get("maxItems")
        if cap is not None and len(value) == cap and path.rsplit(".", 1)[-1] not in counts:
            out.append(f"{path or 'value'} ({cap} items)")
        for i, item in enumerate(value):
            out += capped_fields(item, schema.get("items") or {}, f"{path}[{i}]", counts)
    elif isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                out += capped_fields(value[key], sub, f"{path}.{key}" if path else key, counts)
    return out


def note_capped(value: Any, schema: dict[str, Any], where: str, counts: frozenset[str] = frozenset()) -> list[str]:
    """:func:`capped_fields` as one trace note in the current step (nothing when no field reached its cap)."""
    from imagent.core.trace import note

    capped = capped_fields(value, schema, counts=counts)
    if capped:
        note(f"{where}: {', '.join(capped)} stopped exactly at the length bound: may have been cut by decoding")
    return capped


__all__ = [
    "CaptionsConfig",
    "MissingCaptionsError",
    "capped_fields",
    "caption_coverage",
    "check_captions",
    "note_capped",
    "pixel_described",
]
