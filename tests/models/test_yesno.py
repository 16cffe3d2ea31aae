"""The yes/no score from first-token logprobs, and the strict reading of a yes/no reply."""

from __future__ import annotations

import math

import pytest

from imagent.models.base import Message, TokenLogprob
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.roles import Role, parse_yes_no
from imagent.models.yesno import yes_no_logits, yes_no_probability


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def lp(*pairs: tuple[str, float]) -> list[TokenLogprob]:
    """Alternatives given as probabilities (easier to check by hand)."""
    return [TokenLogprob(tok, math.log(p)) for tok, p in pairs]


def test_single_pair_is_sigmoid_of_the_difference() -> None:
    alts = [TokenLogprob("Yes", -0.3), TokenLogprob("No", -1.6), TokenLogprob("Maybe", -2.0)]
    assert yes_no_probability(alts) == pytest.approx(sigmoid(-0.3 - -1.6), abs=1e-12)
    assert yes_no_logits(alts) == pytest.approx((-0.3, -1.6))


def test_variants_of_each_side_are_summed() -> None:
    # yes: 0.5 + 0.1 + 0.05 = 0.65; no: 0.2 + 0.05 = 0.25; "The" is neither.
    alts = lp(("Yes", 0.5), (" yes", 0.1), ("YES", 0.05), ("No", 0.2), (" no", 0.05), ("The", 0.1))
    p = yes_no_probability(alts)
    assert p == pytest.approx(0.65 / (0.65 + 0.25), abs=1e-12)
    assert p == pytest.approx(sigmoid(math.log(0.65) - math.log(0.25)), abs=1e-12)
    ly, ln = yes_no_logits(alts)
    assert ly == pytest.approx(math.log(0.65)) and ln == pytest.approx(math.log(0.25))


def test_punctuation_true_false_and_vocabulary_markers() -> None:
    alts = lp(("Yes.", 0.3), ("\u2581yes", 0.1), ("\u0120Yes", 0.1), ("true", 0.1), ("No,", 0.2), ("False", 0.1))
    assert yes_no_probability(alts) == pytest.approx(0.6 / 0.9, abs=1e-12)


def test_words_that_only_start_like_yes_or_no_do_not_count() -> None:
    alts = lp(("Yesterday", 0.4), ("Not", 0.3), ("Nope", 0.1), ("Yes", 0.1), ("No", 0.1))
    assert yes_no_probability(alts) == pytest.approx(0.5)


def test_one_side_missing_goes_to_the_extremes() -> None:
    only_yes = yes_no_probability(lp(("Yes", 0.7), ("Sure", 0.2)))
    only_no = yes_no_probability(lp((" no", 0.6), ("Perhaps", 0.3)))
    assert only_yes is not None and only_yes > 0.999999
    assert only_no is not None and only_no < 1e-6


def test_neither_side_is_none() -> None:
    assert yes_no_probability(lp(("Maybe", 0.5), ("The", 0.3))) is None
    assert yes_no_probability([]) is None
    assert yes_no_logits([]) is None


def test_tiny_probabilities_do_not_underflow() -> None:
    # exp(-800) is 0.0 in floating point; the difference still decides.
    alts = [TokenLogprob("Yes", -800.0), TokenLogprob("No", -802.0)]
    assert yes_no_probability(alts) == pytest.approx(sigmoid(2.0), abs=1e-12)


def test_extreme_differences_stay_in_range() -> None:
    assert yes_no_probability([TokenLogprob("Yes", 0.0), TokenLogprob("No", -5000.0)]) == pytest.approx(1.0)
    assert yes_no_probability([TokenLogprob("Yes", -5000.0), TokenLogprob("No", 0.0)]) == pytest.approx(0.0)
    assert yes_no_probability([TokenLogprob("Yes", -math.inf), TokenLogprob("No", -0.1)]) < 1e-6


def test_nan_logprobs_are_ignored() -> None:
    alts = [TokenLogprob("Yes", math.nan), TokenLogprob("No", -0.1), TokenLogprob("yes", -2.0)]
    assert yes_no_probability(alts) == pytest.approx(sigmoid(-2.0 - -0.1), abs=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes.", True),
        ("yes", True),
        ("YES!", True),
        ("Yes, because the dog is on the left.", True),
        ("  **Yes**", True),
        ("True", True),
        ("no", False),
        ("No.", False),
        ("No, it is a cat.", False),
        ("False", False),
        ("false.", False),
        ("Maybe", None),
        ("I think yes", None),
        ("I think no", None),
        ("Not really", None),
        ("Yesterday it was", None),
        ("Nope", None),
        ("", None),
        ("   ", None),
        ("...", None),
        ("1", None),
    ],
)
def test_parse_yes_no_is_strict(text: str, expected: bool | None) -> None:
    assert parse_yes_no(text) is expected


def test_false_is_never_read_as_yes() -> None:
    for text in ("False", "false", "FALSE.", "False, yes it is"):
        assert parse_yes_no(text) is False


def test_role_yes_no_combines_answer_and_probability() -> None:
    model = ScriptedChatModel(rules=[("cat", "Yes, it is."), ("dog", "Unclear")], yes_probability=0.8)
    role = Role("verifier", model)
    yes = role.yes_no([Message.user("Is it a cat?")])
    assert yes.answer is True and yes.probability == pytest.approx(0.8)
    assert model.calls[-1][1].top_logprobs == 20 and model.calls[-1][1].max_tokens == 3
    unclear = role.yes_no([Message.user("Is it a dog?")])
    assert unclear.answer is None and unclear.probability is None and unclear.text == "Unclear"
