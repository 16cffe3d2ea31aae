"""The ``album`` method's plan: the per-search grammar (relations the search's words can express, spans of its own
words, stated counts and seasons), the checks on the model's object, the planner call with a scripted model for
every plan kind (end to end over the synthetic album of tests/methods/conftest.py), and the real Qwen 0.5B on a
handful of searches."""

from __future__ import annotations

import json
import re

import pytest

from imagent.core.trace import Trace
from imagent.core.types import Query
from imagent.methods.album.method import AlbumSearch
from imagent.methods.album.plan import (
    COUNTED,
    PLAN_SCHEMA,
    RELATIONS,
    Plan,
    offered_relations,
    plan_prompt,
    plan_schema,
    query_tokens,
    read_plan,
    spans,
)
from imagent.methods.base import MethodContext
from imagent.models.roles import Roles

from .conftest import SYNTHETIC_ALBUM

# Every plan kind: a search in words of our own, the plan a model answers, and the synthetic album's answer.
KINDS: dict[str, tuple[str, dict, set[str]]] = {
    "none": ("every dog in my pictures", {"target": "dog"}, {"a2", "a3", "a6", "d1", "e1", "f1", "g1"}),
    "same day": ("dogs on the day of the lighthouse", {"target": "dogs", "anchor": "lighthouse"}, {"a2", "a3"}),
    "same trip": ("dogs during the holiday with the lighthouse", {"target": "dogs", "anchor": "lighthouse"},
                  {"a2", "a3", "a6"}),
    "same place": ("dogs at the spot of the lighthouse", {"target": "dogs", "anchor": "lighthouse"},
                   {"a2", "a3", "e1"}),
    "same city": ("dogs in the town of the lighthouse", {"target": "dogs", "anchor": "lighthouse"},
                  {"a2", "a3", "a6", "e1"}),
    "days after": ("fruit three days after the lighthouse", {"target": "fruit", "anchor": "lighthouse", "count": 3},
                   {"b2"}),
    "days before": ("dogs three days before the bicycle", {"target": "dogs", "anchor": "bicycle", "count": 3},
                    {"a2", "a3"}),
    "weeks after": ("dogs four weeks after the lighthouse", {"target": "dogs", "anchor": "lighthouse", "count": 4},
                    {"d1"}),
    "weeks before": ("kites two weeks before the white dog", {"target": "kites", "anchor": "white dog", "count": 2},
                     {"c3"}),
    "months after": ("dogs one month after the lighthouse", {"target": "dogs", "anchor": "lighthouse", "count": 1},
                     {"d1"}),
    "months before": ("dogs two months before the poodle", {"target": "dogs", "anchor": "poodle", "count": 2},
                      {"d1"}),
    "years after": ("dogs one year after the lighthouse", {"target": "dogs", "anchor": "lighthouse", "count": 1},
                    {"g1"}),
    "years before": ("dogs one year before the beagle", {"target": "dogs", "anchor": "beagle", "count": 1},
                     {"a2", "a3", "a6", "d1", "e1", "f1"}),
    "next trip": ("fruit on the holiday following the lighthouse", {"target": "fruit", "anchor": "lighthouse",
                                                                    "count": 1}, {"b2"}),
    "previous trip": ("dogs on the holiday preceding the poodle", {"target": "dogs", "anchor": "poodle", "count": 1},
                      {"d1"}),
    "after": ("fruit after the lighthouse day", {"target": "fruit", "anchor": "lighthouse"}, {"b2"}),
    "before": ("dogs before the husky day", {"target": "dogs", "anchor": "husky"}, {"e1"}),
    "visit": ("dogs on my first visit to the spot of the bicycle", {"target": "dogs", "anchor": "bicycle",
                                                                     "count": 1}, {"a2", "a3"}),
    "city visit": ("dogs on my second stay in the town of the snowman", {"target": "dogs", "anchor": "snowman",
                                                                          "count": 2}, {"d1"}),
    "other visit": ("dogs on another visit to the spot of the bicycle", {"target": "dogs", "anchor": "bicycle"},
                    {"a2", "a3", "e1"}),
    "same month": ("dogs in that month of the pineapple", {"target": "dogs", "anchor": "pineapple"},
                   {"a2", "a3", "a6"}),
    "month after": ("dogs in the month after the lighthouse", {"target": "dogs", "anchor": "lighthouse"}, {"d1"}),
    "month before": ("dogs in the month before the snowman", {"target": "dogs", "anchor": "snowman"}, set()),
    "same season": ("dogs in the same autumn as the lighthouse", {"target": "dogs", "anchor": "lighthouse",
                                                                  "season": "autumn"}, {"a2", "a3", "a6", "d1"}),
    "season after": ("dogs in the winter after the lighthouse", {"target": "dogs", "anchor": "lighthouse",
                                                                 "season": "winter"}, {"e1"}),
    "season before": ("dogs in the season before the husky", {"target": "dogs", "anchor": "husky"}, {"e1"}),
    "same year": ("dogs in that year of the lighthouse", {"target": "dogs", "anchor": "lighthouse"},
                  {"a2", "a3", "a6", "d1", "e1", "f1"}),
    "year after": ("dogs in the year after the lighthouse", {"target": "dogs", "anchor": "lighthouse"}, {"g1"}),
    "year before": ("dogs in the year before the beagle", {"target": "dogs", "anchor": "beagle"},
                    {"a2", "a3", "a6", "d1", "e1", "f1"}),
}


def reply(relation: str, fields: dict) -> str:
    plan = {"target": "", "anchor": "", "relation": relation, "count": 0, "season": "", "exclude": "", "person": ""}
    return json.dumps({**plan, **fields})


def test_every_plan_kind_has_a_search():
    assert set(KINDS) == set(RELATIONS)


@pytest.mark.parametrize("relation", list(KINDS))
def test_the_grammar_offers_each_kind_its_search_states(relation):
    query, fields, _ = KINDS[relation]
    assert relation in offered_relations(query)
    schema = plan_schema(query)
    branches = schema.get("anyOf", [schema])
    branch = next(b for b in branches if relation in b["properties"]["relation"]["enum"])
    props = branch["properties"]
    value = json.loads(reply(relation, fields))
    for key in ("target", "anchor"):  # the plan's words are runs of the search's own words
        spec = props[key]
        assert value[key] in spec["enum"] if "enum" in spec else re.fullmatch(spec["pattern"], value[key])
    assert value["count"] in props["count"]["enum"]
    assert value["season"] in props["season"]["enum"]


def test_the_grammar_narrows_what_a_small_model_can_write():
    # A search with no word of time order offers no relation that needs one.
    offered = offered_relations("the dogs on the day of the lighthouse")
    assert "same day" in offered and not {"days after", "next trip", "before", "month after"} & set(offered)
    # A word of time order without "same", "that" or "during": not the anchor's own day or month.
    offered = offered_relations("the dogs in the month after the lighthouse")
    assert "month after" in offered and "same month" not in offered
    assert "same month" in offered_relations("the dogs during that month of the lighthouse")
    # A rank asks for one occasion among several; "another" for the others; a town for the city's visits.
    assert "visit" in offered_relations("dogs on my third visit to the spot of the kite")
    assert "visit" not in offered_relations("dogs at the spot of the kite")
    assert "other visit" not in offered_relations("dogs at the spot of the kite")
    assert not {"same place", "visit"} & set(offered_relations("dogs on my second stay in the town of the kite"))
    # A search with none of the cue words is offered every relation.
    assert set(offered_relations("kayak pictures")) == {"none", "same day", "same trip", "same place", "same city",
                                                        "same month", "same season", "same year"}
    schema = plan_schema("every kite I own a picture of, but none from the beach at Bondi, with Maria")
    unanchored, anchored = schema["anyOf"]
    assert unanchored["properties"]["relation"]["enum"] == ["none"]
    assert unanchored["properties"]["anchor"]["enum"] == [""]
    assert "none" not in anchored["properties"]["relation"]["enum"]
    person = unanchored["properties"]["person"]["pattern"]
    assert re.fullmatch(person, "Maria") and not re.fullmatch(person, "Bondi")  # "at Bondi" is a place
    exclude = unanchored["properties"]["exclude"]["pattern"]
    assert re.fullmatch(exclude, "beach") and re.fullmatch(exclude, "")  # "but": may rule something out
    assert plan_schema("the kites")["anyOf"][0]["properties"]["exclude"] == {"enum": [""]}  # nothing ruled out
    counts = plan_schema("dogs from my last trip to the town of the kite")["anyOf"][1]["properties"]["count"]["enum"]
    assert counts == [-1]  # "last": the rank is stated
    assert plan_schema("dogs the summer after the kite")["anyOf"][1]["properties"]["season"]["enum"] == ["summer"]


def test_spans_start_and_end_with_words_of_their_own():
    tokens = query_tokens("The birds from my trip before the one where I saw the very noisy parrot.")
    runs = spans(tokens)
    assert "noisy parrot" in runs and "birds" in runs and "parrot" in runs
    assert not any(r.split()[0].lower() in {"the", "one", "where", "very"} for r in runs)
    assert "the very noisy parrot" not in runs and "trip" not in runs


def test_read_plan_checks_the_object_against_the_search():
    q = "dogs on the day of the lighthouse"
    plan = read_plan(json.loads(reply("same day", {"target": "dogs", "anchor": "lighthouse"})), q)
    assert plan == Plan("dogs", "lighthouse", "same day") and not plan.notes
    plan = read_plan(json.loads(reply("same day", {"target": "kayaks", "anchor": "waterfall", "person": "Maria"})), q)
    assert plan.target == q and plan.anchor == "" and plan.relation == "none" and plan.person == ""
    assert len(plan.notes) >= 3  # every change is said
    plan = read_plan(json.loads(reply("days after", {"target": "dogs", "anchor": "lighthouse"})), q)
    assert plan.count == 1  # "the day after": one
    plan = read_plan(json.loads(reply("same day", {"target": "dogs", "anchor": "lighthouse", "count": 3})), q)
    assert plan.count == 0
    plan = read_plan(json.loads(reply("same day", {"target": "dogs", "anchor": "lighthouse",
                                                   "person": "lighthouse"})), q)
    assert plan.person == "" and any("repeats" in n for n in plan.notes)
    assert read_plan(json.loads(reply("none", {"target": "photos"})), "photos of Maria").every_photo
    with pytest.raises(ValueError):
        read_plan(["not", "an", "object"], q)
    assert "lighthouse" in Plan("dogs", "lighthouse", "same day").describe()


def test_prompt_is_a_static_prefix_with_the_search_last():
    a, b = plan_prompt("dogs on the day of the lighthouse"), plan_prompt("fruit after the kite day")
    prefix = len(a) - len("dogs on the day of the lighthouse")
    assert a[:prefix] == b[:prefix] and a.endswith("Search: dogs on the day of the lighthouse")
    assert set(PLAN_SCHEMA["properties"]["relation"]["enum"]) == set(RELATIONS)
    assert set(RELATIONS) >= COUNTED


def album_query(text: str) -> Query:
    return Query(text=text, id="t", candidates=[row[0] for row in SYNTHETIC_ALBUM])


@pytest.mark.parametrize("relation", list(KINDS))
def test_scripted_planner_every_kind_end_to_end(album_method, scripted, relation):
    query, fields, expected = KINDS[relation]
    model = scripted(default=reply(relation, fields))
    result = album_method(model, check=False).search(album_query(query))
    plan_step = next(s for s in result.trace.steps if s.name == "album.plan")
    assert plan_step.outputs["plan"]["relation"] == relation
    assert relation in plan_step.outputs["relations_offered"]
    params = model.calls[0][1]
    assert params.json_schema == plan_schema(query) and params.temperature == 0.0  # the per-search grammar
    assert result.counts["planner_calls"] == 1 and result.counts[f"plan_relation.{relation.replace(' ', '_')}"] == 1
    if relation == "none":  # over the whole album the cut keeps the album's best few: dogs, not all of them
        assert result.answer_set and set(result.answer_set) <= expected and result.source == "method"
    elif expected:
        assert set(result.answer_set) == expected and result.source == "method"
    else:
        assert result.source == "fallback:target_search" and result.source_reason
    assert result.answer_origin == "code" and result.code_selected_share == 1.0


def test_real_planner_on_a_handful(qwen_local, synthetic_gallery, caption_dual, minilm):
    """The offline Qwen 0.5B under the grammar: the relation, anchor and target of searches worded our own way."""
    ctx = MethodContext(gallery=synthetic_gallery, dual=caption_dual, text=minilm,
                        roles=Roles.from_models({"default": qwen_local}))
    method = AlbumSearch(ctx)
    searches = {
        "the dogs from the day I photographed the lighthouse": ("same day", "lighthouse", "dogs"),
        "dogs I saw three days before the bicycle": ("days before", "bicycle", "dogs"),
        "the dogs from my second stay in the town of the snowman": ("city visit", "snowman", "dogs"),
        "fruit pictures from the month after the lighthouse": ("month after", "lighthouse", "fruit"),
        "every dog in my pictures except the ones in Bergen": ("none", "", "dog"),
    }
    for text, (relation, anchor, target) in searches.items():
        trace = Trace()
        with trace.activate():
            plan = method.plan(album_query(text), trace)
        assert plan is not None, text
        assert (plan.relation, plan.anchor.lower(), plan.target.lower().rstrip("s")) == (
            relation, anchor, target.rstrip("s")), (text, plan)
