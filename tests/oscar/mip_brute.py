"""Random small OSCAR MIP instances and brute-force optima (imported by the MIP tests)."""

from __future__ import annotations

import itertools
import random
from typing import Any

from imagent.tools.oscar_mip import MipInstance, compose, stage_one_objective, stage_two_objective


def random_instance(rng: random.Random, case: str = "random") -> dict[str, Any]:
    """An instance dict in the ``imagent oscar solve`` format. ``case``: random, no_positive_hit (targets
    exist but no retrieval returns them), empty_positives, all_positive (I- empty), few_negatives."""
    n = rng.randint(4, 14)
    gallery = [f"img{i}" for i in range(n)]
    if case == "empty_positives":
        positives: list[str] = []
    elif case == "all_positive":
        positives = list(gallery)
    else:
        positives = rng.sample(gallery, rng.randint(1, max(1, n // 3)))
    pool = [g for g in gallery if g not in positives] if case == "no_positive_hit" else gallery
    tools = [f"t{j}" for j in range(rng.randint(1, 3))]
    retrievals = []
    n_pos_fam = rng.randint(1, 3)
    n_neg_fam = 0 if case == "no_negatives" else rng.randint(0, 3 if case == "few_negatives" else 2)
    budget = {"+": 8, "-": 6}
    for fam in range(n_pos_fam + n_neg_fam):
        pol = "+" if fam < n_pos_fam else "-"
        tool = rng.choice(tools)
        ranked = rng.sample(pool, min(len(pool), rng.randint(1, 6)))
        levels = sorted(rng.sample([1, 2, 3, 4, 6], rng.randint(1, 3)))
        for k in levels:
            if budget[pol] == 0:
                break
            budget[pol] -= 1
            retrievals.append({"id": f"{pol}{fam}k{k}", "tool": tool, "query": f"q{fam}", "polarity": pol,
                               "k": k, "results": ranked})
    weights: dict[str, float] = {}
    if rng.random() < 0.5:
        weights = {"w_R": rng.choice([0.0, 0.5, 1.0, 2.0]), "w_P": rng.choice([0.0, 1.0, 3.0]),
                   "lambda_div": rng.choice([0.0, 0.01, 0.3, None]),
                   "lambda_fp": rng.choice([0.0, 0.05, 0.5, 1.0, 2.0])}
    return {"gallery": gallery, "positives": positives, "retrievals": retrievals, "weights": weights}


def brute_stage_one(inst: MipInstance) -> float:
    """Best Stage I value over every selection with at most one retrieval per family."""
    families: dict[tuple, list[int]] = {}
    for n, r in enumerate(inst.retrievals):
        if r.polarity == "+":
            families.setdefault(r.family, []).append(n)
    best = stage_one_objective(inst, [])
    for choice in itertools.product(*[[None, *rs] for rs in families.values()]):
        best = max(best, stage_one_objective(inst, [c for c in choice if c is not None]))
    return best


def brute_stage_two(inst: MipInstance, selected: list[int]) -> float:
    """Best Stage II value over every non-empty subset of ``selected`` and every subset of R-
    (no reduction of any kind), with the composed set computed directly."""
    negs = [n for n, r in enumerate(inst.retrievals) if r.polarity == "-"]
    best = float("-inf")
    for pmask in range(1, 1 << len(selected)):
        pos = [selected[j] for j in range(len(selected)) if pmask >> j & 1]
        for nmask in range(1 << len(negs)):
            neg = [negs[j] for j in range(len(negs)) if nmask >> j & 1]
            best = max(best, stage_two_objective(inst, pos, neg))
    return best


def direct_objectives(inst: MipInstance, selected: list[str], pos: list[str], neg: list[str]
                      ) -> tuple[float, float, set[str]]:
    """Both objectives and the composed set recomputed from first principles (sets of ids)."""
    sets = {r.id: set(r.results[: r.k]) for r in inst.retrievals}
    gt = set(inst.positives)
    non = set(inst.gallery) - gt
    covered = set().union(*(sets[i] for i in selected)) if selected else set()
    wr = inst.weights.w_R / len(gt) if gt else 0.0
    wp = inst.weights.w_P / len(non) if non else 0.0
    tools = {r.tool for r in inst.retrievals if r.id in selected}
    s1 = wr * len(covered & gt) - wp * len(covered - gt) + inst.lambda_div * len(tools)
    union = set().union(*(sets[i] for i in pos)) if pos else set()
    inter = set.intersection(*(sets[i] for i in neg)) if neg else set()
    final = union - inter
    s2 = len(final & gt) - inst.weights.lambda_fp * len(final - gt)
    assert final == {inst.gallery[i] for i in compose(inst, inst.by_id(pos), inst.by_id(neg))}
    return s1, s2, final
