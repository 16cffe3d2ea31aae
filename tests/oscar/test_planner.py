"""OSCAR online, with a scripted planner and verifier over the 627 real stamps (caption mode, real MiniLM):
plan reading in both call formats, malformed and partial plans, set-operation semantics, the fallback, the
ablations, decision 3's ranking, the exact model calls per query, and the golden library round trip."""

from __future__ import annotations

import json

import pytest

from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Ranking
from imagent.methods.base import ranking_from_scores
from imagent.methods.oscar.atomic import Retrievers
from imagent.methods.oscar.config import OscarConfig, default_retrievers
from imagent.methods.oscar.library import GoldenLibrary, build_library
from imagent.methods.oscar.method import Oscar, rank
from imagent.methods.oscar.planner import execute, order_set, parse_reply, render_planner_prompt
from imagent.models.chat_scripted import ScriptedChatModel

TOOLS = default_retrievers()
PLANNER_MARK = "you plan searches for Composed Image Retrieval"
VERIFIER_MARK = "does the candidate image match"


def block(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def steps(*s) -> str:
    return block("set_operation", steps=[{"name": n, "op": op, "operands": list(o)} for n, op, o in s])


FULL_PLAN = "\n".join([
    "Analysis: keep the coin, change the value.",
    block("caption_search_text", query="a European coin of 5 cents", top_k=10),
    block("embedding_search_dual", query="a small euro cent coin", top_k=5),
    block("caption_search_dual", query="2 euros", top_k=5),
    steps(("positive", "UNION", [0, 1]), ("negative", "INTERSECT", [2]),
          ("final", "DIFFERENCE", ["positive", "negative"])),
])


def cir_query(ref: str = "symbols__money__euro__coins__002",
              text: str = "the next euro cent coin up in value") -> Query:
    return Query(text=text, id="q1", reference=ImageRecord(id=ref, path=""), exclude=[ref])


# --------------------------------------------------------------------------- reading plans


def test_text_blocks_are_read_with_polarity_from_the_set_operations():
    plan = parse_reply(FULL_PLAN, [], TOOLS, OscarConfig())
    assert plan.ok, plan.errors
    assert [(c.tool, c.top_k, c.polarity) for c in plan.calls] == [
        ("caption_search_text", 10, "+"), ("embedding_search_dual", 5, "+"), ("caption_search_dual", 5, "-")]
    assert [s.op for s in plan.steps] == ["UNION", "INTERSECT", "DIFFERENCE"]


def test_native_tool_calls_are_read_the_same_way():
    native = [{"id": "a", "name": "caption_search_text", "arguments": json.dumps({"query": "x", "top_k": 7})},
              {"id": "b", "name": "caption_search_dual", "arguments": {"query": "y", "top_k": "3"}},
              {"id": "c", "name": "set_operation", "arguments": json.dumps(
                  {"steps": [{"name": "final", "op": "difference", "operands": [0, "1"]}]})}]
    native[1]["arguments"] = json.dumps(native[1]["arguments"])
    plan = parse_reply("", native, TOOLS, OscarConfig())
    assert plan.ok, plan.errors
    assert [(c.query, c.top_k, c.polarity) for c in plan.calls] == [("x", 7, "+"), ("y", 3, "-")]


def test_partial_and_malformed_plans_are_diagnosed():
    cfg = OscarConfig()
    cut = FULL_PLAN[: FULL_PLAN.rindex("<tool_call>")]  # the set_operation never came
    assert "no set_operation" in " ".join(parse_reply(cut, [], TOOLS, cfg).errors)
    unknown = parse_reply(block("google", query="x", top_k=3), [], TOOLS, cfg)
    assert "unknown tool 'google'" in unknown.errors[0]
    bad_operand = parse_reply(block("caption_search_text", query="x", top_k=3) + block(
        "caption_search_dual", query="y", top_k=3) + steps(("final", "UNION", [0, 5])), [], TOOLS, cfg)
    assert "there is no call 5" in bad_operand.errors[0]
    bad_op = parse_reply(block("caption_search_text", query="x", top_k=3) + block(
        "caption_search_dual", query="y", top_k=3) + steps(("final", "XOR", [0, 1])), [], TOOLS, cfg)
    assert "unknown op" in bad_op.errors[0]
    assert not parse_reply("I think the answer is a coin.", [], TOOLS, cfg).ok
    # A missing closing tag and a top_k beyond k_max are repaired, a lone call needs no set_operation.
    lone = parse_reply('<tool_call>{"name": "caption_search_text", "arguments": {"query": "x", "top_k": 500}}',
                       [], TOOLS, cfg)
    assert lone.ok and lone.calls[0].top_k == 50
    # Untagged calls, one per line and some in parentheses (the 0.5B model writes this): every one is read.
    untagged = parse_reply('{"name": "caption_search_text", "arguments": {"query": "x", "top_k": 5}}\n'
                           '({"name": "caption_search_dual", "arguments": {"query": "y", "top_k": 5}})\n'
                           '({"name": "set_operation", "arguments": {"steps": [{"name": "final", "op": '
                           '"DIFFERENCE", "operands": [0, 1]}]}})', [], TOOLS, cfg)
    assert untagged.ok and [c.polarity for c in untagged.calls] == ["+", "-"] and not untagged.errors
    # ... and what is not a call (a step, prose) is not taken for one; a cut-off call is reported
    cut_off = parse_reply('{"name": "caption_search_text", "arguments": {"query": "x", "top_k": 5}}\n'
                          '{"name": "caption_search_dual", "arguments": {"query": "y"', [], TOOLS, cfg)
    assert not cut_off.ok and len(cut_off.calls) == 1 and "<tool_call>" in cut_off.errors[-1]


def test_set_operation_semantics():
    cfg = OscarConfig()
    plan = parse_reply("".join(block("caption_search_text", query=q, top_k=3) for q in "abcd") + steps(
        ("u", "UNION", [0, 1]), ("i", "INTERSECT", ["u", 2]), ("final", "DIFFERENCE", ["u", 2, 3])), [], TOOLS, cfg)
    results = {0: ["x1", "x2"], 1: ["x2", "x3"], 2: ["x2", "x9"], 3: ["x3"]}
    run = execute(plan, results, cfg)
    assert [e["size"] for e in run.step_log] == [3, 1, 1]
    assert run.composed == {"x1"}  # DIFFERENCE removes what is in ANY later operand
    assert run.step_log[2]["removed"] == 2 and run.step_log[2]["sizes"] == [3, 2, 1]
    assert [c.polarity for c in plan.calls] == ["+", "+", "-", "-"]
    # The step "i" feeds nothing: the result is "final".
    no_diff = execute(plan, results, cfg.model_copy(update={"set_operations": "no_difference"}))
    assert no_diff.composed == {"x1", "x2", "x3"}
    union = execute(plan, results, cfg.model_copy(update={"set_operations": "union_only"}))
    assert union.composed == {"x1", "x2", "x3"}  # positive calls 0 and 1 only


def test_prompt_follows_the_ablation():
    full = render_planner_prompt(OscarConfig(), TOOLS, ["Case 1 ..."], "m", "r", "c")
    assert "DIFFERENCE (A - B)" in full and "RETRIEVED SIMILAR CASES" in full and "Example 2" in full
    union = render_planner_prompt(OscarConfig(set_operations="union_only"), TOOLS, [], "m", "r", "c")
    assert "DIFFERENCE" not in union and "INTERSECT" not in union and "RETRIEVED SIMILAR CASES" not in union


def test_rank_is_decision_3():
    fused = Ranking(["a", "b", "c", "d", "e"], [0.9, 0.8, 0.7, 0.6, 0.5])
    out = rank(["b", "d", "e"], {"d": 0.9, "b": 0.2}, fused)
    assert out.ids == ["d", "b", "e", "a", "c"]
    assert all(x >= y for x, y in zip(out.scores, out.scores[1:], strict=False))


# --------------------------------------------------------------------------- the method end to end


def scripted(planner_replies: list, verifier: str = "yes") -> ScriptedChatModel:
    replies = iter(planner_replies)
    return ScriptedChatModel([(VERIFIER_MARK, verifier), (PLANNER_MARK, lambda _t: next(replies))])


def test_full_plan_runs_with_exact_model_calls(make_context, tmp_path):
    model = scripted([FULL_PLAN])
    method = Oscar(make_context(model), {"demonstrations": False, "max_verified": 4})
    result = method.search(cir_query(), top_k=50)
    t = result.trace.to_dict()
    steps_by = {s["name"]: s for s in t["steps"]}
    planner_calls = [c for c in model.calls if PLANNER_MARK in ScriptedChatModel.conversation_text(c[0])]
    composed = steps_by["set_operations"]["outputs"]["composed"]
    assert len(planner_calls) == 1
    assert t["model_calls"] == 1 + min(4, composed) == len(model.calls)
    assert steps_by["verify"]["outputs"]["scores"][0]["score"] == pytest.approx(0.9)
    diff = steps_by["set_operations"]["outputs"]["steps"][-1]
    assert diff["op"] == "DIFFERENCE" and diff["size"] == diff["sizes"][0] - diff["removed"]
    calls = steps_by["retrieve"]["outputs"]["calls"]
    assert [(c["tool"], c["polarity"], c["top_k"], c["returned"]) for c in calls] == [
        ("caption_search_text", "+", 10, 10), ("embedding_search_dual", "+", 5, 5), ("caption_search_dual", "-", 5, 5)]
    # Ranking: the composed set first (decision 3), the reference never, every pool image once.
    assert set(result.ranking.ids[:composed]) == set(result.answer_set)
    assert "symbols__money__euro__coins__002" not in result.ranking.ids and len(result.ranking.ids) == 50
    assert set(result.stages) == {"fused", "composed"}
    assert "w/o Demo." in " ".join(steps_by["demonstrations"]["notes"])
    assert result.source == "method" and result.counts["plan_fallbacks"] == 0
    assert result.counts["set_operations.DIFFERENCE"] == 1 and result.counts["difference_removed"] == diff["removed"]
    assert result.counts["verified"] == 4
    line = steps_by["rank"]["outputs"]["report_line"]  # the eval report's per-query detail
    assert "final=DIFFERENCE" in line and f"removed {diff['removed']}" in line and "verified 4" in line


def test_ranking_equals_decision_3_over_the_whole_pool(make_context, tmp_path):
    # The method ranks only the composed set and the head of the fused ranking (framework speed); the result
    # must equal decision 3 applied to the fused ranking of the whole pool, computed here the slow way.
    model = scripted([FULL_PLAN], verifier="no")
    method = Oscar(make_context(model), {"demonstrations": False, "max_verified": 3})
    query = cir_query()
    result = method.search(query, top_k=30)
    steps_by = {s["name"]: s for s in result.trace.to_dict()["steps"]}
    calls = steps_by["retrieve"]["outputs"]["calls"]
    retrievers = Retrievers(method.ctx, method.config.retrievers, query)
    positive = list(dict.fromkeys((c["tool"], c["query"]) for c in calls if c["polarity"] == "+"))
    fused = retrievers.scan([(tool, text, "+") for tool, text in positive]).mean(axis=0)
    pool = retrievers.rows
    full = ranking_from_scores(retrievers.pool_ids(), fused[pool])
    assert len(full) == len(method.ctx.gallery) - 1
    scores = {v["id"]: v["score"] for v in steps_by["verify"]["outputs"]["scores"]}
    expected = rank(order_set(set(result.answer_set), full), scores, full)
    assert result.ranking.ids == expected.ids[:30]
    assert result.stages["fused"].ids == full.ids[:30]


def test_malformed_plan_is_retried_then_falls_back(make_context, tmp_path):
    # Two calls, no set_operation, the second stated negative: decision 7 runs the first stated-positive call
    # alone (never the union of both: the negative would be added).
    two_calls_no_op = block("caption_search_text", query="a euro coin", top_k=5, polarity="+") + block(
        "caption_search_dual", query="a coin", top_k=5, polarity="-")
    model = scripted([two_calls_no_op, two_calls_no_op], verifier="no")
    method = Oscar(make_context(model), {"demonstrations": False, "plan_retries": 1, "max_verified": 2})
    result = method.search(cir_query(), top_k=20)
    t = result.trace.to_dict()
    assert result.source == "fallback:first_positive_call"
    assert result.counts["plan_retries"] == 1 and result.counts["plan_fallbacks"] == 1
    assert t["counters"]["plan_retries"] == 1 and t["counters"]["plan_fallbacks"] == 1
    assert not any(result.counts[f"set_operations.{op}"] for op in ("UNION", "INTERSECT", "DIFFERENCE"))
    plan = next(s for s in t["steps"] if s["name"] == "plan")
    assert len(plan["outputs"]["attempts"]) == 2 and plan["outputs"]["source"] == result.source
    assert "Your plan cannot be run" in ScriptedChatModel.conversation_text(model.calls[1][0])
    assert [c["query"] for c in plan["outputs"]["plan"]["calls"]] == ["a euro coin"]
    assert len(result.answer_set) == 5
    assert t["model_calls"] == 2 + 2


def test_no_usable_call_falls_back_to_the_composed_query(make_context, tmp_path):
    model = scripted(["no idea"], verifier="yes")
    method = Oscar(make_context(model), {"demonstrations": False, "plan_retries": 0, "verify": False})
    result = method.search(cir_query(), top_k=10)
    plan = next(s for s in result.trace.to_dict()["steps"] if s["name"] == "plan")["outputs"]["plan"]
    assert {c["tool"] for c in plan["calls"]} == set(TOOLS) and all(c["top_k"] == 20 for c in plan["calls"])
    assert len({c["query"] for c in plan["calls"]}) == 1 and "the next euro cent coin up" in plan["calls"][0]["query"]
    assert result.source == "fallback:composed_query" and result.counts["plan_fallbacks"] == 1
    assert result.trace.model_calls == 1


def test_native_protocol_offers_tools(make_context, tmp_path):
    native = {"text": "", "tool_calls": [
        {"name": "caption_search_text", "arguments": {"query": "a European coin of 5 cents", "top_k": 5}}]}
    model = ScriptedChatModel([(VERIFIER_MARK, "yes"), (PLANNER_MARK, native)], supports_tools=True)
    method = Oscar(make_context(model), {"demonstrations": False, "max_verified": 1})
    result = method.search(cir_query(), top_k=10)
    params = model.calls[0][1]
    assert {t["function"]["name"] for t in params.tools} == {*TOOLS, "set_operation"}
    assert result.answer_set and len(result.answer_set) == 5


def test_library_round_trip_steers_the_planner(make_context, tmp_path):
    """Build two trajectories with a scripted rewriter, then the planner prompt holds the nearest one."""
    rewriter = ScriptedChatModel([("search queries", json.dumps(
        {"positive": ["a European coin of 5 cents"], "negative": ["yen"]}))])
    ctx = make_context(rewriter)
    cfg = OscarConfig(library=str(tmp_path / "lib.jsonl"))
    lib = GoldenLibrary(cfg.library_path())
    items = [("stamps/train/1", cir_query(), ["symbols__money__euro__coins__005"]),
             ("stamps/train/2", cir_query("animals__birds__drake", "the female of this bird"),
              ["animals__birds__duck"])]
    report = build_library(ctx, cfg, items, lib)
    assert report.added == 2 and len(rewriter.calls) == 2
    entry = {e.key: e for e in GoldenLibrary(lib.path).entries()}["stamps/train/1"]
    assert entry.stats["targets_kept"] == 1 and entry.stats["atomic_retrievals"] == 3 * 3 * 10
    assert entry.calls[-1]["polarity"] in "+-" and entry.steps[-1]["name"] == "final"
    assert entry.stage2["objective"] == pytest.approx(1 - 0.05 * (entry.stats["final_size"] - 1))
    # Resumable: nothing is rebuilt.
    again = build_library(ctx, cfg, items, GoldenLibrary(lib.path))
    assert again.added == 0 and again.already == 2 and len(rewriter.calls) == 2
    # Online: the nearest case for a coin query is the coin trajectory, shown in the planner's prompt.
    model = scripted([FULL_PLAN])
    method = Oscar(make_context(model), {"library": str(lib.path), "max_verified": 1})
    trace = method.search(cir_query(text="the next coin up"), top_k=10).trace.to_dict()
    demo = next(s for s in trace["steps"] if s["name"] == "demonstrations")["outputs"]["cases"]
    assert [c["key"] for c in demo] == ["stamps/train/1"]
    prompt = ScriptedChatModel.conversation_text(model.calls[0][0])
    assert "RETRIEVED SIMILAR CASES" in prompt and entry.calls[0]["arguments"]["query"] in prompt
    # w/o Demo. ablation: no case in the prompt.
    model2 = scripted([FULL_PLAN])
    Oscar(make_context(model2), {"library": str(lib.path), "demonstrations": False, "verify": False}).search(
        cir_query(), top_k=10, trace=Trace())
    assert "RETRIEVED SIMILAR CASES" not in ScriptedChatModel.conversation_text(model2.calls[0][0])
