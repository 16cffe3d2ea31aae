"""X^R: cross-modal agents for composed image retrieval (Yang, Pang, Yuan, WWW 2026), Algorithm 1.

Each step of the algorithm box is one trace step (``trace.step(name, line=..., agent=...)``)::

    1-2   caption             C = A_c(I) from the index; C_r = A_c(I_r)
    3     imagine.text        M_t, C_t = A_t^i(T_m, C_r)                 role ``imaginer``
    4     imagine.vision      M_v, C_v = A_v^i(T_m, I_r)                 role ``vision_imaginer``
    5-9   coarse.similarity   S_t = cos(C_t, C_a) + cos(C_t, I_a)
                              S_v = cos(C_v, C_a) + cos(C_v, I_a)
    10    coarse.rrf          RRF(a) = 1/(z + rank_t(a)) + 1/(z + rank_v(a)); keep the top k'
    11    fine.questions      Q, A = A^q(M_t, M_v, T_m)                  role ``questioner``
    13    fine.verify.text    s_q^t = A_t^q(C_a, Q, A)                   role ``text_verifier``
    14    fine.verify.vision  s_q^v = A_v^q(I_a, Q, A)                   role ``vision_verifier``
    15-16 fine.rerank         S^k' = (S_q^t + S_q^v) * minmax(lambda S_t + (1 - lambda) S_v)

Decisions (``shared/papers/README.md``, decision 1): Algorithm 1 lines 8-9 as printed (``s_t = s_tt + s_tv``,
``s_v = s_vv + s_tv``) count ``s_tv`` twice and contradict the text; the text's reading is used: the scores are
"aligned within each modality" of the imagined caption, S_t from C_t and S_v from C_v, each summed over the
candidate's caption C_a (``caption_dual`` space: the CLIP text encoder on both sides) and its image I_a
(``image`` space). Ranks are 1-based. The top k' are re-ranked by the formula above; ties keep RRF order; the
candidates outside k' follow the re-ranked block in RRF order.

Other choices the paper leaves open, each documented where it is made:
- C (line 1) is the index's captions, computed once at indexing time and cached there. C_r (line 2) is the
  reference record's caption (or its index entry's); only a reference with no caption costs a ``captioner`` call.
  An index where no image of the pool has a caption (file-name words do not count) is refused before any model
  call, naming the fixes (:mod:`imagent.methods.captions`), unless ``allow_missing_captions=true``, which the
  trace and the eval report then state; partial coverage is noted.
- JSON bounds only stop a small model looping under constrained decoding; they sit far above GPT-4-class
  output, a longer value is kept whole and a value stopped at its bound is noted in the trace.
- The two similarity agents are the Table 3 switches: the *textual* agent A_t^s reads C_a, the *visual* agent
  A_v^s reads I_a. With one of them off, S_t and S_v each keep the other's term. (Both off leaves nothing to rank
  by: that row of Table 3 is the ``clip`` baseline method.)
- With both question agents off, lines 11-16 are skipped and the coarse ranking is the answer (no question call).
- A verifier's reply is parsed strictly from its first word (True/False, Yes/No); anything else is *unanswered*:
  counted in ``trace.counters`` and scored 0 (not correct), never guessed. Expected answers are JSON booleans,
  coerced strictly ("False" is False), so the ``bool("False") == True`` slip of the authors' code cannot happen.
- ``batch_questions`` (off by default: one call per question is what the paper's +1-per-question scoring and a
  small model handle best) asks all questions of one candidate in one JSON call per verifier.
- Fallbacks when a model's output stays unusable after retries (the paper gives none): imagination falls back to
  "reference caption + modification text" as the caption and the modification text as M_t; questions fall back to
  one statement per M_v attribute (answer = present), else the request itself (answer True).

Model calls per query (without retries of malformed JSON, with k'' = min(k', pool size)):
``2 + [1 + k'' * V * (|Q| unbatched, or 1 batched)]``, where V is the number of question agents on (0, 1, 2)
and the bracket is dropped when V = 0; plus 1 ``captioner`` call when the reference has no caption.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from imagent.core.concurrency import map_threads
from imagent.core.trace import Trace, note
from imagent.core.types import ImageRecord, Query, Ranking
from imagent.index.gallery import GalleryError
from imagent.index.scoring import (
    minmax,
    reciprocal_rank_fusion,
    rrf_top_k,
    stable_order,
    top_k,
    weighted_sum,
)
from imagent.methods.base import (
    SPACE_CAPTION_DUAL,
    SPACE_IMAGE,
    Method,
    MethodConfig,
    keep_best,
    register_method,
)
from imagent.methods.captions import CaptionsConfig, check_captions, note_capped
from imagent.models.base import ImagePart, Message
from imagent.models.roles import Role

IMAGE_MARK = "<image>"

# Role names: separate so that a config can map each agent to its own model.
ROLE_CAPTIONER = "captioner"
ROLE_TEXT_IMAGINER = "imaginer"
ROLE_VISION_IMAGINER = "vision_imaginer"
ROLE_QUESTIONER = "questioner"
ROLE_TEXT_VERIFIER = "text_verifier"
ROLE_VISION_VERIFIER = "vision_verifier"

# Bounds keep a small model from looping inside a JSON string or list. They sit far above what a GPT-4-class
# agent writes; a value that reaches one is noted in the trace (it may have been cut).
_TEXT_IMAGINATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "modifications": {"type": "array", "items": {"type": "string", "maxLength": 600}, "maxItems": 16},
        "target_caption": {"type": "string", "maxLength": 1000},
    },
    "required": ["modifications", "target_caption"],
}
_VISION_IMAGINATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "attributes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"attribute": {"type": "string", "maxLength": 300}, "present": {"type": "boolean"}},
                "required": ["attribute", "present"],
            },
            "maxItems": 20,
        },
        "target_caption": {"type": "string", "maxLength": 1000},
    },
    "required": ["attributes", "target_caption"],
}


def _questions_schema(n: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"question": {"type": "string", "maxLength": 600}, "answer": {"type": "boolean"}},
                    "required": ["question", "answer"],
                },
                "maxItems": n,
            }
        },
        "required": ["questions"],
    }


def _answers_schema(n: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"answers": {"type": "array", "items": {"type": "boolean"}, "maxItems": n}},
        "required": ["answers"],
    }


class XRConfig(CaptionsConfig):
    """X^R hyper-parameters; defaults are the paper's (Sec. 4.1 and Fig. 3-4)."""

    rrf_z: float = Field(60.0, ge=0, description="RRF smoothing constant z (Eq. 1)")
    k_prime: int = Field(100, ge=1, description="coarse pool k' passed to fine filtering")
    num_questions: int = Field(3, ge=1, le=10, description="true/false questions from the question agent")
    lam: float = Field(0.15, ge=0, le=1, description="lambda: weight of S_t in the re-ranking (1 - lambda on S_v)")
    fusion: Literal["rrf", "sum"] = Field("rrf", description="coarse fusion: RRF (paper) or plain S_t + S_v (Fig. 3a)")
    # Table 3 ablation switches.
    text_similarity: bool = Field(True, description="textual similarity agent A_t^s (candidate captions C_a)")
    visual_similarity: bool = Field(True, description="visual similarity agent A_v^s (candidate images I_a)")
    text_questions: bool = Field(True, description="textual question agent A_t^q (answers from C_a)")
    visual_questions: bool = Field(True, description="visual question agent A_v^q (answers from I_a)")
    batch_questions: bool = Field(False, description="ask all questions of a candidate in one call per verifier")

    @model_validator(mode="after")
    def _one_similarity_agent(self) -> XRConfig:
        if not (self.text_similarity or self.visual_similarity):
            raise ValueError(
                "X^R needs at least one similarity agent (text_similarity or visual_similarity); "
                "the all-off row of the paper's Table 3 is the `clip` baseline method"
            )
        return self


# --------------------------------------------------------------------------- prompts


@cache
def load_prompt(name: str) -> str:
    return (resources.files("imagent.methods") / "prompts" / "xr" / name).read_text(encoding="utf-8")


class _Piece:
    """One text piece of a prompt file: ``Template(text).substitute(values)``, with the template parsed once
    into literal text and placeholder names (verifiers build hundreds of messages per query from one file).
    A piece with an invalid placeholder is left to ``Template``, which raises as it always did."""

    def __init__(self, text: str) -> None:
        self.template = Template(text)
        self.segments: list[tuple[str, str | None]] | None = []
        pos = 0
        for mo in self.template.pattern.finditer(text):
            name = mo.group("named") or mo.group("braced")
            if name is not None:
                self.segments.append((text[pos:mo.start()], name))
            elif mo.group("escaped") is not None:
                self.segments.append((text[pos:mo.start()] + self.template.delimiter, None))
            else:
                self.segments = None
                break
            pos = mo.end()
        if self.segments is not None:
            self.segments.append((text[pos:], None))

    def substitute(self, values: dict[str, str]) -> str:
        if self.segments is None:
            return self.template.substitute(values)
        return "".join(literal if name is None else literal + str(values[name]) for literal, name in self.segments)


@cache
def _prompt_pieces(name: str) -> tuple[_Piece, ...]:
    """The prompt file's pieces around its ``<image>`` markers, split and parsed once."""
    return tuple(_Piece(p) for p in load_prompt(name).split(IMAGE_MARK))


def prompt_message(name: str, image: ImagePart | None = None, **values: str) -> Message:
    """A user message from a prompt file; an ``<image>`` line in the file marks where the image goes.
    The template is split before substitution so that text inside values never acts as a marker."""
    pieces = _prompt_pieces(name)
    if len(pieces) > 1 and image is None:
        raise ValueError(f"prompt {name!r} needs an image")
    texts = [p.substitute(values) for p in pieces]
    parts: list[str | ImagePart] = [texts[0]]
    for t in texts[1:]:
        parts += [image, t]  # type: ignore[list-item]
    return Message.user(*[p for p in parts if not isinstance(p, str) or p.strip()])


# --------------------------------------------------------------------------- data


@dataclass
class Imagination:
    """What an imagination agent returns: a target caption and its modification set (M_t or M_v)."""

    caption: str
    modifications: list[str] = dataclasses.field(default_factory=list)  # M_t
    attributes: list[tuple[str, bool]] = dataclasses.field(default_factory=list)  # M_v: (attribute, present)
    ok: bool = True


@dataclass
class Question:
    text: str
    answer: bool  # the answer the ideal target image gives


def record_caption(record: ImageRecord) -> str:
    """C_a: all of a record's captions, as the index embeds them."""
    return " ".join(c.strip() for c in record.captions if c.strip())


# --------------------------------------------------------------------------- pure scoring (tested directly)


def similarity_scores(
    cos_tc: np.ndarray | None, cos_ti: np.ndarray | None, cos_vc: np.ndarray | None, cos_vi: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Lines 6-9 (decision 1): S_t = cos(C_t, C_a) + cos(C_t, I_a), S_v = cos(C_v, C_a) + cos(C_v, I_a).
    A term is None when its similarity agent is off (C_a terms: textual agent; I_a terms: visual agent)."""
    s_t = [np.asarray(x, dtype=np.float32) for x in (cos_tc, cos_ti) if x is not None]
    s_v = [np.asarray(x, dtype=np.float32) for x in (cos_vc, cos_vi) if x is not None]
    if not s_t or not s_v:
        raise ValueError("at least one similarity agent must give scores")

    def total(terms: list[np.ndarray]) -> np.ndarray:
        # One float32 addition per entry (what np.sum over the two terms computes), without stacking them first.
        return np.add(*terms) if len(terms) == 2 else terms[0].copy()

    return total(s_t), total(s_v)


def coarse_scores(s_t: np.ndarray, s_v: np.ndarray, z: float = 60.0, fusion: str = "rrf") -> np.ndarray:
    """Line 10, Eq. 1: RRF(a) = 1/(z + rank_t(a)) + 1/(z + rank_v(a)), ranks 1-based and stable (ties by
    position). ``fusion="sum"`` is the direct summation the paper compares against (Fig. 3a)."""
    if fusion == "sum":
        return (np.asarray(s_t, dtype=np.float64) + np.asarray(s_v, dtype=np.float64)).astype(np.float64)
    return reciprocal_rank_fusion([s_t, s_v], z=z)


def coarse_top(s_t: np.ndarray, s_v: np.ndarray, k: int, z: float = 60.0, fusion: str = "rrf"
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The first ``k`` positions of ``stable_order(coarse_scores(...))``, their fused scores and (RRF) their
    ranks in S_t and S_v: the same numbers without sorting the whole gallery (only the top is ever used)."""
    if fusion == "sum":
        fused = coarse_scores(s_t, s_v, z, fusion)
        best = top_k(fused, k)
        return best, fused[best], None
    return rrf_top_k([s_t, s_v], k, z)


def rerank_scores(sq: np.ndarray, s_t: np.ndarray, s_v: np.ndarray, lam: float) -> np.ndarray:
    """Line 15: S^k' = (S_q^t + S_q^v) * minmax(lambda S_t + (1 - lambda) S_v), over the k' block only.
    ``sq`` is S_q^t + S_q^v (correct answers per candidate)."""
    return np.asarray(sq, dtype=np.float32) * minmax(weighted_sum([s_t, s_v], [lam, 1.0 - lam]))


def rerank_order(scores: np.ndarray) -> np.ndarray:
    """Line 16: descending S^k'; the block is in RRF order, so a stable sort breaks ties by RRF order."""
    return stable_order(scores)


# --------------------------------------------------------------------------- the method


@dataclass(frozen=True)
class _Coarse:
    """Lines 5-10's outcome: both agents' scores over the pool, the fused order of its top positions (indices into
    the scores) with their fused scores and ids, the size of the k' block, the coarse ranking."""

    s_t: np.ndarray
    s_v: np.ndarray
    order: np.ndarray
    fused: np.ndarray
    order_ids: list[str]
    k_block: int
    ranking: Ranking


@register_method
class XR(Method):
    """X^R (WWW 2026): imagination agents, cross-modal similarity fused by RRF, true/false question agents."""

    name = "xr"
    image_roles = (ROLE_CAPTIONER, ROLE_VISION_IMAGINER, ROLE_VISION_VERIFIER)
    tasks = frozenset({"cir"})
    Config = XRConfig
    fallback_counters: ClassVar[dict[str, str]] = {"xr.imagination_fallback": "imagination_reference_caption",
                                                   "xr.questions_fallback": "questions_from_attributes"}
    description = (
        "X^R: text and vision imagination agents, four cross-modal similarities fused by RRF (coarse top k'), "
        "true/false question agents on captions and images, cross-modal re-ranking"
    )

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        """2 imagination calls + [1 question call + k' x V x (|Q|, or 1 batched)] (the module doc's formula)."""
        cfg = config if isinstance(config, XRConfig) else XRConfig.model_validate(config)
        agents = int(cfg.text_questions) + int(cfg.visual_questions)
        if not agents:
            return 2
        return 2 + 1 + cfg.k_prime * agents * (1 if cfg.batch_questions else cfg.num_questions)
    config: XRConfig

    # ------------------------------------------------------------------ pipeline
    def preflight(self, query: Query | None = None) -> list[str]:
        """Refuse an index without captions: C (line 1) is the gallery's captions (see the module doc)."""
        cfg, roles = self.config, self.ctx.roles
        uses = []
        if cfg.text_similarity:
            uses.append("the caption terms cos(C_t, C_a) and cos(C_v, C_a) of lines 6-9")
        if cfg.visual_similarity and self.ctx.caption_mode:
            uses.append("the image terms (caption mode: image vectors are caption embeddings)")
        if cfg.text_questions:
            uses.append("the textual question agent A_t^q (line 13)")
        if cfg.visual_questions and roles[ROLE_VISION_VERIFIER].caption_mode:
            uses.append("the visual question agent A_v^q (caption mode: it reads captions in place of pixels)")
        ids = query.candidates if query is not None else None
        return check_captions(self.ctx.gallery, self.name, uses, cfg.allow_missing_captions, ids)

    def run(self, query: Query, top_k: int, trace: Trace) -> tuple[Ranking, dict[str, Ranking]]:
        """Algorithm 1: caption and imagination agents (lines 1-4), the coarse ranking (5-10), then, with a question
        agent, the questions (11), their verification over the k' block (12-14) and the re-ranking (15-16)."""
        cfg = self.config
        assert query.reference is not None  # tasks = {"cir"}: Method.search enforces it
        text_im, vision_im = self._imagine(query, trace)
        coarse = self._coarse(query, text_im, vision_im, top_k, trace)
        keep_best(coarse.ranking)  # what the search returns if the call cap stops the question agents
        if not (cfg.text_questions or cfg.visual_questions) or coarse.k_block == 0:
            # No question agent: lines 11-16 do not run; the coarse ranking is the answer.
            final = coarse.ranking.top(top_k)
            return final, {"coarse": coarse.ranking.top(top_k), "full": final}
        # Line 11: question agent.
        with trace.step("fine.questions", line="11", agent="A^q", role=ROLE_QUESTIONER) as step:
            questions, ok = self._questions(query.text, text_im, vision_im, trace)
            step.outputs.update({
                "questions": [{"question": q.text, "answer": q.answer} for q in questions],
                "parsed": ok,
            })
        sq, per_candidate = self._verify_block(coarse, questions, trace)
        final = self._rerank(coarse, sq, per_candidate, trace).top(top_k)
        return final, {"coarse": coarse.ranking.top(top_k), "full": final}

    def _imagine(self, query: Query, trace: Trace) -> tuple[Imagination, Imagination]:
        """Lines 1-4: the reference's caption C_r, then the text and vision imagination agents' target captions."""
        assert query.reference is not None
        # Lines 1-2: caption agent.
        with trace.step("caption", line="1-2", agent="A_c", role=ROLE_CAPTIONER) as step:
            reference, c_r, source = self._reference_caption(query.reference, trace)
            step.outputs.update({
                "C_r": c_r,
                "C_r_source": source,
                "C": f"gallery captions from the index ({len(self.ctx.gallery)} records, captioned once at indexing)",
            })
        # Line 3: text imagination agent.
        with trace.step("imagine.text", line="3", agent="A_t^i", role=ROLE_TEXT_IMAGINER) as step:
            text_im = self._imagine_text(query.text, c_r, trace)
            step.outputs.update({"C_t": text_im.caption, "M_t": text_im.modifications, "parsed": text_im.ok})
        # Line 4: vision imagination agent.
        with trace.step("imagine.vision", line="4", agent="A_v^i", role=ROLE_VISION_IMAGINER) as step:
            role = self.ctx.roles[ROLE_VISION_IMAGINER]
            vision_im = self._imagine_vision(role, query.text, reference, c_r, trace)
            step.outputs.update({
                "reference_seen_as": "text surrogate (caption mode)" if role.caption_mode else "pixels",
                "C_v": vision_im.caption,
                "M_v": [{"attribute": a, "present": p} for a, p in vision_im.attributes],
                "parsed": vision_im.ok,
            })
            if role.caption_mode:
                step.note("caption mode: the vision imagination agent read the reference's text surrogate, not its "
                          "pixels")
        return text_im, vision_im

    def _coarse(self, query: Query, text_im: Imagination, vision_im: Imagination, top_k: int,
                trace: Trace) -> _Coarse:
        """Lines 5-10: the similarity agents' scores over the pool, fused by reciprocal rank fusion."""
        cfg = self.config
        rows = self.ctx.pool(query)
        pool_size = len(self.ctx.gallery.ids) if rows is None else len(rows)
        # Lines 5-9: similarity agents.
        with trace.step("coarse.similarity", line="5-9", agents="A_t^s, A_v^s") as step:
            s_t, s_v, parts = self._similarities(text_im.caption, vision_im.caption, rows)
            step.outputs.update({
                "pool": pool_size,
                "agents": [n for n, on in (("textual (C_a)", cfg.text_similarity),
                                           ("visual (I_a)", cfg.visual_similarity)) if on],
                "S_t": "cos(C_t, C_a) + cos(C_t, I_a)",
                "S_v": "cos(C_v, C_a) + cos(C_v, I_a)",
            })
            if self.ctx.caption_mode and cfg.visual_similarity:
                step.note("caption mode: I_a vectors are the dual encoder's encoding of the captions")
        # Line 10: reciprocal rank fusion -> top k'. Only the top max(k', top_k) of the fused order is ever
        # returned (the block, then RRF order below it), so only that much is ranked.
        with trace.step("coarse.rrf", line="10", z=cfg.rrf_z, k_prime=cfg.k_prime, fusion=cfg.fusion) as step:
            k_block = min(cfg.k_prime, pool_size)
            order, fused, ranks = coarse_top(s_t, s_v, max(k_block, top_k), cfg.rrf_z, cfg.fusion)
            # The ids of the ranked positions only (no list of the whole pool's ids).
            order_ids: list[str] = self.ctx.gallery.id_array[order if rows is None else rows[order]].tolist()
            step.outputs.update({
                "kept": k_block,
                "top": [
                    {"id": order_ids[n], "rrf": round(float(fused[n]), 6),
                     **({} if ranks is None else {"rank_t": int(ranks[0, n]), "rank_v": int(ranks[1, n])}),
                     "S_t": round(float(s_t[i]), 4), "S_v": round(float(s_v[i]), 4),
                     **{k: round(float(v[i]), 4) for k, v in parts.items()}}
                    for n, i in enumerate(order[: min(k_block, 20)])
                ],
            })
        return _Coarse(s_t, s_v, order, fused, order_ids, k_block, Ranking(list(order_ids), fused.tolist()))

    def _verify_block(self, coarse: _Coarse, questions: list[Question],
                      trace: Trace) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
        """Lines 12-14: the question-based scoring agents over the k' candidates: Sq (correct answers per
        candidate, both modalities summed) and each candidate's answers by modality."""
        cfg = self.config
        block_ids = coarse.order_ids[: coarse.k_block]
        records = [self.ctx.gallery.record(i) for i in block_ids]
        sq = np.zeros(coarse.k_block, dtype=np.float32)
        verifiers = [("text", cfg.text_questions, ROLE_TEXT_VERIFIER, "13", "A_t^q"),
                     ("vision", cfg.visual_questions, ROLE_VISION_VERIFIER, "14", "A_v^q")]
        per_candidate: dict[str, dict[str, Any]] = {i: {} for i in block_ids}
        for modality, on, role_name, line, agent in verifiers:
            if not on:
                continue
            with trace.step(f"fine.verify.{modality}", line=line, agent=agent, role=role_name) as step:
                role = self.ctx.roles[role_name]
                answers = self._verify(role, modality, records, questions, trace)
                scores = np.array([sum(a is not None and a == q.answer for a, q in zip(ans, questions, strict=True))
                                   for ans in answers], dtype=np.float32)
                sq += scores
                unanswered = sum(a is None for ans in answers for a in ans)
                for cid, ans, s in zip(block_ids, answers, scores, strict=True):
                    per_candidate[cid][modality] = {"answers": ans, "correct": int(s)}
                step.outputs.update({
                    "candidates": [{"id": cid, "answers": ans, "correct": int(s)}
                                   for cid, ans, s in zip(block_ids, answers, scores, strict=True)],
                    "unanswered": unanswered,
                })
                if modality == "vision" and role.caption_mode:
                    step.outputs["images_seen_as"] = "text surrogate (caption mode)"
                if modality == "text":
                    missing = sum(not record_caption(r) for r in records)
                    if missing:
                        trace.count("xr.candidates_without_caption", missing)
                        step.note(f"{missing} candidate(s) have no caption; the text verifier saw '(no caption)'")
        return sq, per_candidate

    def _rerank(self, coarse: _Coarse, sq: np.ndarray, per_candidate: dict[str, dict[str, Any]],
                trace: Trace) -> Ranking:
        """Lines 15-16: cross-modal re-ranking of the k' block; the rest keeps RRF order below it."""
        lam, k_block = self.config.lam, coarse.k_block
        block, block_ids = coarse.order[:k_block], coarse.order_ids[:k_block]
        s_t, s_v = coarse.s_t[block], coarse.s_v[block]
        with trace.step("fine.rerank", line="15-16", lam=lam) as step:
            final_scores = rerank_scores(sq, s_t, s_v, lam)
            sim = minmax(weighted_sum([s_t, s_v], [lam, 1.0 - lam]))
            new_order = rerank_order(final_scores)
            rest = coarse.order[k_block:]
            rest_scores = np.asarray(coarse.fused[k_block:], dtype=np.float64)
            if rest.size:
                # Below the block only the order matters: shift the coarse scores under every block score (>= 0).
                rest_scores = rest_scores - rest_scores.max() - 1.0
            kept, scores_, sims = new_order.tolist(), final_scores.tolist(), sim.tolist()  # Python numbers once
            final = Ranking([block_ids[j] for j in kept] + coarse.order_ids[k_block:],
                            [scores_[j] for j in kept] + rest_scores.tolist())
            step.outputs.update({
                "kept_order": [
                    {"id": block_ids[j], "coarse_rank": j + 1,
                     "Sq_t": per_candidate[block_ids[j]].get("text", {}).get("correct"),
                     "Sq_v": per_candidate[block_ids[j]].get("vision", {}).get("correct"),
                     "sim": round(sims[j], 4), "score": round(scores_[j], 4)}
                    for j in kept
                ],
                "moved": sum(j != n for n, j in enumerate(kept)),
            })
        return final

    # ------------------------------------------------------------------ lines 1-2
    def _reference_caption(self, reference: ImageRecord, trace: Trace) -> tuple[ImageRecord, str, str]:
        """C_r and the record the vision agent sees (given C_r as its caption, so its surrogate is never empty)."""
        caption = record_caption(reference)
        if caption:
            return reference, caption, "reference record"
        gallery = self.ctx.gallery
        if reference.id in gallery:
            caption = record_caption(gallery.record(reference.id))
            if caption:
                return dataclasses.replace(reference, captions=[caption]), caption, "index"
        role = self.ctx.roles[ROLE_CAPTIONER]
        if role.caption_mode:
            # A model that cannot see pixels would caption the text surrogate: use the surrogate itself.
            trace.count("xr.reference_without_caption")
            return reference, reference.surrogate(), "text surrogate (no caption, caption mode)"
        caption = role.text([prompt_message("caption.txt", ImagePart(record=reference))], max_tokens=120)
        return dataclasses.replace(reference, captions=[caption]), caption, "captioner"

    # ------------------------------------------------------------------ lines 3-4
    @staticmethod
    def _fallback_caption(c_r: str, modification: str) -> str:
        return f"{c_r.rstrip('. ')}. {modification.strip()}".strip(". ") if c_r else modification.strip()

    def _imagine_text(self, modification: str, c_r: str, trace: Trace) -> Imagination:
        role = self.ctx.roles[ROLE_TEXT_IMAGINER]
        msg = prompt_message("imagine_text.txt", reference_caption=c_r or "(no caption)", modification=modification)
        value, ok = role.json(
            [msg], _TEXT_IMAGINATION_SCHEMA, validate=_require_caption,
            fallback=lambda: {"modifications": [modification], "target_caption": self._fallback_caption(
                c_r, modification)},
        )
        if not ok:
            trace.count("xr.imagination_fallback")
        else:
            note_capped(value, _TEXT_IMAGINATION_SCHEMA, "text imagination output")
        mods = [m.strip() for m in value["modifications"] if isinstance(m, str) and m.strip()]
        return Imagination(value["target_caption"].strip(), modifications=mods, ok=ok)

    def _imagine_vision(self, role: Role, modification: str, reference: ImageRecord, c_r: str,
                        trace: Trace) -> Imagination:
        msg = prompt_message("imagine_vision.txt", ImagePart(record=reference), modification=modification)
        value, ok = role.json(
            [msg], _VISION_IMAGINATION_SCHEMA, validate=_require_caption,
            fallback=lambda: {"attributes": [], "target_caption": self._fallback_caption(c_r, modification)},
        )
        if not ok:
            trace.count("xr.imagination_fallback")
        else:
            note_capped(value, _VISION_IMAGINATION_SCHEMA, "vision imagination output")
        attrs = [(a["attribute"].strip(), bool(a["present"])) for a in value["attributes"]
                 if isinstance(a, dict) and isinstance(a.get("attribute"), str) and a["attribute"].strip()]
        return Imagination(value["target_caption"].strip(), attributes=attrs, ok=ok)

    # ------------------------------------------------------------------ lines 5-9
    def _similarities(self, c_t: str, c_v: str, rows: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        cfg = self.config
        spaces = [s for s, on in ((SPACE_CAPTION_DUAL, cfg.text_similarity), (SPACE_IMAGE, cfg.visual_similarity))
                  if on]
        gallery = self.ctx.gallery
        for space in spaces:
            if not gallery.has_space(space):
                switch = "text_similarity" if space == SPACE_CAPTION_DUAL else "visual_similarity"
                raise GalleryError(f"X^R needs the index's {space!r} vectors; re-index with them or "
                                   f"--set xr.{switch}=false")
            self.ctx.check_space(space)
        # Both spaces hold the dual encoder's vectors: C_t and C_v are encoded once by its text side.
        q = self.ctx.encode([c_t, c_v], spaces[0])
        parts: dict[str, np.ndarray] = {}
        if cfg.text_similarity:  # C_t and C_v in one scan of each space
            parts["cos(C_t,C_a)"], parts["cos(C_v,C_a)"] = caption_scores = gallery.scores(q, SPACE_CAPTION_DUAL, rows)
        if cfg.visual_similarity:
            # Spaces stored as one matrix (caption mode) give the same scores: the first scan's are reused.
            same = cfg.text_similarity and gallery.vector_shards(SPACE_IMAGE) is gallery.vector_shards(
                SPACE_CAPTION_DUAL)
            parts["cos(C_t,I_a)"], parts["cos(C_v,I_a)"] = caption_scores if same else gallery.scores(
                q, SPACE_IMAGE, rows)
        s_t, s_v = similarity_scores(parts.get("cos(C_t,C_a)"), parts.get("cos(C_t,I_a)"),
                                     parts.get("cos(C_v,C_a)"), parts.get("cos(C_v,I_a)"))
        return s_t, s_v, parts

    # ------------------------------------------------------------------ line 11
    def _questions(self, modification: str, text_im: Imagination, vision_im: Imagination,
                   trace: Trace) -> tuple[list[Question], bool]:
        n = self.config.num_questions
        role = self.ctx.roles[ROLE_QUESTIONER]
        m_t = "\n".join(f"- {m}" for m in text_im.modifications) or "- (none)"
        m_v = "\n".join(f"- {a}: {'present' if p else 'absent'}" for a, p in vision_im.attributes) or "- (none)"
        msg = prompt_message("questions.txt", modification=modification, text_modifications=m_t,
                             visual_attributes=m_v, n=str(n))

        def fallback() -> dict[str, Any]:
            qs = [{"question": f"The image shows {a}.", "answer": p} for a, p in vision_im.attributes[:n]]
            return {"questions": qs or [{"question": f"The image matches this request: {modification.strip()}",
                                         "answer": True}]}

        value, ok = role.json([msg], _questions_schema(n), validate=_clean_questions, fallback=fallback)
        questions = [Question(q["question"], q["answer"]) for q in value["questions"]]
        if not ok:
            trace.count("xr.questions_fallback")
        else:
            note_capped(value, _questions_schema(n), "question agent output", counts=frozenset({"questions"}))
        if ok and len(questions) < n:
            trace.count("xr.questions_short")
            note(f"asked for {n} questions, the question agent gave {len(questions)}")
        return questions, ok

    # ------------------------------------------------------------------ lines 12-14
    def _verify(self, role: Role, modality: str, records: list[ImageRecord], questions: list[Question],
                trace: Trace) -> list[list[bool | None]]:
        """Each candidate's answer to each question (None = unanswerable reply, counted, scored 0)."""
        counter = f"xr.unanswered_{modality}"

        def candidate_input(record: ImageRecord) -> dict[str, Any]:
            if modality == "text":
                return {"caption": record_caption(record) or "(no caption)"}
            return {"image": ImagePart(record=record)}

        if self.config.batch_questions:
            listing = "\n".join(f"{n}. {q.text}" for n, q in enumerate(questions, 1))
            k = len(questions)

            def ask_all(record: ImageRecord) -> list[bool | None]:
                msg = prompt_message(f"verify_{modality}_batch.txt", questions=listing, n=str(k),
                                     **candidate_input(record))
                value, ok = role.json([msg], _answers_schema(k), validate=_exact_length(k), fallback=lambda: None,
                                      max_tokens=16 + 8 * k)
                if not ok:
                    trace.count(counter, k)
                    return [None] * k
                return list(value["answers"])

            return map_threads(ask_all, records, self.config.concurrency or role.concurrency)

        inputs = [candidate_input(r) for r in records]  # once per candidate, not per question
        pairs = [(i, q) for i in range(len(records)) for q in questions]

        def ask(pair: tuple[int, Question]) -> bool | None:
            i, question = pair
            answer = role.yes_no([prompt_message(f"verify_{modality}.txt", question=question.text,
                                                 **inputs[i])]).answer
            if answer is None:
                trace.count(counter)
            return answer

        flat = map_threads(ask, pairs, self.config.concurrency or role.concurrency)
        k = len(questions)
        return [flat[i * k:(i + 1) * k] for i in range(len(records))]


# --------------------------------------------------------------------------- validators for Role.json


def _require_caption(value: dict[str, Any]) -> dict[str, Any]:
    if not str(value.get("target_caption", "")).strip():
        raise ValueError("empty target caption")
    return value


def _clean_questions(value: dict[str, Any]) -> dict[str, Any]:
    """Drop empty and repeated statements; at least one must remain (else Role.json retries)."""
    seen: set[str] = set()
    out = []
    for q in value["questions"]:
        text = q["question"].strip()
        key = text.lower().rstrip(".")
        if text and key not in seen:
            seen.add(key)
            out.append({"question": text, "answer": q["answer"]})
    if not out:
        raise ValueError("no questions")
    return {"questions": out}


def _exact_length(k: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        if len(value["answers"]) != k:
            raise ValueError(f"expected {k} answers, got {len(value['answers'])}")
        return value

    return check
