"""``album``: imagent's own album search, a planner executed by code (decision 10; not a paper's method).

1. **Read** (no model): the query reader (:func:`imagent.tools.query_reader.read_query`) links the search's people,
   places, dates and the Nth day of a trip to the library's own vocabulary;
2. **Plan** (one grammar-constrained call of the ``planner`` role): the search as a typed chain
   (:class:`~imagent.methods.album.plan.Plan`: target, place, one or two hops of anchor and relation, exclusion);
   the reader's links join it (:func:`assemble`): a link inside an anchor's words is a clue of that anchor, any
   other a filter of the target;
3. **Execute** (code, :mod:`imagent.methods.album.execute`): each anchor's candidates scored on every clue, the
   chain's photos for each, the candidate whose photos best support the target, the answer cut by evidence;
4. **Check** (at most one more call): when the plan found no photo or left words of the search unused, the planner
   is asked once more, told why; of the two plans the one the scores back better is kept (the same evidence for
   both: an answer found, the words used, then the anchors' and the answer's standing).

The answer is a set (``Result.answer_set``) chosen by code from the plan; who chose it and how much of it equals
the list code computed are measured per result (``answer_origin``, ``code_selected_share``). An empty answer is an
answer ("no photo matches", with the reason), never the best of the rest. The trace shows the reading, the plan
(typed and in words), the planner model and every execution step. ``docs/album.md`` describes it all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from imagent.core.config import OFFLINE_CHAT_MODEL
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking, Result, Source
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.execute import Execution, execute
from imagent.methods.album.plan import (
    ASKS_EVERY,
    GENERIC_TARGETS,
    NEGATIONS,
    NTH_DAY,
    NUMBER_WORDS,
    ORDINALS,
    OTHER_WORDS,
    RELATIONS,
    SEASON_NAMES,
    SPAN_EDGE_STOP,
    UNIT_WORDS,
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
    stem,
)
from imagent.methods.album.scaffold import answer_origin
from imagent.methods.base import Method, MethodConfig, register_method
from imagent.models.base import Message
from imagent.models.roles import Role
from imagent.tools.album import Album
from imagent.tools.query_reader import COMMAND_WORDS
from imagent.tools.timeline import Timeline

# Above any cosine: the answer set ranks before every other photo.
ANSWER_SCORE = 2.0
RETRY_NOTE = ("\n{plan}\nThat plan {why}. Write the plan for the same search again, reading it differently where "
              "that plan went wrong.")
# Words of the search that a plan needs not use: the words of the relations (the table's names and units, and the
# words people use for them). Only for "which words did the plan leave unused" (the check's trigger): they never
# narrow what a plan may say.
RELATION_WORDS = frozenset(stem(w) for w in (
    *(w for r in RELATIONS.values() for w in (*r.name.split(), *r.unit.split())),
    "trip", "trips", "journey", "holiday", "vacation", "getaway", "outing", "excursion", "tour", "travel", "stay",
    "visit", "visits", "time", "times", "occasion", "day", "days", "week", "weeks", "weekend", "fortnight", "month",
    "months", "season", "year", "years", "spot", "location", "site", "town", "city", "place", "later", "earlier",
    "following", "followed", "preceding", "prior", "ahead", "previous", "next", "last", "first", "then", "once",
    "another", "different", "other", "again", "same", "whole", "entire", "ago", "since", "until", "came", "went",
    "been", "back", "away", "anywhere", "ones", "everything", "album", "ever", "own", "remember", "too", "which",
    "lot", "kind", "sort", "anything", "something", "out", "ones", *SEASON_NAMES, "fall", *NUMBER_WORDS, *ORDINALS,
    *NEGATIONS, *GENERIC_TARGETS))
# The units of a relation that, from an anchor that is only a place or a date, keep just that place or date.
FILTER_UNITS = frozenset({"place", "city", "day", "month", "season", "year"})


@dataclass
class Attempt:
    """One plan and what it found: ``unused`` the search's words it left unused, ``disagree`` its relations the
    search's words do not say (:meth:`~imagent.methods.album.plan.Relation.agrees`)."""

    plan: Plan
    done: Execution
    unused: list[str]
    disagree: list[str]
    agreement: int = 0

    def key(self) -> tuple[bool, int, int, float]:
        """The evidence two plans are compared by: an answer found, fewer words of the question unused, how well
        the words say its relation (a plan without one: as well as the words say any), then the scores (the
        anchors' and the answer's standing)."""
        found, strength = self.done.evidence()
        return found, -len(self.unused), self.agreement, strength


@register_method
class AlbumSearch(Method):
    """imagent's own album search: the reader links, one model call plans, code executes (module docstring)."""

    name = "album"
    tasks: ClassVar[frozenset[str]] = frozenset({"tir"})
    Config = AlbumConfig
    config: AlbumConfig
    reads_question = True  # the whole question: it reads it against the album's own vocabulary (``read``), keeping
    # the links a person removed (``query.extra["reading"].unlinked``)
    description = ("imagent's own album search (not a paper's): the query reader links people, places and dates, "
                   "one grammar-constrained model call parses the query into a typed chain (anchor -> relations "
                   "-> target), code executes it over the album; answers a set in <= 2 model calls")

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        assert isinstance(config, AlbumConfig)
        return 1 + int(config.check)

    def album(self, query: Query) -> Album:
        album = Album(self.ctx.gallery, self.ctx.dual, self.ctx.text, text_clues=True)  # words read in photos count
        return album if query.candidates is None else album.scoped(query.candidates)

    def search_spaces(self) -> list[str]:
        return [space for space, _ in Album(self.ctx.gallery, self.ctx.dual, self.ctx.text).spaces]

    def preflight(self, query: Query | None = None) -> list[str]:
        """Without captions, with a dual encoder that cannot see pixels and an index the pixel model never saw,
        the album is searched by file names, dates and places only: the user must know."""
        if not self.ctx.caption_mode or self.ctx.gallery.has_space("visual"):
            return []
        info = self.ctx.gallery.spaces().get("image")
        if info is not None and not str(info.model_id).startswith("caption:"):
            return []  # the image vectors come from a model that sees pixels
        from imagent.methods.captions import caption_coverage

        have, total = caption_coverage(self.ctx.gallery, query.candidates if query is not None else None)
        if total and not have:
            return ["the encoders cannot see pixels, the pixel model has not seen the photos and no photo of the "
                    "album has a caption: the album is searched by file names, dates and places only (caption the "
                    "photos, index with the pixel model, or configure an image encoder)"]
        return []

    # ------------------------------------------------------------------ read
    def read(self, query: Query, album: Album, trace: Trace) -> Any:
        """The query reader's reading of the search (None, with a note, when the reader fails)."""
        from imagent.tools.query_reader import read_query

        with trace.step("album.read", query=query.text) as step:
            lat = album.meta.lat if album.rows is None else album.meta.lat[album.rows]
            south = bool(np.isfinite(lat).any() and np.nanmedian(lat) < 0)
            try:
                prepared = query.extra.get("reading")  # Workspace.prepare's reading: the links a person removed
                unlink = getattr(prepared, "unlinked", None) or ()
                reading = read_query(query.text, album, hemisphere="south" if south else "north", unlink=unlink)
            except Exception as exc:  # the reader is an aid: a search goes on without it, and says so
                step.note(f"the query reader failed ({type(exc).__name__}: {exc}); read without its links")
                return None
            step.outputs = {"understood": reading.describe(), "where": reading.where, "trip_day": reading.trip_day}
            for n in reading.notes:
                step.note(n)
            return reading

    # ------------------------------------------------------------------ plan
    @cached_property
    def planner(self) -> tuple[Role, str]:
        """The role that writes the plan, and why it is not the configured model ("" when it is): the planner
        role, whose offline default model (Qwen2.5 0.5B in-process) plans as ``planner_model`` (the 1.5B by
        measurement) when that model's parts are installed."""
        from imagent.models.chat_llamacpp import LlamaCppChatModel, offline_sibling
        from imagent.models.offline import OfflineModelError

        role = self.ctx.roles[self.config.planner_role]
        want, model = self.config.planner_model, role.model
        if want == "role" or not isinstance(model, LlamaCppChatModel) or model.model_id != OFFLINE_CHAT_MODEL \
                or want == model.model_id:
            return role, ""
        try:
            return Role(role.name, offline_sibling(model, want), role.cache), ""
        except (OfflineModelError, OSError) as exc:
            return role, f"planner model {want!r} is not available ({exc}): the role's {model.model_id!r} plans"

    def plan(self, query: Query, trace: Trace, failed: tuple[Plan, str] | None = None,
             without: tuple[str, ...] = (), target: str = "") -> Plan | None:
        """One planner call (the second, ``failed`` = (plan, what was wrong with it), leaves ``without``'s
        relations out and keeps ``target``). None when the reply is unusable."""
        role, unavailable = self.planner
        prompt = plan_prompt(query.text)
        if failed is not None:
            prompt += RETRY_NOTE.format(plan=json.dumps(_model_fields(failed[0])), why=failed[1])
        schema = plan_schema(query.text, without, target)
        name = "album.plan" if failed is None else "album.plan_check"
        with trace.step(name, query=query.text) as step:
            if unavailable:  # the default planner's parts are not installed: never silent
                step.note(unavailable)
                trace.count("album.planner_unavailable")
            value, ok = role.json([Message.user(prompt)], schema, fallback=lambda: None, retries=0,
                                  max_tokens=self.config.plan_max_tokens, temperature=0.0)
            offered = offered_relations(schema)
            step.outputs = {"planner_model": getattr(role.model, "model_id", ""), "relations_offered": offered}
            if not ok or value is None:
                step.note("the planner's reply is not a plan")
                step.outputs["parsed"] = False
                return None
            try:
                plan = read_plan(value, query.text, target=failed[0].target if failed is not None else "")
            except ValueError as exc:
                step.note(f"the planner's reply is not a plan: {exc}")
                step.outputs["parsed"] = False
                return None
            for n in plan.notes:
                step.note(n)
            step.outputs.update({"parsed": True, "plan": plan.to_dict(), "reads": plan.describe(),
                                 "model_reply": value})
            return plan

    # ------------------------------------------------------------------ run
    def attempt(self, plan: Plan, query: Query, reading: Any, album: Album, trace: Trace) -> Attempt:
        def unused(p: Plan) -> list[str]:
            return unused_words(p, reading, query.text)

        written = len(plan.notes)
        timeline = Timeline.of(album, self.config.trip_gap_days)
        plan = place_not_unit(plan)
        plan = target_not_command(plan, unused(plan), query.text)
        plan = target_from_unused(plan, unused(plan), query.text)
        plan = exclusion_from_words(plan, unused(plan), query.text)
        plan = target_asked(plan, unused(plan), query.text)
        plan = day_within_trip(plan, unused(plan), query.text)
        plan = trip_from_visit(plan, query.text, timeline, reading)
        plan = place_from_anchor(plan, unused(plan), query.text, timeline, reading)
        plan = assemble(plan, reading, query.text)
        plan = place_from_unused(plan, unused(plan), timeline)
        if plan.notes[written:]:  # what the code read into the model's plan (the reader's links, the repairs)
            with trace.step("album.assemble", plan=plan.describe()) as step:
                for n in plan.notes[written:]:
                    step.note(n)
                step.outputs = {"plan": plan.to_dict(), "reads": plan.describe()}
        asks_all = bool({w.lower() for w in query_tokens(query.text)} & ASKS_EVERY)
        done = execute(plan, album, self.config, trace, asks_all=asks_all)
        said = relation_words(query.text, reading)
        best = best_relations(said)
        disagree = [h.relation for h in plan.hops[:1] if h.relation not in best]
        agreement = plan.hops[0].rel.agreement(said) if plan.hops else max(
            RELATIONS[r].agreement(said) for r in best)
        return Attempt(plan, done, unused(plan), disagree, agreement)

    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        album = self.album(query)
        reading = self.read(query, album, trace)
        calls = 1
        plan = self.plan(query, trace)
        unparsed = plan is None
        if plan is None:  # unusable reply: the search's own words are the target, no relation
            trace.count("album.plan_unparsed")
            plan = Plan(" ".join(query.text.split()), notes=["no plan: the whole search is the target"])
        first = best = self.attempt(plan, query, reading, album, trace)
        why = _check_reason(first)
        if why and self.config.check and not unparsed:
            calls += 1
            empty = not first.done.answer  # the same target, read into another chain
            without = tuple(h.relation for h in first.plan.hops) if empty else tuple(first.disagree)
            if first.disagree:  # the words narrow the second plan to the relations they say best (none: no anchor)
                said = relation_words(query.text, reading)
                said_best = [r for r in best_relations(said) if RELATIONS[r].agrees(said)]
                without = tuple(r for r in RELATIONS if r != "none" and r not in said_best)
            # a check of the relation keeps the target; so does a check of words left unused when the target is
            # the thing a wh-question asks for ("which mammals ...") or, in a search without one, comes before
            # them ("the vegetables from the day I saw the wrench, ..."): the second plan places those words
            # rather than asks for them
            asked = asked_thing(query.text)
            led = _same_words(asked, first.plan.target) if asked else said_first(plan.target, first.unused,
                                                                                   query.text)
            keep = (first.plan.target if asked and led else plan.target) if empty or first.disagree or led else ""
            second = self.plan(query, trace, failed=(plan, why), without=without, target=keep)
            if second is not None:
                other = self.attempt(second, query, reading, album, trace)
                if other.key() > first.key():
                    best = other
                    trace.count("album.check_replanned")
                with trace.step("album.check", why=why) as step:
                    step.outputs = {"kept": "second" if best is other else "first",
                                    "evidence": {"first": list(first.key()), "second": list(other.key())}}
        plan, done = best.plan, best.done
        with trace.step("answer", plan=plan.describe()) as step:
            step.outputs = {"answer_set": list(done.answer), "anchors": done.anchors, "kept": done.kept,
                            "filters": done.notes, "reason": done.reason, "unused_words": best.unused}
            if done.reason:
                step.note(f"no photo matches: {done.reason}" if not done.reason.startswith("no photo") else
                          done.reason)
        source, reason = Source.METHOD, done.reason
        if unparsed:
            source, reason = Source.fallback("plan_unparsed"), "the planner's reply was not a plan: the whole search "\
                "was searched as the target"
        origin, share = answer_origin(done.answer, [done.answer], fallback=unparsed) if done.answer else ("code", 1.0)
        return Result(ranking=self.ranking(done, top_k), trace=trace, answer_set=list(done.answer), source=source,
                      source_reason=reason, answer_origin=origin, code_selected_share=share,
                      counts=self.counts(plan, done, calls, best is not first))

    @staticmethod
    def ranking(done: Execution, top_k: int) -> Ranking:
        """The answer first, then the album's other photos by target score (scores non-increasing)."""
        ids = list(done.answer)
        scores = [ANSWER_SCORE] * len(ids)
        seen = set(ids)
        for pid, s in done.ranked:
            if len(ids) >= max(top_k, len(done.answer)):
                break
            if pid not in seen:
                ids.append(pid)
                scores.append(min(float(s), ANSWER_SCORE))
                seen.add(pid)
        return Ranking(ids, scores)

    @staticmethod
    def counts(plan: Plan, done: Execution, calls: int, replanned: bool) -> dict[str, int]:
        """Behaviour counts of one search (summed by an evaluation)."""
        out = {"planner_calls": calls, f"plan_relation.{plan.relation.replace(' ', '_')}": 1,
               "plan_anchored": int(plan.anchored), "plan_hops": len(plan.hops), "plan_notes": len(plan.notes),
               "anchor_paths": len(done.paths), "check_replanned": int(replanned),
               "anchor_weighed": int(len({tuple(c.photo for c in p.anchors) for p in done.paths if p.any_kept}) > 1),
               "anchor_in_answer": int(done.anchor is not None and done.anchor in done.answer),
               "answer_size": len(done.answer), "answer_empty": int(not done.answer)}
        if len(plan.hops) > 1:
            out[f"plan_relation2.{plan.hops[1].relation.replace(' ', '_')}"] = 1
        return out


def _model_fields(plan: Plan) -> dict[str, Any]:
    """A plan as the model writes it (the retry shows the first one): the fields it says, in the grammar's order."""
    out: dict[str, Any] = {"target": plan.target}
    for n, hop in enumerate(plan.hops[:2]):
        k = str(n + 1) if n else ""
        out.update({f"link{k}": hop.link or hop.anchor, f"anchor{k}": hop.anchor, f"relation{k}": hop.relation})
    first = plan.hops[0] if plan.hops else None
    extra = {"place": plan.place, "count": first.count if first else 0, "season": first.season if first else "",
             "exclude": plan.exclude}
    out.update({k: v for k, v in extra.items() if v})
    return out


def relation_words(query: str, reading: Any) -> set[str]:
    """The search's words that can say a relation (:func:`~imagent.methods.album.plan.said_words`), less the names
    of people and places the reader linked ("the Old Town Square" names a place, not a town) and the thing the
    search rules out ("away from the old town": no town), and :data:`~imagent.methods.album.plan.NTH_DAY` when the
    reader read the Nth day of a trip."""
    text = query
    if reading is not None:
        for s in sorted((s for s in reading.spans if s.kind in ("person", "place")), key=lambda s: -s.start):
            text = text[: s.start] + " " + text[s.end:]
    ruled = _find(text, excluded_thing(text))
    if ruled is not None:
        text = text[: ruled[0]] + " " + text[ruled[1]:]
    said = said_words(text)
    if reading is not None and reading.trip_day is not None:  # "my last day in Krakow": the Nth day of a trip
        said.add(NTH_DAY)
    return said


def _check_reason(first: Attempt) -> str:
    """Why the first plan deserves a second opinion ("" when it does not): it found no photo, or it left words of
    the search unused."""
    if first.disagree:
        return "read the relation as " + " and ".join(repr(r) for r in first.disagree) + ", which is not what the " \
            "search's words say best"
    if not first.done.answer:
        return f"found no photo: {first.done.reason}"
    if first.unused:
        return "left these words of the search unused: " + ", ".join(repr(w) for w in first.unused)
    return ""


def _find(text: str, part: str, start: int = 0) -> tuple[int, int] | None:
    """Where ``part`` (words, any case) stands in ``text``, as character offsets."""
    if not part:
        return None
    m = re.compile(r"(?<![\w])" + r"\W+".join(re.escape(w) for w in part.split()) + r"(?![\w])",
                   re.I).search(text, start)
    return (m.start(), m.end()) if m else None


def assemble(plan: Plan, reading: Any, query: str) -> Plan:
    """The plan with the reader's links joined: a link inside a hop's anchor words is a clue of that anchor (its
    candidates must match it; the words left are what is searched), any other person or place a filter of the
    target, and a date too when no hop relates the target to a moment. The Nth day of a trip the reader read turns
    a "same trip" hop into a "trip day" one, or, with no hop, keeps the Nth day of each trip the filters keep."""
    if reading is None:
        return plan
    notes = list(plan.notes)
    hops = [Hop(h.anchor, h.relation, h.count, h.season) for h in plan.hops]
    ranges = [_find(query, h.anchor) for h in hops]
    excluded = _find(query, plan.exclude)
    links = [(u, s) for u in reading.understood for s in reading.spans
             if s.kind == u.kind and s.value == u.value and s.where == u.where]
    target_where: list[str] = []
    understood: list[str] = []
    target = plan.target
    for u, span in links:
        inside = [k for k, r in enumerate(ranges) if r is not None and r[0] <= span.start and span.end <= r[1]]
        if inside:
            hop = hops[inside[0]]
            hop.clues = f"{hop.clues} and {u.where}" if hop.clues else u.where
            rest = re.sub(re.escape(span.text), " ", hop.content or "", flags=re.I).split()
            hop.content = " ".join(w for w in rest if w.lower() not in SPAN_EDGE_STOP)
            notes.append(f"{u.label} is a clue of the anchor {hop.anchor!r}")
            continue
        if excluded is not None and span.start < excluded[1] and excluded[0] < span.end:
            target_where.append(f"not ({u.where})")  # "not at the Old Town Square": ruled out, not a filter
            understood.append(f"not {u.label}")
            continue
        if u.kind == "time" and hops:
            notes.append(f"{u.label}: not applied (the plan relates the photos to a moment of its own)")
            continue
        target_where.append(f"({u.where})")
        understood.append(u.label)
        rest = " ".join(re.sub(re.escape(span.text), " ", target, flags=re.I).split())
        if rest and rest != target and any(w.lower() not in SPAN_EDGE_STOP for w in rest.split()):
            target = rest
    for hop in list(hops):  # "fish from Hobart" read as "the same place as Hobart": the place itself is the filter
        if hop.clues and not hop.content and hop.rel.direction == 0 and hop.rel.unit in FILTER_UNITS:
            hops.remove(hop)
            target_where.append(f"({hop.clues})")
            understood.append(hop.anchor)
            notes.append(f"anchor {hop.anchor!r} is only a place or date the reader linked: a filter, not a hop")
    trip_day = reading.trip_day
    if trip_day is not None:
        same_trip = [h for h in hops if h.relation in ("same trip", "trip day")]
        if same_trip:
            h = same_trip[0]
            if (h.relation, h.count) != ("trip day", trip_day):
                notes.append(f"the search says day {trip_day} of a trip: relation {h.relation!r} read as 'trip day'")
            h.relation, h.count = "trip day", trip_day
            trip_day = None
        elif hops:
            notes.append(f"day {trip_day} of a trip: not applied (the plan's relation is not a trip's)")
            trip_day = None
    for hop in hops:  # "trip day" with no Nth day in the words: the trip (or the day) the words say
        if hop.relation == "trip day" and reading.trip_day is None:
            said = said_words(hop.link or query)
            hop.relation = "same trip" if said & UNIT_WORDS["trip"] - {"time"} else "same day"
            hop.count = 0
            notes.append(f"the search names no Nth day of a trip: 'trip day' read as {hop.relation!r}")
    return Plan(target, hops, place=plan.place, exclude=plan.exclude, where=" and ".join(target_where),
                understood=understood, trip_day=trip_day, notes=notes)


def unused_thing(unused: list[str], query: str) -> str:
    """The longest run of the search's words that are all among ``unused`` (one thing the plan left out: "big eared
    rabbit"); "" when there is none."""
    left = {w.lower() for w in unused}
    runs = [r for r in spans([t.lower() for t in query_tokens(query)])
            if all(w in left or w in JOINERS for w in r.split())]
    return max(runs, key=lambda r: len(r.split())) if runs else ""


# Words inside the name of one thing the plan left out ("pair of pliers", "head of lettuce").
JOINERS = frozenset({"of"})


WH_WORDS = frozenset({"which", "what", "whichever", "whatever"})


def asked_thing(query: str) -> str:
    """The thing a wh-question asks for: the run of words right after "which" or "what" ("which fish did I
    photograph ...": "fish"; "what musical instruments ...": "musical instruments"); "" when the word after it is
    no thing ("what did I photograph", "which day", "what kind of")."""
    tokens = [t.lower() for t in query_tokens(query)]
    for i, t in enumerate(tokens[:-1]):
        if t not in WH_WORDS:
            continue
        run = []
        for w in tokens[i + 1:]:
            if w in SPAN_EDGE_STOP or stem(w) in RELATION_WORDS or w.isdigit():
                break
            run.append(w)
        if run:
            return " ".join(run)
    return ""


def _same_words(a: str, b: str) -> bool:
    return [stem(w.lower()) for w in query_tokens(a)] == [stem(w.lower()) for w in query_tokens(b)]


def target_asked(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan whose target is not the thing a wh-question asks for, that thing left unused: it is the target
    ("the shrimp trip: which mammals did I take the day I saw the tent" planned with target "shrimp"); the model's
    target is then left unused, for the check to place."""
    asked = asked_thing(query)
    left = {stem(w.lower()) for w in unused}
    if not asked or _same_words(asked, plan.target) or not all(stem(w) in left for w in asked.split()):
        return plan
    return replace(plan, target=asked, notes=[*plan.notes, f"the search asks {asked!r} (which / what {asked}), left "
                                              f"unused: the target is {asked!r}, not {plan.target!r}"])


def said_first(target: str, unused: list[str], query: str) -> bool:
    """Whether the words of ``target`` come, in a row, before every word of ``unused`` in the search (by stem:
    "fruit" is said in "the fruits from ...")."""
    tokens = [stem(t.lower()) for t in query_tokens(query)]
    where = _span_at(tokens, target) if target else None
    if where is None or not unused:
        return False
    left = {stem(w.lower()) for w in unused}
    return all(where[0] < i for i, t in enumerate(tokens) if t in left)


def target_from_unused(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan whose anchor the model also wrote as its target (:attr:`Plan.circular`), when the search names one
    other thing the plan left out: that thing is the target, and the dropped hop is given back ("the fruit I took
    the day I saw the red apple" planned as target and anchor "red apple": the fruit on the red apple's day; "pics
    of fruit on red apple day", read as every photo of that day, likewise)."""
    if plan.circular is None or (plan.hops and not plan.every_photo):
        return plan
    thing = unused_thing(unused, query)
    if not thing:
        return plan
    asked = asked_thing(query)
    if asked and _same_words(asked, plan.target) and not plan.hops:  # "which vehicles ... where I saw the lionfish"
        return replace(plan, hops=[replace(plan.circular, anchor=thing, content=thing, clues="")], circular=None,
                       notes=[*plan.notes, f"the plan wrote the asked {asked!r} as its anchor too and left {thing!r} "
                              f"unused: {thing!r} is the anchor, in {plan.circular.relation!r}"])
    return replace(plan, target=thing, hops=plan.hops or [plan.circular], circular=None,
                   notes=[*plan.notes, f"the plan wrote its anchor {plan.circular.anchor!r} as its target and left "
                          f"{thing!r} unused: {thing!r} is the target, in {plan.circular.relation!r} to the anchor"])


# The units of relations of time: their anchor is a moment (a thing photographed), not where the photos were taken.
TIME_UNITS = frozenset({"day", "trip", "trip day", "week", "month", "season", "year", "occasion"})


def place_from_anchor(plan: Plan, unused: list[str], query: str, tl: Timeline, reading: Any = None) -> Plan:
    """The plan whose one hop of time is anchored on a place while a thing of the search is left unused: the place
    is where the wanted photos were taken and the thing is the anchor ("the houses at the castle the autumn after
    the round tower" planned as the autumn after the castle, the tower unused). The anchor is a place when it is
    only a place the reader linked ("in Bergen": the link then filters the target, :func:`assemble`) or its words
    all name a place of the album by stem (the plan's place). Not when the place is said right after the thing
    (at most two words between): "the birds the year after I saw the crane in Kyoto" says where the crane was; "on
    the trip with the deer, what mammals did I photograph at the beach?" where the mammals were."""
    if len(plan.hops) != 1 or plan.hops[0].rel.unit not in TIME_UNITS:
        return plan
    hop = plan.hops[0]
    thing = unused_thing(unused, query)
    tokens = [stem(t.lower()) for t in query_tokens(query)]
    at, of = (_span_at(tokens, hop.anchor), _span_at(tokens, thing)) if thing else (None, None)
    if at is None or of is None or 0 <= at[0] - of[1] <= 2:
        return plan
    linked = _only_linked_place(hop.anchor, reading, query)
    if not linked and (plan.place or not tl.named_place_mask(hop.anchor).any()):
        return plan
    note = (f"anchor {hop.anchor!r} is a place and {thing!r} was left unused: the wanted photos were taken at "
            f"{hop.anchor!r}, the anchor is {thing!r}")
    return replace(plan, place=plan.place if linked else hop.anchor,
                   hops=[Hop(thing, hop.relation, hop.count, hop.season, link=hop.link)], notes=[*plan.notes, note])


def _span_at(tokens: list[str], run: str) -> tuple[int, int] | None:
    """Where the words of ``run`` (by stem) stand in the search's stemmed ``tokens``: (first, last + 1)."""
    ws = " ".join(stem(w.lower()) for w in query_tokens(run))
    start = _position(tokens, ws) if ws else None
    return None if start is None else (start, start + len(ws.split()))


def _only_linked_place(anchor: str, reading: Any, query: str) -> bool:
    """Whether ``anchor``'s words in the search are places the reader linked and framing words only."""
    where = _find(query, anchor)
    if reading is None or where is None:
        return False
    rest = query[where[0]: where[1]]
    places = [s for s in reading.spans if s.kind == "place" and where[0] <= s.start and s.end <= where[1]]
    for s in sorted(places, key=lambda s: -s.start):
        rest = rest[: s.start - where[0]] + " " + rest[s.end - where[0]:]
    return bool(places) and all(w.lower() in SPAN_EDGE_STOP for w in query_tokens(rest))


def place_from_unused(plan: Plan, unused: list[str], tl: Timeline) -> Plan:
    """The plan with a place its words name: when it has none and one of the search's words it left unused names a
    place of the album (by stem: "the gardens" ~ "Botanical Garden"), the wanted photos were taken there ("the
    birds at the gardens on my kite trip" planned without the gardens)."""
    if plan.place or not unused:
        return plan
    named = [w for w in unused if tl.named_place_mask(w).any()]
    if not named:
        return plan
    return replace(plan, place=named[0], notes=[*plan.notes, f"{named[0]!r} names a place of the album the plan left "
                                                "unused: the wanted photos' place"])


DAY_WORDS = frozenset({"day", "days"})
TRIP_WORDS = frozenset({"trip", "journey", "holiday", "vacation", "getaway", "outing", "tour", "excursion", "stay"})


def day_within_trip(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan with the day the search names inside a trip it names, when the model wrote one hop of the two:
    "the fruit from the day of the tamarin during my koala trip" planned as the koala's trip (the tamarin unused)
    is the tamarin's day (hop 1, ``same day``) on the koala's trip (hop 2, ``same trip``). Only when the search
    says both a day and a trip (no visit: "my shrimp trip" is not a visit), the one hop is of a day, a trip or a
    visit, the words the plan left unused are one thing (a run of the search), and the words tie that thing and the
    anchor to different ones of the two (:func:`_unit_of`); otherwise the plan as is."""
    if len(plan.hops) != 1 or plan.hops[0].rel.unit not in ("day", "trip", "trip day", "visit") or not unused:
        return plan
    tokens = [t.lower() for t in query_tokens(query)]
    days = [i for i, t in enumerate(tokens) if t in DAY_WORDS]
    trips = [i for i, t in enumerate(tokens) if t in TRIP_WORDS]
    if not days or not trips:
        return plan
    thing = unused_thing(unused, query)
    if not thing:
        return plan
    anchor = " ".join(w for w in plan.hops[0].anchor.split() if w.lower() not in DAY_WORDS | TRIP_WORDS)
    if not anchor:
        return plan
    kinds = {name: _unit_of(tokens, name, days, trips) for name in (thing, anchor)}
    if None in kinds.values() or kinds[thing] == kinds[anchor]:
        return plan  # which thing names the day and which the trip is not clear from the words
    on_day, on_trip = (thing, anchor) if kinds[thing] == "day" else (anchor, thing)
    hops = [Hop(on_day, "same day", link=plan.hops[0].link), Hop(on_trip, "same trip")]
    return replace(plan, hops=hops, notes=[*plan.notes, f"the search names a day ({on_day!r}) on a trip ({on_trip!r}) "
                                           "and the plan had one of them: the day of the one on the trip of the other"])


def _unit_of(tokens: list[str], run: str, days: list[int], trips: list[int]) -> str | None:
    """Whether the thing ``run`` names a day or a trip in the search's words: the unit word right after it ("the
    hammer day", "my koala trip"), else the nearest one before it ("the day I saw the wrench", "the trip where I
    photographed the rabbit", "the day of the tamarin"); None when neither."""
    start = _position(tokens, run)
    if start is None:
        return None
    end = start + len(run.split())
    if end in days or end in trips:
        return "day" if end in days else "trip"
    before = [i for i in (*days, *trips) if i < start]
    if not before:
        return None
    return "day" if max(before) in days else "trip"


def _position(tokens: list[str], run: str) -> int | None:
    """Where the words of ``run`` begin in ``tokens`` (lower case), None when they are not there in a row."""
    ws = run.lower().split()
    return next((i for i in range(len(tokens) - len(ws) + 1) if tokens[i: i + len(ws)] == ws), None)


# Words after which a search names what it rules out ("except the beach", "did not take at the castle", "minus the
# garden ones", "apart from the zoo"); "but" and "than" only after "anywhere" / "other" ("anywhere but the hill").
EXCLUSION_MARKERS = frozenset({"except", "excluding", "exclude", "excepting", "minus", "besides", "without",
                               "barring", "not", "apart", "aside", "ignoring", "omitting", "skipping"})
_EXCLUSION_AFTER = {"but": frozenset({"anywhere", "everywhere", "all", "everything", "nothing"}),
                    "than": frozenset({"other", "rather"}), "out": frozenset({"leave", "leaving", "left"})}
# Words between the marker and the thing it rules out ("not counting the ones from the garden").
_EXCLUSION_SKIP = frozenset({"counting", "including", "include", "showing", "show", "shows", "those", "ones", "out",
                             "from", "anything", "any"})


# Words for a place that end a place's name ("the old town", "the market square"): inside a thing ruled out.
PLACE_NOUNS = UNIT_WORDS["city"] | UNIT_WORDS["place"]


def excluded_thing(query: str) -> str:
    """The thing the search rules out: the first run of words naming a thing after a word of exclusion
    (:data:`EXCLUSION_MARKERS`; "n't"), at most four words, "of" inside ("except the head of lettuce"); "" when the
    search rules nothing out."""
    tokens = [t.lower() for t in query_tokens(query)]
    for i, t in enumerate(tokens):
        marker = t in EXCLUSION_MARKERS or re.search(r"n['’]t$", t) or (
            t in _EXCLUSION_AFTER and i > 0 and tokens[i - 1] in _EXCLUSION_AFTER[t]) or (
            t == "away" and tokens[i + 1: i + 2] == ["from"])
        if not marker:
            continue
        j = i + 1
        while j < len(tokens) and (tokens[j] in SPAN_EDGE_STOP or tokens[j] in _EXCLUSION_SKIP
                                   or tokens[j] in EXCLUSION_MARKERS):
            j += 1
        run: list[str] = []
        while j < len(tokens) and len(run) < 4:
            w = tokens[j]
            if w in JOINERS and run and j + 1 < len(tokens) and tokens[j + 1] not in SPAN_EDGE_STOP:
                run.append(w)
            elif w in SPAN_EDGE_STOP or w in _EXCLUSION_SKIP or w.isdigit() or (
                    stem(w) in RELATION_WORDS and not (run and w in PLACE_NOUNS)):  # "the old town", not "day"
                break
            else:
                run.append(w)
            j += 1
        if run:
            return " ".join(run)
    return ""


def _stems(text: str) -> set[str]:
    return {stem(w.lower()) for w in query_tokens(text) if w.lower() not in SPAN_EDGE_STOP}


def exclusion_from_words(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan with the thing the search rules out (:func:`excluded_thing`) as its exclusion, when it has none:
    "the houses on my circus tent trip but not at the lighthouse point" planned with the lighthouse point as the
    anchor (or the target, or the place) and the circus tent unused is the circus tent's trip without the
    lighthouse point. The thing left out takes the anchor's (or the target's) place; an anchor with no such thing
    is dropped, a target with none stays as is."""
    said = excluded_thing(query)
    if not said:
        return plan
    ruled = _stems(said)
    hit = [k for k, h in enumerate(plan.hops) if _stems(h.anchor) & ruled]
    on_target = bool(_stems(plan.target) & ruled) and not plan.every_photo
    on_place = bool(plan.place) and bool(_stems(plan.place) & ruled)
    used = set().union(*(_stems(t) for t in (plan.target, plan.place, *(h.anchor for h in plan.hops))))
    other = plan.exclude and not _stems(plan.exclude) & ruled  # the model ruled out another thing of the search
    if (not hit and not on_target and not on_place and (ruled & used or plan.exclude)) or (
            other and not hit and not on_target):
        return plan
    # the thing that takes the place of the one ruled out: the model's own exclusion when it named another thing
    # ("flowers on the trip with the brown potato, away from the harbour" planned as the harbour's trip without
    # the potato), else the thing the plan left out
    thing = plan.exclude if other else unused_thing(unused, query)
    if on_target and not thing:
        return plan
    hops = list(plan.hops)
    for k in hit:
        hops[k] = replace(hops[k], anchor=thing, content=thing, clues="") if thing else None
    hops = [h for h in hops if h is not None]
    note = f"the search rules out {said!r}: the plan's exclusion"
    if hit or on_target:
        note += f"; {thing!r}, left unused, takes its place" if thing else "; its hop is dropped"
    return replace(plan, target=thing if on_target else plan.target, hops=hops, exclude=said,
                   place="" if on_place else plan.place, notes=[*plan.notes, note])


def _ranked_words(query: str) -> bool:
    tokens = [t.lower() for t in query_tokens(query)]
    return any(t in ORDINALS or re.fullmatch(r"\d+(st|nd|rd|th)", t) for t in tokens)


def trip_from_visit(plan: Plan, query: str, tl: Timeline, reading: Any = None) -> Plan:
    """The plan with a ``visit`` hop whose rank the search does not say ("my hippopotamus trip", "the holiday
    where I saw the crane": no "first", "second", "last"), or an ``other visit`` hop where it says no "other",
    "another" or "different", read as the anchor's trip: a visit is counted only when the words count it. Not for
    an anchor that is a place ("my trip to Kyoto": its visits are the place's)."""
    tokens = {t.lower() for t in query_tokens(query)}
    uncounted = set() if _ranked_words(query) else {"visit"}
    uncounted |= set() if tokens & OTHER_WORDS else {"other visit"}
    if not any(h.relation in uncounted for h in plan.hops):
        return plan
    hops, changed = [], []
    for h in plan.hops:
        place = _only_linked_place(h.anchor, reading, query) or tl.named_place_mask(h.anchor).any()
        if h.relation in uncounted and not place:
            h = replace(h, relation="same trip", count=0)
            changed.append(h.anchor)
        hops.append(h)
    if not changed:
        return plan
    return replace(plan, hops=hops, notes=[*plan.notes, "the search counts no visit: the visit of "
                                           + ", ".join(repr(a) for a in changed) + " read as 'same trip'"])


def target_not_command(plan: Plan, unused: list[str], query: str) -> Plan:
    """The plan whose target is the search's command ("Show me everything from ..." planned with target "show"):
    the thing left out is the target, else every photo."""
    tokens = [t.lower() for t in query_tokens(query)]
    t = [w.lower() for w in query_tokens(plan.target)]
    if len(t) != 1 or t[0] not in COMMAND_WORDS or t[0] not in tokens:
        return plan
    i = tokens.index(t[0])
    if not (i == 0 or (i + 1 < len(tokens) and tokens[i + 1] in ("me", "us"))):
        return plan
    thing = unused_thing(unused, query) or "photos"
    return replace(plan, target=thing, notes=[*plan.notes, f"target {plan.target!r} is the search's command: the "
                                              f"target is {thing!r}"])


def place_not_unit(plan: Plan) -> Plan:
    """The plan whose place is only a word for a place or town ("the town where I saw ...") names no place."""
    ws = [w.lower() for w in query_tokens(plan.place)]
    if not ws or not all(w in SPAN_EDGE_STOP or w in UNIT_WORDS["city"] | UNIT_WORDS["place"] for w in ws):
        return plan
    return replace(plan, place="", notes=[*plan.notes, f"place {plan.place!r} is no place's name: not applied"])


def unused_words(plan: Plan, reading: Any, query: str) -> list[str]:
    """The search's words that name something (not function words, framing, relations, numbers, or what the
    reader linked) and that no field of the plan uses (the anchor it wrote as its target counts as used: "huge" of
    "the huge dump truck" when the target was "dump truck")."""
    circular = (plan.circular.anchor,) if plan.circular is not None else ()
    used = {stem(w.lower()) for part in (plan.target, plan.place, plan.exclude, *(h.anchor for h in plan.hops),
                                         *circular) for w in query_tokens(part)}
    linked: set[int] = set()
    if reading is not None:
        for s in reading.spans:
            if s.kind in ("person", "place", "time", "trip_day", "frame"):
                linked.update(range(s.start, s.end))
    out = []
    for m in re.finditer(r"[^\W_]+(?:['’-][^\W_]+)*", query):
        w = m.group(0).lower()
        if m.start() in linked or w in SPAN_EDGE_STOP or stem(w) in RELATION_WORDS or w.isdigit() or \
                stem(w) in used or re.fullmatch(r"\d+(st|nd|rd|th)", w) or len(w) < 3:
            continue
        out.append(m.group(0))
    return list(dict.fromkeys(out))


__all__ = ["AlbumConfig", "AlbumSearch", "asked_thing", "assemble", "excluded_thing", "exclusion_from_words",
           "place_from_anchor", "place_from_unused", "place_not_unit", "target_asked", "target_from_unused",
           "target_not_command", "trip_from_visit", "unused_words"]
