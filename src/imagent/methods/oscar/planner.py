"""OSCAR's planner: the prompt (Appendix I), reading its tool calls, and executing the plan with set operations.

**Prompt** (``prompts/oscar/planner.txt``, the paper's structure in our words): the retrieval tools, the
set-operation rules, the planning strategy (DIFFERENCE only for things that are completely absent; negative
queries name only the absent thing), two static format examples (``examples.json``, written in the protocol's
own form), the retrieved golden cases, then the task (modification query, reference image id and caption; for
text-to-image search, Sec. 4.5, the description alone). Ablations change what the planner is offered:
``no_difference`` and ``union_only`` drop those operations from the tools, rules and examples.

**Protocols** (:mod:`.protocols`, on the agents runtime's protocol classes): ``json``: the whole plan is one
JSON object ``{"thought", "calls": [{"tool", "query", "top_k"}], "steps": [{"name", "op", "operands"}]}``
decoded under :func:`~.protocols.plan_schema`, a grammar built from the offered tools, the ablation's
operations and the operand references valid at each step (llama.cpp in-process and server); ``native``: the
tools as OpenAI functions; ``text``: the paper's ``<tool_call>`` blocks. Each reply becomes the same
:class:`~imagent.agents.ToolCall` list, read by one :func:`read_plan`, so a plan parses the same from all
three; the trace's ``plan`` step names the protocol.

**Reading the plan**: retrieval calls are numbered in order from 0; the ``set_operation`` call (the last one
counts) holds named steps ``{"name", "op": UNION | INTERSECT | DIFFERENCE, "operands": [call numbers or
earlier step names]}``. UNION keeps images in any operand, INTERSECT those in all, DIFFERENCE those in the
first and in none of the others. The result is the step named ``final``, else the last step. A call's
polarity follows from where it feeds the result (a subtracted operand of a DIFFERENCE is negative); a call
that feeds nothing is not run. Calls beyond ``max_calls_per_plan`` are cut, and operands naming them are
dropped (the rest of the plan runs).

**Malformed plans**: a reply with no readable retrieval call, an unknown tool, or (with two or more calls)
no usable ``set_operation`` is asked again with the problem stated (``plan_retries``). After that, decision 7:
polarity is unknown, so the calls are never unioned (a call meant to exclude would be added); the plan's
first call whose polarity the reply states as positive runs alone (``fallback:first_positive_call``), else
the composed query (reference caption + modification) runs on the plan's tools, or on every tool when no call
is usable (``fallback:composed_query``). The plan's ``source`` says which; every fallback is counted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from string import Template
from typing import Any

from imagent.agents import ToolCall, format_tool_call, parse_tool_calls
from imagent.agents.wire import TOOL_CALL_OPEN
from imagent.core.types import Ranking
from imagent.methods.base import load_prompt
from imagent.methods.oscar.config import OscarConfig, RetrieverSpec
from imagent.methods.oscar.protocols import (
    OPS,
    SET_OPERATION,
    Protocol,
    allowed_ops,
    grammar_max_calls,
    json_plan_calls,
    native_tools,
    plan_protocol,
    plan_schema,
)
from imagent.models.base import ChatResponse

_OP_ALIASES = {"union": "UNION", "or": "UNION", "intersect": "INTERSECT", "intersection": "INTERSECT",
               "and": "INTERSECT", "difference": "DIFFERENCE", "diff": "DIFFERENCE", "minus": "DIFFERENCE",
               "except": "DIFFERENCE", "subtract": "DIFFERENCE"}


# --------------------------------------------------------------------------- the prompt

_RULES = {
    "INTERSECT": "- INTERSECT (AND): images in ALL operands. Use when results must meet several criteria.",
    "UNION": "- UNION (OR): images in ANY operand. Use for the widest coverage.",
    "DIFFERENCE": "- DIFFERENCE (A - B): images in the first operand and NOT in the others. Use to exclude an "
                  "unwanted feature.",
}




def _examples() -> list[dict[str, Any]]:
    return json.loads(load_prompt("oscar/examples.json"))


def plan_document(calls: list[dict[str, Any]], steps: list[dict[str, Any]], thought: str = "") -> dict[str, Any]:
    """A plan as the JSON protocol's reply: ``{"thought", "calls": [{"tool", "query", "top_k"}], "steps"}``."""
    return {"thought": thought, "calls": [{"tool": c["tool"], "query": c["query"], "top_k": c["top_k"]} for c in calls],
            "steps": steps}


def write_plan(calls: list[dict[str, Any]], steps: list[dict[str, Any]], protocol: Protocol, thought: str = "") -> str:
    """A plan written the way ``protocol`` expects the planner to write it (examples and demonstrations use it,
    so a small model sees the exact form it must produce): one JSON object, or ``<tool_call>`` blocks (what a
    native tool call is replayed as)."""
    if protocol == "json":
        return json.dumps(plan_document(calls, steps, thought), ensure_ascii=False)
    lines = [f"Analysis: {thought}"] if thought else []
    lines += [format_tool_call(c["tool"], {"query": c["query"], "top_k": c["top_k"]}) for c in calls]
    if len(calls) > 1 or len(steps) > 1:
        lines.append(format_tool_call(SET_OPERATION, {"steps": steps}))
    return "\n".join(lines)


def _format_section(protocol: Protocol) -> tuple[str, str]:
    """(how to write the plan, the closing instruction) for ``protocol``."""
    if protocol == "json":
        return ('Reply with ONE JSON object: {"thought": "<your analysis>", "calls": [{"tool": "<tool>", "query": '
                '"<search text>", "top_k": <k>}, ...], "steps": [{"name": "<step name>", "op": "<operation>", '
                '"operands": [<call numbers or earlier step names>]}, ...]}. The step named "final" is the result.',
                "Reply with the JSON plan.")
    if protocol == "native":
        return ("Call the retrieval tools, then set_operation with the steps.",
                "Call the tools that retrieve the target images, set_operation last.")
    return ('Write each call as a <tool_call> block holding one JSON object: {"name": ..., "arguments": {...}}.',
            "Write the tool calls that retrieve the target images, each inside <tool_call></tool_call> tags, the "
            "set_operation last.")


def render_planner_prompt(cfg: OscarConfig, tools: dict[str, RetrieverSpec], cases: list[str], modification: str,
                          ref_img: str | None, ref_caption: str, protocol: Protocol = "text") -> str:
    """The planner's prompt (Appendix I's structure) for a composed query, or, with ``ref_img=None``, for a
    text-to-image query (Sec. 4.5: no reference; ``modification`` is the description of the target)."""
    ops = allowed_ops(cfg)
    tir = ref_img is None
    tool_lines = [f"- {name}(query, top_k): {spec.kind} search; {spec.description or spec.space}"
                  for name, spec in tools.items()]
    names = list(tools)
    letters = {"a": names[0], "b": names[1 % len(names)]}
    examples = []
    for n, ex in enumerate(_examples(), 1):
        if ex.get("needs") and ex["needs"] not in ops:
            continue
        calls = [{**c, "tool": letters[c["tool"]]} for c in ex["calls"]]
        head = [f"Example {n} - {ex['title']}"]
        if tir:
            head.append(f"Query: {ex['tir']['query']}")
        else:
            head += [f"Modification query: {ex['cir']['query']}", f"Reference image: example_{n}",
                     f"Reference image caption: {ex['cir']['reference_caption']}"]
        thought = ex["tir_analysis"] if tir else ex["analysis"]
        examples.append("\n".join(head) + "\n" + write_plan(calls, ex["steps"], protocol, thought))
    if "DIFFERENCE" in ops:
        difference_advice = (
            "- Use DIFFERENCE only when something is COMPLETELY ABSENT from the target (\"without X\", \"has no X\").\n"
            "- Do not use DIFFERENCE when a thing is still there but changed (fewer, another colour, greyscale).")
        negative_advice = ("- Negative calls search ONLY for the absent thing. Never include the shared concept "
                           "(if the shared concept is a cake, the negative query is \"toppings\", not \"cake with "
                           "toppings\").")
        composition = ("- UNION all positive calls into \"positive\"; INTERSECT all negative calls into "
                       "\"negative\"; DIFFERENCE(positive, negative) into \"final\". Without negative calls, "
                       "\"final\" is the UNION of the positive calls.")
    else:
        difference_advice = "- Describe the target as it should look; every call searches for what it shows."
        negative_advice = "- There are no negative calls: exclusion is not available."
        composition = ("- Combine the calls into \"final\" with " + " or ".join(ops) + ".")
    block = ""
    if cases:
        block = ("\nRETRIEVED SIMILAR CASES\nThe cases below are similar queries with their optimal plans, found "
                 "offline. Learn from them how to rewrite the query, which tools to use and combine, and which "
                 "top_k values to choose.\n\n" + "\n\n".join(cases) + "\n")
    fmt, final_instruction = _format_section(protocol)
    if tir:
        task_name = "text-to-image retrieval in a photo collection"
        task_description = "the user describes the images they want. Find the target images: those that match it."
        analysis_step = "work out what the target must show and what must be absent from it."
        positive_what = "what the target shows"
        task = f"Query: {modification}"
    else:
        task_name = "Composed Image Retrieval (CIR)"
        task_description = ("the user gives a reference image and a modification query. Find the target images: the "
                            "reference image changed as the query says.")
        analysis_step = "work out what stays (the shared concept) and what changes (additions, removals, changed " \
                        "attributes)."
        positive_what = "the shared concept together with the additions and changes"
        task = (f"Modification query: {modification}\nReference image: {ref_img}\n"
                f"Reference image caption: {ref_caption or '(none)'}")
    return Template(load_prompt("oscar/planner.txt")).substitute(
        task_name=task_name, task_description=task_description, analysis_step=analysis_step,
        positive_what=positive_what, tools="\n".join(tool_lines), ops=", ".join(ops),
        rules="\n".join(_RULES[o] for o in ops), difference_advice=difference_advice, negative_advice=negative_advice,
        composition=composition, format=fmt, examples="\n\n".join(examples), cases=block, task=task,
        final_instruction=final_instruction)


# --------------------------------------------------------------------------- reading a plan


@dataclass
class PlanCall:
    tool: str
    query: str
    top_k: int
    polarity: str = "+"  # "+" or "-": from the set operations (or an explicit argument)
    explicit_polarity: str | None = None
    used: bool = True
    index: int = 0  # the call's number in the reply (what set_operation operands name)

    def to_dict(self) -> dict[str, Any]:
        return {"call": self.index, "tool": self.tool, "query": self.query, "top_k": self.top_k,
                "polarity": self.polarity, "used": self.used}


@dataclass
class Step:
    name: str
    op: str
    operands: list[int | str]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "operands": list(self.operands)}


@dataclass
class Plan:
    calls: list[PlanCall] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # what makes it unexecutable as written
    notes: list[str] = field(default_factory=list)  # what was repaired or ignored
    positions: int = 0  # retrieval calls in the reply, unusable ones included
    cut: set[int] = field(default_factory=set)  # calls beyond max_calls_per_plan (not run; operands dropped)
    source: str = "method"  # "method": the planner's own plan; "fallback:<name>": decision 7's fallback
    protocol: str = ""  # which protocol the reply came through: json, native or text

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.calls)

    def to_dict(self) -> dict[str, Any]:
        return {"calls": [c.to_dict() for c in self.calls], "steps": [s.to_dict() for s in self.steps],
                "errors": list(self.errors), "notes": list(self.notes), "source": self.source}


def _top_k(value: Any, k_max: int) -> int | None:
    try:
        k = int(value)
    except (TypeError, ValueError):
        return None
    return max(1, min(k, k_max))


def _operand(value: Any) -> int | str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        v = value.strip()
        if v.lstrip("-").isdigit():
            return int(v)
        return v or None
    return None


def read_plan(calls: list[ToolCall], tools: dict[str, RetrieverSpec], cfg: OscarConfig) -> Plan:
    """A :class:`Plan` from parsed tool calls: retrieval calls in order, the last ``set_operation``'s steps,
    every problem recorded (``errors`` make it unexecutable as written; ``notes`` were repaired)."""
    plan = Plan()
    set_ops: list[ToolCall] = []
    position = -1  # retrieval calls are numbered in reply order, unusable ones included
    for c in calls:
        if c.name == SET_OPERATION and not c.error:
            set_ops.append(c)
            continue
        position += 1
        if c.error:
            plan.errors.append(f"unreadable tool call: {c.error}")
            continue
        if c.name not in tools:
            plan.errors.append(f"unknown tool {c.name!r} (tools: {', '.join(tools)})")
            continue
        query = c.arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            plan.errors.append(f"a {c.name} call has no query")
            continue
        k = _top_k(c.arguments.get("top_k", cfg.fallback_top_k), cfg.k_max)
        if k is None:
            plan.errors.append(f"a {c.name} call has a top_k that is not a number")
            continue
        pol = str(c.arguments.get("polarity", "")).strip()
        explicit = {"+": "+", "positive": "+", "-": "-", "negative": "-"}.get(pol.lower())
        plan.calls.append(PlanCall(c.name, " ".join(query.split()), k, explicit or "+", explicit, index=position))
    plan.positions = position + 1
    if len(plan.calls) > cfg.max_calls_per_plan:
        plan.notes.append(f"{len(plan.calls)} retrieval calls: only the first {cfg.max_calls_per_plan} are run")
        plan.cut = {c.index for c in plan.calls[cfg.max_calls_per_plan:]}
        plan.calls = plan.calls[: cfg.max_calls_per_plan]
    if len(set_ops) > 1:
        plan.notes.append(f"{len(set_ops)} set_operation calls: the last one counts")
    if set_ops:
        _read_steps(plan, set_ops[-1].arguments.get("steps"))
    elif len(plan.calls) > 1:
        plan.errors.append("two or more retrieval calls but no set_operation call")
    elif plan.calls:  # one call needs no set operation
        plan.steps = [Step("final", "UNION", [plan.calls[0].index])]
    if not plan.calls and not plan.errors:
        plan.errors.append("no retrieval call")
    if plan.steps:
        _assign_polarity(plan)
    return plan


def _read_steps(plan: Plan, raw: Any) -> None:
    if not isinstance(raw, list) or not raw:
        plan.errors.append("set_operation has no list of steps")
        return
    names: set[str] = set()
    for n, s in enumerate(raw):
        if not isinstance(s, dict):
            plan.errors.append(f"set_operation step {n} is not an object")
            return
        op = _OP_ALIASES.get(str(s.get("op", "")).strip().lower())
        if op is None:
            plan.errors.append(f"set_operation step {n}: unknown op {s.get('op')!r} (use {', '.join(OPS)})")
            return
        operands = [_operand(o) for o in s.get("operands") or []]
        if not operands or any(o is None for o in operands):
            plan.errors.append(f"set_operation step {n}: operands must be call numbers or step names")
            return
        cut = [o for o in operands if isinstance(o, int) and o in plan.cut]
        if cut:  # calls beyond max_calls_per_plan are not run: their operands go, the plan stays
            plan.notes.append(f"set_operation step {n}: operand(s) {cut} name calls beyond max_calls_per_plan; "
                              "dropped")
            operands = [o for o in operands if o not in cut]
            if not operands:
                plan.notes.append(f"set_operation step {n}: no operand left; it yields an empty set")
        valid = {c.index for c in plan.calls}
        for o in operands:
            if isinstance(o, int) and not 0 <= o < plan.positions:
                plan.errors.append(f"set_operation step {n}: there is no call {o} (calls are 0..{plan.positions - 1})")
                return
            if isinstance(o, int) and o not in valid:
                plan.errors.append(f"set_operation step {n}: call {o} is unusable")
            if isinstance(o, str) and o not in names:
                plan.errors.append(f"set_operation step {n}: {o!r} is not an earlier step")
                return
        name = str(s.get("name") or f"step{n}").strip()
        names.add(name)
        plan.steps.append(Step(name, op, operands))  # type: ignore[arg-type]


def result_step(plan: Plan) -> Step:
    return next((s for s in plan.steps if s.name == "final"), plan.steps[-1])


def _assign_polarity(plan: Plan) -> None:
    """Walk back from the result: operands after the first of a DIFFERENCE flip the sign."""
    by_name = {s.name: s for s in plan.steps}
    signs: dict[int, set[str]] = {}

    def visit(step: Step, sign: str, depth: int = 0) -> None:
        if depth > len(plan.steps):
            return
        for n, o in enumerate(step.operands):
            s = sign if step.op != "DIFFERENCE" or n == 0 else ("-" if sign == "+" else "+")
            if isinstance(o, int):
                signs.setdefault(o, set()).add(s)
            else:
                visit(by_name[o], s, depth + 1)

    visit(result_step(plan), "+")
    for call in plan.calls:
        got = signs.get(call.index)
        call.used = bool(got)
        if got:
            call.polarity = "-" if got == {"-"} else "+"
    unused = [c.index for c in plan.calls if not c.used]
    if unused:
        plan.notes.append(f"call(s) {unused} feed no step of the result: not run")


def parse_reply(text: str, native: list[dict[str, Any]], tools: dict[str, RetrieverSpec], cfg: OscarConfig,
                protocol: Protocol = "text") -> Plan:
    """A plan from one planner reply, read by the runtime protocol the planner spoke (:func:`plan_protocol`):
    the JSON protocol's one plan object, native tool calls (whatever the protocol, when the backend returned
    any), else ``<tool_call>`` blocks, else every bare JSON call in the text (small models often drop the tags
    and write one call per line). All become the same tool calls, read by one :func:`read_plan`."""
    reply = plan_protocol(protocol, cfg, tools).read(ChatResponse(text=text or "", tool_calls=list(native)))
    if reply.path in ("json", "native"):
        plan = read_plan(reply.calls, tools, cfg)
        plan.protocol = reply.path
        return plan
    names = [*tools, SET_OPERATION]
    calls = reply.calls
    named = len(re.findall(r'"name"\s*:\s*"(?:' + "|".join(map(re.escape, names)) + ')"', text or ""))
    if TOOL_CALL_OPEN not in (text or "") and named > len(calls):
        calls = max(calls, _bare_calls(text, names), key=len)
    plan = read_plan(calls, tools, cfg)
    plan.protocol = "text"
    if TOOL_CALL_OPEN not in (text or "") and named > len(calls):
        # Bare JSON that could not all be read as calls: the plan would be cut short.
        plan.errors.append("write every call inside <tool_call></tool_call> tags (only "
                           f"{len(calls)} untagged call(s) could be read)")
    return plan


def _bare_calls(text: str, names: list[str]) -> list[ToolCall]:
    """Every top-level JSON object in ``text`` that is a call of one of ``names``, in order (each read as
    :func:`parse_tool_calls` reads one untagged call, with its aliases); text between them is ignored."""
    decoder = json.JSONDecoder()
    out: list[ToolCall] = []
    i = text.find("{")
    while i >= 0:
        try:
            _value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found = parse_tool_calls(text[i:end], names)
        if len(found) == 1 and found[0].error is None:
            out.append(ToolCall(found[0].name, found[0].arguments, id=f"call_{len(out)}", raw=text[i:end]))
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return out


FALLBACK_FIRST_POSITIVE = "fallback:first_positive_call"
FALLBACK_COMPOSED = "fallback:composed_query"


def fallback_plan(plan: Plan | None, tools: dict[str, RetrieverSpec], cfg: OscarConfig, composed_query: str) -> Plan:
    """Decision 7: a plan that cannot be run as written has no known polarity, so its calls are never unioned
    (a call meant to exclude would be added). Runs the plan's first call whose polarity the reply states as
    positive (an explicit ``polarity`` argument) when it has one (source ``fallback:first_positive_call``),
    else the composed query (reference caption + modification) on the plan's tools, or on every tool when no
    call names one (source ``fallback:composed_query``)."""
    calls = list(plan.calls) if plan else []
    out = Plan(notes=list(plan.notes) if plan else [], protocol=plan.protocol if plan else "")
    stated = [c for c in calls if c.explicit_polarity == "+"]
    if stated:
        first = stated[0]
        out.calls = [PlanCall(first.tool, first.query, first.top_k, "+", "+", True, 0)]
        out.source = FALLBACK_FIRST_POSITIVE
        out.notes.append(f"fallback: the plan's first call stated as positive (call {first.index}) alone; the "
                         "other calls have no known polarity and are not run")
    else:
        names = list(dict.fromkeys(c.tool for c in calls if c.tool in tools)) or list(tools)
        out.calls = [PlanCall(name, composed_query, min(cfg.fallback_top_k, cfg.k_max), index=n)
                     for n, name in enumerate(names)]
        out.source = FALLBACK_COMPOSED
        where = "the plan's tools" if calls else "every tool (no usable call)"
        out.notes.append(f"fallback: the composed query on {where}")
    out.positions = len(out.calls)
    out.steps = [Step("final", "UNION", [c.index for c in out.calls])]
    return out


# --------------------------------------------------------------------------- executing a plan


@dataclass
class Execution:
    """What running a plan produced: each call's ranked ids, each step's set, the composed set."""

    call_results: dict[int, list[str]]
    step_log: list[dict[str, Any]]
    composed: set[str]


def execute(plan: Plan, results: dict[int, list[str]], cfg: OscarConfig) -> Execution:
    """Apply the plan's set operations to the calls' results (``results[n]`` = call number n's top_k ids;
    a call that was not run counts as empty). Ablations: ``no_difference`` keeps a DIFFERENCE's first operand,
    ``union_only`` is the UNION of every positive call."""
    log: list[dict[str, Any]] = []
    if cfg.set_operations == "union_only":
        used = [c.index for c in plan.calls if c.used and c.polarity == "+"]
        out = set().union(*(set(results.get(n, [])) for n in used)) if used else set()
        log.append({"name": "final", "op": "UNION", "operands": used, "sizes": [len(results.get(n, [])) for n in used],
                    "size": len(out), "note": "union_only ablation: UNION of the positive calls"})
        return Execution(results, log, out)
    sets: dict[str, set[str]] = {}

    def value(o: int | str) -> set[str]:
        return set(results.get(o, [])) if isinstance(o, int) else sets[o]

    for step in plan.steps:
        operands = [value(o) for o in step.operands]
        entry: dict[str, Any] = {"name": step.name, "op": step.op, "operands": list(step.operands),
                                 "sizes": [len(s) for s in operands]}
        if not operands:  # every operand named a cut call
            out = set()
        elif step.op == "UNION":
            out = set().union(*operands)
        elif step.op == "INTERSECT":
            out = set.intersection(*operands)
        elif cfg.set_operations == "no_difference":
            out = set(operands[0])
            entry["note"] = "no_difference ablation: the first operand is kept"
        else:
            out = set(operands[0]).difference(*operands[1:])
            entry["removed"] = len(operands[0]) - len(out)
        entry["size"] = len(out)
        sets[step.name] = out
        log.append(entry)
    return Execution(results, log, set(sets[result_step(plan).name]))


def order_set(ids: set[str], fused: Ranking) -> list[str]:
    """The members of ``ids`` in fused-similarity order (ids outside the ranking go last, sorted)."""
    pos = {i: n for n, i in enumerate(fused.ids)}
    return sorted(ids, key=lambda i: (pos.get(i, len(pos)), i))


def plan_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), ensure_ascii=False)


__all__ = [
    "FALLBACK_COMPOSED",
    "FALLBACK_FIRST_POSITIVE",
    "OPS",
    "Execution",
    "Plan",
    "PlanCall",
    "Step",
    "allowed_ops",
    "execute",
    "fallback_plan",
    "grammar_max_calls",
    "json_plan_calls",
    "native_tools",
    "order_set",
    "parse_reply",
    "plan_document",
    "plan_schema",
    "read_plan",
    "render_planner_prompt",
    "result_step",
    "write_plan",
]
