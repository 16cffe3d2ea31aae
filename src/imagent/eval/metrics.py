"""Official retrieval metrics, one pure function per benchmark metric.

Conventions shared by every function here:

- A *ranking* is a sequence of gallery ids, best first. It is used exactly as given: position ``i`` is
  the ``i``-th entry. Scores play no part, so ties were already broken by whoever produced the list
  (every imagent method sorts stably: equal scores keep gallery order). Duplicated ids are *not*
  removed, because the official scripts do not remove them either; :func:`duplicate_count` lets
  callers warn about them. CIRCO is the exception: its official ``evaluation.py`` refuses a query
  whose predictions repeat an id (``ValueError``), and :func:`average_precision_at_k` does the same.
- A ranking shorter than ``K`` is scored on what it has (a miss beyond its end).
- Aggregates are percentages (0-100), the unit every paper's table uses. Means are taken with
  ``numpy.mean`` over float64 values, the same operation (and so the same last digit) as the
  official numpy code.

The formulas are written out in each docstring; the code is ours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

CIRR_KS = (1, 5, 10, 50)
CIRR_SUBSET_KS = (1, 2, 3)
CIRCO_KS = (5, 10, 25, 50)
CIRCO_ASPECTS = (
    "cardinality",
    "addition",
    "negation",
    "direct_addressing",
    "compare_change",
    "comparative_statement",
    "statement_with_conjunction",
    "spatial_relations_background",
    "viewpoint",
)
FASHIONIQ_KS = (10, 50)
GENECIS_KS = (1, 2, 3)
TIR_KS = (1, 5, 10)
VISDIAL_KS = (1, 5, 10)


# --------------------------------------------------------------------------- primitives


def mean_percent(values: Iterable[float]) -> float:
    """``100 * mean(values)``; ``nan`` for no values (never a silent 0)."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        return float("nan")
    return float(np.mean(arr)) * 100.0


def without(ranking: Sequence[str], removed: Iterable[str]) -> list[str]:
    """The ranking with every occurrence of the removed ids dropped, order kept."""
    drop = set(removed)
    return [i for i in ranking if i not in drop]


def restricted(ranking: Sequence[str], allowed: Iterable[str]) -> list[str]:
    """The ranking keeping only ids in ``allowed``, order kept (a per-query sub-gallery)."""
    keep = set(allowed)
    return [i for i in ranking if i in keep]


def hit_at_k(ranking: Sequence[str], positives: Iterable[str], k: int) -> bool:
    """True when any positive id is among the first ``k`` entries."""
    pos = set(positives)
    return any(i in pos for i in ranking[:k])


def duplicate_count(ranking: Sequence[str]) -> int:
    return len(ranking) - len(set(ranking))


# --------------------------------------------------------------------------- CIRR


def cirr_recall(
    rankings: Sequence[Sequence[str]],
    targets: Sequence[str],
    references: Sequence[str],
    ks: Sequence[int] = CIRR_KS,
) -> dict[str, float]:
    """CIRR Recall@K (test server / CIRR paper protocol).

    ``R@K = 100 * mean_q 1[target_hard(q) in top-K(ranking(q) minus reference(q))]``.
    The reference image is removed from the ranking *before* the top K is taken (the CIRR authors
    confirm it in their issue #3: random Recall_subset@1 is 1/5, not 1/6). ``target_hard`` is the
    label the server scores.
    """
    out: dict[str, float] = {}
    cleaned = [without(r, [ref]) for r, ref in zip(rankings, references, strict=True)]
    for k in ks:
        out[f"recall@{k}"] = mean_percent(hit_at_k(r, [t], k) for r, t in zip(cleaned, targets, strict=True))
    return out


def cirr_recall_subset(
    rankings: Sequence[Sequence[str]],
    targets: Sequence[str],
    references: Sequence[str],
    members: Sequence[Sequence[str]],
    ks: Sequence[int] = CIRR_SUBSET_KS,
) -> dict[str, float]:
    """CIRR Recall_subset@K.

    The ranking is restricted to the query's ``img_set.members`` other than the reference (5
    images), order kept; ``R_s@K = 100 * mean_q 1[target_hard in its top K]``. Given a full-gallery
    ranking this is the official computation; given a server ``recall_subset`` file (top 3 of the
    subset) it is what the server computes.
    """
    out: dict[str, float] = {}
    subs = [
        restricted(without(r, [ref]), m)
        for r, ref, m in zip(rankings, references, members, strict=True)
    ]
    for k in ks:
        out[f"recall_subset@{k}"] = mean_percent(hit_at_k(s, [t], k) for s, t in zip(subs, targets, strict=True))
    return out


# --------------------------------------------------------------------------- CIRCO


class DuplicatePredictionError(ValueError):
    """A ranking repeats an id where the official code refuses it (CIRCO)."""


def average_precision_at_k(ranking: Sequence[str], ground_truths: Sequence[str], k: int) -> float:
    """CIRCO AP@k (``src/evaluation.py`` of the CIRCO repository).

    ``rel_i = 1[ranking[i] in GT]``, ``P_i = (sum_{j<=i} rel_j) * rel_i / i`` (1-based ``i``),
    ``AP@k = sum_{i<=k} P_i / min(|GT|, k)``. A ranking that repeats an id is refused with
    :class:`DuplicatePredictionError`, as the official script does since its commit 9aca351 ("ensure no
    duplicate predictions"): a repeated ground truth would otherwise count twice and AP could exceed 1.
    Ids are compared as given: normalise them first (:func:`circo_id`), as the official ``int`` cast does.
    """
    if not ground_truths:
        raise ValueError("AP@k needs at least one ground truth")
    if duplicate_count(ranking):
        repeated = sorted({i for i in ranking if list(ranking).count(i) > 1})
        raise DuplicatePredictionError(
            f"the ranking repeats {', '.join(map(str, repeated[:5]))}; the official CIRCO evaluation refuses "
            "duplicate predictions (give each image id once)")
    gt = set(ground_truths)
    labels = np.array([i in gt for i in ranking], dtype=bool)  # what np.isin gives the official code
    if labels.size == 0:
        return 0.0
    # Same operations, in the same order and dtypes, as the official numpy code.
    precisions = np.cumsum(labels, axis=0) * labels
    precisions = precisions / np.arange(1, labels.shape[0] + 1)
    return float(np.sum(precisions[:k]) / min(len(ground_truths), k))


def circo_map(
    rankings: Sequence[Sequence[str]],
    ground_truths: Sequence[Sequence[str]],
    ks: Sequence[int] = CIRCO_KS,
) -> dict[str, float]:
    """CIRCO mAP@k = ``100 * mean_q AP@k(q)`` for each k (the official script prints ``mAP * 100``)."""
    out: dict[str, float] = {}
    for k in ks:
        aps = [average_precision_at_k(r, g, k) for r, g in zip(rankings, ground_truths, strict=True)]
        out[f"map@{k}"] = mean_percent(aps)
    return out


def circo_semantic_map10(
    rankings: Sequence[Sequence[str]],
    ground_truths: Sequence[Sequence[str]],
    aspects: Sequence[Sequence[str]],
) -> dict[str, float]:
    """CIRCO semantic-aspect mAP@10: for each of the 9 aspects, ``100 * mean AP@10`` over the queries
    annotated with it (``nan`` for an aspect no scored query has, as ``np.mean([])`` gives)."""
    per: dict[str, list[float]] = {a: [] for a in CIRCO_ASPECTS}
    for r, g, asp in zip(rankings, ground_truths, aspects, strict=True):
        ap = average_precision_at_k(r, g, 10)
        for a in asp:
            per.setdefault(a, []).append(ap)
    return {f"semantic_map@10/{a}": mean_percent(v) for a, v in per.items()}


def circo_id(value: object) -> str:
    """A CIRCO image or query id as the official code reads it (``np.array(predictions, dtype=int)``,
    ``int(query_id)``): ``123``, ``123.0``, ``"123"``, ``"000123"`` and ``"123.0"`` are all ``"123"``.
    Anything that is not a whole number (``12.5``, ``"abc"``, a bool) is a :class:`ValueError`."""
    if isinstance(value, bool):
        raise ValueError(f"CIRCO id {value!r} is not a number")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        number = value
    else:
        text = str(value).strip()
        if text.isdigit():
            return str(int(text))
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"CIRCO id {value!r} is not a number") from None
    if not number.is_integer():
        raise ValueError(f"CIRCO id {value!r} is not a whole number")
    return str(int(number))


def circo_target_recall(
    rankings: Sequence[Sequence[str]], targets: Sequence[str], ks: Sequence[int] = CIRCO_KS
) -> dict[str, float]:
    """The official CIRCO script's secondary Recall@k: only ``target_img_id`` (the image the caption
    was written for) counts. Reported for completeness; CIRCO's headline metric is mAP@k."""
    return {
        f"target_recall@{k}": mean_percent(hit_at_k(r, [t], k) for r, t in zip(rankings, targets, strict=True))
        for k in ks
    }


# --------------------------------------------------------------------------- FashionIQ


def fashioniq_recall(
    rankings: Sequence[Sequence[str]], targets: Sequence[str], ks: Sequence[int] = FASHIONIQ_KS
) -> dict[str, float]:
    """FashionIQ Recall@K for one category: ``100 * mean_q 1[target in top-K]`` over the category's
    whole gallery; the reference (candidate) image is *not* removed (the official protocol)."""
    return {
        f"recall@{k}": mean_percent(hit_at_k(r, [t], k) for r, t in zip(rankings, targets, strict=True)) for k in ks
    }


def fashioniq_average(
    per_category: Mapping[str, Mapping[str, float]], ks: Sequence[int] = FASHIONIQ_KS
) -> dict[str, float]:
    """The FashionIQ summary: each R@K averaged over the categories (arithmetic mean of the
    per-category percentages), and ``average`` = mean of those averages (the "Avg." column)."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = float(np.mean([per_category[c][f"recall@{k}"] for c in per_category]))
    out["average"] = float(np.mean([out[f"recall@{k}"] for k in ks]))
    return out


# --------------------------------------------------------------------------- GeneCIS


def genecis_recall(
    rankings: Sequence[Sequence[str]],
    targets: Sequence[str],
    candidates: Sequence[Sequence[str]],
    ks: Sequence[int] = GENECIS_KS,
) -> dict[str, float]:
    """GeneCIS Recall@K on per-query galleries: the scored gallery is ``[target] + gallery`` (target at
    index 0 by construction); ``R@K = 100 * mean_q 1[target among the top K of the ranking restricted
    to that gallery]``."""
    subs = [restricted(r, c) for r, c in zip(rankings, candidates, strict=True)]
    return {f"recall@{k}": mean_percent(hit_at_k(s, [t], k) for s, t in zip(subs, targets, strict=True)) for k in ks}


# --------------------------------------------------------------------------- text-to-image


def tir_recall(
    rankings: Sequence[Sequence[str]], targets: Sequence[str | Sequence[str]], ks: Sequence[int] = TIR_KS
) -> dict[str, float]:
    """Flickr30K / MSCOCO text-to-image Recall@K (Karpathy test split): every caption is a query whose
    ground truth is its image; ``R@K = 100 * |{q : rank(image) < K}| / |Q|``. A query may have several
    ground truths (a list of ids: a caption shared by several images, a duplicated image): it is a hit
    when *any* of them is in the top K, as the BLIP/ALBEF ``itm_eval`` loop does for image-to-text
    (``rank = min over the query's ground truths``)."""
    truths = [[t] if isinstance(t, str) else list(t) for t in targets]
    if any(not t for t in truths):
        raise ValueError("tir_recall: every query needs at least one ground truth")
    pairs = list(zip(rankings, truths, strict=True))
    return {f"recall@{k}": mean_percent(hit_at_k(r, t, k) for r, t in pairs) for k in ks}


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, float] | Iterable[str], k: int = 10) -> float:
    """NDCG@K of one ranking (Järvelin & Kekäläinen's DCG with linear gain, as scikit-learn's ``ndcg_score`` and
    OSCAR's Sec. 4.5 personal-gallery search): ``DCG@K = sum_{i=1..K} rel(r_i) / log2(i + 1)`` over the first
    K of the ranking (duplicates count once), divided by the DCG of the ideal ordering of the relevance values
    (the K largest); 0 when no item is relevant. ``relevance``: id -> graded relevance, or an iterable of ids
    (each relevance 1, binary). Returns a value in [0, 1]."""
    rel = dict(relevance) if isinstance(relevance, Mapping) else dict.fromkeys(relevance, 1.0)
    ideal = sorted((float(v) for v in rel.values() if v > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    seen: set[str] = set()
    dcg = 0.0
    for i, doc in enumerate(ranking[:k]):
        if doc in seen:
            continue
        seen.add(doc)
        dcg += max(0.0, float(rel.get(doc, 0.0))) / math.log2(i + 2)
    return dcg / idcg


def mean_ndcg(rankings: Sequence[Sequence[str]], relevances: Sequence[Mapping[str, float] | Iterable[str]],
              k: int = 10) -> dict[str, float]:
    """``ndcg@K = 100 * mean_q NDCG@K`` (:func:`ndcg_at_k`)."""
    return {f"ndcg@{k}": mean_percent(ndcg_at_k(r, g, k) for r, g in zip(rankings, relevances, strict=True))}


# --------------------------------------------------------------------------- VisDial (PlugIR protocol)


def visdial_hits(
    round_rankings: Sequence[Sequence[Sequence[str] | None]],
    targets: Sequence[str],
    ks: Sequence[int] = VISDIAL_KS,
) -> dict[str, float]:
    """Chat retrieval, PlugIR protocol. ``round_rankings[d][r]`` is dialogue ``d``'s ranking after round
    ``r`` (round 0 = the caption alone; ``None`` = not run).

    - ``Hits@K(r) = 100 * mean_d 1[exists r' <= r: rank_{r'}(target) < K]`` (cumulative: once found,
      a dialogue stays a hit; PlugIR's ``cumulative_hits_per_round``);
    - ``Recall@K(r) = 100 * mean_d 1[rank_r(target) < K]`` (that round alone).

    Keys: ``hits@K/round_r`` and ``recall@K/round_r``; a round is averaged over the dialogues that have it.
    """
    n_rounds = max((len(r) for r in round_rankings), default=0)
    out: dict[str, float] = {}
    for k in ks:
        found_so_far = [False] * len(round_rankings)
        for rnd in range(n_rounds):
            hits, recalls = [], []
            for d, (rounds, target) in enumerate(zip(round_rankings, targets, strict=True)):
                if rnd >= len(rounds) or rounds[rnd] is None:
                    continue
                now = hit_at_k(rounds[rnd], [target], k)
                found_so_far[d] = found_so_far[d] or now
                hits.append(found_so_far[d])
                recalls.append(now)
            out[f"hits@{k}/round_{rnd}"] = mean_percent(hits)
            out[f"recall@{k}/round_{rnd}"] = mean_percent(recalls)
    return out


# --------------------------------------------------------------------------- DISBench (set retrieval)


def set_exact_match(predicted: Iterable[str], gold: Iterable[str]) -> float:
    """EM = 1 when the predicted set equals the gold set (order and repeats ignored), else 0."""
    return 1.0 if set(predicted) == set(gold) else 0.0


def set_f1(predicted: Iterable[str], gold: Iterable[str]) -> float:
    """Set F1 = ``2 P R / (P + R)`` with ``P = |pred & gold| / |pred|``, ``R = |pred & gold| / |gold|``;
    0 when nothing overlaps (including an empty prediction); 1 when both sets are empty."""
    p, g = set(predicted), set(gold)
    if not p and not g:
        return 1.0
    inter = len(p & g)
    if inter == 0:
        return 0.0
    precision, recall = inter / len(p), inter / len(g)
    return 2 * precision * recall / (precision + recall)


def set_precision_recall(predicted: Iterable[str], gold: Iterable[str]) -> tuple[float, float]:
    """Set precision ``|pred & gold| / |pred|`` and recall ``|pred & gold| / |gold|`` (1 for an empty set
    beside an empty set, 0 for an empty set beside a non-empty one)."""
    p, g = set(predicted), set(gold)
    inter = len(p & g)
    precision = inter / len(p) if p else (1.0 if not g else 0.0)
    recall = inter / len(g) if g else (1.0 if not p else 0.0)
    return precision, recall


def disbench_scores(
    predicted_sets: Sequence[Iterable[str]], gold_sets: Sequence[Iterable[str]], event_types: Sequence[str]
) -> dict[str, float]:
    """DISBench EM and F1, averaged per query (x100), for ``overall``, ``intra`` (intra-event) and
    ``inter`` (inter-event) queries."""
    rows = [
        (set_exact_match(p, g), set_f1(p, g), t)
        for p, g, t in zip([list(x) for x in predicted_sets], [list(x) for x in gold_sets], event_types, strict=True)
    ]
    out: dict[str, float] = {}
    groups = {
        "overall": rows,
        "intra": [r for r in rows if r[2].startswith("intra")],
        "inter": [r for r in rows if r[2].startswith("inter")],
    }
    for name, sel in groups.items():
        out[f"{name}/em"] = mean_percent(r[0] for r in sel)
        out[f"{name}/f1"] = mean_percent(r[1] for r in sel)
    return out


def wording_scores(scores: Sequence[float], questions: Sequence[str]) -> dict[str, float]:
    """Robustness to wording (imagent's own, not DISBench's): when queries are one question asked in several
    wordings (``questions`` names each query's question), the mean over questions of their worst wording's score
    and of their best (x100), and how many questions; {} when no question has two wordings."""
    by: dict[str, list[float]] = {}
    for s, q in zip(scores, questions, strict=True):
        by.setdefault(q, []).append(s)
    if not any(len(v) > 1 for v in by.values()):
        return {}
    return {"wording/f1_worst": mean_percent(min(v) for v in by.values()),
            "wording/f1_best": mean_percent(max(v) for v in by.values()), "wording/questions": float(len(by))}


# --------------------------------------------------------------------------- generic (stamps, curves)


def recall_any(
    rankings: Sequence[Sequence[str]],
    positives: Sequence[Iterable[str]],
    ks: Sequence[int],
    excluded: Sequence[Iterable[str]] | None = None,
) -> dict[str, float]:
    """``R@K = 100 * mean_q 1[any positive in top-K(ranking minus excluded)]`` (the stamps benchmark,
    and the recall-at-k curve of every report)."""
    excl = excluded if excluded is not None else [()] * len(rankings)
    cleaned = [without(r, e) for r, e in zip(rankings, excl, strict=True)]
    pos = [list(p) for p in positives]
    return {f"recall@{k}": mean_percent(hit_at_k(r, p, k) for r, p in zip(cleaned, pos, strict=True)) for k in ks}


__all__ = [
    "CIRCO_ASPECTS",
    "DuplicatePredictionError",
    "average_precision_at_k",
    "circo_id",
    "circo_map",
    "circo_semantic_map10",
    "circo_target_recall",
    "cirr_recall",
    "cirr_recall_subset",
    "disbench_scores",
    "duplicate_count",
    "fashioniq_average",
    "fashioniq_recall",
    "genecis_recall",
    "hit_at_k",
    "mean_ndcg",
    "mean_percent",
    "ndcg_at_k",
    "recall_any",
    "restricted",
    "set_exact_match",
    "set_f1",
    "tir_recall",
    "visdial_hits",
    "without",
]
