"""The ``album`` method's executor: a :class:`~imagent.methods.album.plan.Plan` run by code over one album.

Every step is code over the album's columns (no model call), each recorded as a trace step, and each a few
vectorised passes over numpy arrays (one scan of the vector spaces scores the target, the anchors and the
exclusion together: :meth:`Album.scores`; the calendar and the map are :class:`~imagent.tools.timeline.Timeline`
masks), so a plan costs about one search at any album size (``benchmarks/overhead.py``):

1. **anchor** (``album.anchor``): candidates for each hop's anchor, scored on every clue the plan gives: its
   content words (the best ``anchor_candidates`` photos within ``anchor_margin`` of the best, so a *decoy* — the
   same object photographed on another day — is weighed, not skipped), a place its words name (by stem: the first
   photo of each trip there), and the people, places and dates the query reader linked inside the anchor's words
   (filters the candidates must pass); with two hops the inner anchor's candidates lie in the outer hop's photos;
2. **constraint** (``album.constraint``): for each candidate (pair), the photos its chain of relations keeps
   (:func:`relation_mask`, dispatched on the relation's unit and direction), then the target's filters (the
   reader's people, places, dates; the plan's place; the exclusion; the Nth day of a trip); the candidate chosen is
   the one whose photos best support the target (:func:`choice_key`: photos kept, the target shown there, the
   relation held exactly, then clue + support), never the first hit alone;
3. **target** (``album.target``): the *answer cut* (:func:`evidence_cut`): a kept photo shows the target when its
   score stands ``match_floor`` robust deviations above the album's median for the target (a floor calibrated on
   the album's own scores), and of those the answer ends at the largest gap between consecutive scores (the floor
   counting as the last one): one true photo answers one; none answers none, with the reason. A target asking for
   every photo keeps all the chain kept; never the whole album unless the question asks for it.

When nothing is found the answer is empty and :attr:`Execution.reason` says why (never "the best of the rest").
imagent's own (``docs/album.md``), not a paper's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np

from imagent.core.trace import Trace
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.plan import Hop, Plan
from imagent.tools.album import Album
from imagent.tools.filter_lang import FilterError, parse_filter
from imagent.tools.timeline import Timeline, add_months, day_date

# The default of ``AlbumConfig.clue_z`` (above any robust deviation a search scores).
CLUE_Z: float = AlbumConfig.model_fields["clue_z"].default
# Estimating an album's median and spread from at most this many of its scores (a stride sample) is plenty.
_SAMPLE = 20_000
# Photos of the album the category's kinds are read at for the answer cut's median and spread (kinds_scores).
_KIND_SAMPLE = 2_000


def kinds_scores(album: Album, tl: Timeline, target: TextScores, words: str, kept: np.ndarray, cfg: AlbumConfig
                 ) -> tuple[TextScores, list[str]]:
    """The target's scores as the answer cut reads them, and the kinds it read: when ``words`` name a category
    of the pixel model's WordNet classes (:func:`~imagent.models.pixels.classes_under`: "mammals", "birds"),
    each photo's score adds ``target_kinds_weight`` x its best score for the category's ``target_kinds`` kinds
    closest to the words ("a photo of a yak" for "mammals"). Read at the kept photos and at a sample of the album
    (for its median and spread) only: a few hundred rows, whatever the album's size. ``target`` itself when the
    words name no category or the setting is off."""
    from imagent.models.pixels import classes_under, label_data

    found = list(classes_under(words)) if cfg.target_kinds and cfg.target_kinds_weight else []
    if not found or not len(tl):
        return target, []
    names = [label_data()[i]["name"] for i in found]
    texts = [cfg.target_prompt.replace("{}", f"a {n}") if "{}" in cfg.target_prompt else n for n in names]
    if len(texts) > cfg.target_kinds:  # the kinds closest to the words (one batch of their text vectors)
        vecs = album.text_vectors([target.text, *texts])
        order = np.argsort(-(vecs[1:] @ vecs[0]), kind="stable")[: cfg.target_kinds]
        texts, names = [texts[i] for i in order], [names[i] for i in order]
    sample = np.arange(0, len(tl), max(1, len(tl) // _KIND_SAMPLE))
    at = np.union1d(sample, np.flatnonzero(kept))
    best = album.scores_at(texts, at).max(axis=0)
    raw = np.full(len(tl), np.nan)
    raw[at] = target.raw[at] + cfg.target_kinds_weight * best
    scores = TextScores(target.text, np.nan_to_num(raw, nan=-np.inf), sample=raw[sample])
    return scores, names


class TextScores:
    """One text's scores over the album (``raw``, aligned with the timeline) and their robust standard form
    ``z`` = (score - median) / spread: how far above the album's run of photos a photo stands, the same scale for
    every encoder. The spread is 1.4826 x the median deviation of the photos *below* the median: the photos that
    show the text sit above it, so even an album where a third of the photos show it keeps the noise's own scale."""

    def __init__(self, text: str, raw: np.ndarray, sample: np.ndarray | None = None) -> None:
        self.text = text
        self.raw = np.asarray(raw, dtype=np.float64)
        if sample is None:  # else the scores of a sample of the album, for the median and spread
            sample = self.raw[:: max(1, len(self.raw) // _SAMPLE)] if len(self.raw) else np.zeros(1)
        self.median = float(np.median(sample))
        below = self.median - sample[sample <= self.median]
        self.spread = max(float(np.median(below)) * 1.4826 if len(below) else 0.0, 1e-6)
        self.z = (self.raw - self.median) / self.spread


@dataclass
class Candidate:
    """One anchor candidate of one hop: its photo (timeline index), its clue strength (``z``), how it was found,
    and, once the chain ran, the photos kept (a mask), the target's best standing there (``support``) and whether
    every relation held exactly."""

    index: int
    photo: str
    z: float
    how: str
    place: np.ndarray | None = None  # a place the anchor's words name: its photos stand for "the anchor's place"


@dataclass
class Path:
    """A candidate for every hop (outermost first) and what the chain kept for it."""

    anchors: list[Candidate]
    kept: np.ndarray
    how: list[str]
    exact: bool
    support: float | None  # the target's best robust score among the kept photos (None: every photo counts)
    shown: bool  # a kept photo other than the anchors passes the floor (or the target is every photo)
    cap: float = CLUE_Z  # the clue_z setting: no clue or support counts for more

    @property
    def clue(self) -> float:
        return min((min(c.z, self.cap) for c in self.anchors), default=0.0)

    @property
    def any_kept(self) -> bool:
        return bool(self.kept.any())

    def to_dict(self, tl: Timeline) -> dict[str, Any]:
        return {"anchors": [c.photo for c in self.anchors], "clue_z": round(self.clue, 3),
                "kept": int(self.kept.sum()), "exact": self.exact, "shown": self.shown,
                "support_z": None if self.support is None else round(self.support, 3), "how": "; ".join(self.how)}


@dataclass
class Execution:
    """What the plan found: the answer (photo ids), the anchors chosen (outermost first) and the paths weighed,
    how many photos the chain kept, the target scores (best first, for the ranking), ``reason`` when the answer is
    empty, notes on the filters, and the evidence the check compares plans by (:meth:`evidence`)."""

    answer: list[str]
    anchors: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    kept: int = 0
    ranked: list[tuple[str, float]] = field(default_factory=list)
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    clue: float = 0.0
    answer_z: float = 0.0

    @property
    def anchor(self) -> str | None:
        """The innermost anchor chosen (the one the target's photos relate to)."""
        return self.anchors[-1] if self.anchors else None

    def evidence(self) -> tuple[bool, float]:
        """How well the scores back this execution: an answer found, then the weakest anchor's clue plus the
        answer's mean standing (robust deviations). The check keeps the plan with more."""
        return bool(self.answer), round(self.clue + self.answer_z, 4)


# --------------------------------------------------------------------------- the answer cut


def evidence_cut(z: np.ndarray, kept: np.ndarray, cfg: AlbumConfig, anchored: bool = False
                 ) -> tuple[np.ndarray, str]:
    """The kept photos (indices) that show the target, best first, and "" — or no photo and the reason. A photo
    shows it when its robust score ``z`` is at least the floor (``match_floor``; ``match_floor_anchored`` within
    the photos a chain of relations kept) and at least ``match_share`` of the best kept photo's; of those, the
    answer ends at the largest drop between consecutive scores (the floor counting as the score after the last)
    when that drop is at least ``match_gap`` and the photo after it stands under ``match_sure``: a clear group is
    kept whole, a lone clear match answers alone."""
    idx = np.flatnonzero(kept)
    if not len(idx):
        return idx, "the chain kept no photo"
    best = float(z[idx].max())
    least = cfg.match_floor_anchored if anchored else cfg.match_floor
    floor = max(least, cfg.match_share * best)
    above = idx[z[idx] >= floor]
    if not len(above):
        return above, (f"no photo matches: the best of the {len(idx)} kept photo(s) stands {best:.1f} deviations "
                       f"above the album's median for the target, under the floor {least:g}")
    order = above[np.argsort(-z[above], kind="stable")]
    drops = -np.diff(np.append(z[order], floor))
    drops[:-1][z[order][1:] >= cfg.match_sure] = 0.0  # never between two photos that both clearly show it
    cut = int(np.argmax(drops))
    if drops[cut] >= cfg.match_gap and cut < len(order) - 1:
        return order[: cut + 1], ""
    return order, ""


# --------------------------------------------------------------------------- relations


def _count(hop: Hop) -> int:
    return max(hop.count, 1) if hop.count >= 0 else hop.count


def _none(tl: Timeline) -> np.ndarray:
    return np.zeros(len(tl), dtype=bool)


def _place_relation(hop: Hop, tl: Timeline, a: int, cfg: AlbumConfig, place: np.ndarray | None
                    ) -> tuple[np.ndarray, str, bool]:
    rel, n = hop.rel, _count(hop)
    city = rel.unit in ("city", "city visit")
    km = cfg.city_km if city else cfg.place_km
    here = place if place is not None and not city else tl.place_mask(a, km)
    where = "the named place" if place is not None and not city else f"within {km:g} km of photo {tl.ids[a]}"
    if not here.any():
        return _none(tl), f"photo {tl.ids[a]} has no GPS and no address", True
    if rel.unit in ("place", "city"):
        return here, where, True
    if tl.trip[a] < 0:
        return _none(tl), f"photo {tl.ids[a]} has no time", True
    visits = tl.visits(here)
    if rel.other:
        return here & (tl.trip != tl.trip[a]), f"{where}, on the {len(visits) - 1} other visit(s)", True
    k = n - 1 if n > 0 else n
    if not -len(visits) <= k < len(visits):
        return _none(tl), f"visit {n} asked for, {len(visits)} visit(s) {where}", True
    return here & (tl.trip == visits[k]), f"visit {n if n > 0 else 'last'} of {len(visits)} {where}", True


def _day_relation(hop: Hop, tl: Timeline, a: int, cfg: AlbumConfig) -> tuple[np.ndarray, str, bool]:
    rel, n, day = hop.rel, _count(hop), int(tl.day[a])
    if rel.direction == 0 and rel.unit == "day":
        return tl.days_mask(day), f"the day {day_date(day)}", True
    weeks = rel.unit == "week"
    want = day + rel.direction * n * (7 if weeks else 1)
    tolerance = cfg.week_tolerance if weeks else cfg.day_tolerance
    found = want if tl.days_mask(want).any() else tl.nearest_day(want, tolerance, tl.day != day)
    if found is None:
        return _none(tl), f"no photo within {tolerance} day(s) of {day_date(want)}", True
    moved = "" if found == want else f" (no photo on {day_date(want)}: the nearest photo day)"
    if weeks:
        trip = int(tl.trip[tl.days_mask(found)][0])
        return tl.trip_mask(trip), f"the trip of {day_date(found)}{moved}", found == want
    return tl.days_mask(found), f"the day {day_date(found)}{moved}", found == want


def _season_relation(hop: Hop, tl: Timeline, a: int) -> tuple[np.ndarray, str, bool]:
    rel = hop.rel
    block, own = tl.season_of(a)
    south = tl.south(a)
    if rel.direction == 0 and hop.season and own != hop.season:
        return _none(tl), f"photo {tl.ids[a]} was taken in {own}, not {hop.season}", True
    if rel.direction:  # the next (last) season of that name with photos ("the autumn after": the first I took)
        blocks = np.unique(tl.season_block[tl.has_day])
        later = blocks[blocks > block] if rel.direction > 0 else blocks[blocks < block][::-1]
        named = [int(b) for b in later if not hop.season or tl.season_name(int(b), south) == hop.season]
        if hop.season and not named:  # "the winter after ...": never the next season of another name
            side = "after" if rel.direction > 0 else "before"
            return _none(tl), f"no {hop.season} with photos {side} photo {tl.ids[a]}", True
        block = named[0] if named else block + rel.direction
    mask = tl.season_block == block
    name = tl.season_name(block, south)
    how = f"the {name} of {day_date(tl.day[mask][0]).year}" if mask.any() else f"a {name} without photos"
    return mask, how, True


def relation_mask(hop: Hop, tl: Timeline, a: int, cfg: AlbumConfig, shows: np.ndarray | None = None,
                  place: np.ndarray | None = None) -> tuple[np.ndarray, str, bool]:
    """The photos (a mask) ``hop``'s relation keeps for anchor photo ``a``, how (in words), and whether the
    relation held exactly (False: the nearest photo day to the date it names stood in). Dispatched on the
    relation's unit and direction (:data:`~imagent.methods.album.plan.RELATION_TABLE`). Time relations keep
    nothing for an anchor without a time; place relations nothing for one without a place; "the same winter as"
    nothing for an anchor taken in another season. ``shows``: the photos that show the target (the occasion
    relations, "the first later trip that shows it"); ``place``: the photos of a place the anchor's words name,
    standing for the photos near the anchor photo."""
    rel, n = hop.rel, _count(hop)
    if rel.unit in ("place", "city", "visit", "city visit"):
        return _place_relation(hop, tl, a, cfg, place)
    if not tl.has_day[a]:
        return _none(tl), f"photo {tl.ids[a]} has no time", True
    day, when = int(tl.day[a]), day_date(int(tl.day[a]))
    trip = int(tl.trip[a])
    if rel.unit in ("day", "week"):
        return _day_relation(hop, tl, a, cfg)
    if rel.unit == "trip":
        t = trip + rel.direction * n
        return tl.trip_mask(t), f"trip {t + 1} of {tl.trips}", True
    if rel.unit == "trip day":
        days = tl.trip_days(trip)
        k = n - 1 if n > 0 else n
        if not -len(days) <= k < len(days):
            return _none(tl), f"day {n} asked for, the trip of {when} has {len(days)} photo day(s)", True
        return tl.days_mask(int(days[k])), f"day {n if n > 0 else 'last'} of the trip of {when}: " \
            f"{day_date(int(days[k]))}", True
    if rel.unit == "month":
        step = rel.direction * n
        shown = add_months(date(when.year, when.month, 1), step)
        return tl.month == int(tl.month[a]) + step, f"the month {shown:%Y-%m}", True
    if rel.unit == "year":
        year = int(tl.year[a]) + rel.direction * n
        return tl.year == year, f"the year {year}", True
    if rel.unit == "season":
        return _season_relation(hop, tl, a)
    if rel.unit == "occasion":
        later = (tl.day > day) if rel.direction > 0 else (tl.day < day) & tl.has_day
        trips = tl.visits(later)
        if rel.direction < 0:
            trips.reverse()
        word = "after" if rel.direction > 0 else "before"
        if not trips:
            return _none(tl), f"no photo {word} {when}", True
        if shows is None:  # every photo: the very next (previous) trip
            return tl.trip_mask(trips[0]), f"the {'next' if rel.direction > 0 else 'previous'} trip", True
        for t in trips:
            members = tl.trip_mask(t)
            if (members & shows).any():
                return members, f"the {'first' if rel.direction > 0 else 'last'} trip {word} {when} showing the " \
                    "target", True
        return _none(tl), f"no trip {word} {when} shows the target", True
    raise ValueError(f"relation {hop.relation!r} has no executor")


# --------------------------------------------------------------------------- filters and candidates


def where_mask(album: Album, tl: Timeline, expression: str) -> np.ndarray:
    """The album's photos (a mask over the timeline) matching a filter expression (the query reader's)."""
    meta = album.meta
    mask = meta.evaluate(parse_filter(expression))
    rows = album.rows
    return mask if rows is None else mask[np.asarray(rows)]


def trip_day_mask(tl: Timeline, kept: np.ndarray, n: int) -> np.ndarray:
    """Of ``kept``, the photos of each trip's n-th photo day among them (-1: the last): "my second day in Kyoto"."""
    out = _none(tl)
    for trip in tl.visits(kept):
        days = np.unique(tl.day[kept & (tl.trip == trip)])
        k = n - 1 if n > 0 else n
        if -len(days) <= k < len(days):
            out |= kept & (tl.day == days[k])
    return out


def first_of_trips(tl: Timeline, mask: np.ndarray, most: int) -> list[int]:
    """The first photo of each trip in ``mask`` (at most ``most``, in time order)."""
    out = []
    for trip in tl.visits(mask)[:most]:
        members = np.flatnonzero(mask & (tl.trip == trip))
        out.append(int(members[np.argmin(tl.day[members])]))
    return out


def hop_candidates(hop: Hop, tl: Timeline, scores: TextScores | None, clues: np.ndarray | None,
                   within: np.ndarray, cfg: AlbumConfig) -> list[Candidate]:
    """Candidates for one hop's anchor among the photos of ``within``: its content words' best photos (within
    ``anchor_margin`` of the best), the first photo of each trip at a place its words name, or — an anchor that
    is only a place, date or person the reader linked — the first photo of each trip matching those clues."""
    allowed = within & (clues if clues is not None else True)
    out: list[Candidate] = []
    words = hop.content or hop.anchor
    named = tl.named_place_mask(words) & allowed if words else _none(tl)
    for i in first_of_trips(tl, named, cfg.anchor_candidates):
        out.append(Candidate(i, tl.ids[i], cfg.clue_z, f"at a place named {words!r}", place=named))
    if scores is not None and allowed.any():
        top = _best(scores.raw, np.flatnonzero(allowed), cfg.anchor_candidates)
        best = float(scores.raw[top[0]])
        taken = {c.index for c in out}
        out += [Candidate(int(i), tl.ids[int(i)], float(scores.z[i]), f"shows {scores.text!r}") for i in top
                if scores.raw[i] >= best - cfg.anchor_margin and int(i) not in taken]
    elif scores is None and clues is not None:
        for i in first_of_trips(tl, allowed, cfg.anchor_candidates):
            out.append(Candidate(i, tl.ids[i], cfg.clue_z, "matches the linked people, places or dates"))
    return out


def choice_key(p: Path) -> tuple[bool, bool, bool, float]:
    """How candidate paths are ranked: one whose chain kept photos, then one where the target shows among them,
    then one whose relations held exactly, then clue + support (the joint evidence of anchor and target)."""
    return p.any_kept, p.shown, p.exact, p.clue + (min(p.support, p.cap) if p.support is not None else 0.0)


# --------------------------------------------------------------------------- the chain


@dataclass
class _Run:
    """What one execution works with: the album's timeline, each text's scores, each hop's clue filters, the
    target's filters, and the settings."""

    tl: Timeline
    cfg: AlbumConfig
    target: TextScores | None
    anchors: list[TextScores | None]
    clues: list[np.ndarray | None]
    base: np.ndarray
    shows: np.ndarray | None


def _paths(plan: Plan, run: _Run) -> list[Path]:
    """Every candidate path through the plan's hops, outermost first: each outer candidate's relation bounds the
    next hop's candidates."""
    tl, cfg = run.tl, run.cfg
    hops = list(reversed(plan.hops))
    scores = list(reversed(run.anchors))
    clues = list(reversed(run.clues))
    partial: list[tuple[list[Candidate], np.ndarray, list[str], bool]] = [([], np.ones(len(tl), bool), [], True)]
    for h, hop in enumerate(hops):
        grown = []
        for chosen, within, how, exact in partial:
            for c in hop_candidates(hop, tl, scores[h], clues[h], within, cfg):
                mask, said, held = relation_mask(hop, tl, c.index, cfg, run.shows, c.place)
                grown.append(([*chosen, c], mask, [*how, f"{c.photo} ({c.how}): {said}"], exact and held))
        partial = grown
    out = []
    for chosen, mask, how, exact in partial:
        kept = mask & run.base
        others = kept.copy()
        others[[c.index for c in chosen]] = False
        if run.target is None:
            support, shown = None, bool(kept.any())
        else:
            support = float(run.target.z[others].max()) if others.any() else None
            shown = support is not None and support >= cfg.match_floor_anchored
            if support is None:
                kept = _none(tl)  # nothing but the anchor itself: no evidence for the target
        out.append(Path(chosen, kept, how, exact, support, shown, cfg.clue_z))
    return out


def _filters(plan: Plan, album: Album, run_tl: Timeline, cfg: AlbumConfig, exclude: TextScores | None,
             notes: list[str]) -> np.ndarray:
    """The target's filters as one mask: the reader's people, places and dates, the plan's place, the
    exclusion (a place named so, else the photos that clearly show it)."""
    tl = run_tl
    base = np.ones(len(tl), dtype=bool)
    if plan.where:
        try:
            m = where_mask(album, tl, plan.where)
            base &= m
            notes.append(f"{' · '.join(plan.understood) or plan.where}: {int(m.sum())} photo(s)")
        except FilterError as exc:
            notes.append(f"the reader's filter {plan.where!r} was not applied: {exc}")
    if plan.place:
        m = tl.named_place_mask(plan.place)
        if m.any():
            base &= m
            notes.append(f"place {plan.place!r}: {int(m.sum())} photo(s) at places named so")
        else:
            notes.append(f"place {plan.place!r}: no address of this album names it; not applied")
    if plan.exclude:
        m = tl.named_place_mask(plan.exclude)
        if not m.any():
            m = tl.address_mask(plan.exclude)
        if m.any():
            base &= ~m
            notes.append(f"exclude {plan.exclude!r}: {int(m.sum())} photo(s) at places named so")
        elif exclude is not None:
            hits, _ = evidence_cut(exclude.z, np.ones(len(tl), dtype=bool), cfg)
            base[hits] = False
            notes.append(f"exclude {plan.exclude!r}: no place is named so; {len(hits)} photo(s) showing it left out")
    return base


def execute(plan: Plan, album: Album, cfg: AlbumConfig, trace: Trace, asks_all: bool = False) -> Execution:
    """Run ``plan`` over ``album``, recording each step in ``trace`` (module docstring). ``asks_all``: the question
    asks for every photo ("all my photos from ..."), so a chain that narrows nothing may answer the whole album."""
    tl = Timeline.of(album, cfg.trip_gap_days)
    notes: list[str] = []
    asked = cfg.target_prompt.replace("{}", plan.target) if "{}" in cfg.target_prompt else plan.target
    texts = [] if plan.every_photo else [asked]
    texts += [h.content for h in plan.hops if h.content]
    texts += [plan.exclude] if plan.exclude else []
    texts = list(dict.fromkeys(texts))
    matrix = album.scores(texts) if texts and len(tl) else None
    by_text = {t: TextScores(t, matrix[i]) for i, t in enumerate(texts)} if matrix is not None else {}
    target = None if plan.every_photo else by_text.get(asked)
    base = _filters(plan, album, tl, cfg, by_text.get(plan.exclude) if plan.exclude else None, notes)
    shows = target.z >= cfg.match_floor_anchored if target is not None else None
    clues = [where_mask(album, tl, h.clues) if h.clues else None for h in plan.hops]
    run = _Run(tl, cfg, target, [by_text.get(h.content) if h.content else None for h in plan.hops], clues, base,
               shows if shows is None else shows & base)
    if plan.trip_day is not None and plan.relation != "trip day":
        base &= trip_day_mask(tl, base, plan.trip_day)
        notes.append(f"day {plan.trip_day if plan.trip_day > 0 else 'last'} of each trip of the photos kept")
        run.base = base

    with trace.step("album.anchor", hops=[h.to_dict() for h in plan.hops]) as step:
        paths = _paths(plan, run) if plan.hops else []
        step.outputs = {"paths": len(paths), "candidates": sorted({c.photo for p in paths for c in p.anchors})}
        if plan.hops and not paths:
            step.note("no photo matches the anchor")

    with trace.step("album.constraint", relations=[h.relation for h in plan.hops]) as step:
        chosen = max(paths, key=choice_key) if paths else None
        kept = base if not plan.hops else (chosen.kept if chosen is not None and chosen.any_kept else _none(tl))
        step.outputs = {"paths": [p.to_dict(tl) for p in sorted(paths, key=choice_key, reverse=True)[:12]],
                        "kept": int(kept.sum()), "filters": notes,
                        "how": "; ".join(chosen.how) if chosen is not None else "the whole album"}

    with trace.step("album.target", target=plan.target, every_photo=plan.every_photo) as step:
        reason, cut, kinds = "", target, []
        if plan.hops and chosen is None:
            reason = "no photo matches the anchor"
        elif plan.hops and not kept.any():
            reason = "the relation kept no photo for any anchor candidate"
        if target is None:
            narrowed = bool(plan.hops or plan.where or plan.place or plan.exclude or plan.trip_day is not None)
            if not reason and not narrowed and not asks_all:
                reason = "the question names nothing to narrow the album to (ask for all photos to list them all)"
            matched = np.flatnonzero(kept)[np.argsort(tl.day[kept], kind="stable")] if not reason else []
        else:
            if not reason:
                cut, kinds = kinds_scores(album, tl, target, plan.target, kept, cfg)
            if kinds:
                step.note(f"{plan.target!r} names a category: its kinds read too ({', '.join(kinds[:5])}"
                          f"{', ...' if len(kinds) > 5 else ''})")
            matched, why = evidence_cut(cut.z, kept, cfg, anchored=plan.anchored) if not reason else ([], "")
            reason = reason or why
        answer = [tl.ids[int(i)] for i in matched]
        if reason:
            step.note(reason)
        step.outputs = {"answer": answer, "reason": reason}
        if target is not None:
            shown = _best(cut.z, np.flatnonzero(kept), 30)
            step.outputs.update({"album_median": round(cut.median, 4), "album_spread": round(cut.spread, 4),
                                 "kept_z": [[tl.ids[int(i)], round(float(cut.z[i]), 2)] for i in shown],
                                 "kinds": len(kinds)})
    ranked = _ranked(tl, target)
    answer_z = float(np.minimum(cut.z[np.asarray(matched, dtype=np.int64)], cfg.clue_z * 2).mean()) if (
        target is not None and len(matched)) else 0.0
    return Execution(answer, [c.photo for c in chosen.anchors] if chosen is not None else [], paths,
                     int(kept.sum()), ranked, reason, notes, chosen.clue if chosen is not None else 0.0, answer_z)


def _best(values: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` indices of ``idx`` with the highest ``values``, best first (a partition, then a small sort)."""
    if len(idx) > k:
        idx = idx[np.argpartition(-values[idx], k - 1)[:k]]
    return idx[np.argsort(-values[idx], kind="stable")]


def _ranked(tl: Timeline, target: TextScores | None, most: int = 500) -> list[tuple[str, float]]:
    """The album's best photos for the target (at most ``most``, best first; the earliest for every photo)."""
    every = np.arange(len(tl))
    if target is None:
        return [(tl.ids[int(i)], 0.0) for i in _best(-tl.day.astype(np.float64), every, most)]
    return [(tl.ids[int(i)], float(target.raw[i])) for i in _best(target.raw, every, most)]


__all__ = ["Candidate", "Execution", "Path", "TextScores", "choice_key", "evidence_cut", "execute", "relation_mask",
           "trip_day_mask", "where_mask"]
