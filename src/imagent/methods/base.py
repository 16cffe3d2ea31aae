"""What every method stands on: the context (gallery, encoders, roles, tools), the base class,
the per-method config class and the registry.

A method is a readable pipeline: ``run`` opens named trace steps and composes the gallery's search
and the scoring helpers. Its hyper-parameters are a pydantic model (``Config``) whose defaults are the
paper's, so ``--set imagescope.tau=0.3`` is validated against the class.
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from imagent.core.config import ResultOptions
from imagent.core.registry import Registry
from imagent.core.trace import Trace, current_trace, note
from imagent.core.types import ImageRecord, Query, Ranking, Result, Source
from imagent.index.embedding import ExtraEncoder
from imagent.index.gallery import (
    SPACE_CAPTION_DUAL,
    SPACE_CAPTION_TEXT,
    SPACE_IMAGE,
    Gallery,
    GalleryError,
    split_space,
)
from imagent.index.levels import gallery_cut
from imagent.index.scoring import stable_order, top_k
from imagent.models.base import DualEncoder, TextEmbedder
from imagent.models.roles import CallBudgetExceeded, Roles


class MethodConfig(BaseModel):
    """Base of every method's hyper-parameters. Unknown keys are errors (typos in ``--set``)."""

    model_config = ConfigDict(extra="forbid")
    # Parallel model calls inside one query (verifier fan-out). None: as many as the role's backend takes
    # at once (a served model's `concurrency`; 1 for in-process llama.cpp); 1 = sequential.
    concurrency: int | None = Field(None, ge=1)
    # Cap on uncached model calls per query (bounded cost). None: twice the method's expected count at these
    # settings (``Method.estimate_calls``). Past the cap the method stops with its best ranking so far.
    max_calls: int | None = Field(None, ge=0, description="cap on uncached model calls per query (None: 2x the "
                                  "expected count at these settings); past it the best ranking so far is returned")

    def for_context(self, ctx: MethodContext) -> MethodConfig:
        """These settings completed by what ``ctx`` offers (OSCAR: a retrieval tool per extra encoder's space).
        :class:`Method` applies it when it is built; the default changes nothing."""
        return self


@dataclass
class MethodContext:
    """Everything a method may use. Built by :class:`imagent.api.Workspace` or directly in tests."""

    gallery: Gallery
    dual: DualEncoder
    text: TextEmbedder
    roles: Roles
    tools: dict[str, Any] = field(default_factory=dict)
    # Extra encoders by name (config ``[encoders.<name>]``): the query side of spaces ``image@<name>``,
    # ``caption_dual@<name>`` (a dual encoder's text tower) and ``caption_text@<name>`` (a text embedder).
    extras: dict[str, ExtraEncoder] = field(default_factory=dict)
    # How far a cosine ranking's matches go ([results], imagent.index.levels): :meth:`rank` gives each ranking its
    # cut from the query's scores over the gallery. None: rankings carry no cut (no match levels).
    results: ResultOptions | None = None

    def encoder_for(self, space: str) -> DualEncoder | TextEmbedder:
        """The encoder whose text side queries ``space``: the text embedder for ``caption_text``, the dual
        encoder for ``image`` and ``caption_dual``, and extra encoder X for ``<kind>@X``."""
        base, name = split_space(space)
        if name is None:
            return self.text if space == SPACE_CAPTION_TEXT else self.dual
        extra = self.extras.get(name)
        if extra is None:
            raise GalleryError(
                f"space {space!r} belongs to the extra encoder {name!r}, which is not configured: add "
                f"[encoders.{name}] with the model the index holds"
                f"{f' ({self.gallery.spaces()[space].model_id})' if self.gallery.has_space(space) else ''}, "
                f"or search another space (configured extra encoders: {', '.join(self.extras) or 'none'})")
        wanted = "text" if base == SPACE_CAPTION_TEXT else "dual"
        if extra.kind != wanted:
            raise GalleryError(f"space {space!r} needs a {wanted} encoder, but [encoders.{name}] is a {extra.kind} "
                               f"encoder (its spaces: {', '.join(extra.spaces)})")
        return extra.encoder

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

    def image_vector(self, record: ImageRecord, space: str = SPACE_IMAGE) -> np.ndarray:
        """A reference image's vector in an image space (``image``, or ``image@<name>`` of an extra dual
        encoder): stored if it is in the gallery, else encoded by that space's encoder."""
        if record.id in self.gallery and self.gallery.has_space(space):
            return self.gallery.vector(space, record.id)
        return self.encoder_for(space).encode_images([record])[0]

    @property
    def caption_mode(self) -> bool:
        return not self.dual.sees_pixels

    def pool(self, query: Query) -> np.ndarray | None:
        """Rows a query may return: its candidate subset, metadata constraints and exclusions."""
        return self.gallery.candidate_rows(query.constraints, query.candidates, query.exclude)

    def pool_scores(self, query_vec: np.ndarray, space: str, rows: np.ndarray | None) -> np.ndarray:
        return self.gallery.scores(query_vec, space, rows)

    def pool_ids(self, rows: np.ndarray | None) -> list[str]:
        return list(self.gallery.ids) if rows is None else self.gallery.id_array[rows].tolist()

    def pool_id_array(self, rows: np.ndarray | None) -> np.ndarray:
        """:meth:`pool_ids` as a numpy object array (``ids[i]`` is a ``str``): no Python list of the whole
        pool is built when only its top few ids are read."""
        return self.gallery.id_array if rows is None else self.gallery.id_array[rows]

    def rank(self, query: Query, query_vec: np.ndarray, space: str, top_k: int) -> Ranking:
        """Exact cosine top-k of one query vector over the query's pool (subset, filters, exclusions), with where
        its matches stop (``Ranking.cut``, from the query's scores over the whole gallery: :mod:`imagent.index.levels`)
        when :attr:`results` is set and the query has no candidate subset of its own (a benchmark's per-query
        gallery)."""
        ranking = self.gallery.search(query_vec, space, top_k, query.constraints, query.candidates, query.exclude)
        if self.results is not None and query.candidates is None:
            ranking.cut = gallery_cut(self.gallery, query_vec, space, self.results)
        return ranking

    def describe_image(self, record: ImageRecord, role: str = "captioner") -> str:
        """An image's description: its stored caption when it has one (no model call), else the
        ``role`` model's one-sentence description when that model sees pixels. A blind model is never
        asked to describe an image it cannot see (it would make one up): what the pixel model saw of it is used
        instead when the index has seen it (its pixel description, :mod:`imagent.index.describe`: labels with their
        parent category, people, the text in it, then date and place), else its derived text (file/folder words,
        date, place), marked in the trace; without either the query is refused with what to configure. Which one
        was used goes into the trace."""
        if record.captions:
            note(f"image {record.id}: used its stored caption")
            return record.caption
        if self.roles[role].caption_mode:
            if not record.description and record.id in self.gallery:
                record = self.gallery.record(record.id)  # a bare reference: the index's record, described
            if record.description:
                note(f"image {record.id}: no caption and the {role} role cannot see pixels: used its pixel description "
                     "(what the pixel model saw, people, date and place: a description from the pixel model, not a "
                     "caption)")
                trace = current_trace()
                if trace is not None:
                    trace.count("pixel_descriptions")
                return record.surrogate()
            if record.derived_text:
                note(f"image {record.id}: no caption and the {role} role cannot see pixels: used its derived "
                     f"text (file/folder words, date, place), not a description of its content")
                return record.derived_text
            raise BlindDescriptionError(
                f"image {record.id} ({record.path or 'no path'}) has no caption and the {role} role's model cannot "
                f"see pixels, so it cannot be described; give it a caption (index a manifest with captions), "
                f"or configure a vision model for the {role} role (vision = true; `imagent models presets`)"
            )
        from imagent.models.base import ImagePart, Message

        prompt = load_prompt("common/describe_image.txt")
        text = self.roles[role].text([Message.user(prompt, ImagePart(record=record))], max_tokens=80)
        note(f"image {record.id}: described by the {role} role")
        return text or ""


class BlindDescriptionError(ValueError):
    """A method needed an image described, but it has no caption and no configured model sees pixels."""


@cache
def load_prompt(relative: str) -> str:
    """A prompt template shipped in ``imagent/methods/prompts/`` (prompts live in their own files); read once per
    process (methods ask for their prompts on every query)."""
    from importlib.resources import files

    return (files("imagent.methods") / "prompts" / relative).read_text(encoding="utf-8").strip()


def ranking_from_scores(ids: list[str], scores: np.ndarray, k: int | None = None) -> Ranking:
    """Stable descending ranking of ``ids`` by ``scores``; ``k=None`` keeps every id."""
    scores = np.asarray(scores)
    order = stable_order(scores) if k is None else top_k(scores, k)
    picked = np.asarray(ids, dtype=object)[order] if len(order) > 64 else [ids[int(i)] for i in order]
    return Ranking(list(picked), scores[order].astype(np.float64).tolist())


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
    # Trace counters that mean a named fallback stood in for part of the method (unusable model output): a
    # result whose trace counts any has ``source`` ``fallback:<name>`` (the first counted, in this order).
    fallback_counters: ClassVar[dict[str, str]] = {}
    # True for a method that reads a plain-words question itself (the ``album`` method: its relations need the
    # whole question): a request with ``read_query`` hands it the question whole and the query reader's reading in
    # ``query.extra["reading"]`` instead of filtering by what was understood (``Workspace.prepare``).
    reads_question: ClassVar[bool] = False
    # The roles this method shows photos to (a reference, candidates): :meth:`text_readers` names those that read them
    # as text. Empty: no role of the method is shown a photo.
    image_roles: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: MethodContext, config: MethodConfig | dict[str, Any] | None = None) -> None:
        self.ctx = ctx
        if config is None:
            config = self.Config()
        elif isinstance(config, dict):
            config = self.Config.model_validate(config)
        self.config = config.for_context(ctx)

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        """Model calls one query is expected to cost at ``config`` (cache hits not subtracted), shown
        before a search starts. ``query`` (when given) tells the task; 0 for methods that call no model."""
        return 0

    def fanout(self, role: str) -> int:
        """Threads for a fan-out of calls to ``role``: the configured ``concurrency``, else what the role's
        backend takes at once (so a vLLM endpoint with concurrency 8 gets 8 verifications in flight)."""
        return self.config.concurrency or self.ctx.roles[role].concurrency

    def search(self, query: Query, top_k: int = 50, trace: Trace | None = None,
               warnings: list[str] | None = None) -> Result:
        """Run the method on one query. ``trace`` may be given to observe the search while it runs
        (listeners), cancel it (``cancel_event``) or cap its model calls (``max_calls``). ``warnings``: what
        :meth:`preflight` already returned for this query (a prepared search runs it once); None runs it here.

        Bounded cost: unless the caller set ``trace.max_calls``, the cap is ``config.max_calls`` or, when
        that is None, twice :meth:`estimate_calls`. Roles refuse uncached calls past it
        (:class:`~imagent.models.roles.CallBudgetExceeded`); JSON answers fall back, and a refused call that
        the method cannot do without ends :meth:`run`: the search then returns the best ranking the method
        offered through :func:`keep_best` (else :meth:`fallback_ranking`), in a trace step ``stopped.call_cap``.

        A search whose model calls failed (refused by the cap, or a ``ChatError`` a stand-in replaced) returns a
        result whose ``source`` is ``error`` with the reason (:func:`failed_calls_reason`): its ranking is only
        the never-empty answer interactive search shows; an evaluation counts the query as an error."""
        if query.task not in self.tasks:
            raise ValueError(f"method {self.name!r} handles {sorted(self.tasks)} queries, not {query.task!r}")
        if trace is None:
            trace = Trace()
        trace.method, trace.query = self.name, summarize_query(query)

        found: list[str] = []

        def run() -> Any:
            # Before any model call (it may refuse): typed in Result.warnings, shown in a first step "checks".
            found.extend(self.preflight(query) if warnings is None else warnings)
            if found:
                with trace.step("checks") as step:
                    for w in found:
                        step.note(w)
            return self.run(query, top_k, trace)

        out, stopped = self.capped(query, top_k, trace, run)
        if stopped:
            result = self.stopped_result(out, trace)
            result.warnings = list(found)
            return result
        if isinstance(out, Result):
            result = out
        else:
            ranking, stages = out if isinstance(out, tuple) else (out, {})
            result = Result(ranking=ranking, trace=trace, stages=stages)
        result.warnings = list(found)
        result.counts = {**trace.counters, **result.counts}  # the trace's counts, and the method's own
        failed = failed_calls_reason(trace)
        if failed and not result.is_error:  # a stand-in replaced a failed model call: not the method's answer
            result.source, result.source_reason = Source.ERROR, failed
        elif result.source == Source.METHOD:
            used = [(c, name) for c, name in self.fallback_counters.items() if trace.counters.get(c)]
            if used:
                result.source = Source.fallback(used[0][1])
                result.source_reason = "; ".join(f"{name} ({c} = {trace.counters[c]})" for c, name in used)
        return result

    @staticmethod
    def stopped_result(ranking: Ranking, trace: Trace) -> Result:
        """The result of a search the call cap stopped: an error (the method could not finish), whose ranking is
        only the never-empty answer interactive search shows (labelled in step ``stopped.call_cap``)."""
        return Result(ranking=ranking, trace=trace, source=Source.ERROR,
                      source_reason=failed_calls_reason(trace) or f"call cap {trace.max_calls} reached")

    def capped(self, query: Query, top_k: int, trace: Trace, work: Callable[[], Any]) -> tuple[Any, bool]:
        """``(work(), False)`` run with ``trace`` current and under the query's cap on model calls (the caller's
        ``trace.max_calls``, else :meth:`call_cap`); ``(ranking, True)`` when the cap stopped it: the best ranking
        ``work`` offered through :func:`keep_best`, else :meth:`fallback_ranking` (step ``stopped.call_cap``).
        :meth:`search` runs :meth:`run` through it; so does any entry point that runs a query's stages itself."""
        if trace.max_calls is None:
            trace.max_calls = self.call_cap(query)
        best: list[Ranking | None] = [None]
        token = _BEST.set(best)
        try:
            with trace.activate():
                try:
                    return work(), False
                except CallBudgetExceeded:
                    return self._stopped_by_cap(query, top_k, trace, best[0]), True
        finally:
            _BEST.reset(token)

    def call_cap(self, query: Query | None = None) -> int:
        """The cap on uncached model calls for ``query``: ``config.max_calls``, else 2x :meth:`estimate_calls`."""
        if self.config.max_calls is not None:
            return self.config.max_calls
        return 2 * self.estimate_calls(self.config, query)

    def fallback_ranking(self, query: Query, top_k: int) -> Ranking:
        """The ranking returned when the call cap stops the method before it offered one (:func:`keep_best`):
        plain dual-encoder retrieval of the query text, fused with the reference image for a composed query
        (the ``clip`` baseline, which costs no model call). A method may override it with a better one."""
        from imagent.core.vectors import l2_normalize

        text = fold_dialogue(query) if query.task == "chat" else query.text
        vec = self.ctx.encode([text], SPACE_IMAGE)[0]
        if query.reference is not None:
            vec = l2_normalize(0.5 * vec + 0.5 * self.ctx.image_vector(query.reference))
        return self.ctx.rank(query, vec, SPACE_IMAGE, top_k)

    def _stopped_by_cap(self, query: Query, top_k: int, trace: Trace, best: Ranking | None) -> Ranking:
        with trace.step("stopped.call_cap", max_calls=trace.max_calls) as step:
            if best is None:
                ranking, what = self.fallback_ranking(query, top_k), "the plain retrieval (clip baseline) ranking"
            else:
                ranking, what = best.top(top_k), "the best ranking the method had reached"
            step.note(f"call cap {trace.max_calls} reached: the search stopped and returned {what} (never empty for "
                      "interactive search; an evaluation counts this query as an error)")
            step.outputs["top"] = ranking.head(5)
        trace.count("call_cap_stops")
        return ranking

    def search_spaces(self) -> list[str] | None:
        """The vector spaces this method's retrieval reads, as far as it states them; None: not stated. A
        benchmark whose track depends on what a search used (DISBench, decision 9) reads it."""
        return None

    def text_readers(self) -> list[str]:
        """The roles whose model is shown photos but reads them as text (caption mode: captions, pixel descriptions,
        derived text, date and place) instead of pixels; such text counts as derived from the photos (DISBench's
        tracks, decisions 9 and 11). By default those of :attr:`image_roles` whose model cannot see pixels."""
        return [r for r in self.image_roles if self.ctx.roles[r].caption_mode]

    def start_run(self, run_dir: Path) -> None:
        """An eval run starts in ``run_dir`` (called once, before its first query). A method that learns across
        queries keeps what it learns there (PhotoCraft's skill library); the default does nothing."""
        return None

    def learn_from_outcome(self, query: Query, result: Result, score: float) -> Any:
        """An eval query's answer scored ``score`` in [0, 1] (DISBench: the episode's F1). A method that learns
        from outcomes does so here (PhotoCraft distils a skill); the default does nothing."""
        return None

    def preflight(self, query: Query | None = None) -> list[str]:
        """Checks made before any model call, for one ``query`` or (``None``) for a whole run: raise a
        user error when the method cannot run as its paper defines it (ImageScope or X^R on an index
        without captions), else return warnings a user must see (TaCIR with no tool configured). The CLI
        and the eval runner call it once at the start; :meth:`search` returns the warnings in
        ``Result.warnings`` and notes them in a first trace step named ``checks``."""
        return []

    @abstractmethod
    def run(self, query: Query, top_k: int, trace: Trace) -> Ranking | tuple[Ranking, dict[str, Ranking]] | Result:
        """The pipeline. Return the final ranking (at least ``top_k`` long when the pool allows),
        optionally with named intermediate rankings for stage-wise reports, or a whole
        :class:`Result` (set-valued methods fill ``answer_set``)."""


def failed_calls_reason(trace: Trace) -> str:
    """Why a search's model calls failed, in words ("" when none did): calls the cap refused, or failed calls
    (a ``ChatError``) whose callers went on with a stand-in (counted ``model_call_failed`` by the roles and
    the agent runtime). Such a search is an error of its method, whatever it returned."""
    from imagent.models.roles import MODEL_CALL_FAILED

    refused = trace.counters.get("call_cap_refused", 0)
    failed = trace.counters.get(MODEL_CALL_FAILED, 0)
    if not refused and not failed:
        return ""
    parts = []
    if refused:
        parts.append(f"call cap reached: {refused} model call(s) refused past max_calls={trace.max_calls}")
    if failed:
        errors = [c.error for s in trace.steps for c in s.calls if c.kind == "chat" and c.error]
        first = f" (first: {errors[0]})" if errors else ""
        parts.append(f"{failed} model call(s) failed{first}")
    return "; ".join(parts) + "; the result is a stand-in, not the method's answer"


_BEST: contextvars.ContextVar[list[Ranking | None] | None] = contextvars.ContextVar("imagent_best_ranking",
                                                                                    default=None)


def keep_best(ranking: Ranking) -> None:
    """Offer ``ranking`` (complete: every pool id the method ranks, best first) as the best answer so far of
    the query being searched. If the cap on model calls stops the method later, :meth:`Method.search` returns
    it. A method calls this after each stage that ranks the pool (ImageScope after stages 1 and 2, X^R after
    its coarse ranking)."""
    holder = _BEST.get()
    if holder is not None:
        holder[0] = ranking


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

# Built-in methods by import path: a method's module is imported when it is first asked for. A third-party
# method registers with the :func:`register_method` class decorator.
METHODS: Registry[type[Method]] = Registry("method", {
    "clip": "imagent.methods.baselines:ClipBaseline",
    "caption": "imagent.methods.baselines:CaptionBaseline",
    "cirevl": "imagent.methods.baselines:CIReVL",
    "imagescope": "imagent.methods.imagescope:ImageScope",
    "xr": "imagent.methods.xr:XR",
    "tacir": "imagent.methods.tacir:TaCIR",
    "imageseeker": "imagent.methods.album.photocraft:ImageSeeker",
    "photocraft": "imagent.methods.album.photocraft:PhotoCraft",
    "oscar": "imagent.methods.oscar.method:Oscar",
    "album": "imagent.methods.album.method:AlbumSearch",
})


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: register ``cls`` under ``cls.name`` (a different class under the same name is an error)."""
    METHODS.register(cls.name, cls, replace=False)
    return cls


def list_methods() -> dict[str, type[Method]]:
    """Every registered method by name, the built-in ones included (their modules are imported)."""
    return {name: METHODS[name] for name in METHODS.names()}


def describe_methods() -> dict[str, dict[str, Any]]:
    """Each method's description, tasks and hyper-parameter defaults (the papers'), by name."""
    return {name: {"description": cls.description, "tasks": sorted(cls.tasks),
                   "defaults": cls.Config().model_dump(mode="json")} for name, cls in list_methods().items()}


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name`` (its module imported on first use); ``KeyError`` naming the
    closest name and the known ones on a miss."""
    return METHODS.lookup(name)


def pixel_notice(method: Method) -> list[str]:
    """A warning when the spaces ``method`` searches see no photo's pixels though some photos lack captions: they
    are found by file-name words, dates and places only (said before the first result, not only in the trace).
    Computed once per state of the index."""
    from imagent.index.pixels import answered_by

    g = method.ctx.gallery
    spaces = [s for s in method.search_spaces() or [] if g.has_space(s)]
    info = g.spaces()
    if not spaces or any(s.split("@")[0] == "image" and not info[s].model_id.startswith("caption:") for s in spaces):
        return []
    key = (g.generation(), len(g), spaces[0])
    memo = g.derived.setdefault("pixel_notice", {})  # kept with this gallery object, keyed by its generation
    if key not in memo:
        seen = [answered_by(r, spaces[0], info[spaces[0]].model_id) for r in g.records()]
        blind = seen.count("names") + seen.count("nothing")
        labelled = any(r.labels for r in g.records()) if blind else False
        memo.clear()
        if not blind or seen.count("pixels"):
            memo[key] = []
        elif labelled:
            memo[key] = [f"{method.name} searches {spaces[0]}: {blind} of {len(seen)} photos have no caption and are "
                         "matched there by words from their file names, dates and places; the pixel model has seen "
                         "them: the default method (clip) searches them by their pixels"]
        else:
            memo[key] = [f"nothing sees pixels here: {blind} of {len(seen)} photos have no caption and are searched "
                         "by words from their file names, dates and places only (the pixel model is off or has not "
                         "run on them: `imagent index SRC` with pixels.model = \"effnet-lite0\", or a dual encoder "
                         "that sees pixels)"]
    return list(memo[key])

__all__ = [
    "METHODS",
    "SPACE_CAPTION_DUAL",
    "SPACE_CAPTION_TEXT",
    "SPACE_IMAGE",
    "BlindDescriptionError",
    "Method",
    "MethodConfig",
    "MethodContext",
    "describe_methods",
    "fold_dialogue",
    "get_method",
    "keep_best",
    "list_methods",
    "load_prompt",
    "pixel_notice",
    "ranking_from_scores",
    "register_method",
    "text_score_vector",
]
