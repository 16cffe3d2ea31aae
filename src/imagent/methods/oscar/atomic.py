"""OSCAR's retrieval tools and atomic retrievals (paper Sec. 3.2).

A *retriever* is one vector space of the index searched with its encoder's query side (config
``methods.oscar.retrievers``; by default the index's three spaces: the dual encoder's image vectors, captions
in the dual text space, captions in the text embedder's space; plus one per space of each extra encoder
``[encoders.<name>]``: :meth:`OscarConfig.for_context`). The planner calls them as tools online; the
library builder calls all of them offline.

An *atomic retrieval* ``(tool, rewritten query, polarity, k)`` is one planning unit. The rewriter role
decomposes the modification into positive queries (what the target shows: shared concept + additions) and
negative queries (only what must be absent, never the shared concept). Each family (tool, query, polarity)
is retrieved once at ``k_max`` and sliced at every truncation level, so the decision space is the Cartesian
product tools x queries x levels for the MIPs of :mod:`imagent.tools.oscar_mip`.

Caption mode: with the offline defaults (caption-mode dual encoder and text embedder both MiniLM) the three
spaces hold the same caption vectors; the embedding tool still differs from the caption tools because it
fuses the reference image's vector into positive queries (``reference_weight``). With a real CLIP the three
spaces are three different retrievers, as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from string import Template
from typing import Any, Literal

import numpy as np

from imagent.core.trace import note
from imagent.core.types import Query
from imagent.core.vectors import l2_normalize
from imagent.index.gallery import SPACE_IMAGE, split_space
from imagent.index.scoring import top_k
from imagent.methods.base import MethodContext, load_prompt
from imagent.methods.oscar.config import OscarConfig, RetrieverSpec
from imagent.models.base import Message
from imagent.tools.oscar_mip import AtomicRetrieval

Polarity = Literal["+", "-"]
MAX_QUERY_CHARS = 200


@dataclass
class Rewrites:
    """The rewriter's decomposition: positive (include) and negative (exclude) queries."""

    positive: list[str] = field(default_factory=list)
    negative: list[str] = field(default_factory=list)
    ok: bool = True  # False: the rewriter's output was unusable and only the original query is searched

    def queries(self) -> list[tuple[str, Polarity]]:
        return [(q, "+") for q in self.positive] + [(q, "-") for q in self.negative]


def reference_caption(ctx: MethodContext, query: Query) -> str:
    """The reference's stored caption (the gallery's copy when the query carries only an id); '' without one."""
    ref = query.reference
    if ref is None:
        return ""
    if not ref.captions and ref.id in ctx.gallery:
        ref = ctx.gallery.record(ref.id)
    return ref.caption if ref.captions else ""


def problem_context(modification: str, caption: str) -> str:
    """What keys the golden library (Sec. 3.5): the modification text followed by the reference caption."""
    return f"{modification.strip()} {caption.strip()}".strip()


class Retrievers:
    """The retrieval tools for one query: search a space over the query's pool (subset, exclusions), with
    query encodings shared between calls."""

    def __init__(self, ctx: MethodContext, specs: dict[str, RetrieverSpec], query: Query) -> None:
        self.ctx = ctx
        self.query = query
        self.specs = {n: s for n, s in specs.items() if ctx.gallery.has_space(s.space)}
        missing = sorted(set(specs) - set(self.specs))
        if missing:
            note(f"the index lacks the vector spaces of {', '.join(missing)}: those tools are not offered")
        if not self.specs:
            raise ValueError("none of OSCAR's retrievers has its vector space in the index; re-index")
        self.rows = ctx.pool(query)
        self._vecs: dict[tuple[str, str, str], np.ndarray] = {}
        self._raw: dict[tuple[str, str], np.ndarray] = {}  # (encoder model id, text) -> query vector
        self._ref: dict[str, np.ndarray | None] = {}

    def names(self) -> list[str]:
        return list(self.specs)

    def _reference_vector(self, space: str) -> np.ndarray | None:
        if space not in self._ref:
            ref = self.query.reference
            vec: np.ndarray | None = None
            if ref is not None:
                if split_space(space)[0] == SPACE_IMAGE:  # image, or image@<extra dual encoder>
                    vec = self.ctx.image_vector(ref, space)
                elif ref.id in self.ctx.gallery:
                    vec = self.ctx.gallery.vector(space, ref.id)
                else:
                    caption = reference_caption(self.ctx, self.query)
                    vec = self.ctx.encode([caption], space)[0] if caption else None
            self._ref[space] = vec
        return self._ref[space]

    def encode(self, pairs: list[tuple[str, str]]) -> None:
        """Encode many ``(tool, text)`` pairs at once (one batch per encoder), ahead of :meth:`vector`."""
        todo: dict[str, list[str]] = {}
        for tool, text in pairs:
            space = self.specs[tool].space
            enc = self.ctx.encoder_for(space).model_id
            if (enc, text) not in self._raw and text not in todo.setdefault(space, []):
                todo[space].append(text)
        for space, texts in todo.items():
            enc = self.ctx.encoder_for(space).model_id
            texts = [t for t in texts if (enc, t) not in self._raw]
            if texts:
                for t, v in zip(texts, self.ctx.encode(texts, space), strict=True):
                    self._raw[(enc, t)] = np.asarray(v, dtype=np.float32)

    def vector(self, tool: str, text: str, polarity: Polarity) -> np.ndarray:
        spec = self.specs[tool]
        key = (spec.space, text, polarity if spec.reference_weight > 0 else "")
        vec = self._vecs.get(key)
        if vec is None:
            self.encode([(tool, text)])
            self.ctx.check_space(spec.space)
            vec = self._raw[(self.ctx.encoder_for(spec.space).model_id, text)]
            if polarity == "+" and spec.reference_weight > 0:
                ref = self._reference_vector(spec.space)
                if ref is not None:
                    w = spec.reference_weight
                    vec = l2_normalize((1.0 - w) * vec + w * ref)
            self._vecs[key] = vec
        return vec

    def scan(self, calls: list[tuple[str, str, Polarity]]) -> np.ndarray:
        """Cosine of each ``(tool, text, polarity)`` with every gallery image: one row per call, aligned with the
        gallery's rows, -inf outside the query's pool.

        All calls on one stored matrix are scored by one matrix product (spaces stored as one file, like the
        caption-mode defaults, share it), and a vector asked twice is scored once. Exact, like the index's
        default search (an approximate store, when the index has one, is not used here)."""
        gallery = self.ctx.gallery
        out = np.empty((len(calls), len(gallery)), dtype=np.float32)
        groups: dict[int, tuple[str, dict[bytes, tuple[np.ndarray, list[int]]]]] = {}
        self.encode([(tool, text) for tool, text, _ in calls])
        for n, (tool, text, pol) in enumerate(calls):
            space = self.specs[tool].space
            vec = self.vector(tool, text, pol)
            _, vecs = groups.setdefault(id(gallery.vector_shards(space)), (space, {}))
            vecs.setdefault(vec.tobytes(), (vec, []))[1].append(n)
        for space, vecs in groups.values():
            scores = gallery.scan(np.stack([v for v, _ in vecs.values()]), space, self.rows)
            for row, (_, targets) in zip(scores, vecs.values(), strict=True):
                out[targets] = row
        return out

    def top_ids(self, scores: np.ndarray, k: int) -> list[str]:
        """The ids of the ``k`` best of one :meth:`scan` row inside the pool, best first (ties: gallery order)."""
        best = top_k(scores, k)
        best = best[np.isfinite(scores[best])]
        ids = self.ctx.gallery.ids
        return [ids[int(r)] for r in best]

    def pool_ids(self) -> list[str]:
        return self.ctx.pool_ids(self.rows)


# --------------------------------------------------------------------------- the rewriter

def rewriter_schema(cfg: OscarConfig) -> dict[str, Any]:
    item = {"type": "string", "maxLength": MAX_QUERY_CHARS}
    return {"type": "object",
            "properties": {"positive": {"type": "array", "maxItems": cfg.max_positive_queries, "items": item},
                           "negative": {"type": "array", "maxItems": cfg.max_negative_queries, "items": item}},
            "required": ["positive", "negative"]}


def _clean_queries(items: Any, limit: int) -> list[str]:
    out: list[str] = []
    for q in items if isinstance(items, list) else []:
        text = " ".join(str(q).split())[:MAX_QUERY_CHARS]
        if text and text.lower() not in {o.lower() for o in out}:
            out.append(text)
    return out[:limit]


def rewrite(ctx: MethodContext, cfg: OscarConfig, modification: str, caption: str, tir: bool = False) -> Rewrites:
    """One rewriter call: positive and negative queries (JSON), parsed robustly, with a fallback to none.
    ``tir``: a text-to-image request (no reference image; Sec. 4.5), with its own prompt."""
    if cfg.max_positive_queries == 0 and cfg.max_negative_queries == 0:
        return Rewrites()
    prompt = Template(load_prompt("oscar/rewriter_tir.txt" if tir else "oscar/rewriter.txt")).safe_substitute(
        modification=modification, caption=caption or "(no caption)",
        max_positive=cfg.max_positive_queries, max_negative=cfg.max_negative_queries)

    def validate(value: dict[str, Any]) -> Rewrites:
        r = Rewrites(_clean_queries(value.get("positive"), cfg.max_positive_queries),
                     _clean_queries(value.get("negative"), cfg.max_negative_queries))
        if not r.positive and not r.negative:
            raise ValueError("no rewritten query")
        return r

    value, _ok = ctx.roles["rewriter"].json([Message.user(prompt)], rewriter_schema(cfg),
                                            fallback=lambda: Rewrites(ok=False), validate=validate, retries=1,
                                            max_tokens=300)
    return value


def search_queries(cfg: OscarConfig, modification: str, caption: str, rewrites: Rewrites) -> list[tuple[str, Polarity]]:
    """The (query, polarity) pairs searched: the original composed query first (when enabled), then the rewrites."""
    out: list[tuple[str, Polarity]] = []
    if cfg.original_query or not rewrites.positive:
        out.append((f"{caption} {modification}".strip(), "+"))
    for q, pol in rewrites.queries():
        if (q, pol) not in out:
            out.append((q, pol))
    return out


def atomic_retrievals(retrievers: Retrievers, cfg: OscarConfig, queries: list[tuple[str, Polarity]]
                      ) -> list[AtomicRetrieval]:
    """Every family retrieved once at ``k_max``, sliced at each truncation level (the decision space)."""
    out: list[AtomicRetrieval] = []
    families = [(tool, qi, text, pol) for tool in retrievers.names() for qi, (text, pol) in enumerate(queries)]
    scores = retrievers.scan([(tool, text, pol) for tool, _qi, text, pol in families])
    for (tool, qi, text, pol), row in zip(families, scores, strict=True):
        ranked = tuple(retrievers.top_ids(row, cfg.k_max))
        for k in cfg.truncations:
            out.append(AtomicRetrieval(f"{tool}|{pol}{qi}|k{k}", tool, text, pol, k, ranked))
    return out


__all__ = [
    "Retrievers",
    "Rewrites",
    "atomic_retrievals",
    "problem_context",
    "reference_caption",
    "rewrite",
    "search_queries",
]
