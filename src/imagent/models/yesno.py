"""Yes/no probability from first-token logprobs: sigmoid(logprob_yes - logprob_no).

Backends return the top alternatives for the first generated token; they include case and space
variants (``Yes``, `` yes``, ``YES``...). Each side's probabilities are summed before comparing, so
P(yes) = p_yes / (p_yes + p_no) = sigmoid(log p_yes - log p_no).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from imagent.models.base import TokenLogprob

YES_WORDS = frozenset({"yes", "true"})
NO_WORDS = frozenset({"no", "false"})


def _side(token: str) -> str | None:
    # Raw vocabulary pieces mark a leading space with "▁" (SentencePiece) or "Ġ" (byte-level BPE).
    t = token.replace("\u2581", " ").replace("\u0120", " ").strip().strip(".,:;!\"'*").lower()
    if t in YES_WORDS:
        return "yes"
    if t in NO_WORDS:
        return "no"
    return None


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in xs))


# A side absent from the alternatives is below the last one shown; ~0 stands in for it.
_ABSENT = math.log(1e-12)


def yes_no_logits(alternatives: Iterable[TokenLogprob]) -> tuple[float, float] | None:
    """(log p_yes, log p_no), each side's variants summed (in log space, so very small
    probabilities do not underflow); None when neither side appears. A missing side (or one
    whose probability is exactly 0) is taken as log(1e-12)."""
    sides: dict[str, list[float]] = {"yes": [], "no": []}
    for alt in alternatives:
        side = _side(alt.token)
        if side is not None and not math.isnan(alt.logprob):
            sides[side].append(float(alt.logprob))
    lp = {k: (_logsumexp(v) if v else -math.inf) for k, v in sides.items()}
    if lp["yes"] == -math.inf and lp["no"] == -math.inf:
        return None
    return (lp["yes"] if lp["yes"] > -math.inf else _ABSENT), (lp["no"] if lp["no"] > -math.inf else _ABSENT)


def yes_no_probability(alternatives: Iterable[TokenLogprob]) -> float | None:
    """sigmoid(logprob_yes - logprob_no), or None when neither word is among the alternatives.
    When only one side appears, the other side's probability is taken as ~0 (score near 0 or 1)."""
    logits = yes_no_logits(alternatives)
    if logits is None:
        return None
    d = logits[0] - logits[1]
    return 1.0 / (1.0 + math.exp(-d)) if d > -700 else 0.0
