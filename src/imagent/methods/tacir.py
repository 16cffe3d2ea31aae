"""TaCIR: a tool-augmented agent for training-free composed image retrieval (papers/tacir.txt).

One reasoner (the paper's single MLLM) reads the reference image and the manipulation text with a
tool-aware reflective prompt (Sec. 3.2, App. A.2, Fig. 7) and returns the reference description,
thoughts, reflections, a tool decision ``a`` in {search, edit, none} with its instruction ``theta_a``,
and an initial target description ``T_t^(0)`` (Eq. 2). When a tool is chosen it is invoked
cache-first (Eq. 3, Algorithms 2-3) and returns a visual proxy ``I_tool``; a refinement prompt over
the reference, the manipulation text and the "Tool Visual Proxy" (Sec. 3.3, App. A.4, Fig. 8) gives
the final description ``T_t`` (Eq. 4). Retrieval scores every candidate by Eq. 5:

    score(I) = cos(Psi_T(T_t), Psi_I(I)) + 1[proxy] * cos(Psi_I(I_tool), Psi_I(I))

In caption mode (no pixel encoder) ``Psi_I(I_tool)`` is the proxy's title/description encoded like
the gallery's captions, so the proxy still contributes through its words.

Iterations (Algorithm 1). The paper is not consistent about K: Sec. 4.3 calls the default "K = 2 (one
select&invoke followed by one refine)" and also "K = 1"; Algorithm 1 loops ``t <= K`` but returns
right after the first refinement that follows a tool (line 10). Here ``max_iterations`` (K, default 2)
counts reasoner rounds: round 0 is the selection, rounds 1..K-1 are refinements, and a tool may only
be invoked when a refinement round is left to read its result. With ``early_exit`` (the paper's line
10, default on) the loop ends after the first refinement; without it, a refinement may ask for
another tool (Sec. 3.3 "re-iterate the selection and refinement"), up to K rounds. The loop also
ends when a round chooses ``none`` (lines 11) and when a tool fails or its result is rejected: that
falls back to ``none`` (App. A.4), keeping the latest description and the last good proxy.

Ablation switches (all config fields): ``tool_policy`` always_search / always_edit / none (Table 7,
Table 4 model 2) and always_model_picks (Fig. 5 "Always Use Tool": a tool for every query, the model picks
which; a model that declines gets search with its target description); ``enabled_tools`` (models 3-4: w/o
searching / editing); ``refine`` (model 5);
``proxy_weight`` = 0 (model 6, the proxy not used at retrieval); ``fusion = "feature_combination"``
(model 8: one query vector, the normalised sum of the text and proxy vectors, instead of summing the
two cosine scores).

Parsing (App. A.3): the JSON answer is parsed leniently (fences, wrappers, repairs; see
:mod:`imagent.models.json_output`), then the tool call is read from ``<search>``/``<edit>`` tags in
``tool_usage`` or from explicit JSON fields; anything else is ``none``. A tool chosen without an
instruction (a bare "Search", an empty tag) gets the same stand-in as the always_* policies: the
target description as the search query, the manipulation text as the edit instruction. Decisions are
parsed from whole fields: each JSON field is bounded only for constrained decoding (``max_field_chars``,
2000, far above GPT-4-class output; a field stopped at the bound is noted in the trace), each answer by
``max_tokens`` (1536), and a tool instruction is cut only beyond ``MAX_INSTRUCTION_CHARS``, at a word,
with a note.

Start of a search (:meth:`TaCIR.preflight`): with no tool configured the method is the paper's no-tool
ablation, and the CLI, the web trace (step ``checks``) and the eval report say so. Search results that are
images of the searched gallery are skipped (``exclude_gallery_exemplars``, default on): an exemplar
collection holding the gallery would hand back the target itself. GeneCIS queries get their task's
manipulation text from ``prompts/tacir/genecis/<task>.txt`` (focus: keep the named attribute or object;
change: replace it), as the paper does following recent training-free work. In caption mode an edit proxy
is encoded as ``"<source surrogate>, edited: <whole instruction>"``.

Per query the reasoner is called once (selection) plus once per refinement round; by default
``1 + [a tool ran successfully]`` calls (each may be retried ``json_retries`` times on unusable JSON),
and at most ``K - 1`` tool calls (cache hits cost nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from string import Template
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from imagent.core.trace import Trace, TraceStep, note
from imagent.core.types import ImageRecord, Query, Ranking
from imagent.core.vectors import l2_normalize
from imagent.index.gallery import SPACE_IMAGE
from imagent.index.scoring import weighted_sum
from imagent.methods.base import Method, MethodConfig, load_prompt, ranking_from_scores, register_method
from imagent.methods.captions import note_capped
from imagent.models.base import ImagePart, Message
from imagent.tools.base import MAX_TITLE_CHARS, ToolError, ToolImage, input_text, safe_text
from imagent.tools.cached import CachedTool, as_cached

ROLE = "reasoner"
TOOLS = ("search", "edit")
# Longest tool instruction sent to a backend (a search query or an edit script): far above what a model
# writes for one; a longer one is cut at a word boundary and the cut is noted in the trace.
MAX_INSTRUCTION_CHARS = 1000
# Exemplar results looked at to find one outside the evaluated gallery (exclude_gallery_exemplars).
EXEMPLAR_LOOKAHEAD = 10
# GeneCIS tasks with their own instruction template (prompts/tacir/genecis/<task>.txt).
GENECIS_TASKS = ("focus_attribute", "change_attribute", "focus_object", "change_object")


class TaCIRConfig(MethodConfig):
    max_iterations: int = Field(2, ge=1, le=8, description="K: reasoner rounds (selection + up to K-1 refinements)")
    early_exit: bool = Field(True, description="Alg. 1 line 10: stop after the first refinement that follows a tool")
    tool_policy: Literal["auto", "always_search", "always_edit", "always_model_picks", "none"] = Field(
        "auto", description="auto: the model decides; always_search/always_edit: force that tool (Table 7); "
                            "always_model_picks: a tool is always used, the model picks which (Fig. 5); "
                            "none: no tools")
    enabled_tools: list[Literal["search", "edit"]] = Field(
        default_factory=lambda: ["search", "edit"], description="tools offered when configured (ablations 3-4)")
    search_tool: str = Field("search", description="name of the image-search tool in the tools config")
    edit_tool: str = Field("edit", description="name of the image-edit tool in the tools config")
    refine: bool = Field(True, description="refine the description with the proxy (off: ablation 5)")
    proxy_weight: float = Field(1.0, ge=0.0, description="weight of the proxy term in Eq. 5 (the indicator's 1)")
    fusion: Literal["score_sum", "feature_combination"] = Field(
        "score_sum", description="Eq. 5 score sum, or one fused query vector (ablation 8)")
    temperature: float = Field(0.0, ge=0.0, description="decoding temperature (the paper uses 0)")
    max_tokens: int = Field(1536, ge=64, description="cap on each reasoner answer (room for GPT-4-class output)")
    max_field_chars: int = Field(
        2000, ge=100, description="bound on each JSON field of an answer (stops a small model looping in one); "
                                  "a field that reaches it is noted in the trace")
    json_retries: int = Field(2, ge=0, description="extra reasoner calls when the JSON answer is unusable")
    exclude_gallery_exemplars: bool = Field(
        True, description="search: skip results that are images of the searched gallery (same file or content), "
                          "so an exemplar collection that holds the gallery cannot hand back the target itself")
    genecis_templates: bool = Field(
        True, description="GeneCIS queries: the manipulation text from the task's template (focus: keep the "
                          "named attribute/object; change: replace it), prompts/tacir/genecis/<task>.txt")


SELECT_FIELDS = ("original_image_description", "thoughts", "reflections", "tool_usage", "target_image_description")
# The refinement answer adds what the tool's visual proxy showed.
REFINE_FIELDS = ("original_image_description", "tool_evidence_description", "thoughts", "reflections",
                 "tool_usage", "target_image_description")


def answer_schema(fields: tuple[str, ...], max_chars: int = 2000) -> dict[str, Any]:
    """An object of the given string fields, all required, in this order (constrained decoding follows it).
    Every string is bounded because small models loop inside unbounded strings; the bound is generous and
    the tool decision is parsed from the whole field (:func:`parse_tool_decision`)."""
    return {"type": "object",
            "properties": {f: {"type": "string", "maxLength": max_chars} for f in fields},
            "required": list(fields)}


SELECT_SCHEMA = answer_schema(SELECT_FIELDS)
REFINE_SCHEMA = answer_schema(REFINE_FIELDS)


# --------------------------------------------------------------------------- parsing the tool decision

_TAG = re.compile(r"<\s*(search|edit)\s*>(.*?)(?:<\s*/\s*\1\s*>|(?=<\s*/?\s*(?:search|edit)\s*>)|$)", re.I | re.S)
_TOOL_KEYS = ("tool", "tool_name", "action", "tool_choice", "chosen_tool")
_INSTRUCTION_KEYS = ("tool_instruction", "instruction", "query", "search_query", "edit_instruction", "tool_query")


def clean_instruction(text: str) -> str:
    """A tool instruction as sent to a backend: tags stripped, one line, quotes trimmed. One longer than
    ``MAX_INSTRUCTION_CHARS`` is cut at a word boundary, and the cut is noted in the current trace step."""
    text = re.sub(r"<\s*/?\s*(search|edit)\s*>", " ", str(text or ""), flags=re.I)
    text = " ".join(text.split()).strip(" \"'`.;:")
    if len(text) > MAX_INSTRUCTION_CHARS:
        cut = text[: MAX_INSTRUCTION_CHARS + 1].rsplit(" ", 1)[0] or text[:MAX_INSTRUCTION_CHARS]
        note(f"tool instruction of {len(text)} characters cut to {len(cut)} (MAX_INSTRUCTION_CHARS)")
        text = cut
    return text.strip()


_BARE_NAMES = {
    "search": "search", "search api": "search", "search tool": "search", "image search": "search",
    "edit": "edit", "edit tool": "edit", "image edit": "edit", "image editing": "edit",
    "image editing tool": "edit",
}


def parse_tool_decision(answer: dict[str, Any]) -> tuple[str, str]:
    """``(tool, instruction)`` from a reasoner answer; ``("none", "")`` when no tool is chosen.

    Accepted, in order: a ``<search>...</search>`` or ``<edit>...</edit>`` tag in ``tool_usage`` (the
    paper's format; an unclosed tag runs to the end; the first tag wins: one tool per round); then
    explicit JSON fields a model may add (``"tool": "search", "query": "..."``); then a bare tool name
    as the whole ``tool_usage`` ("Search"). A tool chosen without an instruction (an empty tag, a bare
    name, a ``tool`` field alone) comes back as ``(tool, "")``: the method fills the instruction in.
    Anything else, "None" or an unknown tool included, is ``none``."""
    usage = answer.get("tool_usage")
    if isinstance(usage, str):
        m = _TAG.search(usage)
        if m:
            return m.group(1).lower(), clean_instruction(m.group(2))
    for key in _TOOL_KEYS:
        value = answer.get(key)
        if isinstance(value, str) and value.strip().lower() in TOOLS:
            tool = value.strip().lower()
            for ikey in _INSTRUCTION_KEYS:
                instruction = clean_instruction(answer.get(ikey) or "")
                if instruction:
                    return tool, instruction
            return tool, ""
    if isinstance(usage, str):
        bare = " ".join(re.sub(r"[^a-z ]", " ", usage.lower()).split())
        if bare in _BARE_NAMES:
            return _BARE_NAMES[bare], ""
    return "none", ""


@dataclass
class Round:
    """One reasoner round's answer (selection: ``t = 0``; refinement: ``t >= 1``)."""

    t: int
    reference_description: str = ""
    thoughts: str = ""
    reflections: str = ""
    tool_usage: str = ""
    target: str = ""
    evidence: str = ""  # refinement only: the tool evidence description
    tool: str = "none"
    instruction: str = ""
    parsed: bool = True
    raw: dict[str, Any] = field(default_factory=dict)

    def outputs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reference_description": self.reference_description,
            "thoughts": self.thoughts,
            "reflections": self.reflections,
            "tool_usage": self.tool_usage,
            "tool": self.tool,
            "instruction": self.instruction,
        }
        if self.t > 0:
            out["tool_evidence_description"] = self.evidence
        out["target_description"] = self.target
        out["parsed"] = self.parsed
        return out


# --------------------------------------------------------------------------- prompts

_FRAGMENT = re.compile(r"^\[\[([\w.]+)\]\]\s*$", re.M)
_MARK = re.compile(r"\[\[(\w+)\]\]")


def prompt_fragments() -> dict[str, str]:
    """Named pieces of ``tacir/fragments.txt`` (``[[name]]`` header lines)."""
    text = load_prompt("tacir/fragments.txt")
    parts = _FRAGMENT.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def user_parts(template: str, images: dict[str, ImagePart], values: dict[str, str]) -> list[str | ImagePart]:
    """The user message: ``[[name]]`` marks become image parts. Marks are split *before* the values are
    filled in, so text from users or tools can never create an image slot."""
    pieces = _MARK.split(template)
    out: list[str | ImagePart] = []
    for i, piece in enumerate(pieces):
        if i % 2:
            out.append(images[piece])
        elif piece:
            out.append(Template(piece).safe_substitute(values))
    return out


# --------------------------------------------------------------------------- the method


@register_method
class TaCIR(Method):
    name = "tacir"
    image_roles = (ROLE,)  # the reference (and a visual proxy) shown to the reasoner
    tasks = frozenset({"cir"})
    Config = TaCIRConfig
    description = "tool-augmented reflective CoT: optional web-search/edit visual proxy, fused text+proxy score"
    fallback_counters: ClassVar[dict[str, str]] = {"tacir.parse_fallback": "reasoner_output_unusable"}

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        """1 selection call + at most K - 1 refinements (only after a tool ran)."""
        cfg = config if isinstance(config, TaCIRConfig) else TaCIRConfig.model_validate(config)
        return 1 if cfg.tool_policy == "none" else cfg.max_iterations

    def __init__(self, ctx: Any, config: Any = None) -> None:
        super().__init__(ctx, config)
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        # The tools this method may call: configured, enabled, of the right kind; wrapped cache-first.
        self.tools: dict[str, CachedTool] = {}
        for kind, name in (("search", cfg.search_tool), ("edit", cfg.edit_tool)):
            tool = ctx.tools.get(name)
            if tool is None or kind not in cfg.enabled_tools:
                continue
            if getattr(tool, "kind", None) != kind:
                raise ValueError(f"tool {name!r} is a {getattr(tool, 'kind', '?')} tool; TaCIR needs {kind} there")
            self.tools[kind] = as_cached(tool, name)
        self._fragments = prompt_fragments()
        self._gallery_paths: set[str] | None = None

    # ------------------------------------------------------------------ Algorithm 1
    def preflight(self, query: Query | None = None) -> list[str]:
        """Warn when no tool can run: TaCIR would silently become the paper's no-tool ablation."""
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        if cfg.tool_policy == "none" or self._policy_tools():
            return []
        wanted = {"always_search": "search", "always_edit": "edit"}.get(cfg.tool_policy, "search or edit")
        return [f"TaCIR: no {wanted} tool is configured (tools {cfg.search_tool!r}/{cfg.edit_tool!r} under [tools]), "
                "so every query runs as the paper's no-tool ablation (Table 4, row 2), not as TaCIR. Configure a "
                "tool (e.g. the offline exemplar search), or set tacir.tool_policy=none to run that ablation on "
                "purpose"]

    def run(self, query: Query, top_k: int, trace: Trace) -> tuple[Ranking, dict[str, Ranking]]:
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        assert query.reference is not None
        K = cfg.max_iterations
        policy_tools = self._policy_tools()
        query = self._templated(query, trace)

        # Round 0 (Eq. 2): tool-aware reflective selection -> (T_t^(0), a, theta_a).
        offered = policy_tools if K > 1 else {}
        with trace.step("tacir.select", reference=query.reference.id, modification=query.text,
                        tools_offered=sorted(offered)) as step:
            current = self._select(query, offered, trace, step)
            tool, instruction = self._decide(current, offered, policy_forced=True, query=query, trace=trace,
                                             step=step)
            step.outputs.update(current.outputs())
            step.outputs["decision"] = {"tool": tool, "instruction": instruction}
            # The eval report sums counters over queries: how often each tool was chosen.
            trace.count(f"tacir.chose_{tool}")
        initial = current.target
        proxy: ToolImage | None = None
        proxy_instruction, proxy_tool = "", "none"
        proxy_source: ImageRecord | ToolImage = query.reference  # what an edit proxy was made from
        t = 0
        while tool != "none":
            # Eq. 3: invoke exactly one tool, cache-first; a failure falls back to none.
            with trace.step(f"tacir.tool.{tool}", instruction=instruction, round=t) as step:
                source = proxy if (tool == "edit" and proxy is not None) else query.reference  # I_curr
                new_proxy = self._invoke(tool, instruction, source, trace, step)
            if new_proxy is None:
                break
            proxy, proxy_instruction, proxy_tool, proxy_source = new_proxy, instruction, tool, source
            if not cfg.refine:  # ablation 5: keep T_t^(0); the proxy still enters the score
                break
            t += 1
            # Round t (Eq. 4): refine over the reference, the manipulation text and the tool visual proxy.
            more = (not cfg.early_exit) and t + 1 < K
            offered = policy_tools if more else {}
            with trace.step("tacir.refine", round=t, proxy=proxy.summary(), tools_offered=sorted(offered)) as step:
                current = self._refine(query, proxy, tool, instruction, offered, current, trace, step)
                tool, instruction = self._decide(current, offered, policy_forced=False, query=query, trace=trace,
                                                 step=step)
                step.outputs.update(current.outputs())
                step.outputs["decision"] = {"tool": tool, "instruction": instruction}

        # Eq. 5: retrieval with the final description and the optional proxy.
        final = current.target
        with trace.step("tacir.retrieve", space=SPACE_IMAGE, k=top_k) as step:
            rows = self.ctx.pool(query)
            ids = self.ctx.pool_ids(rows)
            text_vec = self.ctx.encode([final], SPACE_IMAGE)[0]
            text_scores = self.ctx.gallery.scores(text_vec, SPACE_IMAGE, rows)
            use_proxy = proxy is not None and cfg.proxy_weight > 0
            if use_proxy:
                assert proxy is not None
                proxy_vec = self._proxy_vector(proxy, proxy_tool, proxy_instruction, proxy_source, step)
                if cfg.fusion == "score_sum":
                    proxy_scores = self.ctx.gallery.scores(proxy_vec, SPACE_IMAGE, rows)
                    scores = weighted_sum([text_scores, proxy_scores], [1.0, cfg.proxy_weight])
                    step.outputs["score"] = f"cos(T_t, I) + {cfg.proxy_weight:g} * cos(proxy, I)"
                else:
                    fused = l2_normalize(text_vec + cfg.proxy_weight * proxy_vec)
                    scores = self.ctx.gallery.scores(fused, SPACE_IMAGE, rows)
                    step.outputs["score"] = f"cos(normalize(T_t + {cfg.proxy_weight:g} * proxy), I)"
                step.outputs["proxy"] = proxy.summary()
            else:
                scores = text_scores
                step.outputs["score"] = "cos(T_t, I)"
            if self.ctx.caption_mode:
                step.note("caption mode: image vectors are caption embeddings; the proxy enters through its title")
            ranking = ranking_from_scores(ids, np.asarray(scores, dtype=np.float32), top_k)
            step.outputs["initial_description"] = initial
            step.outputs["final_description"] = final
            step.outputs["proxy_used"] = use_proxy
            step.outputs["top"] = ranking.head(5)
            # Eq. 1 with T_t^(0) alone: what the query would get without tools (for side-by-side reports).
            init_scores = text_scores if initial == final else self.ctx.gallery.scores(
                self.ctx.encode([initial], SPACE_IMAGE)[0], SPACE_IMAGE, rows)
            stages = {"initial": ranking_from_scores(ids, np.asarray(init_scores, dtype=np.float32), top_k)}
        return ranking, stages

    # ------------------------------------------------------------------ rounds
    def _policy_tools(self) -> dict[str, CachedTool]:
        """The tools the policy lets the agent know about (the agent is told only what exists)."""
        policy = self.config.tool_policy  # type: ignore[attr-defined]
        if policy == "none":
            return {}
        if policy == "always_search":
            return {k: v for k, v in self.tools.items() if k == "search"}
        if policy == "always_edit":
            return {k: v for k, v in self.tools.items() if k == "edit"}
        return dict(self.tools)  # auto and always_model_picks

    def _templated(self, query: Query, trace: Trace) -> Query:
        """GeneCIS: the condition word becomes a manipulation text through the task's template (the paper
        follows recent training-free work: focus keeps the named attribute or object, change replaces it)."""
        task = query.extra.get("task")
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        if not (cfg.genecis_templates and task in GENECIS_TASKS and query.extra.get("condition")):
            return query
        text = Template(load_prompt(f"tacir/genecis/{task}.txt")).safe_substitute(
            condition=" ".join(str(query.extra["condition"]).split()))
        with trace.step("tacir.instruction", task=task, condition=query.extra["condition"]) as step:
            step.outputs["manipulation_text"] = text
        return replace(query, text=text)

    def _tool_sections(self, offered: dict[str, CachedTool], forced: str | None) -> tuple[str, str]:
        """The tools block and the tool-usage rules; ``forced`` is search, edit or model_picks (any tool)."""
        f = self._fragments
        tools = "\n\n".join(f[f"tool.{k}"] for k in TOOLS if k in offered) or f["tools.none"]
        if not offered:
            rules = f["rules.none"]
        elif forced == "model_picks" and len(offered) == 1:
            rules = f[f"rules.force_{next(iter(offered))}"]
        elif forced:
            rules = f[f"rules.force_{forced}"]
        else:
            rules = f["rules.choose"]
        return tools, rules

    def _ask(self, system: str, user: list[str | ImagePart], fields: tuple[str, ...],
             fallback: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        schema = answer_schema(fields, cfg.max_field_chars)

        def validate(value: Any) -> Any:
            if not str(value.get("target_image_description") or "").strip():
                raise ValueError("empty target_image_description")
            return value

        answer, ok = self.ctx.roles[ROLE].json(
            [Message.system(system), Message.user(*user)], schema, fallback=lambda: dict(fallback),
            retries=cfg.json_retries, validate=validate, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
        )
        if ok:
            note_capped(answer, schema, "reasoner answer")
        return answer, ok

    def _select(self, query: Query, offered: dict[str, CachedTool], trace: Trace, step: TraceStep) -> Round:
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        assert query.reference is not None
        forced = cfg.tool_policy.removeprefix("always_") if cfg.tool_policy.startswith("always_") else None
        tools, rules = self._tool_sections(offered, forced if offered else None)
        system = Template(load_prompt("tacir/select.txt")).safe_substitute(tools=tools, tool_rules=rules)
        user = user_parts(load_prompt("tacir/user_select.txt"), {"reference": ImagePart(record=query.reference)},
                          {"modification": query.text})
        # Unusable output: describe the target by the reference caption plus the modification, no tool.
        fallback_target = f"{query.reference.caption.rstrip('. ')}, {query.text}" if query.reference.caption \
            else query.text
        answer, ok = self._ask(system, user, SELECT_FIELDS, {"target_image_description": fallback_target,
                                                             "tool_usage": "None"})
        if not ok:
            trace.count("tacir.parse_fallback")
            step.note("selection answer unusable: target = reference caption + modification, no tool")
        return self._round(0, answer, ok)

    def _refine(self, query: Query, proxy: ToolImage, tool: str, instruction: str, offered: dict[str, CachedTool],
                previous: Round, trace: Trace, step: TraceStep) -> Round:
        assert query.reference is not None
        tools, rules = self._tool_sections(offered, None)
        # Fig. 8 states the call formats inside its Tool Usage guidelines: the tools' blocks go there.
        rules = f"{tools}\n\n{rules}" if offered else rules
        system = Template(load_prompt("tacir/refine.txt")).safe_substitute(tool_rules=rules)
        f = self._fragments
        if tool == "search":
            origin = "a search result"
            proxy_note = Template(f["proxy.search"]).safe_substitute(title=proxy.text() or "(no title)")
        else:
            origin = "an edited version of the original image"
            proxy_note = Template(f["proxy.edit"]).safe_substitute(
                instruction=safe_text(instruction, MAX_INSTRUCTION_CHARS))
        user = user_parts(load_prompt("tacir/user_refine.txt"),
                          {"reference": ImagePart(record=query.reference), "proxy": proxy.image_part()},
                          {"modification": query.text, "proxy_origin": origin, "proxy_note": proxy_note})
        answer, ok = self._ask(system, user, REFINE_FIELDS, {"target_image_description": previous.target,
                                                             "tool_usage": "None"})
        if not ok:
            trace.count("tacir.parse_fallback")
            step.note("refinement answer unusable: kept the previous target description")
        return self._round(previous.t + 1, answer, ok)

    @staticmethod
    def _round(t: int, answer: dict[str, Any], ok: bool) -> Round:
        def s(key: str) -> str:
            return str(answer.get(key) or "").strip()

        tool, instruction = parse_tool_decision(answer) if ok else ("none", "")
        return Round(t=t, reference_description=s("original_image_description"), thoughts=s("thoughts"),
                     reflections=s("reflections"), tool_usage=s("tool_usage"),
                     target=" ".join(s("target_image_description").split()), evidence=s("tool_evidence_description"),
                     tool=tool, instruction=instruction, parsed=ok, raw=answer)

    def _decide(self, rnd: Round, offered: dict[str, CachedTool], policy_forced: bool, query: Query,
                trace: Trace, step: TraceStep) -> tuple[str, str]:
        """The tool to run after this round: the model's choice, bounded by what is offered (budget,
        configuration, ablation) and, at selection, forced by an always_* policy."""
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        tool, instruction = rnd.tool, rnd.instruction
        if policy_forced and cfg.tool_policy == "always_model_picks":
            if not offered:
                step.note("policy always_model_picks: no tool can run (not configured or K too small)")
                return "none", ""
            if tool not in offered:
                # Fig. 5 "always use a tool": the model declined or named an unavailable tool. Search with the
                # target description when search is offered (the always_search stand-in), else edit.
                tool = "search" if "search" in offered else next(iter(offered))
                instruction = ""
                step.note(f"policy always_model_picks: the model chose {rnd.tool}; {tool} is used")
                trace.count("tacir.policy_forced")
            if not instruction:
                instruction = clean_instruction(rnd.target if tool == "search" else query.text)
                step.note(f"policy always_model_picks: no {tool} instruction given; used "
                          f"{'the target description' if tool == 'search' else 'the manipulation text'}")
            return (tool, instruction) if instruction else ("none", "")
        if policy_forced and cfg.tool_policy.startswith("always_"):
            forced = cfg.tool_policy.removeprefix("always_")
            if forced not in offered:
                step.note(f"policy {cfg.tool_policy}: no {forced} tool can run (not configured or K too small)")
                return "none", ""
            if tool != forced or not instruction:
                # The model did not issue the call: build it from what it produced (Table 7 forces the tool).
                instruction = clean_instruction(rnd.target if forced == "search" else query.text)
                what = "gave no instruction" if tool == forced else f"chose {tool}"
                step.note(f"policy {cfg.tool_policy}: the model {what}; the {forced} instruction is "
                          f"{'the initial target description' if forced == 'search' else 'the manipulation text'}")
                trace.count("tacir.policy_forced")
            return (forced, instruction) if instruction else ("none", "")
        if tool == "none":
            return "none", ""
        if tool in offered and not instruction:
            # A tool chosen without its instruction (small models): the same stand-ins as the always_* policies.
            instruction = clean_instruction(rnd.target if tool == "search" else query.text)
            step.note(f"the model chose {tool} without an instruction; used "
                      f"{'the target description' if tool == 'search' else 'the manipulation text'}")
            trace.count("tacir.instruction_filled")
            if not instruction:
                return "none", ""
        if tool not in offered:
            if tool in self._policy_tools():
                why = (f"the iteration budget (K={cfg.max_iterations}) is spent" if policy_forced or not cfg.early_exit
                       else "the loop exits after the first refinement (early_exit)")
                step.note(f"the model asked for {tool}, but {why}; treated as none")
                trace.count("tacir.budget_exhausted")
            else:
                step.note(f"the model asked for {tool}, which is not available here "
                          f"(not configured, disabled, or tool_policy={cfg.tool_policy}); treated as none")
                trace.count("tacir.tool_unavailable")
            return "none", ""
        return tool, instruction

    def _invoke(self, tool: str, instruction: str, source: ImageRecord | ToolImage, trace: Trace,
                step: TraceStep) -> ToolImage | None:
        """Algorithms 2-3 through the cache-first wrapper; ``None`` when the call fails or is rejected."""
        wrapper = self.tools[tool]
        step.outputs["tool"] = tool
        step.outputs["instruction"] = instruction
        try:
            if tool == "search":
                proxy = self._top_search_result(wrapper, instruction, step)  # Alg. 2: the top result
            else:
                proxy = wrapper.edit(source, instruction)
        except ToolError as exc:
            step.outputs["error"] = str(exc)[:300]
            step.outputs["fallback"] = "none"
            step.note(f"{tool} failed or was rejected ({str(exc)[:200]}); fell back to none")
            trace.count("tacir.tool_failed")
            return None
        step.outputs["proxy"] = proxy.summary()
        return proxy

    def _top_search_result(self, wrapper: CachedTool, instruction: str, step: TraceStep) -> ToolImage:
        """The top search result; with ``exclude_gallery_exemplars`` the top one that is not an image of the
        searched gallery (same content hash or file), looking ``EXEMPLAR_LOOKAHEAD`` results deep."""
        cfg: TaCIRConfig = self.config  # type: ignore[assignment]
        results = wrapper.search(instruction, 1)
        if not results:
            raise ToolError("no result")
        if not cfg.exclude_gallery_exemplars or not self._in_gallery(results[0]):
            return results[0]
        # The top result is a gallery image: look deeper (one more call, only in this case).
        results = wrapper.search(instruction, EXEMPLAR_LOOKAHEAD)
        kept = [r for r in results if not self._in_gallery(r)]
        if len(kept) < len(results):
            skipped = len(results) - len(kept)
            step.outputs["skipped_gallery_images"] = skipped
            step.note(f"search: skipped {skipped} result(s) that are images of the searched gallery "
                      "(exclude_gallery_exemplars)")
        if not kept:
            raise ToolError(f"every one of the {len(results)} results is an image of the searched gallery")
        return kept[0]

    def _in_gallery(self, image: ToolImage) -> bool:
        """Whether a search result is an image of the searched gallery: its file (the cached copy's path, or
        the exemplar backend's source path) is a gallery file, or its content hash is a gallery record's."""
        gallery = self.ctx.gallery
        if self._gallery_paths is None:
            self._gallery_paths = {str(Path(r.path).resolve()) for r in gallery.records() if r.path}
        for path in (image.path, image.provenance.source):
            if path and Path(path).is_absolute() and str(Path(path).resolve()) in self._gallery_paths:
                return True
        try:
            return gallery.record_by_hash(image.content_hash()) is not None
        except (OSError, ToolError):
            return False

    def _proxy_vector(self, proxy: ToolImage, tool: str, instruction: str, source: ImageRecord | ToolImage,
                      step: TraceStep) -> np.ndarray:
        """Psi_I(I_tool): the proxy's pixels with a pixel encoder; its words in caption mode. An edit proxy's
        words are the source's surrogate and the *whole* edit instruction (a long surrogate never pushes the
        instruction out); a search proxy's are its title."""
        if self.ctx.caption_mode:
            if tool == "edit":
                surrogate = input_text(source)
                edit = safe_text(instruction, MAX_INSTRUCTION_CHARS)
                text = f"{safe_text(surrogate, MAX_TITLE_CHARS)}, edited: {edit}"
                if len(" ".join(surrogate.split())) > MAX_TITLE_CHARS:
                    step.note(f"caption mode: the edited image's source text was cut to {MAX_TITLE_CHARS} "
                              "characters; the edit instruction is kept whole")
            else:
                text = proxy.text() or safe_text(instruction)
                if not proxy.text():
                    step.note("caption mode: the proxy has no title; its tool instruction stands in for it")
            step.outputs["proxy_text"] = text
            return self.ctx.encode([text], SPACE_IMAGE)[0]
        self.ctx.check_space(SPACE_IMAGE)
        return np.asarray(self.ctx.dual.encode_images([proxy.record()])[0], dtype=np.float32)


__all__ = ["REFINE_SCHEMA", "SELECT_SCHEMA", "TaCIR", "TaCIRConfig", "parse_tool_decision"]
