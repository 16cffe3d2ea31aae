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
from dataclasses import dataclass
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
    NTH_DAY,
    RELATIONS,
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
)
from imagent.methods.album.readings import (
    asked_thing,
    day_within_trip,
    excluded_thing,
    exclusion_from_words,
    find_words,
    place_from_anchor,
    place_from_unused,
    place_not_unit,
    said_first,
    same_words,
    target_asked,
    target_from_unused,
    target_not_command,
    trip_from_visit,
    unused_words,
)
from imagent.methods.album.scaffold import answer_origin
from imagent.methods.base import Method, MethodConfig, register_method
from imagent.models.base import Message
from imagent.models.roles import Role
from imagent.tools.album import Album
from imagent.tools.timeline import Timeline

# Above any cosine: the answer set ranks before every other photo.
ANSWER_SCORE = 2.0
RETRY_NOTE = ("\n{plan}\nThat plan {why}. Write the plan for the same search again, reading it differently where "
              "that plan went wrong.")
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
        plan = target_not_command(plan, unused(plan), query.text, reading)
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
            led = same_words(asked, first.plan.target) if asked else said_first(plan.target, first.unused,
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
    ruled = find_words(text, excluded_thing(text))
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


def assemble(plan: Plan, reading: Any, query: str) -> Plan:
    """The plan with the reader's links joined: a link inside a hop's anchor words is a clue of that anchor (its
    candidates must match it; the words left are what is searched), any other person or place a filter of the
    target, and a date too when no hop relates the target to a moment. The Nth day of a trip the reader read turns
    a "same trip" hop into a "trip day" one, or, with no hop, keeps the Nth day of each trip the filters keep."""
    if reading is None:
        return plan
    notes = list(plan.notes)
    hops = [Hop(h.anchor, h.relation, h.count, h.season) for h in plan.hops]
    ranges = [find_words(query, h.anchor) for h in hops]
    excluded = find_words(query, plan.exclude)
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


__all__ = ["AlbumConfig", "AlbumSearch", "assemble", "relation_words"]
