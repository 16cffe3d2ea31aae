"""The plain baselines the papers compare against.

- ``clip``: zero-shot dual-encoder retrieval. Text-to-image: the text vector against image vectors.
  Composed: the normalised weighted sum of the text vector and the reference image vector (the
  "image + text" late-fusion baseline of the CIR papers). Chat: the dialogue folded into the text.
- ``caption``: the query text against caption vectors in the text embedder's space.
- ``cirevl``: CIReVL-style caption-then-retrieve. The reference is described (its stored caption, or
  the captioner role), a reasoner rewrites that description by the modification into a target
  description, and the target description is retrieved against image vectors with the dual encoder.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking
from imagent.core.vectors import l2_normalize
from imagent.index.gallery import SPACE_CAPTION_TEXT, SPACE_IMAGE
from imagent.methods.base import Method, MethodConfig, fold_dialogue, load_prompt, register_method
from imagent.models.base import Message


class ClipConfig(MethodConfig):
    text_weight: float = Field(0.5, ge=0.0, le=1.0, description="CIR fusion: weight of the text vector")


@register_method
class ClipBaseline(Method):
    name = "clip"
    tasks = frozenset({"tir", "cir", "chat"})
    Config = ClipConfig
    description = "dual-encoder zero-shot retrieval (text, or text + reference image fused)"

    def search_spaces(self) -> list[str]:
        return [SPACE_IMAGE]

    def run(self, query: Query, top_k: int, trace: Trace) -> Ranking:
        cfg: ClipConfig = self.config  # type: ignore[assignment]
        text = fold_dialogue(query) if query.task == "chat" else query.text
        with trace.step("encode_query", text=text) as step:
            vec = self.ctx.encode([text], SPACE_IMAGE)[0]
            ref_rec = query.reference
            if ref_rec is not None and self.ctx.caption_mode and not ref_rec.has_caption:
                # Caption mode sees an image only through its text: a reference without a caption adds
                # nothing (or only file-name words) to the query, so say so instead of fusing silently.
                if ref_rec.derived_text:
                    step.note(f"reference {ref_rec.id} has no caption and no model sees pixels: fused by its "
                              f"derived text ({ref_rec.derived_text[:60]!r}), not by its content")
                else:
                    step.note(f"reference {ref_rec.id} has no caption and no model sees pixels: it adds nothing; "
                              "searched by the text alone (a pixel-seeing dual encoder: `imagent models presets`)")
                    ref_rec = None
                    step.outputs["fused_with_reference"] = None
            if ref_rec is not None:
                ref = self.ctx.image_vector(ref_rec)
                vec = l2_normalize(cfg.text_weight * vec + (1.0 - cfg.text_weight) * ref)
                step.outputs["fused_with_reference"] = ref_rec.id
            if self.ctx.caption_mode:
                step.note("caption mode: image vectors are caption embeddings"
                          + (", and what the pixel model saw (ConSE) for photos without a caption"
                             if self.ctx.gallery.has_space("visual") else ""))
        with trace.step("retrieve", space=SPACE_IMAGE, k=top_k) as step:
            ranking = self.ctx.rank(query, vec, SPACE_IMAGE, top_k)
            step.outputs["top"] = ranking.head(5)
        return ranking


class CaptionConfig(MethodConfig):
    include_reference_caption: bool = Field(
        False, description="CIR: prepend the reference caption to the modification text"
    )


@register_method
class CaptionBaseline(Method):
    name = "caption"
    tasks = frozenset({"tir", "cir", "chat"})
    Config = CaptionConfig
    description = "query text against gallery captions in the text embedder's space"

    def search_spaces(self) -> list[str]:
        return [SPACE_CAPTION_TEXT]

    def run(self, query: Query, top_k: int, trace: Trace) -> Ranking:
        cfg: CaptionConfig = self.config  # type: ignore[assignment]
        text = fold_dialogue(query) if query.task == "chat" else query.text
        if query.reference is not None and cfg.include_reference_caption:
            text = f"{query.reference.caption} {text}".strip()
        with trace.step("retrieve", text=text, space=SPACE_CAPTION_TEXT, k=top_k) as step:
            vec = self.ctx.encode([text], SPACE_CAPTION_TEXT)[0]
            ranking = self.ctx.rank(query, vec, SPACE_CAPTION_TEXT, top_k)
            step.outputs["top"] = ranking.head(5)
        return ranking


class CIReVLConfig(MethodConfig):
    max_tokens: int = Field(80, ge=8, description="length cap of the edited description")


@register_method
class CIReVL(Method):
    name = "cirevl"
    image_roles = ("captioner",)  # the reference, described
    tasks = frozenset({"cir"})
    Config = CIReVLConfig
    description = "caption the reference, LLM-edit the caption by the modification, retrieve the result"
    fallback_counters: ClassVar[dict[str, str]] = {"edit_fallback": "reference_plus_modification"}
    description = "caption the reference, LLM-edit the caption by the modification, retrieve the result"

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        return 1  # the edit; +1 captioner call for a reference without a caption that a vision model describes

    def search_spaces(self) -> list[str]:
        return [SPACE_IMAGE]  # the edited description against the image vectors

    def run(self, query: Query, top_k: int, trace: Trace) -> Ranking:
        cfg: CIReVLConfig = self.config  # type: ignore[assignment]
        assert query.reference is not None
        with trace.step("describe_reference", reference=query.reference.id) as step:
            reference = self.ctx.describe_image(query.reference)
            step.outputs["reference_description"] = reference
        with trace.step("edit_description", modification=query.text) as step:
            prompt = load_prompt("cirevl/user.txt").format(reference=reference, modification=query.text)
            target = self.ctx.roles["reasoner"].text(
                [Message.system(load_prompt("cirevl/system.txt")), Message.user(prompt)],
                max_tokens=cfg.max_tokens, repeat_penalty=1.1,
            )
            target = clean_description(target)
            if not target:
                # An empty edit would retrieve nothing meaningful: keep the information we have.
                target = f"{reference} {query.text}".strip()
                trace.count("edit_fallback")
                step.note("empty edit: fell back to reference description + modification")
            step.outputs["target_description"] = target
        with trace.step("retrieve", space=SPACE_IMAGE, k=top_k) as step:
            vec = self.ctx.encode([target], SPACE_IMAGE)[0]
            ranking = self.ctx.rank(query, vec, SPACE_IMAGE, top_k)
            step.outputs["top"] = ranking.head(5)
        return ranking


def clean_description(text: str) -> str:
    """First non-empty line, without a leading label or surrounding quotes."""
    for line in (text or "").splitlines():
        line = line.strip().strip('"').strip()
        for label in ("edited description:", "target description:", "description:"):
            if line.lower().startswith(label):
                line = line[len(label):].strip().strip('"')
        if line:
            return line
    return ""


__all__ = ["CIReVL", "CaptionBaseline", "ClipBaseline", "fold_dialogue"]
