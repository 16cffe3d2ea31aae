"""The ``album`` method's executor on a small synthetic album (tests/methods/conftest.py: real MiniLM in caption
mode, known days, trips, places): every relation kind, decoy anchors (the same object photographed on another
day), multi-day trips, the answer cut, the anchor-never-in-answer rule, person and exclude filters, the timeline."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from imagent.core.trace import Trace
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.execute import execute, relation_subset
from imagent.methods.album.plan import RELATIONS, Plan
from imagent.tools.timeline import Timeline, add_months, day_number


def run(album, plan: Plan, **settings):
    trace = Trace()
    with trace.activate():
        done = execute(plan, album, AlbumConfig(**settings), trace)
    return done, trace


# (plan, the answer): every relation kind; "lighthouse" has a decoy (c1, Bergen, 03-20) beside the true one (a1).
CASES = [
    (Plan("dogs", "lighthouse", "same day"), {"a2", "a3"}),
    (Plan("dogs", "lighthouse", "same trip"), {"a2", "a3", "a6"}),  # a two-day trip: a6 is on its second day
    (Plan("dogs", "lighthouse", "same place"), {"a2", "a3", "e1"}),  # Harbour Road on 03-06 and 06-15
    (Plan("dogs", "lighthouse", "same city"), {"a2", "a3", "a6", "e1"}),  # Salamanca Place is 2 km away
    (Plan("fruit", "lighthouse", "days after", 3), {"b2"}),
    (Plan("dogs", "bicycle", "days before", 3), {"a2", "a3"}),
    (Plan("dogs", "lighthouse", "weeks after", 4), {"d1"}),  # 04-03 has no photo: the nearest day, 04-02
    (Plan("kites", "white dog", "weeks before", 2), {"c3"}),
    (Plan("dogs", "lighthouse", "months after", 1), {"d1"}),
    (Plan("dogs", "poodle", "months before", 2), {"d1"}),
    (Plan("dogs", "lighthouse", "years after", 1), {"g1"}),
    (Plan("dogs", "beagle", "years before", 1), {"a2", "a3", "a6", "d1", "e1", "f1"}),
    (Plan("fruit", "lighthouse", "next trip", 1), {"b2"}),
    (Plan("dogs", "poodle", "previous trip", 1), {"d1"}),
    (Plan("fruit", "lighthouse", "after"), {"b2"}),  # the first later trip showing fruit (T2, not T6's banana)
    (Plan("dogs", "husky", "before"), {"e1"}),  # the last earlier trip showing a dog
    (Plan("dogs", "bicycle", "visit", 1), {"a2", "a3"}),
    (Plan("dogs", "bicycle", "visit", 3), {"e1"}),
    (Plan("dogs", "bicycle", "visit", -1), {"e1"}),
    (Plan("dogs", "snowman", "city visit", 2), {"d1"}),  # Bergen: T3, T4, T7
    (Plan("dogs", "bicycle", "other visit"), {"a2", "a3", "e1"}),
    (Plan("dogs", "pineapple", "same month"), {"a2", "a3", "a6"}),
    (Plan("dogs", "lighthouse", "month after"), {"d1"}),
    (Plan("dogs", "poodle", "month before"), set()),  # May 2021 has no photo: the fallback searches the album
    (Plan("dogs", "lighthouse", "same season"), {"a2", "a3", "a6", "d1"}),
    (Plan("dogs", "lighthouse", "season after", season="winter"), {"e1"}),  # Hobart's winter: June-August
    (Plan("dogs", "husky", "season before"), {"e1"}),  # Porto, September (autumn): the summer before
    (Plan("dogs", "lighthouse", "same year"), {"a2", "a3", "a6", "d1", "e1", "f1"}),
    (Plan("dogs", "lighthouse", "year after"), {"g1"}),
    (Plan("dogs", "beagle", "year before"), {"a2", "a3", "a6", "d1", "e1", "f1"}),
]


def test_every_relation_has_a_case():
    assert {p.relation for p, _ in CASES} | {"none"} == set(RELATIONS)


@pytest.mark.parametrize(("plan", "expected"), CASES, ids=[f"{p.relation}-{p.anchor}" for p, _ in CASES])
def test_relation_kinds(synthetic_album, plan, expected):
    done, _ = run(synthetic_album, plan)
    if not expected:  # nothing to find there: a named fallback, never silent
        assert done.fallback == "target_search" and done.reason
        return
    assert not done.fallback
    assert set(done.answer) == expected
    assert done.anchor not in done.answer  # none of these anchors is the target


def test_decoy_anchor_is_weighed_by_joint_evidence(synthetic_album):
    done, trace = run(synthetic_album, Plan("dogs", "lighthouse", "same day"))
    assert {c.photo for c in done.candidates} == {"a1", "c1"}  # the decoy scores the same: both are weighed
    assert done.anchor == "a1"  # the day with dogs, whatever came first in the anchor search
    decoy = next(c for c in done.candidates if c.photo == "c1")
    true = next(c for c in done.candidates if c.photo == "a1")
    assert true.support > decoy.support and true.joint > decoy.joint
    steps = {s.name: s for s in trace.steps}
    assert len(steps["album.constraint"].outputs["candidates"]) == 2
    # The decoy wins where its own relation holds and the true anchor's does not.
    done, _ = run(synthetic_album, Plan("kites", "lighthouse", "same day"))
    assert done.anchor == "c1" and done.answer == ["c3"]


def test_an_exact_relation_beats_an_approximate_one(synthetic_album):
    """N weeks after: an anchor whose date has photos is preferred to one whose nearest photo day stood in."""
    tl = Timeline.of(synthetic_album)
    a1 = tl.index("a1")
    kept, how, exact = relation_subset(Plan("dogs", "lighthouse", "weeks after", 4), tl, a1, AlbumConfig(), None)
    assert not exact and "nearest" in how and {tl.ids[i] for i in kept} == {"d1", "d2"}
    kept, _, exact = relation_subset(Plan("dogs", "lighthouse", "days after", 14), tl, a1, AlbumConfig(), None)
    assert exact and {tl.ids[i] for i in kept} == {"c1", "c2", "c3"}


def test_anchor_is_never_in_the_answer_unless_it_shows_the_target(synthetic_album):
    done, _ = run(synthetic_album, Plan("cars", "lighthouse", "same day"))
    assert done.answer == ["a4"] and "a1" not in done.answer
    done, trace = run(synthetic_album, Plan("dogs", "spotted dog", "same trip"))  # the anchor is a dog itself
    assert done.anchor == "a6" and set(done.answer) == {"a2", "a3", "a6"}
    assert any("shows the target too" in n for s in trace.steps for n in s.notes)


def test_an_anchor_alone_on_its_day_is_no_evidence(synthetic_album):
    """The windmill is the only photo of its day: its day supports no target, so no answer is built from it; the
    named fallback searches the album instead, and the windmill is not in that answer either."""
    done, _ = run(synthetic_album, Plan("dogs", "windmill", "same day"))
    assert done.fallback == "target_search" and "kept no photo" in done.reason
    assert "h1" not in done.answer and done.answer
    assert all(i in {"a2", "a3", "a6", "d1", "e1", "f1", "g1"} for i in done.answer)


def test_every_photo_target_keeps_the_whole_subset(synthetic_album):
    assert Plan("photos", "sailing boat", "same day").every_photo
    done, _ = run(synthetic_album, Plan("photos", "sailing boat", "same day"))
    assert set(done.answer) == {"a5", "a6"}  # the anchor too: "the photos from that day" are all of them


def test_no_anchor_and_exclude(synthetic_album):
    done, _ = run(synthetic_album, Plan("dogs"))
    assert done.answer and set(done.answer) <= {"a2", "a3", "a6", "d1", "e1", "f1", "g1"}
    assert not done.candidates and not done.fallback
    # exclude by a place's name: Bergen's dogs are left out
    done, _ = run(synthetic_album, Plan("dogs", exclude="Bergen"), match_quantile=0.6)
    assert done.answer and not {"d1", "g1"} & set(done.answer)
    assert any("places named so" in n for n in done.notes)
    # exclude by what photos show when no place is named so
    done, _ = run(synthetic_album, Plan("fruit", exclude="pineapple"), match_quantile=0.85)
    assert "b2" not in done.answer and done.answer[0] == "f2"  # the pineapple is left out, the banana stays


def test_person_without_people_in_the_index_is_said(synthetic_album):
    done, _ = run(synthetic_album, Plan("dogs", "lighthouse", "same day", person="Anna"))
    assert set(done.answer) == {"a2", "a3"}
    assert any("not applied" in n and "no people" in n for n in done.notes)
    done, _ = run(synthetic_album, Plan("dogs", "lighthouse", "same day", person="Bergen"))
    assert any("names a place" in n for n in done.notes)


def test_person_filter_is_applied_when_the_index_has_people(synthetic_album):
    class WithPeople(type(synthetic_album)):
        def filter(self, expression, within=None):
            if expression == "person = 'Anna'":
                return ["a3", "d1"]
            return super().filter(expression, within)

    album = WithPeople(synthetic_album.gallery, synthetic_album.dual, synthetic_album.text, synthetic_album.spaces,
                       synthetic_album.ids)
    done, _ = run(album, Plan("dogs", "lighthouse", "same day", person="Anna"))
    assert done.answer == ["a3"]
    assert any("person 'Anna': 2 photo(s)" in n for n in done.notes)


def test_trace_shows_each_execution_step(synthetic_album):
    _, trace = run(synthetic_album, Plan("dogs", "lighthouse", "same day"))
    steps = {s.name: s for s in trace.steps}
    assert set(steps) == {"album.anchor", "album.constraint", "album.target"}
    assert set(steps["album.target"].outputs["answer"]) == {"a2", "a3"}
    assert steps["album.constraint"].outputs["how"].startswith("the day 2021-03-06")


def test_timeline_days_trips_visits_and_seasons(synthetic_album):
    tl = Timeline.of(synthetic_album, gap_days=1)
    assert len(tl) == 21 and tl.trips == 8
    assert tl.trip[tl.index("a1")] == tl.trip[tl.index("a6")] != tl.trip[tl.index("b1")]  # 03-06..07 vs 03-09
    assert tl.trip[tl.index("x1")] == -1 and not tl.has_day[tl.index("x1")]
    assert Timeline.of(synthetic_album, gap_days=2).trips == 7  # a one-day gap joins 03-07 and 03-09
    assert tl.season_of(tl.index("a1"))[1] == "autumn"  # Hobart in March
    assert tl.season_of(tl.index("c1"))[1] == "spring"  # Bergen in March
    assert tl.visits(tl.place_mask(tl.index("a1"), 1.0)) == [0, 1, 4]
    assert not tl.place_mask(tl.index("x1"), 1.0).any()
    assert tl.nearest_day(day_number(date(2021, 4, 3)), 3) == day_number(date(2021, 4, 2))
    assert tl.nearest_day(day_number(date(2021, 5, 10)), 3) is None
    assert add_months(date(2021, 1, 31), 1) == date(2021, 2, 28)
    assert np.array_equal(tl.address_mask("bergen"), np.array(["bergen" in a for a in tl.address]))


def test_a_place_named_by_the_anchor_gives_candidates_too(synthetic_album):
    """"The dogs on my first visit to Bergen": no photo shows Bergen, but the addresses name it: the first photo
    there of each trip is a candidate, and the relation runs from it."""
    done, trace = run(synthetic_album, Plan("dogs", "Bergen", "visit", 2))
    places = [c for c in done.candidates if c.how.startswith("at a place named")]
    assert [c.photo for c in places] == ["c1", "d1", "g1"]  # one a trip: 03-20, 04-02, 2022-01-05
    assert set(done.answer) == {"d1"}
    assert trace.steps[0].outputs["candidates"]


def test_visits_to_a_named_place_are_its_trips_there(synthetic_album):
    """"My last visit to Hobart": every photo whose address names Hobart (two streets 2 km apart), by trip."""
    done, _ = run(synthetic_album, Plan("photos", "Hobart", "visit", -1))
    assert done.answer == ["h1"]  # T8, at Salamanca Place: 1 km around the first Hobart photo would miss it
    done, _ = run(synthetic_album, Plan("photos", "Hobart", "visit", 2))
    assert set(done.answer) == {"b1", "b2"}
