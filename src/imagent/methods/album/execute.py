"""The ``album`` method's executor: a :class:`~imagent.methods.album.plan.Plan` run by code over one album.

Every step is code over the album's tools (no model call), each recorded as a trace step:

1. **anchor** (``album.anchor``): the anchor's words searched over the album (:meth:`Album.search`); the candidates
   are the best ``anchor_candidates`` photos scoring within ``anchor_margin`` of the best one (a decoy, the same
   object photographed on another day, scores the same); when the anchor's words name a place of the album's
   addresses ("the day I was at the zoo"), the first photo there of each trip instead (:func:`place_candidates`);
2. **constraint** (``album.constraint``): for each candidate, the photos the relation keeps
   (:func:`relation_subset` over the album's :class:`~imagent.tools.timeline.Timeline`), then the person and exclude
   filters; the candidate chosen is the one whose kept photos best support the target (*joint evidence*: its
   anchor score plus the best target score among its kept photos other than itself), never the first hit alone;
3. **target** (``album.target``): the target's words scored over the whole album, and the *answer cut*
   (:func:`shows_target`): a kept photo shows the target when its score is in the album's top
   ``1 - match_quantile`` for the target, or its margin over the album's median score is at least ``match_share``
   of the best kept photo's margin. The anchor photo is in the answer only when it passes the same rule (it shows
   the target too); a target that asks for every photo ("the photos from my second trip") keeps them all.

When no candidate's relation keeps a photo, the answer is the cut over the whole album (the named fallback
``target_search``): never silent, the result's source says so. imagent's own (``docs/album.md``), not a paper's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np

from imagent.core.trace import Trace
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.plan import BEFORE_RELATIONS, Plan
from imagent.tools.album import Album
from imagent.tools.filter_lang import FilterError, quote_string
from imagent.tools.timeline import Timeline, add_months, day_date


@dataclass
class Candidate:
    """One anchor candidate: its photo, its anchor score, the photos the relation keeps for it (timeline indices)
    and the best target score among them (``support``; None when the target asks for every photo)."""

    photo: str
    score: float
    kept: list[int]
    support: float | None
    how: str = ""
    exact: bool = True  # the relation held exactly (not the nearest photo day to the date it names)
    place: np.ndarray | None = None  # a place named by the anchor: its photos stand for "the anchor's place"

    @property
    def joint(self) -> float:
        if not self.kept:
            return float("-inf")
        return self.score + (self.support if self.support is not None else 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"photo": self.photo, "anchor_score": round(self.score, 4), "kept": len(self.kept),
                "target_support": None if self.support is None else round(self.support, 4),
                "joint": None if not self.kept else round(self.joint, 4), "exact": self.exact, "how": self.how}


@dataclass
class Execution:
    """What the plan found: the answer (photo ids), the anchor chosen and the candidates weighed, the photos the
    relation kept, the target scores (best first, for the ranking) and a named fallback when one stood in."""

    answer: list[str]
    anchor: str | None = None
    candidates: list[Candidate] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    ranked: list[tuple[str, float]] = field(default_factory=list)
    fallback: str = ""
    reason: str = ""
    notes: list[str] = field(default_factory=list)


class TargetScores:
    """The target's scores over the whole album and the answer cut's two references: the album's
    ``match_quantile`` score and its median."""

    def __init__(self, album: Album, timeline: Timeline, text: str, quantile: float) -> None:
        ranking = album.search(text, top_k=len(timeline)) if len(timeline) else None
        by_id = dict(zip(ranking.ids, ranking.scores, strict=True)) if ranking is not None else {}
        self.score = np.array([by_id.get(i, -1.0) for i in timeline.ids], dtype=np.float64)
        self.high = float(np.quantile(self.score, quantile)) if len(self.score) else 0.0
        self.median = float(np.median(self.score)) if len(self.score) else 0.0
        self.ranked = list(zip(ranking.ids, ranking.scores, strict=True)) if ranking is not None else []


def shows_target(scores: TargetScores, kept: Sequence[int], share: float, relative: bool = True) -> list[int]:
    """The answer cut: the photos of ``kept`` (timeline indices) that show the target, best first: those scoring
    at least the album's ``match_quantile`` score, or (``relative``: the relation narrowed the album) whose margin
    over the album's median is at least ``share`` of the best kept photo's margin (so the best kept photo always
    qualifies). Over the whole album (no anchor) only the first rule holds: the best photo of an album is no
    evidence that the album shows the target."""
    if not kept:
        return []
    order = sorted(kept, key=lambda i: -scores.score[i])
    best = scores.score[order[0]] - scores.median
    return [i for i in order if scores.score[i] >= scores.high
            or (relative and scores.score[i] - scores.median >= share * best)]


def choice_key(c: Candidate) -> tuple[bool, bool, float]:
    """How anchor candidates are ranked: one whose relation kept photos, then one whose relation held exactly, then
    the joint evidence (anchor score + target support)."""
    return bool(c.kept), c.exact, c.joint


def _mask_indices(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)]


def relation_subset(plan: Plan, tl: Timeline, a: int, cfg: AlbumConfig, target: TargetScores | None,
                    place: np.ndarray | None = None) -> tuple[list[int], str, bool]:
    """The photos (timeline indices) the plan's relation keeps for anchor photo ``a``, how (in words), and whether
    the relation held exactly (False: the nearest photo day to the date it names stood in). Time relations keep
    nothing for an anchor without a time; place relations nothing for one without a place; "the same winter as"
    nothing for an anchor taken in another season. ``place``: the photos of a place the anchor names (its visits,
    "my second visit to Lisbon"), standing for the photos near the anchor photo."""
    rel, n = plan.relation, max(plan.count, 1) if plan.count >= 0 else plan.count
    if rel == "none":
        return list(range(len(tl))), "the whole album", True
    if rel in ("same place", "same city", "visit", "city visit", "other visit"):
        km = cfg.city_km if rel in ("same city", "city visit") else cfg.place_km
        here = place if place is not None else tl.place_mask(a, km)
        if not here.any():
            return [], f"photo {tl.ids[a]} has no GPS and no address", True
        if rel in ("same place", "same city"):
            return _mask_indices(here), f"within {km:g} km of photo {tl.ids[a]}", True
        if tl.trip[a] < 0:
            return [], f"photo {tl.ids[a]} has no time", True
        visits = tl.visits(here)
        if rel == "other visit":
            return (_mask_indices(here & (tl.trip != tl.trip[a])),
                    f"within {km:g} km of photo {tl.ids[a]}, on the {len(visits) - 1} other visit(s)", True)
        k = n - 1 if n > 0 else n
        if not -len(visits) <= k < len(visits):
            return [], f"visit {n} asked for, {len(visits)} visit(s) within {km:g} km of photo {tl.ids[a]}", True
        return (_mask_indices(here & (tl.trip == visits[k])),
                f"visit {n if n > 0 else 'last'} of {len(visits)} within {km:g} km of photo {tl.ids[a]}", True)
    if not tl.has_day[a]:
        return [], f"photo {tl.ids[a]} has no time", True
    day = int(tl.day[a])
    when = day_date(day)
    if rel == "same day":
        return _mask_indices(tl.days_mask(day)), f"the day {when}", True
    if rel == "same trip":
        return _mask_indices(tl.trip_mask(int(tl.trip[a]))), f"trip {int(tl.trip[a]) + 1} of {tl.trips}", True
    sign = -1 if rel in BEFORE_RELATIONS else 1
    if rel in ("days after", "days before", "weeks after", "weeks before"):
        weeks = rel.startswith("weeks")
        want = day + sign * n * (7 if weeks else 1)
        tolerance = cfg.week_tolerance if weeks else cfg.day_tolerance
        others = tl.day != day
        found = want if tl.days_mask(want).any() else tl.nearest_day(want, tolerance, others)
        if found is None:
            return [], f"no photo within {tolerance} day(s) of {day_date(want)}", True
        moved = "" if found == want else f" (no photo on {day_date(want)}: the nearest photo day)"
        if weeks:
            trip = int(tl.trip[tl.days_mask(found)][0])
            return _mask_indices(tl.trip_mask(trip)), f"the trip of {day_date(found)}{moved}", found == want
        return _mask_indices(tl.days_mask(found)), f"the day {day_date(found)}{moved}", found == want
    if rel in ("months after", "months before", "month after", "month before", "same month"):
        step = 0 if rel == "same month" else sign * (n if rel.startswith("months") else 1)
        shown = add_months(date(when.year, when.month, 1), step)
        return _mask_indices(tl.month == int(tl.month[a]) + step), f"the month {shown:%Y-%m}", True
    if rel in ("years after", "years before", "year after", "year before", "same year"):
        year = int(tl.year[a]) + (0 if rel == "same year" else sign * (n if rel.startswith("years") else 1))
        return _mask_indices(tl.year == year), f"the year {year}", True
    if rel in ("same season", "season after", "season before"):
        block, own = tl.season_of(a)
        south = bool(np.isfinite(tl.lat[a]) and tl.lat[a] < 0)
        if rel == "same season" and plan.season and own != plan.season:
            return [], f"photo {tl.ids[a]} was taken in {own}, not {plan.season}", True
        if rel != "same season":
            block += sign
            while plan.season and tl.season_name(block, south) != plan.season:
                block += sign
        return (_mask_indices(tl.season_block == block),
                f"the {tl.season_name(block, south)} of {day_date(tl.day[tl.season_block == block][0]).year}"
                if (tl.season_block == block).any() else f"a {tl.season_name(block, south)} without photos", True)
    if rel in ("next trip", "previous trip"):
        trip = int(tl.trip[a]) + sign * n
        return _mask_indices(tl.trip_mask(trip)), f"trip {trip + 1} of {tl.trips}", True
    if rel in ("after", "before"):
        later = (tl.day > day) if sign > 0 else (tl.day < day) & tl.has_day
        trips = tl.visits(later)
        if sign < 0:
            trips.reverse()
        if not trips:
            return [], f"no photo {rel} {when}", True
        if target is None:  # every photo: the very next (previous) trip
            return _mask_indices(tl.trip_mask(trips[0])), f"the {'next' if sign > 0 else 'previous'} trip", True
        shown = set(shows_target(target, _mask_indices(later), cfg.match_share))
        for t in trips:
            members = _mask_indices(tl.trip_mask(t))
            if shown & set(members):
                return members, f"the {'first' if sign > 0 else 'last'} trip {rel} {when} showing the target", True
        return [], f"no trip {rel} {when} shows the target", True
    raise ValueError(f"relation {rel!r} has no executor")


def place_candidates(tl: Timeline, anchor: str, score: float, most: int) -> list[Candidate]:
    """Anchor candidates by place name: when the anchor's words are a place's name in the album's addresses ("the
    day I was at the zoo"), the first photo there of each trip, scored as the best photo the anchor's search found
    (the joint evidence decides between them), at most ``most``; they stand in for the search's candidates (the
    album's photos rarely show a place's name)."""
    words = " ".join(anchor.lower().split())
    if len(words) < 3:
        return []
    pattern = re.compile(rf"(?<![a-z0-9]){re.escape(words)}(?![a-z0-9])")
    at = np.array([bool(pattern.search(a)) for a in tl.address], dtype=bool)
    out: list[Candidate] = []
    for trip in tl.visits(at):
        first = min(np.flatnonzero(at & (tl.trip == trip)), key=lambda i: tl.day[i])
        if len(out) < most:
            out.append(Candidate(tl.ids[first], float(score), [], None, how=f"at a place named {anchor!r}",
                                 place=at))
    return out


def person_filter(album: Album, name: str) -> tuple[set[str] | None, str]:
    """The album's photos of ``name`` (the filter language's ``person = 'NAME'``), or None with the reason when
    the index has no people (the filter language or the index knows no person)."""
    try:
        return set(album.filter(f"person = {quote_string(name)}")), ""
    except FilterError as exc:
        return None, f"the index has no people to filter by ({exc.args[0].split('.')[0]})"


def execute(plan: Plan, album: Album, cfg: AlbumConfig, trace: Trace) -> Execution:
    """Run ``plan`` over ``album``, recording each step in ``trace`` (module docstring)."""
    tl = Timeline.of(album, cfg.trip_gap_days)
    notes: list[str] = []
    keep = np.ones(len(tl), dtype=bool)
    if plan.person and tl.address_mask(plan.person).any():
        notes.append(f"person {plan.person!r} names a place of this album, not a person: not applied")
    elif plan.person:
        photos, why = person_filter(album, plan.person)
        if photos is None:
            notes.append(f"person {plan.person!r} not applied: {why}")
        else:
            keep &= np.array([i in photos for i in tl.ids], dtype=bool)
            notes.append(f"person {plan.person!r}: {len(photos)} photo(s)")
    if plan.exclude:
        by_place = tl.address_mask(plan.exclude)
        if by_place.any():
            keep &= ~by_place
            notes.append(f"exclude {plan.exclude!r}: {int(by_place.sum())} photo(s) at places named so")
        else:
            shown = TargetScores(album, tl, plan.exclude, cfg.match_quantile)
            best = float(shown.score.max()) - shown.median if len(tl) else 0.0
            hits = [i for i in range(len(tl)) if shown.score[i] >= shown.high
                    and shown.score[i] - shown.median >= cfg.match_share * best]  # clearly showing it
            keep[hits] = False
            notes.append(f"exclude {plan.exclude!r}: no place is named so; {len(hits)} photo(s) showing it left out")
    target = None if plan.every_photo else TargetScores(album, tl, plan.target, cfg.match_quantile)

    candidates: list[Candidate] = []
    with trace.step("album.anchor", anchor=plan.anchor, relation=plan.relation) as step:
        if plan.anchored:
            found = album.search(plan.anchor, top_k=max(cfg.anchor_candidates, 1))
            top = found.scores[0] if found.ids else 0.0
            candidates = place_candidates(tl, plan.anchor, top, cfg.anchor_candidates)
            if candidates:
                step.note(f"{plan.anchor!r} names a place of the album: its trips there are the candidates")
            else:
                candidates = [Candidate(pid, float(s), [], None) for pid, s in zip(found.ids, found.scores,
                                                                                   strict=True)
                              if s >= top - cfg.anchor_margin]
        step.outputs = {"candidates": [[c.photo, round(c.score, 4), c.how] for c in candidates]}
        if plan.anchored and not candidates:
            step.note("no photo matches the anchor")

    with trace.step("album.constraint", relation=plan.relation, count=plan.count, season=plan.season) as step:
        if not plan.anchored:
            kept = [i for i in range(len(tl)) if keep[i]]
            how = "the whole album"
        else:
            for c in candidates:
                a = tl.index(c.photo)
                idx, how, c.exact = relation_subset(plan, tl, a, cfg, target, c.place)
                c.how = f"{c.how}: {how}" if c.how else how
                c.kept = [i for i in idx if keep[i]]
                others = [i for i in c.kept if i != a]
                if target is not None:
                    c.support = max((float(target.score[i]) for i in others), default=None)
                    if c.support is None:
                        c.kept = []  # nothing but the anchor itself: no evidence for the target
            best = max(candidates, key=choice_key, default=None)
            kept = best.kept if best is not None and best.kept else []
            how = best.how if best is not None else "no anchor photo"
        step.outputs = {"candidates": [c.to_dict() for c in candidates], "kept": len(kept), "how": how,
                        "filters": notes}
    chosen = None
    if plan.anchored:
        viable = [c for c in candidates if c.kept]
        chosen = max(viable, key=choice_key).photo if viable else None

    with trace.step("album.target", target=plan.target, every_photo=plan.every_photo) as step:
        fallback, reason = "", ""
        if plan.anchored and chosen is None:
            fallback = "target_search"
            reason = ("the relation kept no photo for any anchor candidate" if candidates
                      else "no photo matches the anchor")
            kept = [i for i in range(len(tl)) if keep[i]]
            step.note(f"{reason}: the target is searched over the whole album (fallback target_search)")
        if target is None:
            matched = sorted(kept, key=lambda i: tl.day[i])
        else:
            anchor_i = tl.index(chosen) if chosen is not None else None
            rest = [i for i in kept if i != anchor_i]
            matched = shows_target(target, rest, cfg.match_share, relative=plan.anchored and chosen is not None)
            if anchor_i is not None and anchor_i in kept and matched:
                lowest = min(target.score[i] for i in matched)
                if target.score[anchor_i] >= min(lowest, target.high):
                    matched.append(anchor_i)
                    step.note(f"the anchor photo {chosen} shows the target too: it is in the answer")
        answer = [tl.ids[i] for i in matched]
        if target is not None:
            step.outputs = {"album_high": round(target.high, 4), "album_median": round(target.median, 4),
                            "kept_scores": [[tl.ids[i], round(float(target.score[i]), 4)]
                                            for i in sorted(kept, key=lambda i: -target.score[i])[:30]],
                            "answer": answer}
        else:
            step.outputs = {"answer": answer, "every_photo": True}
    ranked = target.ranked if target is not None else [(i, 0.0) for i in tl.ids]
    return Execution(answer, chosen, candidates, [tl.ids[i] for i in kept], ranked, fallback, reason, notes)


__all__ = ["Candidate", "Execution", "TargetScores", "choice_key", "execute", "person_filter", "relation_subset",
           "shows_target"]
