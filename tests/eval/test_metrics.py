"""Every official metric on hand-worked rankings, including the edges: ties, duplicates, fewer than K
results, every ground truth found, none found."""

from __future__ import annotations

import math

import numpy as np
import pytest

from imagent.eval import metrics as M
from imagent.methods.base import ranking_from_scores

# ----------------------------------------------------------------------------- CIRR


def test_cirr_recall_removes_reference_before_top_k():
    # Without removal the target would sit at rank 3; removed, it is rank 2.
    ranking = ["ref", "a", "t", "b"]
    r = M.cirr_recall([ranking], ["t"], ["ref"], ks=(1, 2, 3))
    assert r == {"recall@1": 0.0, "recall@2": 100.0, "recall@3": 100.0}


def test_cirr_recall_averages_and_handles_short_and_empty_rankings():
    rankings = [["t1"], ["x", "y"], []]  # hit at 1; fewer than K and no hit; nothing returned
    r = M.cirr_recall(rankings, ["t1", "t2", "t3"], ["r1", "r2", "r3"], ks=(1, 5, 50))
    assert r["recall@1"] == pytest.approx(100 / 3)
    assert r["recall@5"] == pytest.approx(100 / 3)
    assert r["recall@50"] == pytest.approx(100 / 3)


def test_cirr_recall_duplicates_take_positions_as_given():
    # "a" twice pushes the target to the 3rd position: the list is scored as it is.
    assert M.cirr_recall([["a", "a", "t"]], ["t"], ["r"], ks=(2, 3)) == {"recall@2": 0.0, "recall@3": 100.0}


def test_cirr_recall_subset_ranks_members_minus_reference():
    members = ["ref", "m1", "m2", "t", "m4", "m5"]
    full = ["x1", "m2", "ref", "x2", "t", "m1", "m5", "m4"]
    r = M.cirr_recall_subset([full], ["t"], ["ref"], [members])
    assert r == {"recall_subset@1": 0.0, "recall_subset@2": 100.0, "recall_subset@3": 100.0}
    # A server recall_subset file (top 3 of the subset) scores the same.
    assert M.cirr_recall_subset([["m2", "t", "m1"]], ["t"], ["ref"], [members]) == r
    # Target not ranked among the members at all.
    none = M.cirr_recall_subset([["m1", "m2", "m4"]], ["t"], ["ref"], [members])
    assert set(none.values()) == {0.0}


def test_cirr_recall_random_subset_is_one_in_five():
    # The CIRR authors' sanity check: with the reference removed, a random subset R@1 is 1/5.
    members = ["ref", "a", "b", "c", "d", "t"]
    orders = [["a", "b", "c", "d", "t"], ["t", "a", "b", "c", "d"], ["b", "t", "a", "c", "d"],
              ["c", "b", "a", "d", "t"], ["d", "c", "b", "a", "t"]]
    r = M.cirr_recall_subset(orders, ["t"] * 5, ["ref"] * 5, [members] * 5, ks=(1,))
    assert r["recall_subset@1"] == pytest.approx(20.0)


# ----------------------------------------------------------------------------- CIRCO


def test_circo_ap_hand_worked():
    gt = ["g1", "g2", "g3"]
    ranking = ["g1", "x", "g2", "y", "z"]
    # P_1 = 1/1, P_3 = 2/3; AP@5 = (1 + 2/3) / min(3, 5); AP@2 = 1 / min(3, 2)
    assert M.average_precision_at_k(ranking, gt, 5) == pytest.approx((1 + 2 / 3) / 3)
    assert M.average_precision_at_k(ranking, gt, 2) == pytest.approx(0.5)
    assert M.average_precision_at_k(ranking, gt, 1) == pytest.approx(1.0)


def test_circo_ap_all_found_none_found_and_short():
    gt = ["g1", "g2", "g3"]
    assert M.average_precision_at_k(["g2", "g3", "g1", "x"], gt, 5) == pytest.approx(1.0)
    assert M.average_precision_at_k(["x", "y", "z"], gt, 5) == 0.0
    assert M.average_precision_at_k([], gt, 5) == 0.0
    # Fewer than k results: scored on what is there, still divided by min(|GT|, k).
    assert M.average_precision_at_k(["g1"], gt, 10) == pytest.approx(1 / 3)
    # More ground truths than k: the divisor is k.
    many = [f"g{i}" for i in range(20)]
    assert M.average_precision_at_k(["g0", "x", "g1"], many, 5) == pytest.approx((1 + 2 / 3) / 5)


def test_circo_ap_refuses_duplicates_like_the_official_script():
    # Scored as given, a repeated ground truth would count twice (AP 2.0 here); the official script refuses it.
    with pytest.raises(M.DuplicatePredictionError, match="repeats g1"):
        M.average_precision_at_k(["g1", "g1"], ["g1"], 5)
    with pytest.raises(ValueError, match="duplicate"):
        M.circo_map([["g1", "x"], ["x", "y", "x"]], [["g1"], ["h1"]])


def test_circo_ids_are_cast_like_the_official_int():
    for value in (123, 123.0, "123", "000123", " 123 ", "123.0"):
        assert M.circo_id(value) == "123"
    assert M.circo_id(0) == "0" and M.circo_id("000") == "0"
    for bad in (12.5, "12.5", "abc", "", True):
        with pytest.raises(ValueError):
            M.circo_id(bad)


def test_circo_map_and_semantic_aspects():
    rankings = [["g1", "x"], ["x", "h1"]]
    gts = [["g1"], ["h1", "h2"]]
    r = M.circo_map(rankings, gts, ks=(1, 2))
    assert r["map@1"] == pytest.approx(100 * (1.0 + 0.0) / 2)
    assert r["map@2"] == pytest.approx(100 * (1.0 + 0.5 / 2) / 2)
    sem = M.circo_semantic_map10(rankings, gts, [["cardinality"], ["cardinality", "negation"]])
    assert sem["semantic_map@10/cardinality"] == pytest.approx(100 * (1.0 + 0.25) / 2)
    assert sem["semantic_map@10/negation"] == pytest.approx(25.0)
    assert math.isnan(sem["semantic_map@10/viewpoint"])  # no query has it, as np.mean([]) gives
    assert len([k for k in sem if k.startswith("semantic")]) == 9


# ----------------------------------------------------------------------------- FashionIQ / GeneCIS / TIR


def test_fashioniq_recall_keeps_reference_and_averages_categories():
    # The reference ("c") is not masked on FashionIQ: it takes rank 1 here.
    r = M.fashioniq_recall([["c", "t"]], ["t"], ks=(1, 2))
    assert r == {"recall@1": 0.0, "recall@2": 100.0}
    avg = M.fashioniq_average({"dress": {"recall@10": 10.0, "recall@50": 30.0},
                               "shirt": {"recall@10": 20.0, "recall@50": 40.0}})
    assert avg == {"recall@10": 15.0, "recall@50": 35.0, "average": 25.0}


def test_genecis_recall_restricts_to_the_query_gallery():
    cands = ["t", "g1", "g2", "g3"]
    # "z" is not in this query's gallery and is ignored.
    r = M.genecis_recall([["z", "g1", "t", "g2"]], ["t"], [cands])
    assert r == {"recall@1": 0.0, "recall@2": 100.0, "recall@3": 100.0}
    assert M.genecis_recall([["g1", "g2", "g3"]], ["t"], [cands]) == {"recall@1": 0.0, "recall@2": 0.0,
                                                                       "recall@3": 0.0}


def test_tir_recall_with_ties_uses_the_stable_order():
    # Three images tie; a stable sort keeps gallery order, and the metric uses that order.
    ranking = ranking_from_scores(["a", "t", "b", "c"], np.array([0.5, 0.5, 0.5, 0.1], dtype=np.float32))
    assert ranking.ids == ["a", "t", "b", "c"]
    assert M.tir_recall([ranking.ids], ["t"]) == {"recall@1": 0.0, "recall@5": 100.0, "recall@10": 100.0}


def test_tir_recall_accepts_several_ground_truths_per_query():
    rankings = [["x", "t2", "t1"], ["y", "z", "u"], ["s"]]
    targets = [["t1", "t2"], ["u"], "s"]  # several, one in a list, and a plain id
    r = M.tir_recall(rankings, targets, ks=(1, 2, 3))
    assert r == {"recall@1": pytest.approx(100 / 3), "recall@2": pytest.approx(200 / 3),
                 "recall@3": pytest.approx(100.0)}
    with pytest.raises(ValueError, match="at least one ground truth"):
        M.tir_recall([["a"]], [[]])


# ----------------------------------------------------------------------------- VisDial


def test_visdial_hits_are_cumulative_and_recall_is_per_round():
    d1 = [["x", "t"], ["t", "x"], ["x", "y"]]  # found at round 1, lost again at round 2
    d2 = [["u", "v"], ["v", "w"], ["u", "v"]]  # never found (target "u2")
    r = M.visdial_hits([d1, d2], ["t", "u2"], ks=(1, 2))
    assert [r[f"hits@1/round_{i}"] for i in range(3)] == [0.0, 50.0, 50.0]
    assert [r[f"recall@1/round_{i}"] for i in range(3)] == [0.0, 50.0, 0.0]
    assert [r[f"hits@2/round_{i}"] for i in range(3)] == [50.0, 50.0, 50.0]
    assert [r[f"recall@2/round_{i}"] for i in range(3)] == [50.0, 50.0, 0.0]


# ----------------------------------------------------------------------------- DISBench


def test_set_metrics():
    assert M.set_exact_match(["a", "b"], ["b", "a"]) == 1.0
    assert M.set_exact_match(["a", "b", "b"], ["a", "b"]) == 1.0  # repeats ignored (sets)
    assert M.set_exact_match(["a"], ["a", "b"]) == 0.0
    assert M.set_f1(["a", "b"], ["b", "c"]) == pytest.approx(0.5)
    assert M.set_f1(["a", "b", "c", "d"], ["a"]) == pytest.approx(2 * 0.25 * 1 / 1.25)
    assert M.set_f1([], ["a"]) == 0.0
    assert M.set_f1(["x"], ["a"]) == 0.0
    assert M.set_f1([], []) == 1.0


def test_disbench_groups_by_event_type():
    r = M.disbench_scores([["a"], ["b", "c"], []], [["a"], ["c"], ["z"]],
                          ["intra-event", "inter-event", "inter-event"])
    assert r["overall/em"] == pytest.approx(100 / 3)
    assert r["intra/em"] == 100.0 and r["intra/f1"] == 100.0
    assert r["inter/em"] == 0.0
    assert r["inter/f1"] == pytest.approx(100 * (2 / 3 + 0) / 2)


def test_wording_scores_mean_each_questions_worst_and_best_wording():
    r = M.wording_scores([1.0, 0.5, 0.0, 0.8, 0.6], ["g1", "g1", "g1", "g2", "g2"])
    assert r["wording/f1_worst"] == pytest.approx(100 * (0.0 + 0.6) / 2)
    assert r["wording/f1_best"] == pytest.approx(100 * (1.0 + 0.8) / 2) and r["wording/questions"] == 2
    assert M.wording_scores([1.0, 0.5], ["q1", "q2"]) == {}  # one wording a question: nothing to say


# ----------------------------------------------------------------------------- generic


def test_recall_any_and_empty_inputs():
    r = M.recall_any([["ref", "t2"], ["x"]], [["t1", "t2"], ["y"]], ks=(1, 2), excluded=[["ref"], []])
    assert r == {"recall@1": 50.0, "recall@2": 50.0}
    assert math.isnan(M.mean_percent([]))
    assert M.duplicate_count(["a", "b", "a", "a"]) == 2


def test_ndcg_at_10_hand_worked_and_standard_definition():
    # Hand-worked: relevant {a: 1, b: 1}, ranking [x, a, y, b]: DCG = 1/log2(3) + 1/log2(5) = 0.63093 + 0.43068
    # = 1.06161; IDCG = 1/log2(2) + 1/log2(3) = 1.63093; NDCG = 0.65092.
    assert M.ndcg_at_k(["x", "a", "y", "b"], ["a", "b"], 10) == pytest.approx(0.650921, abs=1e-6)
    assert M.ndcg_at_k(["a", "b", "x"], ["a", "b"]) == 1.0 and M.ndcg_at_k(["x"], ["a"]) == 0.0
    assert M.ndcg_at_k(["x"] * 10 + ["a"], ["a"]) == 0.0  # past K; duplicates count once
    assert M.ndcg_at_k(["a"], []) == 0.0
    # Graded relevance against scikit-learn's ndcg_score (the standard definition, linear gain), when present.
    rel = {"a": 3.0, "b": 2.0, "c": 1.0}
    ranking = ["c", "x", "a", "b", "y"]
    ours = M.ndcg_at_k(ranking, rel, 10)
    dcg = 1 / 1.0 + 3 / 2.0 + 2 / 2.321928094887362  # positions 1, 3, 4
    idcg = 3 / 1.0 + 2 / 1.5849625007211562 + 1 / 2.0
    assert ours == pytest.approx(dcg / idcg)
    sklearn = pytest.importorskip("sklearn.metrics")
    docs = ["a", "b", "c", "x", "y"]
    scores = [[5 - ranking.index(d) for d in docs]]
    assert ours == pytest.approx(sklearn.ndcg_score([[rel.get(d, 0.0) for d in docs]], scores, k=10))
    assert M.mean_ndcg([["a"], ["x", "a"]], [["a"], ["a"]]) == {"ndcg@10": pytest.approx(100 * (1 + 0.63093) / 2,
                                                                                         abs=1e-3)}
