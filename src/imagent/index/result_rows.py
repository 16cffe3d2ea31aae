"""Search results as data: the rows ``--json``, the web API and the CLI table show for a :class:`Result` over a
gallery (date, place, labels, people and what answered each photo), and the JSON document of a result."""

from __future__ import annotations

import json
from typing import Any

from imagent.core.types import MATCH_NONE, ImageRecord, Ranking, Result
from imagent.index.gallery import Gallery
from imagent.index.text import line_texts


def result_rows(result: Result, gallery: Gallery) -> list[dict[str, Any]]:
    """One row per result: ``{rank, id, score, match, path, caption, taken, place, labels, text, matched_by,
    people}``
    (what ``--json`` and the web API return); ``match`` how well it matches (:mod:`imagent.index.levels`):
    ``strong``, ``possible`` or ``none``, or None for a ranking whose scores are not compared with the gallery's (a
    method's re-ranking, a result with an answer set, a small gallery); ``path`` for showing
    (:func:`imagent.core.text.display_path`: a file name that is not UTF-8 reads ``caf\\xe9.jpg``; the record holds the
    path that opens the file); ``taken`` (ISO date-time) and ``place`` (the given address, else the place name found
    for the GPS, else "lat, lon") are None when unknown; ``labels`` what the pixel model saw (``[{"name", "p"}]``,
    those of at least ``pixels.label_show_p``: :func:`card_labels`); ``text`` the lines of text read in the photo ([]
    when none: :mod:`imagent.index.text`); ``matched_by`` what the score compared the query with for this photo:
    ``pixels``, ``caption``, ``names`` (file-name words, date, place), ``looks`` (visual features), ``nothing``, or
    None when the result does not say which space answered; ``text`` when the words read in it made it a match (a
    quoted phrase, or the query's words: :mod:`imagent.tools.text_search`), ``text+pixels`` (``text+caption``...)
    when its content matched too; ``people`` the groups whose
    faces the photo holds, ``[{"id", "name"}]`` (name None until given; [] without face data:
    :mod:`imagent.index.people`). ``score`` is the method's raw score: for the trace and ``--json``, never shown on a
    card."""
    from imagent.core.text import display_path
    from imagent.index.people import people_index
    from imagent.index.pixels import answered_by

    people = people_index(gallery)
    spaces = gallery.spaces()
    main = next((s for s in result.spaces if s in spaces), None)
    cut = result.ranking.cut if result.answer_set is None else None  # a set answer is never cut
    rows = []
    for rank, (image_id, score) in enumerate(zip(result.ranking.ids, result.ranking.scores, strict=True), 1):
        rec = gallery.record(image_id)
        rows.append({"rank": rank, "id": image_id, "score": round(float(score), 6),
                     "match": cut.level(float(score)) if cut is not None else None,
                     "path": display_path(rec.path) if rec.path else rec.path,
                     "caption": rec.caption, "taken": rec.taken_time.isoformat() if rec.taken_time else None,
                     "place": record_place(rec), "labels": card_labels(rec, gallery),
                     "text": line_texts(rec.text_lines),
                     "matched_by": matched_by(result, rec, cut, answered_by(rec, main, spaces[main].model_id)
                                              if main else None),
                     "people": people.people_of(image_id)})
    return rows


def matched_by(result: Result, rec: ImageRecord, cut: Any, answered: str | None) -> str | None:
    """``answered`` (what the space compared), or ``text`` / ``text+<answered>`` for a photo the text read in it
    matched (``Result.text_matches``): ``text`` alone when its content score was no match (or not known)."""
    hit = result.text_matches.get(rec.id)
    if hit is None:
        return answered
    content = hit.get("content_score")
    if content is None or (cut is not None and cut.level(float(content)) == MATCH_NONE) or not answered:
        return "text"
    return f"text+{answered}"


def matches_only(result: Result, limit: int) -> Result:
    """``result`` cut where its matches stop: its strong and possible matches (:mod:`imagent.index.levels`), at
    most ``limit``, for a search that asked for no number of results (the CLI's default). A result without a cut
    (a ranking whose scores are not compared with the gallery's) or with an answer set is returned as it is."""
    from dataclasses import replace

    cut = result.ranking.cut
    if cut is None or result.answer_set is not None:
        return result
    r = result.ranking
    keep = [n for n, s in enumerate(r.scores) if cut.level(float(s)) != MATCH_NONE][:limit]  # any order (time too)
    warnings = list(result.warnings)
    if not keep and r.ids:  # never an empty answer without a word on why (--json readers included)
        warnings.append("no photo matches: the best scored like the rest of the library; --top-k N lists the "
                        "closest anyway")
    return replace(result, ranking=Ranking([r.ids[n] for n in keep], [r.scores[n] for n in keep], cut),
                   warnings=warnings)


def card_labels(rec: ImageRecord, gallery: Gallery) -> list[dict[str, Any]]:
    """A photo's labels as result cards show them: those of at least ``pixels.label_show_p`` (the gallery's pixel
    options), best first, at most three."""
    options = getattr(gallery, "pixel_options", None)
    return shown_labels(rec, options.label_show_p if options is not None else 0.5)


def shown_labels(rec: ImageRecord, min_p: float = 0.5, limit: int = 3) -> list[dict[str, Any]]:
    """A photo's labels as results show them: ``[{"name", "p"}]``, best first, at least ``min_p``, at most
    ``limit``."""
    return [{"name": x["name"], "p": x["p"]} for x in rec.labels if float(x.get("p", 0)) >= min_p][:limit]


def record_place(rec: ImageRecord) -> str | None:
    """Where a photo was taken: the given address, else the place name found for its GPS, else its
    coordinates."""
    if rec.place_name:
        return rec.place_name
    if rec.latitude is not None and rec.longitude is not None:
        return f"{rec.latitude:.5f}, {rec.longitude:.5f}"
    return None


def result_json(result: Result, gallery: Gallery) -> str:
    """The result rows, the trace, the spaces the ranking was scored in (so a client rebuilding the result from this
    document can say what matched each row), where the matches stop (``match_cut``: the scores of a strong and a
    possible match, and the distribution they come from) and any per-stage rankings as one JSON document."""
    payload: dict[str, Any] = {"results": result_rows(result, gallery), "source": result.source,
                               "source_reason": result.source_reason, "counts": dict(result.counts),
                               "warnings": list(result.warnings), "spaces": list(result.spaces),
                               "trace": result.trace.to_dict()}
    if result.ranking.cut is not None and result.answer_set is None:  # where the matches stop (the rows' ``match``)
        payload["match_cut"] = result.ranking.cut.to_dict()
    if result.stages:
        payload["stages"] = {k: v.to_dict() for k, v in result.stages.items()}
    if result.understood is not None:  # what the query reader understood (the web app's chips)
        payload["understood"] = result.understood
    return json.dumps(payload, indent=2, ensure_ascii=False, default=str)
