"""``album``: imagent's own album search, a planner executed by code (decision 10; not a paper's method).

One grammar-constrained call of the ``planner`` role parses the search into a typed
:class:`~imagent.methods.album.plan.Plan` (target, anchor, relation, count, season, exclude, person); code runs it
over the album (:mod:`imagent.methods.album.execute`: the anchor's candidates, the relation's photos for each,
the candidate whose photos best support the target, the answer cut); at most one more call (``check``) re-plans
when the first plan's execution kept no photo, with the failed relation left out of the grammar. The answer is a
set (``Result.answer_set``) chosen by code from the plan: ``answer_origin`` "code", ``code_selected_share`` 1.0.
The trace shows the plan (typed and in words) and every execution step. ``docs/album.md`` describes the plan
kinds, the execution, the answer cut and the numbers.
"""

from __future__ import annotations

import json
from typing import ClassVar

from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking, Result, Source
from imagent.methods.album.config import AlbumConfig
from imagent.methods.album.execute import Execution, execute
from imagent.methods.album.plan import RELATIONS, Plan, plan_prompt, plan_schema, read_plan
from imagent.methods.base import Method, MethodConfig, register_method
from imagent.models.base import Message
from imagent.tools.album import Album

# Above any cosine: the answer set ranks before every other photo.
ANSWER_SCORE = 2.0
RETRY_NOTE = ("\n{plan}\nThat plan found no photo: {reason}. Write another plan for the same search, reading its "
              "relation differently.")


@register_method
class AlbumSearch(Method):
    """imagent's own album search: one model call plans, code executes (module docstring)."""

    name = "album"
    tasks: ClassVar[frozenset[str]] = frozenset({"tir"})
    Config = AlbumConfig
    config: AlbumConfig
    reads_question = True  # the whole question, with the query reader's reading in query.extra["reading"]
    description = ("imagent's own album search (not a paper's): one grammar-constrained model call parses the "
                   "query into a typed plan (target, anchor, relation in time or place), code executes it over the "
                   "album; answers a set in <= 2 model calls")

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
        """Without captions and with a dual encoder that cannot see pixels, the album is searched by file names,
        dates and places only: the user must know."""
        if not self.ctx.caption_mode:
            return []
        from imagent.methods.captions import caption_coverage

        have, total = caption_coverage(self.ctx.gallery, query.candidates if query is not None else None)
        if total and not have:
            return ["the encoders cannot see pixels and no photo of the album has a caption: the album is searched "
                    "by file names, dates and places only (caption the photos, or configure an image encoder)"]
        return []

    # ------------------------------------------------------------------ plan
    def plan(self, query: Query, trace: Trace, failed: tuple[Plan, str] | None = None) -> Plan | None:
        """One planner call (the second, ``failed`` = (plan, why it found nothing), leaves that plan's relation
        out). None when the reply is unusable."""
        role = self.ctx.roles[self.config.planner_role]
        prompt = plan_prompt(query.text)
        without: list[str] = []
        if failed is not None:
            prompt += RETRY_NOTE.format(plan=_plan_json(failed[0]), reason=failed[1])
            without = [failed[0].relation]
        schema = plan_schema(query.text, without)
        name = "album.plan" if failed is None else "album.plan_check"
        with trace.step(name, query=query.text) as step:
            value, ok = role.json([Message.user(prompt)], schema, fallback=lambda: None, retries=0,
                                  max_tokens=self.config.plan_max_tokens, temperature=0.0)
            branches = schema.get("anyOf", [schema])
            offered = sorted({r for b in branches for r in b["properties"]["relation"]["enum"]},
                             key=list(RELATIONS).index)
            if not ok or value is None:
                step.note("the planner's reply is not a plan")
                step.outputs = {"parsed": False, "relations_offered": offered}
                return None
            try:
                plan = read_plan(value, query.text)
            except ValueError as exc:
                step.note(f"the planner's reply is not a plan: {exc}")
                step.outputs = {"parsed": False, "relations_offered": offered}
                return None
            for n in plan.notes:
                step.note(n)
            step.outputs = {"parsed": True, "plan": plan.to_dict(), "reads": plan.describe(),
                            "relations_offered": offered, "model_reply": value}
            return plan

    # ------------------------------------------------------------------ run
    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        album = self.album(query)
        cfg = self.config
        calls = 1
        plan = self.plan(query, trace)
        unparsed = plan is None
        if plan is None:  # unusable reply: the search's own words are the target, no relation
            trace.count("album.plan_unparsed")
            plan = Plan(" ".join(query.text.split()), notes=["no plan: the whole search is the target"])
        done = execute(plan, album, cfg, trace)
        if done.fallback and self.config.check and plan.anchored:
            calls += 1
            second = self.plan(query, trace, failed=(plan, done.reason))
            if second is not None:
                retry = execute(second, album, cfg, trace)
                if not retry.fallback:
                    plan, done = second, retry
                    trace.count("album.check_replanned")
        if done.fallback:
            trace.count("album.target_search")
        no_people = [n for n in done.notes if n.startswith(f"person {plan.person!r} not applied")]
        if plan.person and no_people:
            trace.count("album.person_unavailable")
        with trace.step("answer", plan=plan.describe()) as step:
            step.outputs = {"answer_set": list(done.answer), "anchor": done.anchor, "kept": len(done.kept),
                            "filters": done.notes, "fallback": done.fallback}
            if done.fallback:
                step.note(f"fallback {done.fallback}: {done.reason}")
            for n in done.notes:
                step.note(n)
        source, reason = Source.METHOD, ""
        if unparsed:
            source, reason = Source.fallback("plan_unparsed"), "the planner's reply was not a plan: the whole search "\
                "was searched as the target"
        elif done.fallback:
            source, reason = Source.fallback(done.fallback), done.reason
        elif plan.person and no_people:
            source, reason = Source.fallback("without_person"), no_people[0]
        return Result(ranking=self.ranking(done, top_k), trace=trace, answer_set=list(done.answer), source=source,
                      source_reason=reason, answer_origin="code", code_selected_share=1.0,
                      counts=self.counts(plan, done, calls))

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
    def counts(plan: Plan, done: Execution, calls: int) -> dict[str, int]:
        """Behaviour counts of one search (summed by an evaluation)."""
        key = plan.relation.replace(" ", "_")
        return {"planner_calls": calls, f"plan_relation.{key}": 1, "plan_anchored": int(plan.anchored),
                "plan_notes": len(plan.notes), "anchor_candidates": len(done.candidates),
                "anchor_weighed": int(len({c.photo for c in done.candidates if c.kept}) > 1),
                "anchor_in_answer": int(done.anchor is not None and done.anchor in done.answer),
                "answer_size": len(done.answer)}


def _plan_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict())


__all__ = ["AlbumConfig", "AlbumSearch"]
