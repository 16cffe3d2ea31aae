"""The ``album`` method's executor on a small synthetic album (tests/methods/conftest.py: real MiniLM in caption
mode, known days, trips, places): every relation of the table, every chain shape (a venue on a trip, a venue in a
season after, a chain through an intermediate event, an exclusion, the Nth day of a trip, a "photos" target, the
reader's filters), decoy anchors weighed by joint evidence and by the clues the plan gives, the answer cut by
evidence (one true photo answers one, none answers none with the reason, never the whole album), the timeline."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from imagent.core.trace import Trace
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.execute import TextScores, evidence_cut, execute, kinds_scores, relation_mask
from imagent.methods.album.plan import RELATIONS, Hop, Plan
from imagent.tools.timeline import Timeline, add_months, day_number

from .conftest import SYNTHETIC_ALBUM

ALL = {row[0] for row in SYNTHETIC_ALBUM}
DOGS = {"a2", "a3", "a6", "c4", "d1", "e1", "f1", "g1", "i2"}


def run(album, plan: Plan, asks_all: bool = False, **settings):
    trace = Trace()
    with trace.activate():
        done = execute(plan, album, AlbumConfig(**settings), trace, asks_all=asks_all)
    return done, trace


# (plan, the answer): every relation of the table; "lighthouse" has a decoy (c1, Bergen, 03-20) beside the true one
# (a1, Hobart, 03-06), and the decoy's day has a dog too (c4).
CASES = [
    (Plan.single("dogs", "lighthouse", "same day"), {"a2", "a3"}),
    (Plan.single("dogs", "lighthouse", "same trip"), {"a2", "a3", "a6"}),  # a two-day trip: a6 on its second day
    (Plan.single("dogs", "lighthouse", "trip day", 2), {"a6"}),  # the second day of that trip
    (Plan.single("dogs", "lighthouse", "same place"), {"a2", "a3", "e1"}),  # Harbour Road on 03-06 and 06-15
    (Plan.single("dogs", "lighthouse", "same city"), {"a2", "a3", "a6", "e1"}),  # Salamanca Place is 2 km away
    (Plan.single("fruit", "lighthouse", "days after", 3), {"b2"}),
    (Plan.single("dogs", "bicycle", "days before", 3), {"a2", "a3"}),
    (Plan.single("dogs", "lighthouse", "weeks after", 4), {"d1"}),  # 04-03 has no photo: the nearest day, 04-02
    (Plan.single("kites", "white dog", "weeks before", 2), {"c3"}),
    (Plan.single("dogs", "lighthouse", "months after", 1), {"d1"}),
    (Plan.single("dogs", "poodle", "months before", 2), {"d1"}),
    (Plan.single("dogs", "lighthouse", "years after", 1), {"g1", "i2"}),
    (Plan.single("dogs", "beagle", "years before", 1), {"a2", "a3", "a6", "c4", "d1", "e1", "f1"}),
    (Plan.single("fruit", "lighthouse", "next trip", 1), {"b2"}),
    (Plan.single("dogs", "poodle", "previous trip", 1), {"d1"}),
    (Plan.single("fruit", "lighthouse", "after"), {"b2"}),  # the first later trip showing fruit (T2, not T6's banana)
    (Plan.single("dogs", "husky", "before"), {"e1"}),  # the last earlier trip showing a dog
    (Plan.single("dogs", "bicycle", "visit", 1), {"a2", "a3"}),
    (Plan.single("dogs", "bicycle", "visit", -1), {"e1"}),
    (Plan.single("dogs", "snowman", "city visit", 2), {"d1"}),  # Bergen: T3, T4, T7
    (Plan.single("dogs", "bicycle", "other visit"), {"a2", "a3", "e1"}),
    (Plan.single("dogs", "pineapple", "same month"), {"a2", "a3", "a6", "c4"}),
    (Plan.single("dogs", "lighthouse", "same season"), {"a2", "a3", "a6", "c4", "d1"}),
    (Plan.single("dogs", "lighthouse", "season after", season="winter"), {"e1"}),  # Hobart's winter: June-August
    (Plan.single("dogs", "husky", "season before"), {"e1"}),  # Porto, September (autumn): the summer before
    (Plan.single("dogs", "lighthouse", "same year"), {"a2", "a3", "a6", "c4", "d1", "e1", "f1"}),
    (Plan.single("dogs"), DOGS),
]


def test_every_relation_has_a_case():
    assert {p.relation for p, _ in CASES} == set(RELATIONS)


@pytest.mark.parametrize(("plan", "expected"), CASES, ids=[f"{p.relation}-{p.anchor}" for p, _ in CASES])
def test_relations(synthetic_album, plan, expected):
    done, _ = run(synthetic_album, plan)
    assert set(done.answer) == expected and not done.reason
    assert done.anchor not in done.answer  # none of these anchors is the target


# --------------------------------------------------------------------------- chain shapes


def test_a_venue_on_the_anchors_trip(synthetic_album):
    """"The dogs at Salamanca Place on the trip where I saw the lighthouse": the trip's photos at that venue (its
    name matched by stem), not the trip's other dogs; the decoy lighthouse's trip has no such venue."""
    done, _ = run(synthetic_album, Plan("dogs", [Hop("lighthouse", "same trip")], place="salamanca"))
    assert done.answer == ["a6"] and done.anchor == "a1"
    done, _ = run(synthetic_album, Plan("dogs", [Hop("lighthouse", "same trip")], place="bryggen"))
    assert done.answer == ["c4"] and done.anchor == "c1"  # the venue picks the decoy's trip


def test_a_venue_in_the_season_after(synthetic_album):
    done, _ = run(synthetic_album, Plan("dogs", [Hop("lighthouse", "season after", season="winter")],
                                        place="harbour road"))
    assert done.answer == ["e1"]
    done, _ = run(synthetic_album, Plan("dogs", [Hop("lighthouse", "season after", season="winter")],
                                        place="salamanca"))
    assert done.answer == [] and done.reason  # no dog at Salamanca Place in either lighthouse's next winter


def test_a_season_after_is_the_next_one_with_photos(synthetic_album):
    """Without the Hobart winter's photos (e1, e2), the season after the lighthouse's autumn is the next season
    the album has photos of (Porto's September: the husky), not an empty winter."""
    album = synthetic_album.scoped(sorted(ALL - {"e1", "e2"}))
    done, _ = run(album, Plan.single("dogs", "lighthouse", "season after"))
    assert done.answer == ["f1"]
    done, _ = run(album, Plan.single("dogs", "lighthouse", "season after", season="winter"))
    assert done.answer == ["g1"] and done.anchor == "c1"  # no later Hobart winter holds a photo: Bergen's does


def test_a_chain_through_an_intermediate_event(synthetic_album):
    """"The dogs from the day I saw the sailing boat, on the trip with the lighthouse": the sailing boat is
    photographed twice (T1 and T9, each day with a dog); only the one on a lighthouse trip counts."""
    one_hop, _ = run(synthetic_album, Plan.single("dogs", "sailing boat", "same day"))
    assert one_hop.answer in (["a6"], ["i2"])  # alone, the boat is ambiguous
    done, trace = run(synthetic_album, Plan("dogs", [Hop("sailing boat", "same day"), Hop("lighthouse", "same trip")]))
    assert done.answer == ["a6"] and done.anchors == ["a1", "a5"]
    paths = {s.name: s for s in trace.steps}["album.constraint"].outputs["paths"]
    assert paths[0]["anchors"] == ["a1", "a5"]  # the decoy boat i1 lies on no lighthouse trip: never weighed
    assert all("i1" not in p["anchors"] for p in paths)


def test_an_exclusion_on_a_chain(synthetic_album):
    done, _ = run(synthetic_album, Plan("dogs", [Hop("lighthouse", "same trip")], exclude="Salamanca"))
    assert set(done.answer) == {"a2", "a3"}
    assert any("places named so" in n for n in done.notes)
    # an exclusion no address names: the photos that clearly show it are left out
    done, _ = run(synthetic_album, Plan("fruit", exclude="pineapple"))
    assert done.answer == ["f2"]


def test_the_nth_day_of_trips_the_filters_keep(synthetic_album):
    """"Photos from my second day in Hobart" (the reader's place filter and trip day): each Hobart trip's second
    photo day (only T1 has one)."""
    plan = Plan("photos", where="place ~ 'Hobart'", understood=["place Hobart"], trip_day=2)
    done, _ = run(synthetic_album, plan)
    assert set(done.answer) == {"a5", "a6"}
    done, _ = run(synthetic_album, Plan("photos", where="place ~ 'Hobart'", trip_day=-1))
    assert set(done.answer) == {"a5", "a6", "b1", "b2", "e1", "e2", "h1"}  # the last day of each Hobart trip


def test_a_photos_target_keeps_the_whole_subset_in_time_order(synthetic_album):
    done, _ = run(synthetic_album, Plan.single("photos", "sailing boat", "same day"))
    assert done.answer in (["a5", "a6"], ["i1", "i2"])
    done, _ = run(synthetic_album, Plan("photos", [Hop("sailing boat", "same day"), Hop("bicycle", "previous trip")]))
    assert done.answer == ["a5", "a6"]  # the anchor too: "the photos from that day" are all of them


def test_reader_filters_narrow_the_target(synthetic_album):
    done, _ = run(synthetic_album, Plan("dogs", where="place ~ 'Bergen'", understood=["place Bergen"]))
    assert set(done.answer) == {"c4", "d1", "g1"}
    assert any(n.startswith("place Bergen: ") for n in done.notes)
    done, _ = run(synthetic_album, Plan("dogs", where="time = '2022'"))
    assert set(done.answer) == {"g1", "i2"}


# --------------------------------------------------------------------------- anchors


def test_a_decoy_anchor_is_weighed_by_joint_evidence(synthetic_album):
    done, trace = run(synthetic_album, Plan.single("kites", "lighthouse", "same day"))
    assert done.anchor == "c1" and done.answer == ["c3"]  # the day with a kite, whatever came first
    paths = {s.name: s for s in trace.steps}["album.constraint"].outputs["paths"]
    assert {p["anchors"][0] for p in paths} == {"a1", "c1"}  # both lighthouses weighed


def test_a_decoy_anchor_is_not_chosen_when_other_clues_disagree(synthetic_album):
    """Both lighthouse days have dogs; a place (or date) the query names with the anchor decides."""
    bergen = Hop("lighthouse in Bergen", "same day", content="lighthouse", clues="place ~ 'Bergen'")
    done, _ = run(synthetic_album, Plan("dogs", [bergen]))
    assert done.anchor == "c1" and done.answer == ["c4"]
    hobart = Hop("lighthouse in Hobart", "same day", content="lighthouse", clues="place ~ 'Hobart'")
    done, _ = run(synthetic_album, Plan("dogs", [hobart]))
    assert done.anchor == "a1" and set(done.answer) == {"a2", "a3"}
    march_20 = Hop("lighthouse on March 20", "same day", content="lighthouse", clues="time = '2021-03-20'")
    assert run(synthetic_album, Plan("dogs", [march_20]))[0].anchor == "c1"


def test_an_exact_relation_beats_an_approximate_one(synthetic_album):
    """N weeks after: an anchor whose date has photos is preferred to one whose nearest photo day stood in."""
    tl = Timeline.of(synthetic_album)
    a1 = tl.index("a1")
    kept, how, exact = relation_mask(Hop("lighthouse", "weeks after", 4), tl, a1, AlbumConfig())
    assert not exact and "nearest" in how and {tl.ids[i] for i in np.flatnonzero(kept)} == {"d1", "d2"}
    kept, _, exact = relation_mask(Hop("lighthouse", "days after", 14), tl, a1, AlbumConfig())
    assert exact and {tl.ids[i] for i in np.flatnonzero(kept)} == {"c1", "c2", "c3", "c4"}


def test_a_place_named_by_the_anchor_gives_candidates(synthetic_album):
    """"The dogs on my second visit to Bergen": no photo shows Bergen, but the addresses name it: the first photo
    there of each trip is a candidate, and the relation runs from it."""
    done, trace = run(synthetic_album, Plan.single("dogs", "Bergen", "visit", 2))
    assert done.answer == ["d1"]
    assert {"c1", "d1", "g1"} <= set(trace.steps[0].outputs["candidates"])
    done, _ = run(synthetic_album, Plan.single("photos", "Hobart", "visit", -1))
    assert done.answer == ["h1"]  # T8, at Salamanca Place: 1 km around the first Hobart photo would miss it


def test_clue_z_sets_how_sure_a_named_place_counts(synthetic_album):
    """A candidate found by a place its words name counts as ``clue_z`` robust deviations (a setting)."""
    for clue_z in (6.0, 2.5):
        _, trace = run(synthetic_album, Plan.single("dogs", "Bergen", "visit", 2), clue_z=clue_z)
        paths = {s.name: s for s in trace.steps}["album.constraint"].outputs["paths"]
        named = {p["clue_z"] for p in paths if p["anchors"][0] in {"c1", "d1", "g1"}}  # the Bergen trips' first
        assert named == {clue_z} and max(p["clue_z"] for p in paths) == clue_z  # a content match counts no more


def test_anchor_is_in_the_answer_only_when_it_shows_the_target(synthetic_album):
    done, _ = run(synthetic_album, Plan.single("cars", "lighthouse", "same day"))
    assert done.answer == ["a4"] and "a1" not in done.answer
    done, _ = run(synthetic_album, Plan.single("dogs", "spotted dog", "same trip"))  # the anchor is a dog itself
    assert done.anchor == "a6" and set(done.answer) == {"a2", "a3", "a6"}


# --------------------------------------------------------------------------- the cut


def test_one_true_photo_answers_one(synthetic_album):
    done, _ = run(synthetic_album, Plan("kites"))
    assert done.answer == ["c3"]
    done, _ = run(synthetic_album, Plan.single("tractors", "lighthouse", "same trip"))
    assert done.answer == ["c2"] and done.anchor == "c1"


def test_no_true_photo_answers_none_with_the_reason(synthetic_album):
    done, trace = run(synthetic_album, Plan.single("kites", "snowman", "same day"))
    assert done.answer == [] and done.reason.startswith("no photo matches") and "floor" in done.reason
    assert any("no photo matches" in n for s in trace.steps for n in s.notes)
    done, _ = run(synthetic_album, Plan.single("dogs", "poodle", "months before", 1))  # May 2021: no photo
    assert done.answer == [] and "kept no photo" in done.reason
    done, _ = run(synthetic_album, Plan.single("dogs", "windmill", "same day"))  # the windmill is alone on its day
    assert done.answer == [] and done.reason and "h1" not in done.answer


@pytest.mark.parametrize("target", ["dogs", "fruit", "kites", "a photo", "things I saw", "cathedral", "umbrella"])
def test_no_answer_is_the_whole_album_for_a_content_target(synthetic_album, target):
    done, _ = run(synthetic_album, Plan(target))
    assert len(done.answer) < len(ALL) // 2


def test_every_photo_of_the_album_only_when_asked(synthetic_album):
    done, _ = run(synthetic_album, Plan("photos"))
    assert done.answer == [] and "nothing to narrow" in done.reason
    done, _ = run(synthetic_album, Plan("photos"), asks_all=True)
    assert set(done.answer) == ALL - {"x1"} | {"x1"}


def test_evidence_cut_floor_share_and_gap():
    cfg = AlbumConfig(match_floor=1.5, match_share=0.5, match_gap=3.0)
    z = np.array([9.0, 2.0, 1.8, 0.2, -1.0])
    kept = np.ones(5, dtype=bool)
    picked, why = evidence_cut(z, kept, cfg)
    assert picked.tolist() == [0] and not why  # one clear match among near misses answers alone
    z = np.array([4.0, 3.6, 3.1, 0.2, -1.0])
    assert evidence_cut(z, kept, cfg)[0].tolist() == [0, 1, 2]  # a clear group is kept whole
    picked, why = evidence_cut(np.array([1.2, 0.3, -0.5]), np.ones(3, dtype=bool), cfg)
    assert not len(picked) and why.startswith("no photo matches")
    assert "kept no photo" in evidence_cut(z, np.zeros(5, dtype=bool), cfg)[1]


def test_evidence_cut_never_ends_between_two_clear_matches():
    """A category's best kind stands far above its next (a hammer at 10.6, a drill at 7.2 for "tools"): both
    clearly show it, so the largest drop between them does not end the answer; one below ``match_sure`` may."""
    cfg = AlbumConfig(match_floor=2.5, match_share=0.0, match_gap=3.0, match_sure=5.0)
    z = np.array([10.6, 7.2, 6.6, 5.4, 2.6, 0.1, -0.4])
    kept = np.ones(len(z), dtype=bool)
    assert evidence_cut(z, kept, cfg)[0].tolist() == [0, 1, 2, 3, 4]
    assert evidence_cut(z, kept, cfg.model_copy(update={"match_sure": 11.0}))[0].tolist() == [0]
    z = np.array([10.6, 3.0, 2.6, 0.1])  # one clear match among near misses still answers alone
    assert evidence_cut(z, np.ones(len(z), dtype=bool), cfg)[0].tolist() == [0]


def test_a_category_target_reads_its_kinds(synthetic_album):
    """"Mammals" names a WordNet category of the pixel model's classes: the answer cut also reads each photo's best
    score for its kinds closest to the words (never "hot dog" for dogs: categories by their parents), so the breeds
    (poodle, husky, beagle, golden retriever) stand further above the fruit and things, on average, than by the word
    alone;
    words naming no category, or the setting off, leave the scores as they are."""
    tl = Timeline.of(synthetic_album, 1.0)
    target = TextScores("a photo of mammals", synthetic_album.scores(["a photo of mammals"])[0])
    kept = np.ones(len(tl), dtype=bool)
    cut, kinds = kinds_scores(synthetic_album, tl, target, "mammals", kept, AlbumConfig())
    assert 0 < len(kinds) <= AlbumConfig().target_kinds
    breeds = [tl.index(i) for i in ("e1", "f1", "g1", "i2")]
    things = [tl.index(i) for i in ("b2", "f2", "d2", "h1", "x1")]  # pineapple, banana, teapot, windmill, umbrella
    assert cut.z[breeds].mean() - cut.z[things].mean() > target.z[breeds].mean() - target.z[things].mean() + 1
    assert "hot dog" not in kinds_scores(synthetic_album, tl, target, "dogs", kept, AlbumConfig())[1]
    assert kinds_scores(synthetic_album, tl, target, "mammals", kept, AlbumConfig(target_kinds=0)) == (target, [])
    assert kinds_scores(synthetic_album, tl, target, "umbrellas and kites", kept, AlbumConfig()) == (target, [])
    at = np.array([tl.index("b2"), tl.index("e1")])  # the same scores read at a few photos
    assert np.allclose(synthetic_album.scores_at(["a photo of mammals"], at)[0], target.raw[at], atol=1e-5)


def test_text_scores_keep_the_noise_scale_when_many_photos_show_the_text():
    rng = np.random.default_rng(0)
    noise = rng.normal(0.2, 0.05, 200)
    shown = np.full(100, 0.6)  # a third of the album shows it
    z = TextScores("dogs", np.concatenate([noise, shown])).z
    assert z[200:].min() > 5 and np.median(z[:200]) < 0


def test_trace_shows_each_execution_step(synthetic_album):
    _, trace = run(synthetic_album, Plan.single("dogs", "lighthouse", "same day"))
    steps = {s.name: s for s in trace.steps}
    assert set(steps) == {"album.anchor", "album.constraint", "album.target"}
    assert set(steps["album.target"].outputs["answer"]) == {"a2", "a3"}
    assert "the day 2021-03-06" in steps["album.constraint"].outputs["how"]


# --------------------------------------------------------------------------- the timeline


def test_timeline_days_trips_visits_and_seasons(synthetic_album):
    tl = Timeline.of(synthetic_album, gap_days=1)
    assert len(tl) == len(SYNTHETIC_ALBUM) and tl.trips == 9
    assert tl.trip[tl.index("a1")] == tl.trip[tl.index("a6")] != tl.trip[tl.index("b1")]  # 03-06..07 vs 03-09
    assert tl.trip[tl.index("x1")] == -1 and not tl.has_day[tl.index("x1")]
    assert Timeline.of(synthetic_album, gap_days=2).trips == 8  # a one-day gap joins 03-07 and 03-09
    assert Timeline.of(synthetic_album) is Timeline.of(synthetic_album)  # built once per album
    assert tl.season_of(tl.index("a1"))[1] == "autumn"  # Hobart in March
    assert tl.season_of(tl.index("c1"))[1] == "spring"  # Bergen in March
    assert tl.visits(tl.place_mask(tl.index("a1"), 1.0)) == [0, 1, 4]
    assert not tl.place_mask(tl.index("x1"), 1.0).any()
    assert tl.nearest_day(day_number(date(2021, 4, 3)), 3) == day_number(date(2021, 4, 2))
    assert tl.nearest_day(day_number(date(2021, 5, 10)), 3) is None
    assert [day_number(date(2021, 3, 6)), day_number(date(2021, 3, 7))] == tl.trip_days(0).tolist()
    assert add_months(date(2021, 1, 31), 1) == date(2021, 2, 28)
    assert tl.month[tl.index("a1")] == 2021 * 12 + 2 and tl.year[tl.index("g1")] == 2022
    bergen = tl.address_mask("bergen")
    assert {tl.ids[i] for i in np.flatnonzero(bergen)} == {"c1", "c2", "c3", "c4", "d1", "d2", "g1", "g2"}
    assert (tl.named_place_mask("the Salamanca") == tl.address_mask("salamanca")).all()
    assert not tl.named_place_mask("salamander").any() and not tl.named_place_mask("the").any()
