"""OSCAR's hyper-parameters: one config class (``methods.oscar.*``), the paper's defaults where it gives
them (truncation levels, one demonstration, the sigmoid verifier score), documented choices elsewhere."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from imagent.core.config import user_data_dir
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, encoder_space
from imagent.methods.base import MethodConfig
from imagent.tools.oscar_mip import MipWeights


class RetrieverSpec(BaseModel):
    """One retrieval tool: a vector space of the index searched with the query side of its encoder.

    ``kind`` is what the planner is told (``embedding``: visual similarity; ``caption``: text search over
    captions). ``reference_weight`` > 0 fuses the reference image's vector into *positive* queries (the
    paper's embedding tools take the reference image; a negative query names only the absent thing, so it
    is never fused)."""

    model_config = ConfigDict(extra="forbid")

    space: str
    kind: Literal["embedding", "caption"] = "caption"
    reference_weight: float = Field(0.0, ge=0.0, lt=1.0)
    description: str = ""


def default_retrievers() -> dict[str, RetrieverSpec]:
    """The default offline tools: the index's three vector spaces."""
    return {
        "embedding_search_dual": RetrieverSpec(
            space=SPACE_IMAGE, kind="embedding", reference_weight=0.5,
            description="visual similarity: the query (fused with the reference image) against image vectors; "
                        "best for visual attributes, colours, spatial relations"),
        "caption_search_dual": RetrieverSpec(
            space=SPACE_CAPTION_DUAL, kind="caption",
            description="the query against image captions in the dual encoder's text space"),
        "caption_search_text": RetrieverSpec(
            space=SPACE_CAPTION_TEXT, kind="caption",
            description="the query against image captions in the text embedder's space; best for semantic "
                        "descriptions and conceptual changes"),
    }


def extra_retrievers(extras: Iterable[Any]) -> dict[str, RetrieverSpec]:
    """One tool per space of each extra encoder (``[encoders.<name>]``; items with ``name`` and ``kind``):
    a dual encoder X gives ``embedding_search_X`` (``image@X``, fused with the reference like the default
    embedding tool) and ``caption_search_dual_X`` (``caption_dual@X``); a text embedder X gives
    ``caption_search_text_X`` (``caption_text@X``)."""
    out: dict[str, RetrieverSpec] = {}
    for e in extras:
        if e.kind == "dual":
            out[f"embedding_search_{e.name}"] = RetrieverSpec(
                space=encoder_space(SPACE_IMAGE, e.name), kind="embedding", reference_weight=0.5,
                description=f"visual similarity with the {e.name} dual encoder: the query (fused with the reference "
                            "image) against its image vectors; a second view for visual attributes")
            out[f"caption_search_dual_{e.name}"] = RetrieverSpec(
                space=encoder_space(SPACE_CAPTION_DUAL, e.name), kind="caption",
                description=f"the query against image captions in the {e.name} dual encoder's text space")
        else:
            out[f"caption_search_text_{e.name}"] = RetrieverSpec(
                space=encoder_space(SPACE_CAPTION_TEXT, e.name), kind="caption",
                description=f"the query against image captions in the {e.name} text embedder's space; a second "
                            "view for semantic descriptions")
    return out


def default_library_path() -> Path:
    return user_data_dir() / "oscar" / "library.jsonl"


class OscarConfig(MethodConfig):
    # ---- tools and atomic retrievals (Sec. 3.2)
    retrievers: dict[str, RetrieverSpec] = Field(
        default_factory=default_retrievers, description="retrieval tools: name -> {space, kind, reference_weight}; "
        "left unset: the three main spaces plus one tool per space of each [encoders.<name>] entry")
    truncations: list[int] = Field(default_factory=lambda: list(range(5, 55, 5)),
                                   description="top-k levels K (paper: 5..50 step 5); retrieved once at max(K)")
    max_positive_queries: int = Field(3, ge=0, le=8, description="rewriter: most positive (include) queries")
    max_negative_queries: int = Field(2, ge=0, le=8, description="rewriter: most negative (exclude) queries")
    original_query: bool = Field(True, description="also search the reference caption + modification as one "
                                 "positive query (the caption baseline's query)")
    # ---- the two MIPs (decision 2; the paper gives no weights)
    w_R: float = Field(MipWeights().w_R, ge=0.0, description="Stage I recall weight")
    w_P: float = Field(MipWeights().w_P, ge=0.0, description="Stage I noise weight")
    lambda_div: float | None = Field(MipWeights().lambda_div, ge=0.0, description="Stage I tool-diversity bonus "
                                     "per tool; unset: a tie-break only (never changes the targets covered)")
    lambda_fp: float = Field(MipWeights().lambda_fp, ge=0.0, description="Stage II false-positive penalty")
    mip_time_limit_s: float = Field(60.0, gt=0, description="HiGHS time limit per stage (not reached in practice)")
    # ---- online steering (Sec. 3.5, Appendix I)
    library: str = Field("", description="golden library (JSONL); empty: <data dir>/oscar/library.jsonl")
    demonstrations: bool = Field(True, description="retrieve golden trajectories as demonstrations (False: "
                                 "the paper's w/o Demo. ablation)")
    shots: int = Field(1, ge=1, le=4, description="demonstrations retrieved per query (paper: 1, insensitive 1-4)")
    set_operations: Literal["full", "no_difference", "union_only"] = Field(
        "full", description="ablations: full, no_difference (w/o Set.Diff.), union_only (w/o Diff. & Int.)")
    tool_protocol: Literal["auto", "json", "native", "text"] = Field(
        "auto", description="how the planner writes its plan: one JSON plan decoded under a grammar built from the "
        "tools, the ablation's operations and valid operands (json), native OpenAI tool calls (native), the "
        "paper's <tool_call> blocks (text); auto: json on llama.cpp (in-process, or a server with "
        "json_mode=json_object), else native where the backend has tool calls, else text")
    grammar_max_calls: int = Field(6, ge=1, le=12, description="json protocol: the most retrieval calls the plan "
                                   "grammar offers (also capped by max_calls_per_plan)")
    plan_retries: int = Field(1, ge=0, description="extra planner calls when a plan cannot be executed")
    planner_max_tokens: int = Field(1024, ge=64)
    max_calls_per_plan: int = Field(12, ge=1, description="retrieval calls of a plan executed at most")
    fallback_top_k: int = Field(20, ge=1, description="top_k of the fallback plan when no call could be read")
    # ---- verifier (Appendix F) and final ranking (decision 3)
    verify: bool = Field(True, description="score the composed set with the verifier")
    max_verified: int = Field(50, ge=0, description="cap on verified candidates (the composed set's first, "
                          "in fused-similarity order)")

    @field_validator("truncations")
    @classmethod
    def _truncations(cls, v: list[int]) -> list[int]:
        levels = sorted(set(int(k) for k in v))
        if not levels or levels[0] < 1:
            raise ValueError("truncations must be positive integers")
        return levels

    @field_validator("retrievers")
    @classmethod
    def _retrievers(cls, v: dict[str, RetrieverSpec]) -> dict[str, RetrieverSpec]:
        if not v:
            raise ValueError("OSCAR needs at least one retriever")
        bad = [n for n in v if not n.replace("_", "").isalnum() or n == "set_operation"]
        if bad:
            raise ValueError(f"retriever names must be identifiers other than set_operation: {bad}")
        return v

    def for_context(self, ctx: Any) -> OscarConfig:
        """``retrievers`` left at its default also offers one tool per space of each extra encoder the context
        has (:func:`extra_retrievers`); a ``retrievers`` table the user wrote is kept as written."""
        extras = getattr(ctx, "extras", None) or {}
        if "retrievers" in self.model_fields_set or not extras:
            return self
        added = {n: s for n, s in extra_retrievers(extras.values()).items() if n not in self.retrievers}
        return self.model_copy(update={"retrievers": {**self.retrievers, **added}}) if added else self

    @property
    def k_max(self) -> int:
        return self.truncations[-1]

    def weights(self) -> MipWeights:
        return MipWeights(w_R=self.w_R, w_P=self.w_P, lambda_div=self.lambda_div, lambda_fp=self.lambda_fp)

    def library_path(self) -> Path:
        return Path(self.library).expanduser() if self.library else default_library_path()


__all__ = ["OscarConfig", "RetrieverSpec", "default_library_path", "default_retrievers", "extra_retrievers"]
