"""OSCAR's offline optimisation: the two mixed-integer programs that turn atomic retrievals and a known
ground truth into an optimal trajectory (paper Sec. 3.3-3.4, Appendix B; decision 2 of papers/README.md).

Notation (decision 2). ``I`` is the gallery, ``I+`` the ground truth, ``I- = I \\ I+``. An atomic
retrieval ``r = (tool, query, polarity, k)`` returns ``S_r`` = the first ``k`` of its ranked results.
A *family* is the retrievals sharing tool, query and polarity (they differ only in ``k``).

**Stage I** (recall-oriented selection) over the positive retrievals ``R+``::

    max  w_R/|I+| * sum_{i in I+} y_i  -  w_P/|I-| * sum_{i in I-} z_i  +  lambda_div * sum_t u_t
    s.t. at most one retrieval per family;  y_i / z_i = 1 iff some selected r has i in S_r;
         u_t = 1 iff some selected r uses tool t.

**Stage II** (precision-oriented composition) over ``U = union of S_r for r in R+*`` (the Stage I
selection), choosing positives ``p_r`` (r in R+*) and negatives ``n_r`` (r in R-)::

    f_i = OR_{r in R+*}(c_ri p_r) AND NOT g_i,   g_i = nu AND AND_{r in R-, n_r = 1} d_ri,
    nu = 1 iff some negative is selected,   sum_r p_r >= 1,
    max  sum_{i in U and I+} f_i  -  lambda_fp * sum_{i in U and I-} f_i.

The composed set is ``(union of selected positives) minus (intersection of selected negatives)``.
Appendix B.2 as printed is not exact (with no negative selected its constraint (2e) removes every
image, and ``f_i`` has only upper bounds so the false-positive penalty can be dodged). Stage II here pins
every AND/OR in both directions, so each indicator equals its logical value at any feasible point. Stage I
is linearised *one-sided*: a class worth covering gets only ``v <= sum x`` (covered only if returned), a
costly one only ``v >= x`` (counted whenever returned), and ``u_t <= sum x``; the objective pushes each
indicator against its one bound, so at the optimum every indicator equals its logical value and the
optimum is that of the exact model (brute force in the tests agrees), though a non-optimal feasible point
may under-count.

**Formulation** (what keeps ~1,200 retrievals over a 120,000-image gallery well under a second):

- Only images some selectable retrieval returns get variables; the rest are 0 in every plan.
- Images with the same *membership* (which retrievals return them) behave identically, so they share
  one indicator whose objective coefficient is their weighted count; classes with coefficient 0 are
  left out (they cannot change the objective).
- Stage I's "covered" is ``v >= sum_{r in f, i in S_r} x_r`` per *family* (that sum is 0/1 because of
  the one-per-family constraint) instead of one row per retrieval; ``v <= sum_{r: i in S_r} x_r``.
- Stage II's negative intersection uses the count ``T = sum_r n_r``: the number of selected negatives
  that miss image class ``c`` is ``T - sum_{r in N_c} n_r``, so ``g_c >= nu - (T - sum_{N_c} n_r)`` and
  ``T - sum_{N_c} n_r <= M (1 - g_c)`` (``M`` = the most negatives that can be selected) are one row each.
- Negatives are restricted to ``U`` without loss: one that returns nothing in ``U`` empties the
  intersection (same composed set as selecting none), two with the same set in ``U`` are
  interchangeable, and within a family whose sets in ``U`` are nested selecting two equals selecting
  the smaller, so at most one per such family is selected. Brute force over *all* subsets (the tests)
  confirms these reductions keep the optimum.

**Exactness and ties.** HiGHS runs with ``mip_rel_gap = 0`` on an objective scaled so that its smallest
coefficient is 1 (its absolute gap, 1e-6, is then below any difference that matters) and, for the usual
weights, made integral (see :func:`_integral_objective`). Every reported
objective is recomputed from the returned selection with the formula above, never read from the
solver. Ties are broken deterministically: HiGHS is deterministic for a given model, the model is built
in input order, and the returned plan is then made *minimal* in input order: a selected retrieval is
dropped (Stage I: or replaced by a smaller truncation of its family) whenever that does not lower the
objective. So the same instance always yields the same plan, and no part of it is redundant.

Weights (not given by the paper; defaults in :class:`MipWeights`, overridable per instance and as
``methods.oscar.*`` config fields): ``w_R = 1`` and ``w_P = 1`` weigh the normalised recall and noise
terms; ``lambda_div`` unset (the default) makes the tool-diversity bonus a pure tie-break
(:func:`tie_break_bonus`: smaller than any difference of the recall and noise terms, so it never changes
which targets and non-targets Stage I covers; a fixed 0.01, the earlier default, could outweigh the noise
term of a 2,315-image gallery and pick a truncation reaching no target); a number sets it as given;
``lambda_fp = 0.05`` makes one kept
target worth twenty kept non-targets, so Stage II keeps a truncation that brings a target with up to
19 other images. With an empty ``I+`` (or ``I-``) the recall (noise) term is 0.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# HiGHS runs until proven optimal; this only guards against a pathological instance.
DEFAULT_TIME_LIMIT_S = 60.0


class MipInputError(ValueError):
    """An instance that cannot be solved as given (unknown ids, bad polarity, duplicate ids, ...)."""


def read_instance_file(path: str | Path) -> Any:
    """The JSON document of an instance file: :class:`FileNotFoundError` when there is none, :class:`MipInputError`
    when it is not JSON."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no instance file at {p}")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MipInputError(f"{p}: not valid JSON ({exc})") from None


class MipWeights(BaseModel):
    """The weights of decision 2 (the paper gives none). See the module docstring for the defaults."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    w_R: float = Field(1.0, ge=0.0, description="Stage I: weight of the recall term sum_{I+} y / |I+|")
    w_P: float = Field(1.0, ge=0.0, description="Stage I: weight of the noise term sum_{I-} z / |I-|")
    lambda_div: float | None = Field(None, ge=0.0, description="Stage I: bonus per retrieval tool used; None (the "
                                     "default): a tie-break only, below any difference of the recall/noise terms")
    lambda_fp: float = Field(0.05, ge=0.0, description="Stage II: penalty per kept non-target (a target is 1)")


@dataclass(frozen=True)
class AtomicRetrieval:
    """One atomic retrieval: ``S_r`` is the first ``k`` of ``results`` (ranked best first)."""

    id: str
    tool: str
    query: str
    polarity: Literal["+", "-"]
    k: int
    results: tuple[str, ...]

    @property
    def family(self) -> tuple[str, str, str]:
        return (self.tool, self.query, self.polarity)

    @property
    def items(self) -> tuple[str, ...]:
        return self.results[: self.k]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tool": self.tool, "query": self.query, "polarity": self.polarity, "k": self.k,
                "results": list(self.results)}


@dataclass
class MipInstance:
    """A gallery, its ground truth and the atomic retrievals: the input of both stages."""

    gallery: list[str]
    positives: list[str]
    retrievals: list[AtomicRetrieval]
    weights: MipWeights = field(default_factory=MipWeights)

    def __post_init__(self) -> None:
        self._index = {g: n for n, g in enumerate(self.gallery)}
        if len(self._index) != len(self.gallery):
            raise MipInputError("gallery ids must be unique")
        unknown = [p for p in self.positives if p not in self._index]
        if unknown:
            raise MipInputError(f"positives not in the gallery: {unknown[:5]}")
        self.positive_set = {self._index[p] for p in self.positives}
        seen: set[str] = set()
        self.sets: list[frozenset[int]] = []
        for r in self.retrievals:
            if r.id in seen:
                raise MipInputError(f"retrieval id {r.id!r} appears twice")
            seen.add(r.id)
            if r.polarity not in ("+", "-"):
                raise MipInputError(f"retrieval {r.id!r}: polarity must be '+' or '-', not {r.polarity!r}")
            if r.k < 1:
                raise MipInputError(f"retrieval {r.id!r}: k must be >= 1")
            if len(set(r.results)) != len(r.results):
                raise MipInputError(f"retrieval {r.id!r}: an image appears twice in its results")
            missing = [x for x in r.items if x not in self._index]
            if missing:
                raise MipInputError(f"retrieval {r.id!r}: results not in the gallery: {missing[:5]}")
            self.sets.append(frozenset(self._index[x] for x in r.items))

    @classmethod
    def from_dict(cls, data: Any, default_weights: MipWeights | None = None) -> MipInstance:
        """Parse ``{"gallery", "positives", "retrievals": [{id, tool, query, polarity, k, results}],
        "weights"?}``; instance weights override ``default_weights`` key by key."""
        if not isinstance(data, dict):
            raise MipInputError("an instance is a JSON object with gallery, positives and retrievals")
        for key in ("gallery", "positives", "retrievals"):
            if not isinstance(data.get(key), list):
                raise MipInputError(f"instance field {key!r} must be a list")
        base = (default_weights or MipWeights()).model_dump()
        extra = data.get("weights") or {}
        if not isinstance(extra, dict):
            raise MipInputError("instance field 'weights' must be an object")
        try:
            weights = MipWeights.model_validate({**base, **extra})
        except ValidationError as exc:
            raise MipInputError(f"invalid weights: {exc}") from None
        retrievals = []
        for n, r in enumerate(data["retrievals"]):
            if not isinstance(r, dict):
                raise MipInputError(f"retrieval #{n} must be an object")
            missing = [k for k in ("id", "tool", "query", "polarity", "k", "results") if k not in r]
            if missing:
                raise MipInputError(f"retrieval #{n} lacks {', '.join(missing)}")
            if not isinstance(r["results"], list) or isinstance(r["k"], bool) or not isinstance(r["k"], int):
                raise MipInputError(f"retrieval {r['id']!r}: k must be an integer and results a list")
            retrievals.append(AtomicRetrieval(str(r["id"]), str(r["tool"]), str(r["query"]), r["polarity"],
                                              r["k"], tuple(str(x) for x in r["results"])))
        return cls([str(g) for g in data["gallery"]], [str(p) for p in data["positives"]], retrievals, weights)

    @classmethod
    def from_file(cls, path: str | Path, default_weights: MipWeights | None = None) -> MipInstance:
        return cls.from_dict(read_instance_file(path), default_weights)

    def to_dict(self) -> dict[str, Any]:
        return {"gallery": list(self.gallery), "positives": list(self.positives),
                "retrievals": [r.to_dict() for r in self.retrievals], "weights": self.weights.model_dump()}

    # ------------------------------------------------------------------ helpers
    def indices(self, polarity: str) -> list[int]:
        return [n for n, r in enumerate(self.retrievals) if r.polarity == polarity]

    def by_id(self, ids: Iterable[str]) -> list[int]:
        pos = {r.id: n for n, r in enumerate(self.retrievals)}
        try:
            return [pos[i] for i in ids]
        except KeyError as exc:
            raise MipInputError(f"unknown retrieval id {exc.args[0]!r}") from None

    def ids(self, indices: Iterable[int]) -> list[str]:
        return [self.retrievals[n].id for n in indices]

    def gallery_ids(self, images: Iterable[int]) -> list[str]:
        return [self.gallery[i] for i in sorted(images)]

    @property
    def n_negative_images(self) -> int:
        return len(self.gallery) - len(self.positive_set)

    @property
    def lambda_div(self) -> float:
        """The Stage I bonus per tool: ``weights.lambda_div`` when set, else :func:`tie_break_bonus`."""
        if self.weights.lambda_div is not None:
            return self.weights.lambda_div
        if not hasattr(self, "_tie_break"):
            tools = {r.tool for r in self.retrievals if r.polarity == "+"}
            self._tie_break = tie_break_bonus(self.weights, len(self.positive_set), self.n_negative_images,
                                              len(tools))
        return self._tie_break


def tie_break_bonus(weights: MipWeights, n_pos: int, n_neg: int, n_tools: int) -> float:
    """A per-tool bonus too small to change Stage I's recall/noise value: only a tie-break among selections
    with the same value.

    The recall/noise value of a selection is ``a * w_R/|I+| - b * w_P/|I-|`` for integers ``a`` (targets
    covered) and ``b`` (non-targets covered). With the weights read as fractions (denominators up to 10^6),
    every such value is a multiple of ``1/D``, ``D`` the least common multiple of the denominators of
    ``w_R/|I+|`` and ``w_P/|I-|``, so two values that differ, differ by at least ``1/D``. The bonus of all
    ``n_tools`` tools together is below that: ``1 / (D * (n_tools + 1))`` per tool. So the optimum's recall and
    noise are those of a bonus-free optimum, and among equal ones the selection using more tools wins
    (``tests/oscar/test_mip.py`` checks it against brute force)."""
    denominator = 1
    for w, n in ((weights.w_R, n_pos), (weights.w_P, n_neg)):
        if w and n:
            denominator = math.lcm(denominator, (Fraction(w).limit_denominator(10**6) / n).denominator)
    return 1.0 / (denominator * (n_tools + 1))


# --------------------------------------------------------------------------- exact objective values


def _unit_weights(inst: MipInstance) -> tuple[float, float]:
    """(w_R/|I+|, w_P/|I-|), each 0 when its set is empty."""
    npos, nneg = len(inst.positive_set), inst.n_negative_images
    w = inst.weights
    return (w.w_R / npos if npos else 0.0), (w.w_P / nneg if nneg else 0.0)


def union_of(inst: MipInstance, selected: Iterable[int]) -> set[int]:
    out: set[int] = set()
    for n in selected:
        out |= inst.sets[n]
    return out


def stage_one_objective(inst: MipInstance, selected: Sequence[int]) -> float:
    """Decision 2's Stage I value at a selection (retrieval indices)."""
    covered = union_of(inst, selected)
    pos = len(covered & inst.positive_set)
    wr, wp = _unit_weights(inst)
    tools = {inst.retrievals[n].tool for n in selected}
    return wr * pos - wp * (len(covered) - pos) + inst.lambda_div * len(tools)


def compose(inst: MipInstance, positive: Sequence[int], negative: Sequence[int]) -> set[int]:
    """(union of the positives' sets) minus (intersection of the negatives' sets; empty with none)."""
    kept = union_of(inst, positive)
    if negative:
        inter = set(inst.sets[negative[0]])
        for n in negative[1:]:
            inter &= inst.sets[n]
        kept -= inter
    return kept


def stage_two_objective(inst: MipInstance, positive: Sequence[int], negative: Sequence[int]) -> float:
    """Decision 2's Stage II value: kept targets - lambda_fp * kept non-targets (kept sets lie in U)."""
    kept = compose(inst, positive, negative)
    pos = len(kept & inst.positive_set)
    return pos - inst.weights.lambda_fp * (len(kept) - pos)


# --------------------------------------------------------------------------- results


@dataclass
class StageOne:
    selected: list[str]
    objective: float
    optimal: bool = True
    covered_positives: int = 0
    covered_negatives: int = 0
    tools: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class StageTwo:
    positive: list[str]
    negative: list[str]
    objective: float
    optimal: bool = True
    universe: int = 0  # |U|
    union: int = 0  # |union of the selected positives|
    removed: int = 0  # how many of them the DIFFERENCE removed
    kept_positives: int = 0
    kept_negatives: int = 0
    seconds: float = 0.0


@dataclass
class MipPlan:
    stage1: StageOne
    stage2: StageTwo
    final: list[str]

    def to_dict(self) -> dict[str, Any]:
        """The ``imagent oscar solve --json`` document (issue 14's format)."""
        return {
            "stage1": {"selected": list(self.stage1.selected), "objective": self.stage1.objective},
            "stage2": {"positive": list(self.stage2.positive), "negative": list(self.stage2.negative),
                       "objective": self.stage2.objective},
            "final": list(self.final),
        }

    def details(self) -> dict[str, Any]:
        """Everything, for traces and the golden library (sizes, optimality, seconds)."""
        return {"stage1": vars(self.stage1).copy(), "stage2": vars(self.stage2).copy(), "final": list(self.final)}


# --------------------------------------------------------------------------- the solver


class _Model:
    """A small builder of a binary/integer MILP for ``scipy.optimize.milp`` (maximisation)."""

    def __init__(self) -> None:
        self.c: list[float] = []
        self.ub: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def var(self, obj: float = 0.0, ub: float = 1.0) -> int:
        self.c.append(obj)
        self.ub.append(ub)
        return len(self.c) - 1

    def row(self, terms: Iterable[tuple[int, float]], lo: float = -math.inf, hi: float = math.inf) -> None:
        r = len(self.lo)
        for col, val in terms:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(val)
        self.lo.append(lo)
        self.hi.append(hi)

    def solve(self, time_limit_s: float) -> tuple[np.ndarray, bool]:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_array

        n = len(self.c)
        c = _integral_objective(np.asarray(self.c, dtype=np.float64))
        constraints = []
        if self.lo:
            a = csr_array((self.vals, (self.rows, self.cols)), shape=(len(self.lo), n))
            constraints.append(LinearConstraint(a, np.asarray(self.lo), np.asarray(self.hi)))
        res = milp(-c, integrality=np.ones(n), bounds=Bounds(np.zeros(n), np.asarray(self.ub)),
                   constraints=constraints, options={"mip_rel_gap": 0.0, "time_limit": time_limit_s,
                                                     "presolve": True})
        if res.x is None:
            raise RuntimeError(f"HiGHS found no solution: {res.message}")
        return np.round(res.x).astype(np.int64), res.status == 0


def _integral_objective(c: np.ndarray) -> np.ndarray:
    """The objective rescaled so its smallest coefficient is 1 (HiGHS's absolute gap, 1e-6, then lies below
    any difference that matters) and, when the weights are rationals with small denominators (0.01, 1/|I+|,
    1/|I-|: the usual case), made integral: HiGHS then detects an integral objective and prunes every node
    whose bound is less than one unit above the incumbent, which is what closes the last gap quickly. A
    coefficient moves by at most 1e-9 of itself; objective values are always recomputed exactly."""
    nz = np.abs(c[c != 0])
    if nz.size == 0:
        return c
    scaled = c * min(1.0 / nz.min(), 1e7 / nz.max())
    fracs = [Fraction(float(v)).limit_denominator(1000) for v in scaled]
    if any(abs(float(f) - v) > 1e-9 * max(1.0, abs(v)) for f, v in zip(fracs, scaled, strict=True)):
        return scaled
    denominator = 1
    for f in fracs:
        denominator = math.lcm(denominator, f.denominator)
    integral = np.array([float(f * denominator) for f in fracs])
    return integral if np.abs(integral).max() <= 1e9 else scaled


def _classes(members: dict[int, list[Any]], positive: set[int]) -> dict[tuple, list[int]]:
    """Images grouped by membership (which retrievals return them): key -> [#targets, #non-targets]."""
    out: dict[tuple, list[int]] = {}
    for image, key in members.items():
        cnt = out.setdefault(tuple(key), [0, 0])
        cnt[0 if image in positive else 1] += 1
    return out


def solve_stage_one(inst: MipInstance, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> StageOne:
    """Stage I: the recall-oriented selection of positive retrievals (exact; see the module docstring)."""
    import time

    t0 = time.perf_counter()
    cand = inst.indices("+")
    if not cand:
        return StageOne([], 0.0, seconds=time.perf_counter() - t0)
    wr, wp = _unit_weights(inst)
    all_families: dict[tuple, list[int]] = defaultdict(list)
    for r in cand:
        all_families[inst.retrievals[r].family].append(r)
    family_of = {r: f for f, rs in all_families.items() for r in rs}
    families = {f: _undominated(inst, rs) for f, rs in all_families.items()}
    cand = sorted(r for rs in families.values() for r in rs)
    m = _Model()
    x = {r: m.var() for r in cand}
    for rs in families.values():
        if len(rs) > 1:
            m.row(((x[r], 1.0) for r in rs), hi=1.0)
    tools: dict[str, list[tuple]] = defaultdict(list)
    for f in families:
        tools[f[0]].append(f)
    for fams in tools.values():
        u = m.var(inst.lambda_div)
        # A tool counts only if used: u <= sum x. lambda_div >= 0 (validated) pushes u up to that bound, so
        # u >= x needs no rows (they held at every optimum and only slowed each node's LP).
        m.row([(u, 1.0), *((x[r], -1.0) for f in fams for r in families[f])], hi=0.0)
    members: dict[int, list[int]] = defaultdict(list)
    for r in cand:
        for i in inst.sets[r]:
            members[i].append(r)
    for key, (npos, nneg) in _classes(members, inst.positive_set).items():
        coef = wr * npos - wp * nneg
        if coef == 0:
            continue
        v = m.var(coef)
        # Only the side the objective pushes against is needed: a class worth covering (coef > 0) is covered
        # only if some retrieval returns it (v <= sum x); a costly one (coef < 0) is counted whenever one does
        # (v >= x, one row per family: a family holds at most one selected truncation). The other side holds
        # at every optimum by itself, and leaving it out makes each node's LP smaller.
        if coef > 0:
            m.row([(v, 1.0), *((x[r], -1.0) for r in key)], hi=0.0)
            continue
        by_family: dict[tuple, list[int]] = defaultdict(list)
        for r in key:
            by_family[family_of[r]].append(r)
        for rs in by_family.values():
            m.row([*((x[r], 1.0) for r in rs), (v, -1.0)], hi=0.0)
    sol, optimal = m.solve(time_limit_s)
    selected = [r for r in cand if sol[x[r]] > 0]
    selected = _minimal_stage_one(inst, selected, all_families, family_of)
    covered = union_of(inst, selected)
    pos = len(covered & inst.positive_set)
    return StageOne(inst.ids(selected), stage_one_objective(inst, selected), optimal, pos, len(covered) - pos,
                    sorted({inst.retrievals[r].tool for r in selected}), time.perf_counter() - t0)


def _undominated(inst: MipInstance, members: list[int]) -> list[int]:
    """A family's truncations that can be in an optimal selection. When its sets are nested (the usual
    case: one ranking sliced), a truncation that adds no target over the next smaller one is never
    better than it (same tool, no more targets, no fewer non-targets), so it is left out: Stage I's
    value at the optimum is unchanged and the search shrinks from 10 truncations to the few where a
    target enters. Non-nested families keep every member."""
    chain = sorted(members, key=lambda r: (inst.retrievals[r].k, r))
    if not all(inst.sets[a] <= inst.sets[b] for a, b in itertools.pairwise(chain)):
        return members
    keep = [chain[0]]
    for prev, r in itertools.pairwise(chain):
        if (inst.sets[r] - inst.sets[prev]) & inst.positive_set:
            keep.append(r)
    return keep


def _not_worse(new: float, best: float) -> bool:
    return new >= best - 1e-12 * max(1.0, abs(best))


def _minimal_stage_one(inst: MipInstance, selected: list[int], families: dict[tuple, list[int]],
                       family_of: dict[int, tuple]) -> list[int]:
    """Drop, then shrink, selected retrievals (input order) while the objective does not drop.

    Works on coverage counts (how many selected retrievals return each image), so each trial costs
    the size of the sets it touches, not a new union."""
    wr, wp = _unit_weights(inst)
    lam = inst.lambda_div
    count: dict[int, int] = defaultdict(int)
    for r in selected:
        for i in inst.sets[r]:
            count[i] += 1
    tool_uses: dict[str, int] = defaultdict(int)
    for r in selected:
        tool_uses[inst.retrievals[r].tool] += 1

    def gain(images: Iterable[int], sign: int) -> float:
        """Objective change when ``images`` lose (sign -1) or gain (sign +1) their only coverage."""
        return sign * sum(wr if i in inst.positive_set else -wp for i in images)

    def replace_delta(r: int, s: int | None) -> float:
        old, new = inst.sets[r], (inst.sets[s] if s is not None else frozenset())
        lost = [i for i in old - new if count[i] == 1]
        won = [i for i in new - old if count[i] == 0]
        tool_term = -lam if s is None and tool_uses[inst.retrievals[r].tool] == 1 else 0.0
        return gain(lost, -1) + gain(won, 1) + tool_term

    def apply(r: int, s: int | None) -> None:
        for i in inst.sets[r]:
            count[i] -= 1
        tool_uses[inst.retrievals[r].tool] -= 1
        if s is not None:
            for i in inst.sets[s]:
                count[i] += 1
            tool_uses[inst.retrievals[s].tool] += 1

    current = list(selected)
    for r in list(current):
        if replace_delta(r, None) >= -1e-12:
            apply(r, None)
            current.remove(r)
    for pos, r in enumerate(list(current)):
        smaller = sorted((s for s in families[family_of[r]] if inst.retrievals[s].k < inst.retrievals[r].k),
                         key=lambda s: (inst.retrievals[s].k, s))
        for s in smaller:
            if replace_delta(r, s) >= -1e-12:
                apply(r, s)
                current[pos] = s
                break
    return sorted(current)


def solve_stage_two(inst: MipInstance, stage1: Sequence[str], time_limit_s: float = DEFAULT_TIME_LIMIT_S
                    ) -> StageTwo:
    """Stage II: compose the Stage I selection (ids) with negatives (exact; see the module docstring)."""
    import time

    t0 = time.perf_counter()
    sel = inst.by_id(stage1)
    if any(inst.retrievals[r].polarity != "+" for r in sel):
        raise MipInputError("Stage II composes the Stage I selection, which holds positive retrievals only")
    if not sel:
        return StageTwo([], [], 0.0, seconds=time.perf_counter() - t0)
    universe = union_of(inst, sel)
    lam = inst.weights.lambda_fp
    # Negatives reduced to U: empty ones dropped, equal ones merged (first kept), nested families chained.
    seen_sets: set[frozenset[int]] = set()
    negs: list[int] = []
    restricted: dict[int, frozenset[int]] = {}
    for r in inst.indices("-"):
        s = inst.sets[r] & universe
        if not s or s in seen_sets:
            continue
        seen_sets.add(s)
        negs.append(r)
        restricted[r] = frozenset(s)
    families: dict[tuple, list[int]] = defaultdict(list)
    for r in negs:
        families[inst.retrievals[r].family].append(r)
    groups: list[list[int]] = []
    for rs in families.values():
        chain = sorted(rs, key=lambda r: len(restricted[r]))
        if all(restricted[a] <= restricted[b] for a, b in itertools.pairwise(chain)):
            groups.append(rs)
        else:
            groups.extend([r] for r in rs)
    m = _Model()
    p = {r: m.var() for r in sel}
    n = {r: m.var() for r in negs}
    m.row(((p[r], 1.0) for r in sel), lo=1.0)
    big_m = float(len(groups))
    if negs:
        nu = m.var()
        t = m.var(ub=big_m)
        m.row([(t, 1.0), *((n[r], -1.0) for r in negs)], lo=0.0, hi=0.0)
        for g in groups:
            if len(g) > 1:
                m.row(((n[r], 1.0) for r in g), hi=1.0)
            m.row([*((n[r], 1.0) for r in g), (nu, -1.0)], hi=0.0)
        m.row([(nu, 1.0), (t, -1.0)], hi=0.0)
    members: dict[int, list[Any]] = defaultdict(list)
    for r in sel:
        for i in inst.sets[r]:
            members[i].append(r)
    for r in negs:
        for i in restricted[r]:
            members[i].append(-1 - r)  # negatives as -1 - index: one key holds both sides, in order
    for key, (npos, nneg) in _classes(members, inst.positive_set).items():
        coef = npos - lam * nneg
        if coef == 0:
            continue
        pos_key = [r for r in key if r >= 0]
        neg_key = [-1 - r for r in key if r < 0]
        f = m.var(coef)
        a = m.var()
        m.row([(a, 1.0), *((p[r], -1.0) for r in pos_key)], hi=0.0)  # a <= OR
        for r in pos_key:
            m.row([(p[r], 1.0), (a, -1.0)], hi=0.0)  # a >= each
        m.row([(f, 1.0), (a, -1.0)], hi=0.0)  # f <= a
        if not negs:
            m.row([(f, 1.0), (a, -1.0)], lo=0.0)  # f >= a (g = 0)
            continue
        g = m.var()
        m.row([(g, 1.0), (nu, -1.0)], hi=0.0)  # g <= nu
        # selected negatives missing this class: t - sum_{N_c} n  (0 iff every selected one holds it)
        missing = [(t, 1.0), *((n[r], -1.0) for r in neg_key)]
        m.row([*missing, (g, big_m)], hi=big_m)  # g = 1 -> none missing
        m.row([(nu, 1.0), *((c, -v) for c, v in missing), (g, -1.0)], hi=0.0)  # nu and none missing -> g
        m.row([(f, 1.0), (g, 1.0)], hi=1.0)  # f <= 1 - g
        m.row([(a, 1.0), (g, -1.0), (f, -1.0)], hi=0.0)  # f >= a - g
    sol, optimal = m.solve(time_limit_s)
    pos_sel = [r for r in sel if sol[p[r]] > 0]
    neg_sel = [r for r in negs if sol[n[r]] > 0]
    pos_sel, neg_sel = _minimal_stage_two(inst, pos_sel, neg_sel)
    union = union_of(inst, pos_sel)
    kept = compose(inst, pos_sel, neg_sel)
    kp = len(kept & inst.positive_set)
    return StageTwo(inst.ids(pos_sel), inst.ids(neg_sel), stage_two_objective(inst, pos_sel, neg_sel), optimal,
                    len(universe), len(union), len(union) - len(kept), kp, len(kept) - kp,
                    time.perf_counter() - t0)


def _minimal_stage_two(inst: MipInstance, pos: list[int], neg: list[int]) -> tuple[list[int], list[int]]:
    """Drop selected positives (keeping one) and negatives, in input order, while the value does not drop."""
    best = stage_two_objective(inst, pos, neg)
    for r in list(pos):
        if len(pos) > 1:
            trial = [s for s in pos if s != r]
            value = stage_two_objective(inst, trial, neg)
            if _not_worse(value, best):
                pos, best = trial, max(best, value)
    for r in list(neg):
        trial = [s for s in neg if s != r]
        value = stage_two_objective(inst, pos, trial)
        if _not_worse(value, best):
            neg, best = trial, max(best, value)
    return pos, neg


def solve(inst: MipInstance, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> MipPlan:
    """Both stages; ``final`` is the composed set of the Stage II plan, in gallery order."""
    s1 = solve_stage_one(inst, time_limit_s)
    s2 = solve_stage_two(inst, s1.selected, time_limit_s)
    final = compose(inst, inst.by_id(s2.positive), inst.by_id(s2.negative))
    return MipPlan(s1, s2, inst.gallery_ids(final))


def solve_document(data: Any, default_weights: MipWeights | None = None,
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> tuple[MipInstance, MipPlan]:
    """What ``imagent oscar solve`` does with a parsed instance file: validate, then solve both stages."""
    inst = MipInstance.from_dict(data, default_weights)
    return inst, solve(inst, time_limit_s)


__all__ = [
    "AtomicRetrieval",
    "MipInputError",
    "MipInstance",
    "MipPlan",
    "MipWeights",
    "StageOne",
    "StageTwo",
    "compose",
    "solve",
    "solve_document",
    "solve_stage_one",
    "solve_stage_two",
    "stage_one_objective",
    "stage_two_objective",
]
