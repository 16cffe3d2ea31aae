"""OSCAR's two MIPs are exact: on random small instances both stages equal brute force, through the same
code path ``imagent oscar solve`` uses (:func:`solve_document`), and the CLI prints issue 14's format."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from imagent.tools.oscar_mip import MipInputError, MipInstance, MipWeights, solve_document, stage_one_objective

from .mip_brute import brute_stage_one, brute_stage_two, direct_objectives, random_instance

CASES = ["random", "no_positive_hit", "empty_positives", "all_positive", "few_negatives", "no_negatives"]


def _check(data: dict) -> tuple[MipInstance, object]:
    inst, plan = solve_document(json.loads(json.dumps(data)))
    s1, s2 = plan.stage1, plan.stage2
    # Optimal: equal to brute force over every selection (Stage II over every subset of R+* and R-).
    assert s1.objective == pytest.approx(brute_stage_one(inst), abs=1e-9)
    selected = inst.by_id(s1.selected)
    assert s2.objective == pytest.approx(brute_stage_two(inst, selected) if selected else 0.0, abs=1e-9)
    # Reported objectives and the final set are the formulas' values at the returned plan.
    o1, o2, final = direct_objectives(inst, s1.selected, s2.positive, s2.negative)
    assert s1.objective == pytest.approx(o1, abs=1e-12)
    assert s2.objective == pytest.approx(o2, abs=1e-12)
    assert set(plan.final) == final
    # Plan shape: one truncation per family, positives only in Stage I, Stage II inside Stage I.
    fams = [inst.retrievals[n].family for n in selected]
    assert len(fams) == len(set(fams))
    assert all(inst.retrievals[n].polarity == "+" for n in selected)
    assert set(s2.positive) <= set(s1.selected)
    assert all(inst.retrievals[n].polarity == "-" for n in inst.by_id(s2.negative))
    if selected:
        assert s2.positive, "Stage II keeps at least one positive"
    # Minimal: dropping any selected retrieval lowers the Stage I objective.
    for n in selected:
        assert stage_one_objective(inst, [m for m in selected if m != n]) < s1.objective - 1e-12
    return inst, plan


@pytest.mark.parametrize("seed", range(4))
def test_both_stages_equal_brute_force_on_random_instances(seed):
    rng = random.Random(seed)
    stats = {"negatives_used": 0, "difference_removed": 0, "no_negative": 0}
    for n in range(60):  # 4 x 60 = 240 instances
        _inst, plan = _check(random_instance(rng, CASES[n % len(CASES)]))
        stats["negatives_used"] += bool(plan.stage2.negative)
        stats["difference_removed"] += plan.stage2.removed > 0
        stats["no_negative"] += not plan.stage2.negative
    # The instances exercise both branches of Stage II.
    assert stats["negatives_used"] > 0 and stats["no_negative"] > 0 and stats["difference_removed"] > 0


def _inst(positives, retrievals, gallery="abcdefgh", **weights):
    rows = [{"id": i, "tool": t, "query": q, "polarity": p, "k": k, "results": list(res)}
            for i, t, q, p, k, res in retrievals]
    return {"gallery": list(gallery), "positives": list(positives), "retrievals": rows, "weights": weights}


def test_no_negative_selected_keeps_the_union():
    # Decision 2(a): the paper's (2e) would put every image in the "negative intersection" when no negative is
    # selected. Here the only negative also returns the target, so none is selected and the union survives.
    data = _inst("a", [("p", "t", "q", "+", 2, "ab"), ("n", "t", "x", "-", 2, "ab")])
    _, plan = _check(data)
    assert plan.stage2.negative == [] and plan.final == ["a", "b"]
    assert plan.stage2.objective == pytest.approx(1 - 0.05)


def test_false_positive_penalty_cannot_be_dodged():
    # Decision 2(b): kept non-targets are counted exactly; the negative removes them.
    data = _inst("a", [("p", "t", "q", "+", 4, "abcd"), ("n", "t", "x", "-", 3, "bcd")], lambda_fp=0.5)
    _, plan = _check(data)
    assert plan.stage2.negative == ["n"] and plan.final == ["a"]
    assert plan.stage2.objective == pytest.approx(1.0)
    assert plan.stage2.removed == 3


def test_intersection_of_negatives_spares_a_target():
    # n1 alone would remove the target c, n2 alone the target a; n1 AND n2 removes only b and d.
    data = _inst("ac", [("p", "t", "q", "+", 4, "abcd"), ("n1", "t", "x", "-", 3, "bcd"),
                        ("n2", "u", "y", "-", 3, "abd")], lambda_fp=0.5)
    _, plan = _check(data)
    assert sorted(plan.stage2.negative) == ["n1", "n2"] and plan.final == ["a", "c"]


def test_every_image_negative_and_empty_positives():
    gallery = ["a", "b", "c", *(f"x{i}" for i in range(197))]
    retrievals = [("p1", "t", "q", "+", 1, "abc"), ("p3", "t", "q", "+", 3, "abc"), ("n", "t", "x", "-", 1, "a")]
    # Recall term is 0: with the default tie-break bonus a non-target is never worth a tool; nothing is selected.
    _, plan = _check(_inst("", retrievals, gallery=gallery))
    assert plan.stage1.selected == [] and plan.final == []
    # A real bonus (lambda_div = 0.01 > 1/200): the smallest truncation earns it; the negative removes its image.
    _, plan = _check(_inst("", retrievals, gallery=gallery, lambda_div=0.01))
    assert plan.stage1.selected == ["p1"] and plan.stage2.negative == ["n"] and plan.final == []
    assert plan.stage1.objective == pytest.approx(0.01 - 1 / 200)
    # In a small gallery one non-target costs more than the bonus: nothing is selected at all.
    _, plan = _check(_inst("", [("p1", "t", "q", "+", 1, "abc")], lambda_div=0.01))
    assert plan.stage1.selected == [] and plan.final == [] and plan.stage2.objective == 0


def test_stage_one_prefers_the_truncation_that_reaches_the_target():
    data = _inst("c", [(f"k{k}", "t", "q", "+", k, "abcdefgh") for k in (1, 2, 3, 5, 8)])
    _, plan = _check(data)
    assert plan.stage1.selected == ["k3"]


def test_same_instance_same_plan():
    rng = random.Random(7)
    data = random_instance(rng)
    first = solve_document(data)[1].to_dict()
    for _ in range(3):
        assert solve_document(data)[1].to_dict() == first


@pytest.mark.parametrize("bad, message", [
    ({"gallery": ["a"], "positives": ["z"], "retrievals": []}, "positives not in the gallery"),
    ({"gallery": ["a"], "positives": [], "retrievals": [{"id": "r", "tool": "t", "query": "q", "polarity": "*",
                                                          "k": 1, "results": ["a"]}]}, "polarity"),
    ({"gallery": ["a"], "positives": [], "retrievals": [{"id": "r", "tool": "t", "query": "q", "polarity": "+",
                                                          "k": 1, "results": ["x"]}]}, "not in the gallery"),
    ({"gallery": ["a"], "positives": [], "retrievals": [{"id": "r", "tool": "t", "polarity": "+", "k": 1,
                                                          "results": ["a"]}]}, "lacks query"),
    ({"gallery": ["a"], "positives": [], "retrievals": [], "weights": {"w_R": -1}}, "invalid weights"),
    ({"gallery": ["a"], "positives": [], "retrievals": [], "weights": {"gamma": 1}}, "invalid weights"),
    ({"gallery": "a", "positives": [], "retrievals": []}, "must be a list"),
])
def test_bad_instances_are_refused_clearly(bad, message):
    with pytest.raises(MipInputError, match=message):
        solve_document(bad)


def test_instance_weights_override_the_defaults_key_by_key():
    inst = MipInstance.from_dict({"gallery": ["a"], "positives": [], "retrievals": [], "weights": {"w_P": 3}},
                                 MipWeights(lambda_fp=0.2))
    assert (inst.weights.w_P, inst.weights.lambda_fp, inst.weights.w_R) == (3, 0.2, 1.0)


def test_cli_solve_prints_the_issue_format(tmp_path):
    from imagent.cli.main import app

    data = _inst("ac", [("p", "t", "q", "+", 4, "abcd"), ("n1", "t", "x", "-", 3, "bcd"),
                        ("n2", "u", "y", "-", 3, "abd")])
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(data))
    runner = CliRunner()
    out = runner.invoke(app, ["oscar", "solve", str(path), "--json", "--set", "lambda_div=0.5"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert set(doc) == {"stage1", "stage2", "final"}
    assert set(doc["stage1"]) == {"selected", "objective"}
    assert set(doc["stage2"]) == {"positive", "negative", "objective"}
    assert doc["final"] == ["a", "c"] and doc["stage2"]["objective"] == pytest.approx(2.0)
    # The config's weight applied: Stage I = 2/2 - 2/6 + lambda_div * 1 tool.
    assert doc["stage1"]["objective"] == pytest.approx(1 - 2 / 6 + 0.5)
    default = json.loads(runner.invoke(app, ["oscar", "solve", str(path), "--json"]).stdout)
    # Default: the tie-break bonus 1 / (D (|T| + 1)), D = lcm(2, 6) = 6 the denominator of 1/|I+| and 1/|I-|.
    assert default["stage1"]["objective"] == pytest.approx(1 - 2 / 6 + 1 / 12)
    human = runner.invoke(app, ["oscar", "solve", str(path)])
    assert human.exit_code == 0 and "stage II" in human.output and "final" in human.output
    bad = runner.invoke(app, ["oscar", "solve", str(tmp_path / "missing.json")])
    assert bad.exit_code == 2 and "no instance file" in bad.output


def _primary(inst: MipInstance, selected) -> tuple[int, int]:
    """(targets covered, non-targets covered) by a selection: what the diversity bonus must never change."""
    covered = set()
    for n in selected:
        covered |= inst.sets[n]
    return len(covered & inst.positive_set), len(covered - inst.positive_set)


@pytest.mark.parametrize("seed", range(3))
def test_default_diversity_bonus_only_breaks_ties(seed):
    """With ``lambda_div`` unset the bonus is a tie-break: against brute force over every selection, Stage I's
    recall/noise value is the bonus-free optimum, its coverage of I+ and I- is that of a bonus-free optimal
    selection, and among those it uses the most tools."""
    import itertools

    rng = random.Random(100 + seed)
    checked = 0
    for n in range(50):
        data = random_instance(rng, CASES[n % len(CASES)])
        data["weights"] = {k: v for k, v in data["weights"].items() if k != "lambda_div"}
        inst, plan = solve_document(data)
        assert inst.weights.lambda_div is None and 0 < inst.lambda_div < 1
        bonus_free = MipInstance.from_dict({**data, "weights": {**data["weights"], "lambda_div": 0.0}})
        families: dict[tuple, list[int]] = {}
        for m, r in enumerate(inst.retrievals):
            if r.polarity == "+":
                families.setdefault(r.family, []).append(m)
        options = []
        for choice in itertools.product(*[[None, *rs] for rs in families.values()]):
            sel = [c for c in choice if c is not None]
            options.append((stage_one_objective(bonus_free, sel), _primary(inst, sel),
                            len({inst.retrievals[c].tool for c in sel})))
        best = max(v for v, _, _ in options)
        optimal = [(cov, tools) for v, cov, tools in options if v == pytest.approx(best, abs=1e-12)]
        got = inst.by_id(plan.stage1.selected)
        assert stage_one_objective(bonus_free, got) == pytest.approx(best, abs=1e-12)
        assert _primary(inst, got) in {cov for cov, _ in optimal}
        assert len({inst.retrievals[c].tool for c in got}) == max(t for _, t in optimal)
        checked += 1
    assert checked == 50


def test_bonus_never_buys_a_truncation_that_reaches_no_target():
    # The case the old fixed bonus (0.01) got wrong: on a 2,315-image gallery a second tool's k=5 truncation
    # reaching no target cost 5/2315 < 0.01 of noise and was selected for the bonus.
    gallery = [f"g{i}" for i in range(2315)]
    rows = [{"id": "a", "tool": "t1", "query": "q", "polarity": "+", "k": 5, "results": gallery[:5]},
            {"id": "b", "tool": "t2", "query": "q2", "polarity": "+", "k": 5, "results": gallery[10:15]}]
    data = {"gallery": gallery, "positives": ["g0"], "retrievals": rows, "weights": {}}
    _inst, plan = solve_document(data)
    assert plan.stage1.selected == ["a"]
    _inst, old = solve_document({**data, "weights": {"lambda_div": 0.01}})
    assert old.stage1.selected == ["a", "b"]  # the fixed bonus did buy it
