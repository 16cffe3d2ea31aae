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
    t = token.strip().strip(".,:;!\"'").lower()
    if t in YES_WORDS:
        return "yes"
    if t in NO_WORDS:
        return "no"
    return None


def yes_no_logits(alternatives: Iterable[TokenLogprob]) -> tuple[float, float] | None:
    """(log p_yes, log p_no) summed over variants; None if either side is absent."""
    p = {"yes": 0.0, "no": 0.0}
    for alt in alternatives:
        side = _side(alt.token)
        if side is not None:
            p[side] += math.exp(alt.logprob)
    if p["yes"] == 0.0 and p["no"] == 0.0:
        return None
    tiny = 1e-12
    return math.log(max(p["yes"], tiny)), math.log(max(p["no"], tiny))


def yes_no_probability(alternatives: Iterable[TokenLogprob]) -> float | None:
    """sigmoid(logprob_yes - logprob_no), or None when neither word is among the alternatives.
    When only one side appears, the other side's probability is taken as ~0 (score near 0 or 1)."""
    logits = yes_no_logits(alternatives)
    if logits is None:
        return None
    d = logits[0] - logits[1]
    return 1.0 / (1.0 + math.exp(-d)) if d > -700 else 0.0
