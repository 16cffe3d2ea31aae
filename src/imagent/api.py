"""The Python API: a :class:`Workspace` turns settings into ready parts, lazily, and runs searches.

>>> from imagent.api import SearchRequest, Workspace
>>> ws = Workspace.from_config()                       # defaults <- file <- env
>>> result = ws.search("a penguin", method="caption", top_k=5)
>>> result.ranking.ids, result.trace.to_dict()

One request path serves every interface (the CLI, the web server, this API)::

    prepared = ws.prepare(SearchRequest("a penguin", method="photocraft"))  # validated once
    prepared.warnings                                  # the method's preflight, run once
    result = ws.run(prepared, trace)

:meth:`Workspace.prepare` looks the method up, validates its config (the configured parameters under the
request's), resolves the reference and builds the :class:`~imagent.core.types.Query`; the context (gallery,
encoders, roles, tools), the method and its preflight follow once, on first use, so an interface that hands the
search to a running server loads no model. :meth:`Workspace.index` builds or updates an index.

Encoders, chat backends and the gallery are built on first use and then shared, so one workspace
serves many queries (and an eval run) without reloading models.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from imagent.core.cache import DiskCache
from imagent.core.config import Settings, load_settings, register_secret_env_names
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Result
from imagent.index.embedding import ExtraEncoder, LazyEncoder
from imagent.index.gallery import Gallery
from imagent.methods.base import Method, MethodConfig, MethodContext, get_method, summarize_query
from imagent.models.base import ChatModel
from imagent.models.registry import (
    build_chat_model,
    build_dual_encoder,
    build_text_embedder,
    model_id_for,
    sees_pixels_for,
)
from imagent.models.roles import Roles


def user_error_types() -> tuple[type[BaseException], ...]:
    """Errors a user can act on (bad config or method, missing index or file, unreachable model server):
    interfaces report them as one clear message instead of a traceback."""
    from imagent.core.cache import CacheError
    from imagent.core.config import ConfigError
    from imagent.index.gallery import GalleryError
    from imagent.models.base import ChatError
    from imagent.models.encoders import EncoderLoadError
    from imagent.tools.filter_lang import FilterError

    return (ConfigError, GalleryError, ChatError, EncoderLoadError, CacheError, FileNotFoundError, KeyError,
            ValueError, FilterError)


class TaskMismatch(ValueError):
    """The method does not handle this kind of query (a reference given to a text-only method, or none to a
    method for composed queries). ``method``, ``task`` ("tir"/"cir") and ``tasks`` (what it handles) let each
    interface say it in its own words."""

    def __init__(self, method: str, task: str, tasks: frozenset[str]) -> None:
        what = "needs a reference image" if task == "tir" else "takes no reference image"
        super().__init__(f"method {method!r} {what} (it handles {sorted(tasks)} queries)")
        self.method, self.task, self.tasks = method, task, tasks


class UnknownReference(ValueError):
    """A reference that is neither an image id in the gallery nor a file; the message names the closest id
    (or the id of the closest file name: folder ids are content hashes)."""

    def __init__(self, ref: str, gallery: Gallery) -> None:
        import difflib

        close = difflib.get_close_matches(ref, [str(i) for i in gallery.ids], n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        if not close:
            stems = {Path(r.path).stem: r.id for r in gallery.records()}
            near = difflib.get_close_matches(ref, list(stems), n=1, cutoff=0.6)
            if near:
                guess = f" (did you mean {stems[near[0]]!r}, the file {near[0]!r}?)"
        super().__init__(f"reference {ref!r} is neither an image id in the gallery nor a file{guess}")
        self.reference = ref


@dataclass
class SearchRequest:
    """One search as an interface states it: the text, the method, how many results, an optional reference
    (a gallery id, a path inside the gallery, any image file, or a record), the method's parameters for this
    search (over the configured ones) and the index (None: the configured one).

    The photo options (:mod:`imagent.tools.photo_search`): ``where`` a filter expression (the album filter
    language: ``"place ~ 'Vienna' and time >= '2019-07'"``, ``near('Vienna', 5)``) the method ranks inside, and
    with no text the matching photos listed in time order; ``sort`` ``score`` (the method's order) or ``time``
    (when taken); ``like`` a photo (gallery id or image file) to find more like, instead of text;
    ``collapse_duplicates`` one photo per duplicate group (:mod:`imagent.index.duplicates`)."""

    text: str
    method: str = "clip"
    top_k: int = 10
    reference: str | Path | ImageRecord | None = None
    keep_reference: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    index: str | Path | None = None
    where: str | None = None
    sort: str = "score"
    like: str | Path | ImageRecord | None = None
    collapse_duplicates: bool = False

    @property
    def task(self) -> str:
        return "tir" if self.reference is None else "cir"

    @property
    def uses_method(self) -> bool:
        """False for "more like this" and for a filter alone: they rank without the method."""
        return self.like is None and (bool(self.text.strip()) or self.reference is not None or self.where is None)


@dataclass
class PreparedSearch:
    """A validated search, ready to run: the method class, its config (validated once), the query. The method
    over its context (gallery, encoders, roles, tools) is built on first use of :attr:`method`, and its preflight
    runs once, on first use of :attr:`warnings` (:meth:`Workspace.run` uses both)."""

    request: SearchRequest
    method_class: type[Method]
    config: MethodConfig
    query: Query
    build: Callable[[PreparedSearch], Method] = field(repr=False, compare=False)
    like: ImageRecord | None = None  # the photo "more like this" ranks by (request.like resolved)

    @property
    def uses_method(self) -> bool:
        return self.request.uses_method

    @cached_property
    def method(self) -> Method:
        return self.build(self)

    @property
    def context(self) -> MethodContext:
        return self.method.ctx

    @cached_property
    def warnings(self) -> list[str]:
        """The method's preflight for this query: warnings a user must see (it may also refuse the query)."""
        return list(self.method.preflight(self.query))

    @property
    def estimate(self) -> int:
        """Model calls this search is expected to cost (shown before it starts)."""
        if not self.uses_method:
            return 0
        return self.method_class.estimate_calls(self.config, self.query)

    def describe(self) -> dict[str, Any]:
        """What the search will do, as data (two interfaces given the same input describe the same search)."""
        return {"method": self.method_class.name, "config": self.config.model_dump(mode="json"),
                "query": summarize_query(self.query), "exclude": list(self.query.exclude),
                "top_k": self.request.top_k, "index": str(self.request.index) if self.request.index else None}


class Workspace:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        register_secret_env_names(self.settings)  # settings built in code skip load_settings
        self._chat_models: dict[str, ChatModel] = {}
        self._encoders: dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls, config_file: str | Path | None = None, sets: list[str] | None = None, **overrides: Any
    ) -> Workspace:
        return cls(load_settings(config_file, overrides or None, sets))

    # ------------------------------------------------------------------ parts
    @cached_property
    def call_cache(self) -> DiskCache | None:
        if not self.settings.cache_calls:
            return None
        return DiskCache(self.settings.cache_dir / "calls.sqlite")

    @cached_property
    def text_embedder(self) -> Any:
        return build_text_embedder(self.settings.text_embedder)

    @cached_property
    def dual_encoder(self) -> Any:
        cfg = self.settings.dual_encoder
        if cfg.backend == "caption":
            return build_dual_encoder(cfg, text_embedder=self._text_embedder_for(cfg))
        limits = self.settings.indexing
        return build_dual_encoder(cfg, max_pixels=limits.max_pixels, max_bytes=limits.max_file_bytes)

    def encoder(self, name: str) -> Any:
        """The extra encoder ``[encoders.<name>]``, loaded on first use and then shared. A text embedder, or a
        caption-mode dual encoder, with the main text embedder's model shares its loaded instance."""
        cfg = self.settings.encoders.get(name)
        if cfg is None:
            raise KeyError(f"no encoder {name!r} under [encoders] (configured: "
                           f"{', '.join(self.settings.encoders) or 'none'})")
        with self._lock:  # concurrent searches load a model once
            enc = self._encoders.get(name)
            if enc is None:
                main = self.settings.text_embedder
                if cfg.kind == "text":
                    same = (cfg.backend, cfg.model, cfg.device) == (main.backend, main.model, main.device)
                    enc = self.text_embedder if same else build_text_embedder(cfg)
                elif cfg.backend == "caption":
                    enc = build_dual_encoder(cfg, text_embedder=self._text_embedder_for(cfg))
                else:
                    limits = self.settings.indexing
                    enc = build_dual_encoder(cfg, max_pixels=limits.max_pixels, max_bytes=limits.max_file_bytes)
                self._encoders[name] = enc
            return enc

    @cached_property
    def extra_encoders(self) -> list[ExtraEncoder]:
        """Every ``[encoders.*]`` entry as an :class:`ExtraEncoder` whose model loads on first use."""
        return extra_encoders(self.settings, self.encoder)

    def _text_embedder_for(self, cfg: Any) -> Any:
        """Caption mode with the configured text embedder's model shares the loaded instance."""
        if not cfg.model or cfg.model == self.settings.text_embedder.model:
            return self.text_embedder
        return build_text_embedder(self.settings.text_embedder.model_copy(update={"model": cfg.model}))

    def chat_model(self, entry: str) -> ChatModel:
        with self._lock:
            model = self._chat_models.get(entry)
            if model is None:
                cfg = self.settings.models[entry]
                model = self._chat_models[entry] = build_chat_model(cfg, cache_dir=self.settings.cache_dir)
            return model

    @cached_property
    def roles(self) -> Roles:
        def factory(role: str) -> tuple[str, ChatModel]:
            entry, _cfg = self.settings.model_for_role(role)
            return entry, self.chat_model(entry)

        return Roles(factory, self.call_cache)

    def gallery(self, index: str | Path | None = None, create: bool = False) -> Gallery:
        root = Path(index).expanduser() if index else self.settings.index
        key = f"_gallery::{root}"
        g = self.__dict__.get(key)
        if g is None:
            g = self.__dict__[key] = Gallery(root, create=create)
            g.configure(self.settings.indexing)
        return g

    def context(self, index: str | Path | None = None) -> MethodContext:
        from imagent.tools import build_tools

        return MethodContext(
            gallery=self.gallery(index),
            dual=self.dual_encoder,
            text=self.text_embedder,
            roles=self.roles,
            extras={e.name: e for e in self.extra_encoders},
            tools=build_tools(self.settings, self.call_cache, text_embedder=self.text_embedder),
        )

    def method(self, name: str, index: str | Path | None = None, **overrides: Any) -> Method:
        cls = get_method(name)
        return cls(self.context(index), self.method_config(cls, overrides))

    def method_config(self, cls: type[Method], params: dict[str, Any] | None = None) -> MethodConfig:
        """``cls``'s config: the configured parameters (``[methods.<name>]``) with ``params`` over them, validated."""
        return cls.Config.model_validate({**self.settings.methods.get(cls.name, {}), **(params or {})})

    # ------------------------------------------------------------------ the request path
    def prepare(self, request: SearchRequest | str, *,
                check_params: Callable[[type[MethodConfig], dict[str, Any]], None] | None = None,
                **fields: Any) -> PreparedSearch:
        """Validate a search once: the method (a did-you-mean on a miss), the config (pydantic's
        ``ValidationError`` names the bad key), the query's kind against the method's tasks (:class:`TaskMismatch`),
        then the reference (:class:`UnknownReference`). ``request`` may be the text, with the other
        :class:`SearchRequest` fields as keywords. ``check_params`` (the web server's bounds) sees the config
        class and the request's parameters before they are validated.

        A reference that is itself in the gallery is left out of the results unless ``keep_reference``:
        "this, but red" asks for other images, and CIRR's evaluation removes it the same way."""
        req = request if isinstance(request, SearchRequest) else SearchRequest(request, **fields)
        cls = get_method(req.method)
        if check_params is not None:
            check_params(cls.Config, req.params)
        config = self.method_config(cls, req.params)
        from imagent.tools import photo_search

        photo_search.check_sort(req.sort)
        if req.like is not None and (req.text.strip() or req.reference is not None):
            raise ValueError("like ranks by the photo alone: give no text and no reference with it")
        if req.uses_method and req.task not in cls.tasks:
            raise TaskMismatch(req.method, req.task, cls.tasks)
        g = self.gallery(req.index)
        ref = self.resolve_reference(req.reference, req.index) if req.reference is not None else None
        like = self.resolve_reference(req.like, req.index) if req.like is not None else None
        exclude = [ref.id] if ref is not None and not req.keep_reference and ref.id in g else []
        query = photo_search.apply_filter(Query(text=req.text, reference=ref, exclude=exclude), g, req.where)
        return PreparedSearch(req, cls, config, query, build=self._build_method, like=like)

    def _build_method(self, prepared: PreparedSearch) -> Method:
        return prepared.method_class(self.context(prepared.request.index), prepared.config)

    def run(self, prepared: PreparedSearch, trace: Trace | None = None) -> Result:
        """Run a prepared search. ``trace`` (optional) observes the search while it runs (listeners), caps its
        model calls (``max_calls``) or cancels it (``cancel_event``). The photo options (filter, order, more like
        this, duplicates collapsed) apply here (:mod:`imagent.tools.photo_search`)."""
        from imagent.tools import photo_search

        req = prepared.request
        g = self.gallery(req.index)
        top_k = req.top_k * 4 + 10 if req.collapse_duplicates else req.top_k  # room for the ones collapsed
        if prepared.like is not None:  # more like this photo: its own vector
            space = photo_search.like_space(g, req.method)
            vec = photo_search.like_vector(g, prepared.like, space, self.dual_encoder, self.text_embedder)
            result = photo_search.more_like(g, prepared.like, vec, space, prepared.query, top_k, trace)
        elif not prepared.uses_method:  # a filter alone: the matching photos in time order
            result = photo_search.listing(g, prepared.query, top_k, trace)
        else:
            result = prepared.method.search(prepared.query, top_k=top_k, trace=trace, warnings=prepared.warnings)
        result = photo_search.finish(result, g, prepared.query, req.sort)
        if req.collapse_duplicates:
            result = photo_search.collapse_duplicates(result, g, self.duplicate_groups(req.index), req.top_k)
        return result

    # ------------------------------------------------------------------ one-call search
    def search(
        self,
        text: str,
        method: str = "clip",
        top_k: int = 10,
        reference: str | Path | ImageRecord | None = None,
        index: str | Path | None = None,
        keep_reference: bool = False,
        params: dict[str, Any] | None = None,
        trace: Trace | None = None,
        where: str | None = None,
        sort: str = "score",
        like: str | Path | ImageRecord | None = None,
        collapse_duplicates: bool = False,
    ) -> Result:
        """Rank the gallery for ``text`` (with ``reference``: a composed query): :meth:`prepare`, then
        :meth:`run`. ``params`` are the method's hyper-parameters for this search (``{"k": 10}``), on top of the
        configured ones; ``trace`` as in :meth:`run`; ``where``, ``sort``, ``like``, ``collapse_duplicates`` as in
        :class:`SearchRequest`."""
        return self.run(self.prepare(SearchRequest(text, method, top_k, reference, keep_reference,
                                                   dict(params or {}), index, where, sort, like,
                                                   collapse_duplicates)), trace)

    def duplicate_groups(self, index: str | Path | None = None) -> list[Any]:
        """The gallery's duplicate groups (:func:`imagent.index.duplicates.duplicate_groups`), computed once per
        state of the index (perceptual hashes are stored in it after the first time)."""
        from imagent.index.duplicates import duplicate_groups

        g = self.gallery(index)
        key = f"_duplicates::{g.root}"
        hit = self.__dict__.get(key)
        if hit is None or hit[0] != g.generation():
            hit = self.__dict__[key] = (g.generation(), duplicate_groups(g, self.settings.indexing))
        return hit[1]

    # ------------------------------------------------------------------ indexing
    def index(self, source: str | Path, index: str | Path | None = None, *, caption_missing: bool = False,
              captions: str | Path | None = None, ray: str | None = None, ray_actors: int = 2, ray_gpus: float = 0.0,
              progress: Callable[[int, int, str], None] | None = None) -> Any:
        """Index ``source`` (a folder of images, or a manifest) into ``index`` (None: the configured one):
        records, metadata, embeddings; incremental and resumable. Returns the builder's report.

        Models load only when something must be embedded (a run that finds nothing new loads none). With
        ``caption_missing`` the captioner role captions uncaptioned images, unless its model cannot see images:
        then captioning is refused (first warning of the report). ``captions`` imports captions from a file.
        ``ray`` ("local", "auto" or HOST:PORT) runs the encoders on a Ray cluster, ``ray_actors`` per model."""
        import contextlib

        from imagent.core.text import display_path
        from imagent.index.builder import build_index

        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(f"no such file or folder: {display_path(source)}")
        if captions is not None and not Path(captions).is_file():
            raise FileNotFoundError(f"no such caption file: {display_path(Path(captions))}")
        s = self.settings
        root = Path(index).expanduser() if index else s.index
        options = s.indexing.model_copy(update={"caption_missing": caption_missing or s.indexing.caption_missing})
        refusal = ""
        captioner = None
        if options.caption_missing:
            entry, model_cfg = s.model_for_role("captioner")
            if model_cfg.vision:
                captioner = self.roles["captioner"]
            else:
                # Checked from the config, so the blind model is not even loaded.
                refusal = (f"captioning refused: the captioner role uses model entry {entry!r} ({model_cfg.model}), "
                           "which does not see images (vision = false); a model that cannot see an image must not "
                           "describe it. Configure a captioner with vision (an OpenAI-compatible vision model, "
                           "vision = true) or import captions with --captions FILE")
                options = options.model_copy(update={"caption_missing": False})
        # Loaded only when something must be embedded: a run that finds nothing new never loads a model.
        load_text: Callable[[], Any] = lambda: self.text_embedder  # noqa: E731
        load_dual: Callable[[], Any] = lambda: self.dual_encoder  # noqa: E731
        load_extra: Callable[[str], Any] = self.encoder
        cluster: Any = contextlib.nullcontext()
        if ray:
            from imagent.index.distributed import RayEncoderPool, ray_cluster

            def pool(part: str) -> Callable[[], Any]:
                # Each actor builds its own encoder from the settings (models are loaded there, not shipped).
                return lambda: RayEncoderPool(lambda: getattr(Workspace(s), part), actors=ray_actors,
                                              gpus_per_actor=ray_gpus)

            def extra_pool(name: str) -> Any:
                # An extra encoder ([encoders.<name>]) is its own pool of actors, built there like the main ones.
                return RayEncoderPool(lambda: Workspace(s).encoder(name), actors=ray_actors, gpus_per_actor=ray_gpus)

            load_text, load_dual, load_extra = pool("text_embedder"), pool("dual_encoder"), extra_pool
            cluster = ray_cluster(ray)
            options = options.model_copy(update={"batch_size": max(options.batch_size, 64 * ray_actors)})
        text = LazyEncoder(load_text, model_id_for("text", s.text_embedder))
        dual = LazyEncoder(load_dual, model_id_for("dual", s.dual_encoder, s.text_embedder),
                           sees_pixels=sees_pixels_for("dual", s.dual_encoder))
        with cluster:
            report = build_index(source, root, dual, text, options, captioner=captioner, progress=progress,
                                 captions=Path(captions) if captions is not None else None,
                                 extras=extra_encoders(s, load_extra))
        if refusal:
            report.warnings.insert(0, refusal)
        return report

    def mark_answer_correct(self, query: str, trace: Any, index: str | Path | None = None,
                            params: dict[str, Any] | None = None) -> Any:
        """The user says a PhotoCraft search's answer is right (the web UI's button): its trajectory is
        distilled into the user's skill library (PhotoCraft Sec. 3.2). ``trace`` is the search's
        :class:`~imagent.core.trace.Trace` or its ``to_dict()``. Returns the stored (or merged) skill, or
        None when no de-entified skill could be distilled (the reason is in the returned trace notes)."""
        return self.method("photocraft", index, **(params or {})).mark_answer_correct(query, trace)

    def resolve_reference(self, reference: str | Path | ImageRecord, index: str | Path | None = None) -> ImageRecord:
        """A reference given as a gallery id, a path inside the gallery, or any image file;
        :class:`UnknownReference` (with the closest ids) when it is neither an id nor a file."""
        if isinstance(reference, ImageRecord):
            return reference
        from imagent.index.builder import record_for_file

        g = self.gallery(index)
        ref = str(reference)
        if ref in g:
            return g.record(ref)
        if not Path(ref).expanduser().exists():
            raise UnknownReference(ref, g)
        return record_for_file(Path(ref), g)


def extra_encoders(settings: Settings, load: Any) -> list[ExtraEncoder]:
    """The configured extra encoders (``[encoders.*]``), each a :class:`LazyEncoder` over ``load(name)`` with its
    model id (and whether it sees pixels) known from the config, so nothing loads until a vector is needed."""
    out = []
    for name, cfg in settings.encoders.items():
        kind = cfg.kind or "dual"
        lazy = LazyEncoder(lambda n=name: load(n), model_id_for(kind, cfg, settings.text_embedder),
                           sees_pixels=sees_pixels_for(kind, cfg))
        out.append(ExtraEncoder(name, kind, lazy))
    return out


def route_method(text: str, gallery: Gallery) -> Any:
    """The method a plain-words query goes to (the web UI's search box, ``imagent search`` without ``--method``):
    album-style queries (a relation to an anchor: "the birds from the day I saw the penguin") to the ``album``
    method, others to the best content search ``gallery`` supports; a :class:`~imagent.methods.routing.Route`
    with the method, the kind, the reason and, when the album method is not installed, the fallback taken."""
    from imagent.methods.base import METHODS
    from imagent.methods.routing import route

    return route(text, gallery, lambda name: name in METHODS)


# --------------------------------------------------------------------- results as data


def result_rows(result: Result, gallery: Gallery) -> list[dict[str, Any]]:
    """One row per result: ``{rank, id, score, path, caption, taken, place}`` (what ``--json`` and the web API
    return); ``taken`` (ISO date-time) and ``place`` (the given address, else the place name found for the GPS,
    else "lat, lon") are None when unknown."""
    rows = []
    for rank, (image_id, score) in enumerate(zip(result.ranking.ids, result.ranking.scores, strict=True), 1):
        rec = gallery.record(image_id)
        rows.append({"rank": rank, "id": image_id, "score": round(float(score), 6), "path": rec.path,
                     "caption": rec.caption, "taken": rec.taken_time.isoformat() if rec.taken_time else None,
                     "place": record_place(rec)})
    return rows


def record_place(rec: ImageRecord) -> str | None:
    """Where a photo was taken: the given address, else the place name found for its GPS, else its
    coordinates."""
    if rec.place_name:
        return rec.place_name
    if rec.latitude is not None and rec.longitude is not None:
        return f"{rec.latitude:.5f}, {rec.longitude:.5f}"
    return None


def result_json(result: Result, gallery: Gallery) -> str:
    """The result rows, the trace and any per-stage rankings as one JSON document."""
    payload: dict[str, Any] = {"results": result_rows(result, gallery), "source": result.source,
                               "source_reason": result.source_reason, "counts": dict(result.counts),
                               "trace": result.trace.to_dict()}
    if result.stages:
        payload["stages"] = {k: v.to_dict() for k, v in result.stages.items()}
    return json.dumps(payload, indent=2, ensure_ascii=False, default=str)
