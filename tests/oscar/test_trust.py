"""OSCAR reports only its own work (issue 27): no self-demonstration, decision 7's fallback (never a union of
possible negatives) with the result's ``source`` and counts, a missing library is an error, demonstrations
shown with the tools the config offers, cut operands dropped (not the plan); and the planner's JSON grammar
(issue 28): the plan schema admits exactly the runnable plans, and a plan parses the same from all three
protocols. Scripted planner and verifier over the 627 real stamps (caption mode, real MiniLM)."""

from __future__ import annotations

import json

import pytest

from imagent.core.types import ImageRecord, Query
from imagent.methods.oscar.config import OscarConfig, default_retrievers
from imagent.methods.oscar.library import GoldenLibrary, LibraryEntry, build_library
from imagent.methods.oscar.method import Oscar
from imagent.methods.oscar.planner import parse_reply, plan_document, plan_schema, write_plan
from imagent.models.chat_scripted import ScriptedChatModel

from .test_planner import PLANNER_MARK, VERIFIER_MARK, block, cir_query, scripted, steps

TOOLS = default_retrievers()


def run(make_context, replies, **config):
    model = scripted(replies, verifier="no")
    method = Oscar(make_context(model), {"demonstrations": False, "plan_retries": 0, "max_verified": 2, **config})
    result = method.search(cir_query(), top_k=20)
    t = result.trace.to_dict()
    plan = next(s for s in t["steps"] if s["name"] == "plan")["outputs"]
    return result, plan, model


# --------------------------------------------------------------------------- decision 7 and the plan's source


def test_several_calls_without_a_set_operation_run_the_composed_query_on_the_plans_tools(make_context):
    reply = block("caption_search_text", query="a 5 cent euro coin", top_k=10) + block(
        "caption_search_text", query="cherry toppings", top_k=10)  # polarity unknown: never unioned
    result, plan, _ = run(make_context, [reply])
    assert result.source == "fallback:composed_query"
    assert result.counts["plan_fallbacks"] == 1 and result.counts["plans"] == 1
    calls = plan["plan"]["calls"]
    assert [c["tool"] for c in calls] == ["caption_search_text"]  # the plan's tools, not every tool
    assert "cherry" not in calls[0]["query"] and "the next euro cent coin up" in calls[0]["query"]
    assert plan["plan"]["source"] == "fallback:composed_query"


def test_a_negative_call_is_never_added(make_context):
    reply = block("caption_search_text", query="cherries", top_k=10, polarity="negative") + block(
        "caption_search_dual", query="a 5 cent euro coin", top_k=5, polarity="positive")
    result, plan, _ = run(make_context, [reply])
    assert result.source == "fallback:first_positive_call"
    assert [(c["query"], c["polarity"]) for c in plan["plan"]["calls"]] == [("a 5 cent euro coin", "+")]
    assert len(result.answer_set) == 5


def test_operands_naming_cut_calls_are_dropped_not_the_plan(make_context):
    reply = "".join(block("caption_search_text", query=q, top_k=5) for q in ("euro coin", "cent coin", "yen"))
    reply += steps(("positive", "UNION", [0, 1]), ("negative", "INTERSECT", [2]),
                   ("final", "DIFFERENCE", ["positive", "negative"]))
    result, plan, _ = run(make_context, [reply], max_calls_per_plan=2)
    assert result.source == "method" and result.counts["plan_fallbacks"] == 0
    assert [c["query"] for c in plan["plan"]["calls"]] == ["euro coin", "cent coin"]
    assert any("beyond max_calls_per_plan" in n for n in plan["plan"]["notes"])
    ops = next(s for s in result.trace.to_dict()["steps"] if s["name"] == "set_operations")["outputs"]["steps"]
    assert ops[1]["operands"] == [] and ops[1]["size"] == 0 and ops[2]["removed"] == 0
    assert result.counts["set_operations.DIFFERENCE"] == 1 and result.counts["difference_removed"] == 0


# --------------------------------------------------------------------------- the library


def _entry(key: str, modification: str, caption: str, tool: str, **extra) -> LibraryEntry:
    return LibraryEntry(key=key, context=f"{modification} {caption}", embedding=[], embedder="none",
                        modification=modification, reference_caption=caption, rewrites={}, task="cir",
                        calls=[{"name": tool, "arguments": {"query": "a euro coin", "top_k": 10}, "polarity": "+"}],
                        steps=[{"name": "final", "op": "UNION", "operands": [0]}],
                        stage1={"objective": 1.0, "optimal": True}, stage2={"objective": 1.0, "optimal": True},
                        stats={"targets": 1, "targets_kept": 1, "final_size": 10}, **extra)


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_demonstrations_without_a_library_is_an_error(make_context, tmp_path, state):
    path = tmp_path / "lib.jsonl"
    if state == "empty":
        path.write_text("")
    method = Oscar(make_context(scripted([])), {"library": str(path)})
    with pytest.raises(FileNotFoundError, match="oscar build-library") as err:
        method.preflight()
    assert str(path) in str(err.value) and "demonstrations=false" in str(err.value)
    with pytest.raises(FileNotFoundError, match=str(path)):
        method.search(cir_query(), top_k=5)


def test_demonstrations_are_shown_with_the_offered_tools(make_context, tmp_path):
    lib = GoldenLibrary(tmp_path / "lib.jsonl")
    lib.append(_entry("cirr/train/7", "a coin of higher value", "a euro coin", "embedding_search_clip_L14"))
    model = scripted([block("caption_search_text", query="x", top_k=5)])
    method = Oscar(make_context(model), {"library": str(lib.path), "verify": False})
    result = method.search(cir_query(), top_k=10)
    prompt = ScriptedChatModel.conversation_text(model.calls[0][0])
    assert "embedding_search_clip_L14" not in prompt and '"name": "embedding_search_dual"' in prompt
    demo = next(s for s in result.trace.to_dict()["steps"] if s["name"] == "demonstrations")["outputs"]
    assert demo["cases"][0]["tools_mapped"] == {"embedding_search_clip_L14": "embedding_search_dual"}
    assert result.counts["demonstration_tools_mapped"] == 1 and result.counts["self_demonstrations_excluded"] == 0


def test_a_query_never_sees_its_own_entry(make_context, tmp_path):
    """The leakage case with a scripted rewriter: build a library on the evaluated queries, then evaluate them."""
    rewriter = ScriptedChatModel([("search queries", json.dumps({"positive": ["a euro coin"], "negative": []}))])
    ctx = make_context(rewriter)
    lib = GoldenLibrary(tmp_path / "lib.jsonl")
    queries = [Query(text="the next euro cent coin up in value", id="q1",
                     reference=ImageRecord(id="symbols__money__euro__coins__002", path=""),
                     exclude=["symbols__money__euro__coins__002"]),
               Query(text="the female of this bird", id="q2",
                     reference=ImageRecord(id="animals__birds__drake", path=""), exclude=["animals__birds__drake"])]
    targets = [["symbols__money__euro__coins__005"], ["animals__birds__duck"]]
    report = build_library(ctx, OscarConfig(), [(f"stamps/cir/{q.id}", q, t) for q, t in zip(queries, targets,
                                                                                             strict=True)], lib)
    assert report.added == 2 and report.non_optimal == 0 and report.rewriter_failed == 0
    for q in queries:
        model = scripted([block("caption_search_text", query="x", top_k=5)])
        method = Oscar(make_context(model), {"library": str(lib.path), "verify": False})
        result = method.search(q, top_k=10)
        demo = next(s for s in result.trace.to_dict()["steps"] if s["name"] == "demonstrations")["outputs"]
        assert demo["excluded"] == [f"stamps/cir/{q.id}"]
        assert [c["key"] for c in demo["cases"]] != [f"stamps/cir/{q.id}"] and len(demo["cases"]) == 1
        assert result.counts["self_demonstrations_excluded"] == 1
        assert q.text not in ScriptedChatModel.conversation_text(model.calls[0][0]).split("Now solve")[0]


def test_build_report_counts_rewriter_failures(make_context, tmp_path):
    rewriter = ScriptedChatModel([("search queries", "not json at all")])
    report = build_library(make_context(rewriter), OscarConfig(), [("stamps/train/1", cir_query(),
                                                                    ["symbols__money__euro__coins__005"])],
                           GoldenLibrary(tmp_path / "lib.jsonl"))
    assert report.added == 1 and report.rewriter_failed == 1 and report.to_dict()["rewriter_failed"] == 1


# --------------------------------------------------------------------------- the plan grammar (issue 28)


jsonschema = pytest.importorskip("jsonschema")


def valid(schema, doc) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(doc)


T, D = "caption_search_text", "caption_search_dual"
WELL_FORMED = {
    "full": [
        ([("caption_search_text", "a coin", 10)], [("final", "UNION", [0])]),
        ([(T, "a coin", 10), ("embedding_search_dual", "coin", 5)], [("final", "INTERSECT", [0, 1])]),
        ([(T, "a cake", 20), (D, "cake", 15), (T, "cherries", 20)],
         [("positive", "UNION", [0, 1]), ("final", "DIFFERENCE", ["positive", 2])]),
        ([(T, "a cake", 20), (D, "cake", 15), (T, "cherries", 20), (D, "cream", 50)],
         [("positive", "UNION", [0, 1]), ("negative", "INTERSECT", [2, 3]),
          ("final", "DIFFERENCE", ["positive", "negative"])]),
    ],
    "no_difference": [
        ([("caption_search_text", "a coin", 10), ("caption_search_dual", "coin", 5)],
         [("positive", "UNION", [0]), ("final", "INTERSECT", ["positive", 1])]),
    ],
    "union_only": [
        ([("caption_search_text", "a coin", 10), ("caption_search_dual", "coin", 5)], [("final", "UNION", [0, 1])]),
    ],
}


def doc(calls, step_list):
    return plan_document([{"tool": t, "query": q, "top_k": k} for t, q, k in calls],
                         [{"name": n, "op": op, "operands": list(o)} for n, op, o in step_list], "why")


@pytest.mark.parametrize("ablation", ["full", "no_difference", "union_only"])
def test_plan_schema_accepts_every_well_formed_plan_of_the_ablation(ablation):
    cfg = OscarConfig(set_operations=ablation)
    schema = plan_schema(cfg, TOOLS)
    jsonschema.Draft202012Validator.check_schema(schema)
    plans = [p for name, ps in WELL_FORMED.items() for p in ps
             if name == ablation or (ablation == "full") or (ablation == "no_difference" and name == "union_only")]
    for calls, step_list in plans:
        d = doc(calls, step_list)
        assert valid(schema, d), d
        assert parse_reply(json.dumps(d), [], TOOLS, cfg, "json").ok
    # every number of calls up to the grammar's bound, each truncation level
    for n in range(1, 7):
        for k in cfg.truncations:
            assert valid(schema, doc([("caption_search_text", f"q{i}", k) for i in range(n)],
                                     [("final", "UNION", list(range(n)))]))


@pytest.mark.parametrize("bad", [
    doc([("google_images", "a coin", 10)], [("final", "UNION", [0])]),  # unknown tool
    doc([("caption_search_text", "a coin", 7)], [("final", "UNION", [0])]),  # top_k not a truncation level
    doc([("caption_search_text", "a", 10), ("caption_search_dual", "b", 10)], [("final", "XOR", [0, 1])]),
    doc([("caption_search_text", "a", 10), ("caption_search_dual", "b", 10)], [("final", "UNION", [0, 2])]),  # dangling
    doc([("caption_search_text", "a", 10)], [("positive", "UNION", ["final"]), ("final", "UNION", ["positive"])]),
    doc([("caption_search_text", "a", 10)], [("final", "UNION", ["positive"])]),  # no such earlier step
    doc([("caption_search_text", "a", 10)], [("final", "UNION", [])]),
    {"thought": "", "calls": [], "steps": [{"name": "final", "op": "UNION", "operands": [0]}]},
])
def test_plan_schema_rejects_unrunnable_plans(bad):
    assert not valid(plan_schema(OscarConfig(), TOOLS), bad)


@pytest.mark.parametrize("ablation, op", [("no_difference", "DIFFERENCE"), ("union_only", "INTERSECT"),
                                          ("union_only", "DIFFERENCE")])
def test_plan_schema_rejects_operations_outside_the_ablation(ablation, op):
    d = doc([("caption_search_text", "a", 10), ("caption_search_dual", "b", 10)], [("final", op, [0, 1])])
    assert not valid(plan_schema(OscarConfig(set_operations=ablation), TOOLS), d)


def test_plans_parse_identically_from_all_three_protocols():
    cfg = OscarConfig()
    for plans in WELL_FORMED.values():
        for calls, step_list in plans:
            d = doc(calls, step_list)
            as_calls = [{"tool": c["tool"], "query": c["query"], "top_k": c["top_k"]} for c in d["calls"]]
            text = write_plan(as_calls, d["steps"], "text", "analysis")
            native = [{"id": f"c{n}", "name": c["tool"], "arguments": json.dumps({"query": c["query"],
                                                                                  "top_k": c["top_k"]})}
                      for n, c in enumerate(as_calls)]
            native.append({"id": "s", "name": "set_operation", "arguments": json.dumps({"steps": d["steps"]})})
            got = [parse_reply(json.dumps(d), [], TOOLS, cfg, "json"), parse_reply(text, [], TOOLS, cfg, "text"),
                   parse_reply("", native, TOOLS, cfg, "native")]
            assert [p.protocol for p in got] == ["json", "text", "native"]
            forms = [(p.to_dict()["calls"], p.to_dict()["steps"], p.errors) for p in got]
            assert forms[0] == forms[1] == forms[2] and not forms[0][2]


def test_json_protocol_through_the_method(make_context):
    d = doc([("caption_search_text", "a 5 cent euro coin", 10), ("caption_search_dual", "2 euros", 5)],
            [("final", "DIFFERENCE", [0, 1])])
    model = ScriptedChatModel([(VERIFIER_MARK, "no"), (PLANNER_MARK, json.dumps(d))])
    method = Oscar(make_context(model), {"demonstrations": False, "tool_protocol": "json", "max_verified": 1})
    result = method.search(cir_query(), top_k=10)
    params = model.calls[0][1]
    assert params.json_schema == plan_schema(method.config, TOOLS) and params.tools is None
    assert "Reply with ONE JSON object" in ScriptedChatModel.conversation_text(model.calls[0][0])
    plan = next(s for s in result.trace.to_dict()["steps"] if s["name"] == "plan")
    assert plan["inputs"]["protocol"] == "json" and result.source == "method"
    assert result.counts["set_operations.DIFFERENCE"] == 1


def test_demonstrations_come_from_the_same_task_when_the_library_has_it(make_context, tmp_path):
    lib = GoldenLibrary(tmp_path / "lib.jsonl")
    lib.append(_entry("stamps/train/1", "the next euro cent coin up in value", "a euro coin", "caption_search_text"))
    tir = _entry("stamps/tir/5", "a euro coin of higher value", "", "caption_search_text")
    tir.task = "tir"
    lib.append(tir)
    model = ScriptedChatModel([("you plan searches for", block("caption_search_text", query="x", top_k=5))])
    method = Oscar(make_context(model), {"library": str(lib.path), "verify": False})
    for query, key in ((Query(text="a euro coin of high value", id="t1"), "stamps/tir/5"),
                       (cir_query(text="a coin of higher value"), "stamps/train/1")):
        demo = next(s for s in method.search(query, top_k=5).trace.to_dict()["steps"]
                    if s["name"] == "demonstrations")["outputs"]
        assert [c["key"] for c in demo["cases"]] == [key]
    prompt = ScriptedChatModel.conversation_text(model.calls[0][0])
    assert "text-to-image retrieval" in prompt and "Query: a euro coin of high value" in prompt
    assert "Reference image:" not in prompt.split("Now solve")[1]
