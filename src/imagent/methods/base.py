"""What every method stands on: the context (gallery, encoders, roles, tools), the base class,
the per-method config class and the registry.

A method is a readable pipeline: ``run`` opens named trace steps and composes the gallery's search
and the scoring helpers. Its hyper-parameters are a pydantic model (``Config``) whose defaults are the
paper's, so ``--set imagescope.tau=0.3`` is validated against the class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from imagent.core.trace import Trace, note
from imagent.core.types import ImageRecord, Query, Ranking, Result
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from imagent.index.scoring import stable_order, top_k
from imagent.models.base import DualEncoder, TextEmbedder
from imagent.models.roles import Roles


class MethodConfig(BaseModel):
    """Base of every method's hyper-parameters. Unknown keys are errors (typos in ``--set``)."""

    model_config = ConfigDict(extra="forbid")
    # Parallel model calls inside one query (verifier fan-out); 1 = sequential.
    concurrency: int = 1


@dataclass
class MethodContext:
    """Everything a method may use. Built by :class:`imagent.api.Workspace` or directly in tests."""

    gallery: Gallery
    dual: DualEncoder
    text: TextEmbedder
    roles: Roles
    tools: dict[str, Any] = field(default_factory=dict)

    def encoder_for(self, space: str) -> DualEncoder | TextEmbedder:
        return self.text if space == SPACE_CAPTION_TEXT else self.dual

    def check_space(self, space: str) -> None:
        """Refuse to compare vectors from different models (index built with other encoders)."""
        info = self.gallery.spaces().get(space)
        enc = self.encoder_for(space)
        if info is not None and info.model_id != enc.model_id:
            from imagent.index.gallery import GalleryError

            raise GalleryError(
                f"the index's {space!r} vectors come from {info.model_id}, but the configured encoder "
                f"is {enc.model_id}; re-index or configure the same model"
            )

    def encode(self, texts: list[str], space: str) -> np.ndarray:
        """Texts into the query side of ``space`` (CLIP text encoder for image/caption_dual)."""
        self.check_space(space)
        return self.encoder_for(space).encode_texts(texts)

    def image_vector(self, record: ImageRecord) -> np.ndarray:
        """A reference image's vector in the ``image`` space: stored if it is in the gallery."""
        if record.id in self.gallery and self.gallery.has_space(SPACE_IMAGE):
            return np.asarray(self.gallery.vectors(SPACE_IMAGE)[self.gallery.row(record.id)], dtype=np.float32)
        return self.dual.encode_images([record])[0]

    @property
    def caption_mode(self) -> bool:
        return not self.dual.sees_pixels

    def pool(self, query: Query) -> np.ndarray | None:
        """Rows a query may return: its candidate subset, metadata constraints and exclusions."""
        return self.gallery.candidate_rows(query.constraints, query.candidates, query.exclude)

    def pool_scores(self, query_vec: np.ndarray, space: str, rows: np.ndarray | None) -> np.ndarray:
        return self.gallery.scores(query_vec, space, rows)

    def pool_ids(self, rows: np.ndarray | None) -> list[str]:
        return list(self.gallery.ids) if rows is None else [self.gallery.ids[int(r)] for r in rows]

    def rank(self, query: Query, query_vec: np.ndarray, space: str, top_k: int) -> Ranking:
        """Exact cosine top-k of one query vector over the query's pool (subset, filters, exclusions)."""
        return self.gallery.search(query_vec, space, top_k, query.constraints, query.candidates, query.exclude)

    def describe_image(self, record: ImageRecord, role: str = "captioner") -> str:
        """An image's description: its stored caption when it has one (no model call), else the
        ``role`` model's one-sentence description. Which one was used goes into the trace."""
        if record.captions:
            note(f"image {record.id}: used its stored caption")
            return record.caption
        from imagent.models.base import ImagePart, Message

        prompt = load_prompt("common/describe_image.txt")
        text = self.roles[role].text([Message.user(prompt, ImagePart(record=record))], max_tokens=80)
        note(f"image {record.id}: described by the {role} role")
        return text or ""


def load_prompt(relative: str) -> str:
    """A prompt template shipped in ``imagent/methods/prompts/`` (prompts live in their own files)."""
    from importlib.resources import files

    return (files("imagent.methods") / "prompts" / relative).read_text(encoding="utf-8").strip()


def ranking_from_scores(ids: list[str], scores: np.ndarray, k: int | None = None) -> Ranking:
    """Stable descending ranking of ``ids`` by ``scores``; ``k=None`` keeps every id."""
    order = stable_order(scores) if k is None else top_k(np.asarray(scores), k)
    return Ranking([ids[int(i)] for i in order], [float(scores[int(i)]) for i in order])


def fold_dialogue(query: Query) -> str:
    """Chat retrieval: the opening description and every answered question, comma-joined
    (the PlugIR/ChatIR convention: ``", ".join(dialog[:r+1])``)."""
    parts = [query.text.strip()]
    parts += [f"{t.question.strip()} {t.answer.strip()}".strip() for t in query.dialogue]
    return ", ".join(p for p in parts if p)


def text_score_vector(ctx: MethodContext, texts: list[str], spaces_weights: list[tuple[str, float]],
                      rows: np.ndarray | None) -> np.ndarray:
    """Mean over ``texts`` of the weighted sum over spaces of cosine scores (ImageScope-style
    multi-description scoring; used by any method that averages several target descriptions).
    Spaces the index lacks are skipped and the weights renormalised, with a trace note."""
    present = [(s, w) for s, w in spaces_weights if ctx.gallery.has_space(s) and w > 0]
    missing = [s for s, w in spaces_weights if w > 0 and not ctx.gallery.has_space(s)]
    if missing:
        note(f"index has no {', '.join(missing)} vectors: scored with {', '.join(s for s, _ in present)} only")
    if not present:
        raise ValueError("none of the requested vector spaces is in the index")
    total_w = sum(w for _, w in present)
    n = len(ctx.gallery) if rows is None else len(rows)
    out = np.zeros(n, dtype=np.float32)
    encoded: dict[str, np.ndarray] = {}  # image and caption_dual share the dual encoder: encode once
    for space, w in present:
        enc_id = ctx.encoder_for(space).model_id
        if enc_id not in encoded:
            encoded[enc_id] = ctx.encode(texts, space)
        else:
            ctx.check_space(space)
        q = encoded[enc_id]
        s = ctx.gallery.scores(q, space, rows)  # (len(texts), n)
        out += (w / total_w) * np.asarray(s, dtype=np.float32).reshape(len(texts), n).mean(axis=0)
    return out


class Method(ABC):
    """Base class. Subclasses set ``name``, ``tasks`` and ``Config``, and implement ``run``."""

    name: ClassVar[str]
    tasks: ClassVar[frozenset[str]] = frozenset({"tir", "cir"})
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    description: ClassVar[str] = ""

    def __init__(self, ctx: MethodContext, config: MethodConfig | dict[str, Any] | None = None) -> None:
        self.ctx = ctx
        if config is None:
            config = self.Config()
        elif isinstance(config, dict):
            config = self.Config.model_validate(config)
        self.config = config

    def search(self, query: Query, top_k: int = 50, trace: Trace | None = None) -> Result:
        """Run the method on one query. ``trace`` may be given to observe the search while it runs
        (listeners), cancel it (``cancel_event``) or cap its model calls (``max_calls``)."""
        if query.task not in self.tasks:
            raise ValueError(f"method {self.name!r} handles {sorted(self.tasks)} queries, not {query.task!r}")
        if trace is None:
            trace = Trace()
        trace.method, trace.query = self.name, summarize_query(query)
        with trace.activate():
            out = self.run(query, top_k, trace)
        if isinstance(out, Result):
            return out
        ranking, stages = out if isinstance(out, tuple) else (out, {})
        return Result(ranking=ranking, trace=trace, stages=stages)

    @abstractmethod
    def run(self, query: Query, top_k: int, trace: Trace) -> Ranking | tuple[Ranking, dict[str, Ranking]] | Result:
        """The pipeline. Return the final ranking (at least ``top_k`` long when the pool allows),
        optionally with named intermediate rankings for stage-wise reports, or a whole
        :class:`Result` (set-valued methods fill ``answer_set``)."""


def summarize_query(query: Query) -> dict[str, Any]:
    d: dict[str, Any] = {"id": query.id, "task": query.task, "text": query.text}
    if query.reference is not None:
        d["reference"] = {"id": query.reference.id, "caption": query.reference.caption}
    if query.dialogue:
        d["dialogue"] = [[t.question, t.answer] for t in query.dialogue]
    if query.candidates is not None:
        d["candidates"] = len(query.candidates)
    return d


# --------------------------------------------------------------------------- registry

METHODS: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> type[Method]:
    if cls.name in METHODS and METHODS[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} registered twice")
    METHODS[cls.name] = cls
    return cls


def list_methods() -> dict[str, type[Method]]:
    """Every registered method by name, the built-in ones included."""
    import imagent.methods  # noqa: F401  (registers the built-in methods)

    return dict(sorted(METHODS.items()))


def describe_methods() -> dict[str, dict[str, Any]]:
    """Each method's description, tasks and hyper-parameter defaults (the papers'), by name."""
    return {name: {"description": cls.description, "tasks": sorted(cls.tasks),
                   "defaults": cls.Config().model_dump(mode="json")} for name, cls in list_methods().items()}


def get_method(name: str) -> type[Method]:
    methods = list_methods()
    try:
        return methods[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(methods)}") from None


__all__ = [
    "METHODS",
    "SPACE_CAPTION_DUAL",
    "SPACE_CAPTION_TEXT",
    "SPACE_IMAGE",
    "Method",
    "MethodConfig",
    "MethodContext",
    "describe_methods",
    "fold_dialogue",
    "get_method",
    "list_methods",
    "load_prompt",
    "ranking_from_scores",
    "register_method",
    "text_score_vector",
]
