"""The ``album`` method's plan: the per-search grammar (every relation of the table always offered; the values
narrowed to the search's own words, counts and seasons), the checks on the model's object, the relation table's
soft agreement with the search's words, and the method end to end with a scripted planner for every relation and
every chain shape, each in three wordings of our own (tests/methods/conftest.py's synthetic album, with the query
reader linking its places and dates)."""

from __future__ import annotations

import json
import re

import pytest

from imagent.core.types import Query
from imagent.methods.album.plan import (
    ALIASES,
    PLAN_SCHEMA,
    RELATIONS,
    Hop,
    Plan,
    best_relations,
    offered_relations,
    plan_prompt,
    plan_schema,
    query_tokens,
    read_plan,
    said_words,
    spans,
)

from .conftest import SYNTHETIC_ALBUM

SEVEN = {"a2", "a3", "a6", "c4", "d1", "e1", "f1"}

# Every relation of the table: three wordings of one search (our own, none a generator's), the plan a model
# answers, and the synthetic album's answer.
KINDS: dict[str, tuple[tuple[str, str, str], dict, set[str]]] = {
    "none": (("every dog in my pictures", "all my dog photos", "dogs"), {"target": "dog"},
             {"a2", "a3", "a6", "c4", "d1", "e1", "f1", "g1", "i2"}),
    "same day": (("dogs on the day of the lighthouse", "which dogs did I see the day I photographed the lighthouse?",
                  "lighthouse day - dogs?"), {"target": "dogs", "anchor": "lighthouse"}, {"a2", "a3"}),
    "same trip": (("dogs during the holiday with the lighthouse", "the dogs from my lighthouse trip",
                   "pictures of dogs on the journey where I saw a lighthouse"),
                  {"target": "dogs", "anchor": "lighthouse"}, {"a2", "a3", "a6"}),
    "trip day": (("dogs on day two of the lighthouse trip", "the dogs from the second day of the holiday with the "
                  "lighthouse", "lighthouse trip, day 2: dogs"),
                 {"target": "dogs", "anchor": "lighthouse", "count": 2}, {"a6"}),
    "same place": (("dogs at the spot of the lighthouse", "dogs photographed where the lighthouse is",
                    "the dogs at the lighthouse's location"), {"target": "dogs", "anchor": "lighthouse"},
                   {"a2", "a3", "e1"}),
    "same city": (("dogs in the town of the lighthouse", "dogs in the same city as my lighthouse photo",
                   "dog pictures from the lighthouse's city"), {"target": "dogs", "anchor": "lighthouse"},
                  {"a2", "a3", "a6", "e1"}),
    "days after": (("fruit three days after the lighthouse", "the fruit I photographed 3 days after seeing the "
                    "lighthouse", "fruit, three days later than the lighthouse"),
                   {"target": "fruit", "anchor": "lighthouse", "count": 3}, {"b2"}),
    "days before": (("dogs three days before the bicycle", "the dogs I saw 3 days before the bicycle picture",
                     "dogs, three days earlier than the bicycle"),
                    {"target": "dogs", "anchor": "bicycle", "count": 3}, {"a2", "a3"}),
    "weeks after": (("dogs four weeks after the lighthouse", "dogs 4 weeks after I saw the lighthouse",
                     "dogs, four weeks later than the lighthouse"),
                    {"target": "dogs", "anchor": "lighthouse", "count": 4}, {"d1"}),
    "weeks before": (("kites two weeks before the white dog", "kites from 2 weeks before I saw the white dog",
                      "the kites a fortnight before the white dog"),
                     {"target": "kites", "anchor": "white dog", "count": 2}, {"c3"}),
    "months after": (("dogs one month after the lighthouse", "dogs in the month after the lighthouse",
                      "the dogs from the month following the lighthouse"),
                     {"target": "dogs", "anchor": "lighthouse", "count": 1}, {"d1"}),
    "months before": (("dogs two months before the poodle", "the dogs 2 months before I saw the poodle",
                       "dogs, two months earlier than the poodle"),
                      {"target": "dogs", "anchor": "poodle", "count": 2}, {"d1"}),
    "years after": (("dogs one year after the lighthouse", "dogs in the year after the lighthouse",
                     "the dogs from the following year, after the lighthouse"),
                    {"target": "dogs", "anchor": "lighthouse", "count": 1}, {"g1", "i2"}),
    "years before": (("dogs one year before the beagle", "dogs in the year before the beagle",
                      "dogs from the year preceding the beagle"), {"target": "dogs", "anchor": "beagle"}, SEVEN),
    "next trip": (("fruit on the holiday following the lighthouse", "fruit from my next trip after the lighthouse",
                   "the fruit on the trip after the lighthouse one"), {"target": "fruit", "anchor": "lighthouse"},
                  {"b2"}),
    "previous trip": (("dogs on the holiday preceding the poodle", "dogs from the trip before the poodle",
                       "the dogs on my previous trip, before the poodle"), {"target": "dogs", "anchor": "poodle"},
                      {"d1"}),
    "after": (("fruit after the lighthouse day", "the first fruit I photographed after the lighthouse",
               "fruit I saw later, after the lighthouse"), {"target": "fruit", "anchor": "lighthouse"}, {"b2"}),
    "before": (("dogs before the husky day", "the last dogs I photographed before the husky",
                "dogs earlier than the husky"), {"target": "dogs", "anchor": "husky"}, {"e1"}),
    "visit": (("dogs on my first visit to the spot of the bicycle", "dogs from the first time I went where the "
               "bicycle was", "dogs, my 1st visit to the bicycle's place"),
              {"target": "dogs", "anchor": "bicycle", "count": 1}, {"a2", "a3"}),
    "city visit": (("dogs on my second stay in the town of the snowman", "dogs from my 2nd visit to the city of the "
                    "snowman", "the dogs I saw the second time I was in the snowman's town"),
                   {"target": "dogs", "anchor": "snowman", "count": 2}, {"d1"}),
    "other visit": (("dogs on another visit to the spot of the bicycle", "dogs at the bicycle's place on a "
                     "different visit", "the dogs from other times at the spot of the bicycle"),
                    {"target": "dogs", "anchor": "bicycle"}, {"a2", "a3", "e1"}),
    "same month": (("dogs in that month of the pineapple", "the dogs from the same month as the pineapple",
                    "dogs photographed during the month of the pineapple"),
                   {"target": "dogs", "anchor": "pineapple"}, {"a2", "a3", "a6", "c4"}),
    "same season": (("dogs in the same autumn as the lighthouse", "the dogs from that autumn with the lighthouse",
                     "dogs during the autumn of the lighthouse"),
                    {"target": "dogs", "anchor": "lighthouse", "season": "autumn"}, {"a2", "a3", "a6", "c4", "d1"}),
    "season after": (("dogs in the winter after the lighthouse", "the dogs from the following winter, after the "
                      "lighthouse", "dogs the next winter after I saw the lighthouse"),
                     {"target": "dogs", "anchor": "lighthouse", "season": "winter"}, {"e1"}),
    "season before": (("dogs in the season before the husky", "the dogs from the season preceding the husky",
                       "dogs, one season earlier than the husky"), {"target": "dogs", "anchor": "husky"}, {"e1"}),
    "same year": (("dogs in that year of the lighthouse", "the dogs from the same year as the lighthouse",
                   "dogs photographed during the lighthouse's year"),
                  {"target": "dogs", "anchor": "lighthouse"}, SEVEN),
}
# Every chain shape: three wordings, the plan (per wording when the model's words differ), the answer.
CHAINS: dict[str, tuple[tuple[str, str, str], dict | list[dict], set[str]]] = {
    "venue on a trip": (("dogs at Salamanca Place on the trip with the lighthouse", "the dogs I photographed at "
                         "Salamanca during the lighthouse holiday", "lighthouse trip: the dogs at Salamanca Place"),
                        {"target": "dogs", "anchor": "lighthouse", "relation": "same trip", "place": "Salamanca"},
                        {"a6"}),
    "venue in the season after": (("dogs at Harbour Road the winter after the lighthouse", "the dogs on Harbour "
                                   "Road in the following winter, after the lighthouse", "Harbour Road dogs, next "
                                   "winter after the lighthouse"),
                                  {"target": "dogs", "anchor": "lighthouse", "relation": "season after",
                                   "season": "winter", "place": "Harbour Road"}, {"e1"}),
    "through an intermediate event": (("dogs from the day I saw the sailing boat, on the trip with the lighthouse",
                                       "on the lighthouse holiday, the dogs from the sailing boat day", "the dogs "
                                       "photographed the same day as the sailing boat during my lighthouse trip"),
                                      {"target": "dogs", "anchor": "sailing boat", "relation": "same day",
                                       "anchor2": "lighthouse", "relation2": "same trip"}, {"a6"}),
    "an exclusion": (("dogs from the lighthouse trip except at Salamanca Place", "dogs on the holiday with the "
                      "lighthouse, not the ones at Salamanca", "the lighthouse trip's dogs without Salamanca"),
                     {"target": "dogs", "anchor": "lighthouse", "relation": "same trip", "exclude": "Salamanca"},
                     {"a2", "a3"}),
    "photos of the nth day in a place": (("photos from my second day in Hobart", "all my pictures from day 2 in "
                                          "Hobart", "everything from the second day I was in Hobart"),
                                         {"target": "photos"}, {"a5", "a6"}),
    "a place the reader links": (("dogs in Bergen", "my Bergen dog pictures", "which dogs did I photograph in "
                                  "Bergen?"), {"target": "dogs"}, {"c4", "d1", "g1"}),
    "a date the reader links": (("dogs from 2022", "my dog photos of 2022", "the dogs I shot in 2022"),
                                {"target": "dogs"}, {"g1", "i2"}),
    "a decoy anchor with a place clue": (("dogs on the day I saw the lighthouse in Bergen", "the dogs from the day "
                                          "of the Bergen lighthouse", "dogs the day of the lighthouse, in Bergen"),
                                         [{"target": "dogs", "anchor": "lighthouse in Bergen", "relation": "same day"},
                                          {"target": "dogs", "anchor": "Bergen lighthouse", "relation": "same day"},
                                          {"target": "dogs", "anchor": "lighthouse", "relation": "same day"}],
                                         {"c4"}),
}


def album_query(text: str) -> Query:
    return Query(text=text, id="t", candidates=[row[0] for row in SYNTHETIC_ALBUM])


def test_every_relation_and_its_aliases_have_searches():
    assert set(KINDS) == set(RELATIONS)
    assert all(len(set(w)) == 3 for w, _, _ in KINDS.values()) and all(len(set(w)) == 3 for w, _, _ in
                                                                          CHAINS.values())
    assert set(ALIASES.values()) <= set(RELATIONS) and "year after" in ALIASES


@pytest.mark.parametrize("relation", list(KINDS))
def test_every_relation_in_three_wordings(album_method, scripted, relation):
    wordings, fields, expected = KINDS[relation]
    for text in wordings:
        model = scripted(default=json.dumps({**fields, "relation": relation} if relation != "none" else fields))
        result = album_method(model).search(album_query(text))
        assert set(result.answer_set) == expected, (text, result.trace.steps[-1].outputs)
        assert result.source == "method" and result.answer_origin == "code" and result.code_selected_share == 1.0
        assert 1 <= result.counts["planner_calls"] <= 2
        plan = next(s for s in result.trace.steps if s.name == "album.plan")
        assert relation in plan.outputs["relations_offered"]


@pytest.mark.parametrize("shape", list(CHAINS))
def test_every_chain_shape_in_three_wordings(album_method, scripted, shape):
    wordings, replies, expected = CHAINS[shape]
    for n, text in enumerate(wordings):
        fields = replies[n] if isinstance(replies, list) else replies
        result = album_method(scripted(default=json.dumps(fields))).search(album_query(text))
        assert set(result.answer_set) == expected, (text, [s.outputs for s in result.trace.steps])


# --------------------------------------------------------------------------- the grammar


def _branches(schema: dict) -> list[dict]:
    return schema.get("anyOf", [schema])


def test_every_relation_is_offered_whatever_the_words():
    for text in ("kayak pictures", "birds from the time I saw the giraffe", "the weekend I saw the coin show",
                 "dogs on my second stay in the town of the kite"):
        assert set(offered_relations(plan_schema(text))) == set(RELATIONS), text
    assert "same day" not in offered_relations(plan_schema("dogs", without=["same day"]))


def test_the_grammar_narrows_values_to_the_searchs_own():
    schema = plan_schema("every kite I own a picture of, but none from the beach, on my second visit")
    none, one, two = _branches(schema)
    assert set(none["properties"]) == {"target", "place", "exclude"} and none["required"] == ["target"]
    assert one["required"] == ["target", "link", "anchor", "relation"]
    assert two["required"][-3:] == ["link2", "anchor2", "relation2"]
    assert one["properties"]["count"]["enum"] == [1, 2]  # "a", "one" and the "second" it states
    exclude = one["properties"]["exclude"]["pattern"]
    assert re.fullmatch(exclude, "beach") and not re.fullmatch(exclude, "mountain")
    assert "exclude" not in _branches(plan_schema("the kites"))[0]["properties"]  # nothing ruled out
    counts = _branches(plan_schema("dogs from my last trip to the town of the kite"))[1]["properties"]["count"]
    assert counts["enum"] == [-1]  # "last": the rank is stated
    assert _branches(plan_schema("dogs the summer after the kite"))[1]["properties"]["season"]["enum"] == ["summer"]
    assert "season" not in _branches(plan_schema("dogs the day after the kite"))[1]["properties"]
    target = _branches(plan_schema("dogs after the kite", target="dogs"))[1]["properties"]["target"]
    assert target == {"enum": ["dogs"]}  # a second plan keeps the first one's target


def test_an_anchor_names_a_thing_not_a_unit_alone():
    anchor = _branches(plan_schema("the birds from the winter I saw the pig in the city"))[1]["properties"]["anchor"]
    assert re.fullmatch(anchor["pattern"], "pig") and not re.fullmatch(anchor["pattern"], "winter")
    assert not re.fullmatch(anchor["pattern"], "city")
    road = _branches(plan_schema("kites on the road trip after the coin show"))[1]["properties"]["anchor"]
    assert re.fullmatch(road["pattern"], "road trip") and re.fullmatch(road["pattern"], "coin show")


def test_spans_start_and_end_with_words_of_their_own_and_hold_one_thing():
    runs = spans(query_tokens("The birds from my trip before the one where I saw the very noisy parrot."))
    assert "noisy parrot" in runs and "birds" in runs and "parrot" in runs and "trip" in runs
    assert not any(r.split()[0].lower() in {"the", "one", "where", "very"} for r in runs)
    assert "the very noisy parrot" not in runs
    runs = spans(query_tokens("the kites in the city where I saw the large paintbrush"))
    assert "large paintbrush" in runs and not any("where" in r or "saw" in r for r in runs)
    assert "cabin with the antlers" in spans(query_tokens("kites at the cabin with the antlers"))


def test_read_plan_checks_the_object_against_the_search():
    q = "dogs on the day of the lighthouse"
    plan = read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "same day"}, q)
    assert (plan.target, plan.anchor, plan.relation) == ("dogs", "lighthouse", "same day") and not plan.notes
    plan = read_plan({"target": "kayaks", "anchor": "waterfall", "relation": "same day"}, q)
    assert plan.target == q and not plan.anchored and len(plan.notes) == 3  # every change is said
    assert read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "days after"}, q).hops[0].count == 1
    assert read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "same day", "count": 3},
                     q).hops[0].count == 0
    plan = read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "year after"}, q)
    assert (plan.relation, plan.hops[0].count) == ("years after", 1)  # an alias of the table
    plan = read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "same day", "season": "spring"},
                     "dogs the spring after the lighthouse")
    assert plan.relation == "season after" and plan.hops[0].season == "spring"  # a season names its relation
    plan = read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "season after"},
                     "dogs the winter after the lighthouse")
    assert plan.hops[0].season == "winter" and any("names the winter" in n for n in plan.notes)  # left out: filled
    plan = read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "season after"},
                     "dogs in winter or spring after the lighthouse")
    assert plan.hops[0].season == ""  # two seasons named: the model's reading stands
    plan = read_plan({"target": "dogs", "anchor": "dogs", "relation": "same trip"}, "all my dogs")
    assert not plan.anchored and any("target itself" in n for n in plan.notes)
    plan = read_plan({"target": "kite trip", "anchor": "kite trip", "relation": "same trip"},
                     "every picture from my kite trip")
    assert plan.every_photo and plan.anchor == "kite trip"  # asked for every photo: the anchor stays
    plan = read_plan({"target": "kite", "anchor": "kite trip", "relation": "same trip"},
                     "every picture from my kite trip")
    assert plan.every_photo and plan.relation == "same trip"  # the target inside the anchor: still every photo
    plan = read_plan({"target": "crow", "anchor": "crow", "relation": "same trip"},
                     "What did I photograph on the trip where I saw the crow?")
    assert plan.every_photo and plan.anchor == "crow"  # "what did I photograph" asks for every photo of the trip
    plan = read_plan({"target": "trip", "anchor": "blueberries", "relation": "same trip"},
                     "the whole trip with the blueberries")
    assert plan.every_photo  # a stretch of time is no thing a photo shows: every photo of it
    plan = read_plan({"target": "yam", "anchor": "yam", "relation": "same trip", "exclude": "beach"},
                     "the vases from the trip where I saw the yam, except at the beach", target="vases")
    assert (plan.target, plan.anchor, plan.relation) == ("vases", "yam", "same trip")  # the first plan's target
    plan = read_plan({"target": "lighthouse", "anchor": "lighthouse", "relation": "same day"},
                     "photos of the lighthouse")
    assert not plan.anchored and plan.target == "lighthouse"  # no word says a day: no relation to keep
    plan = read_plan({"target": "dogs", "anchor": "boat", "relation": "same day", "anchor2": "lighthouse",
                      "relation2": "same trip"}, "dogs the day of the boat on the lighthouse trip")
    assert [h.relation for h in plan.hops] == ["same day", "same trip"] and plan.hops[1].anchor == "lighthouse"
    assert read_plan({"target": "photos"}, "photos of Maria").every_photo
    with pytest.raises(ValueError):
        read_plan(["not", "an", "object"], q)
    assert "lighthouse" in Plan.single("dogs", "lighthouse", "same day").describe()
    with pytest.raises(ValueError):
        Hop("lighthouse", "none")


def test_which_visit_the_words_say():
    other, ranked = RELATIONS["other visit"], RELATIONS["visit"]
    for said in ("houses from a different visit to the place where I saw the penguin",
                 "the houses from my other visit to where I photographed the penguin",
                 "houses I saw when I went back another time to the penguin place"):
        ws = set(said_words(said))
        assert other.agreement(ws) > ranked.agreement(ws), said
    for said in ("the first time I went where I took the pumpkin photo", "houses on my last visit to the penguin spot"):
        ws = set(said_words(said))
        assert ranked.agreement(ws) > other.agreement(ws), said


def test_words_narrow_the_models_reading():
    plan = read_plan({"target": "houses", "link": "on my second stay in the city of the", "anchor": "shrimp",
                      "relation": "visit", "count": 1}, "houses on my second stay in the city of the shrimp")
    assert (plan.relation, plan.hops[0].count) == ("city visit", 2) and len(plan.notes) == 2
    plan = read_plan({"target": "tools", "anchor": "penguin", "relation": "weeks before"},
                     "tools 2 weeks earlier than a penguin")
    assert plan.hops[0].count == 2  # the one count the search states ("a" is no count)
    plan = read_plan({"target": "kites", "anchor": "kite", "relation": "same place"}, "kites at the spot of a kite")
    assert plan.relation == "same place"


def test_the_words_say_some_relations_best():
    said = {w.lower() for w in query_tokens("Which vegetables did I take the next year after the rabbit photo?")}
    assert best_relations(said) == ["years after"]
    said = {w.lower() for w in query_tokens("houses from my second stay in the town of the shrimp")}
    assert best_relations(said) == ["city visit"]


def test_relations_agree_softly_with_the_words():
    said = {w.lower() for w in query_tokens("the birds in the year after I saw the cottage")}
    assert RELATIONS["years after"].agrees(said)
    assert not RELATIONS["season after"].agrees(said) and not RELATIONS["same year"].agrees(said)
    assert not RELATIONS["years before"].agrees(said) and RELATIONS["none"].agrees(said)
    said = {w.lower() for w in query_tokens("birds from that holiday with the magpie")}
    assert RELATIONS["same trip"].agrees(said) and not RELATIONS["same season"].agrees(said)


def test_prompt_is_a_static_prefix_with_the_search_last():
    a, b = plan_prompt("dogs on the day of the lighthouse"), plan_prompt("fruit after the kite day")
    prefix = len(a) - len("dogs on the day of the lighthouse")
    assert a[:prefix] == b[:prefix] and a.endswith("Search: dogs on the day of the lighthouse")
    assert set(PLAN_SCHEMA["properties"]["relation"]["enum"]) == set(RELATIONS)
    for line in a.splitlines():  # every worked example is a plan the grammar's fields can say
        if line.startswith("{"):
            value = json.loads(line)
            assert set(value) <= set(PLAN_SCHEMA["properties"]) and value.get("relation", "none") in RELATIONS


def test_a_visit_and_a_trips_day_agree_only_when_the_words_rank_them():
    """A visit is counted only when the words say which ("my first", "the last time", "other"); a day of a trip only
    when the reader read its rank: "one day after the apple core" is a day after, "my hippo trip" the trip."""
    said = {w.lower() for w in query_tokens("houses one day after the apple core")}
    assert RELATIONS["days after"].agrees(said) and not RELATIONS["trip day"].agrees(said)
    said = {w.lower() for w in query_tokens("every picture from my hippopotamus trip")}
    assert RELATIONS["same trip"].agrees(said) and not RELATIONS["visit"].agrees(said)
    assert not RELATIONS["other visit"].agrees(said)
    said = {w.lower() for w in query_tokens("tools from my first trip to the place of the cello")}
    assert RELATIONS["visit"].agrees(said)
    said = {w.lower() for w in query_tokens("flowers from my other visits to the seahorse spot")}
    assert RELATIONS["other visit"].agrees(said)
    said = {w.lower() for w in query_tokens("vehicles the last time I was in the town of the lionfish")}
    assert RELATIONS["city visit"].agrees(said)


def test_every_photo_of_a_trip_the_words_do_not_count_is_the_anchors_trip():
    for text in ("every picture from my hippopotamus trip", "all the photos of the hippopotamus trip",
                 "everything from the trip with the hippopotamus"):
        plan = read_plan({"target": "hippopotamus", "anchor": "hippopotamus", "relation": "visit", "count": 1}, text)
        assert plan.every_photo and [h.relation for h in plan.hops] == ["same trip"], text


def test_a_dropped_hop_is_read_as_the_words_rank_it():
    text = "All the photos from the trip where I saw the onion."
    plan = read_plan({"target": "onion", "anchor": "onion", "relation": "trip day", "count": 1}, text)
    assert plan.every_photo and [h.relation for h in plan.hops] == ["same trip"]
    text = "Which vehicles did I shoot the last time I was in the town where I saw the lionfish?"
    plan = read_plan({"target": "vehicles", "anchor": "vehicles", "relation": "city visit"}, text)
    assert plan.circular is not None and plan.circular.count == -1
