"""OSCAR: optimisation-steered agentic planning for composed image retrieval (shared/papers/oscar.txt).

Offline (``imagent oscar build-library``, :mod:`imagent.methods.oscar.library`): atomic retrievals and the two
exact MIPs turn training queries into a golden library of optimal trajectories. Online (this method), per query:

1. ``demonstrations``: the ``shots`` library entries whose problem context (modification + reference caption,
   text embedder) is most similar by cosine (Sec. 3.5; ``demonstrations=false`` is the w/o Demo. ablation).
2. ``plan``: one planner call (role ``planner``) with the tools, set-operation rules, static examples and the
   retrieved cases (Appendix I); its ``<tool_call>`` blocks (or native tool calls) are read into retrieval
   calls and a ``set_operation``; malformed plans are retried, then fall back (see :mod:`.planner`).
3. ``retrieve``: each used call runs its tool for its query at its ``top_k`` (capped at ``k_max``); all calls
   and the fused similarity's queries are scored by one scan per stored matrix (:meth:`Retrievers.scan`).
4. ``set_operations``: the named steps, with every operand's size and the result's (how many DIFFERENCE
   removed, the paper's Table 9).
5. ``verify``: the verifier role scores each candidate of the composed set (reference, candidate, modification;
   text surrogates in caption mode) with sigmoid(logit_yes - logit_no) (Appendix F), concurrently
   (``concurrency``, else what the verifier's backend takes at once), at most ``max_verified`` candidates
   (those first in fused-similarity order).
6. ``rank`` (decision 3): the composed set by verifier score, then the rest of the pool in fused-similarity
   order (the mean, over the plan's positive calls, of each call's cosine in its tool's space), so Recall@50
   stays defined. Stages ``fused`` (similarity only), ``composed`` (composed set first, no verifier) and the
   final ranking are all returned, so a report shows what the plan and the verifier each changed.

Model calls per query: 1 planner call (+ at most ``plan_retries``) + min(|composed set|, ``max_verified``)
verifier calls; offline, 1 rewriter call per training query. A backend without token logprobs gives the
verifier's parsed yes/no (1/0, 0.5 when neither) instead of a probability; the trace counts it.

Deviations: the paper's planner sees the reference image; here it gets the reference id and caption as text
(a vision planner still receives the same prompt). The verifier score without logprobs is the fallback above.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imagent.core.concurrency import map_threads
from imagent.core.trace import Trace, note
from imagent.core.types import Query, Ranking, Result
from imagent.index.scoring import top_k as top_k_rows
from imagent.methods.base import Method, keep_best, load_prompt, register_method
from imagent.methods.oscar.atomic import Retrievers, problem_context, reference_caption
from imagent.methods.oscar.config import OscarConfig
from imagent.methods.oscar.library import GoldenLibrary
from imagent.methods.oscar.planner import (
    Execution,
    Plan,
    execute,
    fallback_plan,
    order_set,
    parse_reply,
    render_planner_prompt,
)
from imagent.methods.oscar.protocols import OPS, Protocol, plan_protocol
from imagent.models.base import ImagePart, Message

# Score tiers keep Ranking.scores non-increasing: verified members > unverified members > the rest.
TIER = 10.0


@register_method
class Oscar(Method):
    name = "oscar"
    image_roles = ("verifier",)  # the reference and each candidate
    tasks = frozenset({"cir", "tir"})
    Config = OscarConfig
    description = "golden-library demonstrations steer a planner of retrieval tools and set operations; logit verifier"

    config: OscarConfig

    @classmethod
    def estimate_calls(cls, config: Any, query: Query | None = None) -> int:
        return 1 + (config.max_verified if config.verify else 0)

    def __init__(self, ctx: Any, config: Any = None) -> None:
        super().__init__(ctx, config)
        self.library = GoldenLibrary(self.config.library_path())

    # ------------------------------------------------------------------ the pipeline
    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        cfg = self.config
        caption = reference_caption(self.ctx, query)
        retrievers = Retrievers(self.ctx, cfg.retrievers, query)
        counts: dict[str, int] = {"plans": 1, "plan_retries": 0, "plan_fallbacks": 0,
                                  "self_demonstrations_excluded": 0, "demonstration_tools_mapped": 0}
        protocol = self.protocol()
        cases = self._demonstrations(query, caption, retrievers, trace, counts, protocol)
        plan = self._plan(query, caption, retrievers, cases, trace, counts, protocol)
        used = [c for c in plan.calls if c.used]
        # Decision 3's fused similarity averages the plan's distinct positive calls (the composed query when none).
        fusing = list(dict.fromkeys((c.tool, c.query) for c in used if c.polarity == "+")) or [
            (retrievers.names()[0], f"{caption} {query.text}".strip())]
        with trace.step("retrieve", calls=len(plan.calls)) as step:
            scores = retrievers.scan([(c.tool, c.query, c.polarity) for c in used]
                                     + [(tool, text, "+") for tool, text in fusing])
            results: dict[int, list[str]] = {}
            rows = []
            for c, row in zip(used, scores, strict=False):
                ids = retrievers.top_ids(row, c.top_k)
                results[c.index] = ids
                rows.append({**c.to_dict(), "returned": len(ids), "top": ids[:5]})
            step.outputs["calls"] = rows
        with trace.step("set_operations", ablation=cfg.set_operations) as step:
            run = execute(plan, results, cfg)
            step.outputs["steps"] = run.step_log
            removed = sum(e.get("removed", 0) for e in run.step_log)
            step.outputs.update(composed=len(run.composed), removed_by_difference=removed)
        for op in OPS:  # the operations the planner itself planned (a fallback plans none)
            counts[f"set_operations.{op}"] = (sum(s.op == op for s in plan.steps) if plan.source == "method" else 0)
        counts["difference_removed"] = removed
        with trace.step("fuse", calls=len(fusing)) as step:
            fused = self._fused(scores[len(used):].mean(axis=0), run.composed, top_k)
            step.outputs["top"] = fused.head(5)
        members = order_set(run.composed, fused)
        composed_first = rank(members, {}, fused)
        keep_best(composed_first)  # what the search returns if the call cap stops the verifier
        scores = self._verify(query, members, trace) if cfg.verify else {}
        counts["verified"] = len(scores)
        with trace.step("rank") as step:
            final = rank(members, scores, fused)
            step.outputs.update(composed=len(members), verified=len(scores), top=final.head(10),
                                report_line=summary_line(plan, run, members, scores, final), source=plan.source,
                                counts=dict(counts))
        for key, n in counts.items():
            if n:
                trace.count(key, n)
        return Result(ranking=final.top(top_k), trace=trace,
                      stages={"fused": fused.top(top_k), "composed": composed_first.top(top_k)},
                      answer_set=[i for i in final.ids if i in run.composed], source=plan.source, counts=counts)

    def preflight(self, query: Query | None = None) -> list[str]:
        self._check_library()
        return []

    def _check_library(self) -> None:
        """``demonstrations=true`` needs a library with entries: never a silent w/o Demo. ablation."""
        if not self.config.demonstrations:
            return
        path = self.library.path
        if not self.library.exists() or not self.library.entries():
            what = "no golden library" if not self.library.exists() else "an empty golden library"
            raise FileNotFoundError(
                f"OSCAR: {what} at {path}. Build one with `imagent oscar build-library <benchmark> --split train "
                f"--library {path}` (or set methods.oscar.library), or run the w/o Demo. ablation with "
                "`--set demonstrations=false`")

    def _demonstrations(self, query: Query, caption: str, retrievers: Retrievers, trace: Trace,
                        counts: dict[str, int], protocol: Protocol = "text") -> list[str]:
        cfg = self.config
        with trace.step("demonstrations", shots=cfg.shots, enabled=cfg.demonstrations) as step:
            if not cfg.demonstrations:
                step.note("demonstrations off (the w/o Demo. ablation)")
                return []
            self._check_library()
            context = problem_context(query.text, caption)
            # Never a self-demonstration (decision 7): the query's own entry (its key, or the same id with the
            # same modification text) and any entry with the same problem context are excluded.
            own = self_entries(self.library.entries(), query, context)
            task = "tir" if query.reference is None else "cir"
            if task not in self.library.tasks():  # e.g. a text query with a library of composed queries
                step.note(f"the library has no {task} entries: its nearest cases of another task are shown")
                task = None
            found = self.library.nearest(context, self.ctx.text, cfg.shots, exclude=own, task=task)
            if own:
                counts["self_demonstrations_excluded"] = 1
                step.note(f"excluded {len(own)} library entr{'y' if len(own) == 1 else 'ies'} built from this "
                          f"query or its problem context: {', '.join(sorted(own)[:3])}")
            offered = {n: cfg.retrievers[n] for n in retrievers.names()}
            cases = []
            rows = []
            for n, (e, sim) in enumerate(found, 1):
                mapping = {a: b for a, b in e.tool_map(offered).items() if a != b}
                counts["demonstration_tools_mapped"] += sum(c["name"] in mapping for c in e.calls)
                rows.append({"key": e.key, "similarity": round(sim, 4), "modification": e.modification,
                             "calls": len(e.calls), "steps": [s["op"] for s in e.steps], "optimal": e.optimal,
                             **({"tools_mapped": mapping} if mapping else {})})
                cases.append(f"Case {n} (similarity {sim:.2f})\n{e.demonstration(offered, protocol)}")
            step.outputs["cases"] = rows
            step.outputs["excluded"] = sorted(own)
            return cases

    def protocol(self) -> Protocol:
        """Which protocol the planner speaks (``tool_protocol``; auto: the JSON grammar on llama.cpp, in-process or
        a server asked for ``json_object`` output; native tool calls where the backend has them; else text)."""
        cfg = self.config
        if cfg.tool_protocol != "auto":
            return cfg.tool_protocol
        model = self.ctx.roles["planner"].model
        if getattr(model, "backend", "") == "llama.cpp" or getattr(model, "json_mode", "") == "json_object":
            return "json"
        return "native" if getattr(model, "supports_tools", False) else "text"

    def _plan(self, query: Query, caption: str, retrievers: Retrievers, cases: list[str], trace: Trace,
              counts: dict[str, int], protocol: Protocol) -> Plan:
        cfg = self.config
        tools = {n: cfg.retrievers[n] for n in retrievers.names()}
        ref_id = query.reference.id if query.reference is not None else None
        prompt = render_planner_prompt(cfg, tools, cases, query.text, ref_id, caption, protocol)
        role = self.ctx.roles["planner"]
        params = plan_protocol(protocol, cfg, tools).params()  # the runtime's protocol: tools or the plan grammar
        params.repeat_penalty = 1.1
        retry = {"json": "Reply with the whole JSON plan again.",
                 "native": "Call the tools again, set_operation last.",
                 "text": "Write all the tool calls again as <tool_call> blocks, ending with one set_operation."}
        with trace.step("plan", protocol=protocol, cases=len(cases)) as step:
            messages = [Message.user(prompt)]
            attempts: list[dict[str, Any]] = []
            best: Plan | None = None
            for attempt in range(cfg.plan_retries + 1):
                resp = role.chat(messages, params)
                plan = parse_reply(resp.text, resp.tool_calls, tools, cfg, protocol)
                attempts.append({"reply": resp.text[:2000], "native_calls": len(resp.tool_calls), **plan.to_dict()})
                if plan.ok:
                    best = plan
                    break
                if best is None or len(plan.calls) > len(best.calls):
                    best = plan
                if attempt < cfg.plan_retries:
                    counts["plan_retries"] += 1
                    messages = [*messages, Message.assistant(resp.text, resp.tool_calls or None),
                                Message.user("Your plan cannot be run: " + "; ".join(plan.errors) + ". "
                                             + retry[protocol])]
            assert best is not None
            if not best.ok:
                counts["plan_fallbacks"] += 1
                best = fallback_plan(best, tools, cfg, f"{caption} {query.text}".strip())
                step.note(best.notes[-1])
            step.outputs.update(attempts=attempts, plan=best.to_dict(), source=best.source)
            for n in best.notes:
                note(n)
        return best

    def _fused(self, fused: np.ndarray, members: set[str], top_k: int) -> Ranking:
        """The head of the fused-similarity ranking that the final ranking can use: every member of the
        composed set and the ``top_k`` best other pool images, in fused order (ties: gallery order). The rest
        of the pool would follow them, so the final ranking's first ``top_k`` are those of the full ranking,
        without sorting or listing the whole pool (``fused`` is one score per gallery row, -inf outside it)."""
        gallery = self.ctx.gallery
        member_rows = gallery.rows(members)
        head = top_k_rows(fused, top_k + len(member_rows))
        picked = np.union1d(head, member_rows)
        picked = picked[np.isfinite(fused[picked])]
        picked = picked[np.lexsort((picked, -fused[picked]))]
        ids = gallery.ids
        return Ranking([ids[int(r)] for r in picked], fused[picked].astype(np.float64).tolist())

    def _verify(self, query: Query, members: list[str], trace: Trace) -> dict[str, float]:
        cfg = self.config
        todo = members[: cfg.max_verified]
        with trace.step("verify", candidates=len(members), verified=len(todo)) as step:
            if len(members) > len(todo):
                step.note(f"{len(members) - len(todo)} composed candidates beyond max_verified={cfg.max_verified} "
                          "are not verified (they follow the verified ones in fused-similarity order)")
            verifier = self.ctx.roles["verifier"]
            tir = query.reference is None  # Sec. 4.5: does the candidate show what the text describes
            prompt = load_prompt("oscar/verifier_tir.txt" if tir else "oscar/verifier.txt").replace("${query}",
                                                                                                   query.text)
            ref = query.reference
            if ref is not None and not ref.captions and ref.id in self.ctx.gallery:
                ref = self.ctx.gallery.record(ref.id)

            # The shared part (instruction, query, reference) comes first and the candidate last, so a backend
            # with a prompt cache (in-process llama.cpp keeps the previous prompt's KV for a common prefix, as do
            # vLLM and llama.cpp server) evaluates only each candidate's tokens.
            shared: list[str | ImagePart] = [prompt, "\n"]
            if ref is not None:
                shared += ["Reference image:", ImagePart(record=ref), "\n"]

            def score(image_id: str) -> tuple[float, str]:
                parts = [*shared, "Candidate image:", ImagePart(record=self.ctx.gallery.record(image_id)),
                         "\nAnswer (yes or no):"]
                yn = verifier.yes_no([Message.user(*parts)], max_tokens=1)
                if yn.probability is not None:
                    return yn.probability, "logprob"
                return (1.0 if yn.answer else 0.0) if yn.answer is not None else 0.5, "parsed"

            out = map_threads(score, todo, self.fanout("verifier"))
            parsed = sum(1 for _, how in out if how == "parsed")
            if parsed:
                trace.count("verifier_without_logprobs", parsed)
                step.note(f"{parsed} verifier replies had no yes/no logprobs: scored 1/0 from the answer "
                          "(0.5 if neither)")
            step.outputs["scores"] = [{"id": i, "score": round(s, 4)} for i, (s, _) in zip(todo, out, strict=True)]
            return {i: s for i, (s, _) in zip(todo, out, strict=True)}


def self_entries(entries: list[Any], query: Query, context: str) -> set[str]:
    """The keys of library entries built from ``query`` itself: its own key (``query.extra["library_key"]``,
    or a key ``<benchmark>/<split>/<query id>`` whose entry has the same modification text) or the same
    problem context (modification + reference caption, whitespace and case ignored)."""
    def norm(text: str) -> str:
        return " ".join(text.split()).lower()

    own_key = str(query.extra.get("library_key", "")) if query.extra else ""
    ctx_norm, text_norm = norm(context), norm(query.text)
    out = set()
    for e in entries:
        same_key = e.key == own_key or (bool(query.id) and e.key.rsplit("/", 1)[-1] == str(query.id)
                                        and norm(e.modification) == text_norm)
        if same_key or norm(e.context) == ctx_norm:
            out.add(e.key)
    return out


def summary_line(plan: Plan, run: Execution, members: list[str], scores: dict[str, float], final: Ranking) -> str:
    """One line for the eval report: the calls, each set operation's size, what the verifier moved to the top."""
    calls = ", ".join(f"#{c.index} {c.tool}({c.query[:40]!r})@{c.top_k}{c.polarity}" for c in plan.calls if c.used)
    ops = ", ".join(f"{e['name']}={e['op']}{e['operands']}->{e['size']}"
                    + (f" (removed {e['removed']})" if e.get("removed") else "") for e in run.step_log)
    line = f"calls: {calls} | sets: {ops}"
    if any("fallback" in n for n in plan.notes):
        line = "fallback plan; " + line
    if scores and final.ids:
        top = final.ids[0]
        line += f" | verified {len(scores)}: top-1 {top} (p={scores.get(top, 0):.2f}, was #{members.index(top) + 1})"
    return line


def rank(members: list[str], scores: dict[str, float], fused: Ranking) -> Ranking:
    """Decision 3: verified members by score (ties: fused order), then unverified members, then the rest of
    the pool, both in fused order. Scores: 2*TIER + p, TIER + fused, fused (non-increasing)."""
    fused_score = dict(zip(fused.ids, fused.scores, strict=True))
    # sorted() is stable and members come in fused order, so ties keep fused order
    verified = sorted((i for i in members if i in scores), key=lambda i: -scores[i])
    rest_members = [i for i in members if i not in scores]
    in_set = set(members)
    others = [i for i in fused.ids if i not in in_set]
    ids = verified + rest_members + others
    values = ([2 * TIER + scores[i] for i in verified] + [TIER + fused_score.get(i, 0.0) for i in rest_members]
              + [fused_score[i] for i in others])
    return Ranking(ids, values)


__all__ = ["Oscar", "rank", "self_entries", "summary_line"]
