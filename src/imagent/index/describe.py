"""A photo without a caption, in words, from what the index holds: its pixel description.

A model that cannot see pixels (caption mode) reads a photo as text (:meth:`ImageRecord.surrogate`). Without a
caption that text used to be the words of its file name, date and place ("IMG 0042, 12 May 2023, Lisbon"), so the
captioner, verifier and imagination roles of ImageScope, X^R, TaCIR and CIReVL reasoned about a file name. When the
pixel model has seen the photo (:mod:`imagent.index.pixels`) the index knows more, and this module says it:

- its labels of probability at least ``pixels.label_show_p`` (the floor of the result cards), best first, each with
  its everyday parent category (the nearest WordNet parent whose concordance count reaches
  ``pixels.parent_min_count``: "flamingo (bird)", "tabby cat (cat)", "convertible (car)"), then a category that
  labels below the floor reach together ("bird (perhaps jacamar, macaw)"), at most :data:`MAX_LABELS`; "nothing it
  could name with confidence" when nothing reaches the floor;
- the people named in it (face groups with a name, :mod:`imagent.index.people`);
- the text read in it (the OCR stage's lines, :mod:`imagent.index.text`): :func:`text_in_photo`, in reading order,
  at most :data:`~imagent.index.text.MAX_DESCRIBED_LINES` lines ("text in the photo: "SINTRA" / "Cafe Sol"");
- the date and place follow in the surrogate, as for every photo.

The text says it is the pixel model's and not a caption ("Seen by the pixel model (not a caption): ..."), so a model
and a reader of the trace know what they are given; it is never stored, never counted as a caption
(``ImageRecord.has_caption`` stays False, methods that need captions still refuse), and it is text derived from the
photos: a run whose roles read it is on DISBench's Open track (decisions 9 and 11). With
``pixels.labels_as_text = false`` there is none. The gallery builds it when it hands a record out
(:meth:`Gallery.record`), so a person named since is in the next description.
"""

from __future__ import annotations

from typing import Any

from imagent.core.config import PixelOptions
from imagent.core.types import ImageRecord

# Labels a description names at most (the cards show as many).
MAX_LABELS = 3
# How the description starts: what it is, so that no model or reader takes it for a caption.
PREFIX = "Seen by the pixel model (not a caption)"


def everyday_parent(label: dict[str, Any], min_count: int) -> str | None:
    """A label's nearest everyday parent category ("bird" for a flamingo), or None when it has none or the parent is
    already a word of its name ("analog clock": "clock")."""
    from imagent.models.pixels import class_parents, label_data

    index = label.get("index")
    if not isinstance(index, int) or not 0 <= index < len(label_data()):
        return None
    parents = class_parents(index, 1, min_count)
    if not parents:
        return None
    name = str(label.get("name", "")).lower()
    return None if parents[0].lower() in name else parents[0]


def described_labels(record: ImageRecord, options: PixelOptions) -> list[str]:
    """``["flamingo (bird)", ...]``: the record's labels of at least ``options.label_show_p``, best first; then an
    everyday category that labels below the floor reach together ("bird (perhaps jacamar, macaw)": the model is sure
    of the kind, not of which one), at most :data:`MAX_LABELS` in all."""
    out: list[str] = []
    named: set[str] = set()
    kinds: dict[str, list[tuple[float, str]]] = {}
    for label in record.labels:
        p = float(label.get("p", 0.0))
        name = str(label.get("name", "?"))
        parent = everyday_parent(label, options.parent_min_count)
        if p >= options.label_show_p:
            out.append(f"{name} ({parent})" if parent else name)
            named.add((parent or name).lower())
        elif parent:
            kinds.setdefault(parent, []).append((p, name))
    for parent, members in sorted(kinds.items(), key=lambda kv: -sum(p for p, _ in kv[1])):
        if sum(p for p, _ in members) >= options.label_show_p and parent.lower() not in named:
            out.append(f"{parent} (perhaps {', '.join(n for _, n in members[:2])})")
    return out[:MAX_LABELS]


def text_in_photo(record: ImageRecord) -> list[str]:
    """The text lines read in the photo (``ImageRecord.text_lines``, the OCR stage's), in reading order, at most
    :data:`~imagent.index.text.MAX_DESCRIBED_LINES`, each shortened to
    :data:`~imagent.index.text.MAX_LINE_CHARS` characters."""
    from imagent.index.text import described_lines

    return described_lines(record.text_lines)


def pixel_description(record: ImageRecord, people: list[str], options: PixelOptions,
                      labels_as_text: bool = True) -> str:
    """What the pixel model saw of ``record`` and who is in it, in words ("" for a photo with a caption, one the
    pixel model has not seen, or with ``labels_as_text`` False: labels kept from models and tools, a run kept on
    DISBench's Standard track). ``people``: the names of the people in it."""
    if record.captions or not record.labels or not labels_as_text:
        return ""
    labels = described_labels(record, options)
    parts = [", ".join(labels) if labels else "nothing it could name with confidence"]
    if people:
        parts.append("people: " + ", ".join(people))
    lines = text_in_photo(record)
    if lines:
        parts.append("text in the photo: " + " / ".join(f'"{x}"' for x in lines))
    return f"{PREFIX}: " + "; ".join(parts)


def describes_pixels(gallery: Any) -> bool:
    """Whether ``gallery``'s photos without a caption read as their pixel description: the pixel model has seen them
    (the index has its ``visual`` space) and labels reach models as text (``pixels.labels_as_text``)."""
    return bool(getattr(gallery, "labels_as_text", True)) and gallery.has_space("visual")


def describe_records(gallery: Any, records: list[ImageRecord]) -> None:
    """Set :attr:`ImageRecord.description` on those of ``records`` without a caption that the pixel model has seen,
    from ``gallery``'s pixel options and people (what :meth:`Gallery.record` and :meth:`Gallery.records` do)."""
    todo = [r for r in records if r.labels and not r.captions]
    if not todo:
        return
    from imagent.index.people import people_index

    people = people_index(gallery)
    options: PixelOptions = getattr(gallery, "pixel_options", None) or PixelOptions()
    as_text = bool(getattr(gallery, "labels_as_text", True))
    for rec in todo:
        names = [p["name"] for p in people.people_of(rec.id) if p["name"]] if people.has_data else []
        rec.description = pixel_description(rec, names, options, as_text)


__all__ = ["MAX_LABELS", "PREFIX", "describe_records", "described_labels", "describes_pixels", "everyday_parent",
           "pixel_description", "text_in_photo"]
