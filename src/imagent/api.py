"""The Python API: a :class:`Workspace` turns settings into ready parts, lazily, and runs searches.

>>> from imagent.api import SearchRequest, Workspace
>>> ws = Workspace.from_config()                       # defaults <- file <- env
>>> result = ws.search("a penguin", method="caption", top_k=5)
>>> result.ranking.ids, result.trace.to_dict()

One request path serves every interface (the CLI, the web server, this API and the evaluation runner), and one
request model, :class:`SearchRequest` (pydantic), states a search for all of them (the web server's JSON body is
it)::

    prepared = ws.prepare(SearchRequest("a penguin", method="photocraft"))  # validated once
    prepared.warnings                                  # the method's preflight, run once
    result = ws.run(prepared, trace)

:meth:`Workspace.prepare` looks the method up and validates its config (the configured parameters under the
request's) through :meth:`Workspace.prepare_method`, resolves the reference and builds the
:class:`~imagent.core.types.Query`; the context (gallery, encoders, roles, tools), the method and its preflight
follow once, on first use, so an interface that hands the search to a running server loads no model. An
evaluation prepares its method once per run (:class:`PreparedMethod`) and each benchmark query with it
(``ws.prepare(SearchRequest(query=..., ...), method=prepared_method)``): one validation, one method.
:meth:`Workspace.index` builds or updates an index.

Encoders, chat backends and the gallery are built on first use and then shared, so one workspace
serves many queries (and an eval run) without reloading models.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, PlainValidator, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from imagent.core.cache import DiskCache
from imagent.core.config import Settings, load_settings, register_secret_env_names
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Result
from imagent.index.embedding import ExtraEncoder
from imagent.index.gallery import Gallery
from imagent.index.parts import Models, extra_encoders

# Results as data (re-exported: callers read them from the request path).
from imagent.index.result_rows import (  # noqa: F401
    card_labels,
    matches_only,
    record_place,
    result_json,
    result_rows,
    shown_labels,
)
from imagent.methods.base import Method, MethodConfig, MethodContext, get_method, pixel_notice, summarize_query
from imagent.models.base import ChatModel
from imagent.models.registry import build_chat_model
from imagent.models.roles import Role, Roles
from imagent.tools.photo_search import UnknownReference

if TYPE_CHECKING:
    from imagent.index.builder import IndexReport


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
        what = {"tir": "needs a reference image", "cir": "takes no reference image"}.get(task, f"takes no {task} query")
        super().__init__(f"method {method!r} {what} (it handles {sorted(tasks)} queries)")
        self.method, self.task, self.tasks = method, task, tasks


def _python_object(cls: type) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not isinstance(value, cls):
            raise ValueError(f"a {cls.__name__} object (given from Python only)")
        return value

    return check


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate: what undecodable bytes become)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Values only Python code can give: JSON never builds a record or a query (a client must not name a file this way).
RecordObject = Annotated[ImageRecord, PlainValidator(_python_object(ImageRecord))]
QueryObject = Annotated[Query, PlainValidator(_python_object(Query))]


class SearchRequest(BaseModel):
    """One search, as every interface states it: the Python API, the CLI (in process and through a running
    server), the web server's JSON body (``POST /api/search``, ``/api/searches``) and the evaluation runner.

    ``text`` the query (the modification with a reference; empty only with a reference, ``like`` or ``where``);
    ``method``; ``top_k`` results; ``reference`` a gallery id, a path inside the gallery, any image file, or a
    record; ``keep_reference`` lets a gallery reference appear in its own results; ``params`` the method's
    parameters for this search (over the configured ones); ``max_calls`` a cap on its model calls.

    The photo options (:mod:`imagent.tools.photo_search`): ``where`` a filter expression (the album filter
    language: ``"place ~ 'Vienna' and time >= '2019-07'"``, ``near('Vienna', 5)``) the method ranks inside, and
    with no text the matching photos listed in time order; ``sort`` ``score`` (the method's order) or ``time``
    (when taken); ``like`` a photo (gallery id or image file) to find more like, instead of text;
    ``collapse_duplicates`` one photo per duplicate group (:mod:`imagent.index.duplicates`).

    ``read_query`` (set by the routed plain-words path, off for a method named explicitly): the question is read
    first (:func:`imagent.tools.query_reader.search_words`; ``unlink`` names understood filters to read as words).

    ``reference_upload`` is the web server's (an id from ``POST /api/uploads``, which the server resolves).
    :attr:`LOCAL_FIELDS` never travel to a server: ``index`` (None: the configured one; a server answers on its
    own) and ``query``, a query already built (an evaluation's benchmark query with its id, dialogue,
    candidates and exclusions), which stands for ``text`` and ``reference``. The web server adds its bounds
    (:func:`imagent.server.limits.check_request`)."""

    LOCAL_FIELDS: ClassVar[frozenset[str]] = frozenset({"index", "query"})

    text: str = Field("", description="the query, or the modification text with a reference")
    method: str = Field("clip", description="retrieval method")
    top_k: int = Field(10, ge=1, description="results to return")
    reference: str | Path | SkipJsonSchema[RecordObject] | None = Field(
        None, description="reference image: a gallery id (the web API takes gallery ids only)")
    reference_upload: str | None = Field(None, description="web API: an id from POST /api/uploads")
    keep_reference: bool = Field(False, description="let a gallery reference appear in its own results")
    params: dict[str, Any] = Field(default_factory=dict, description="the method's hyper-parameters for this search")
    max_calls: int | None = Field(None, ge=0, description="cap on model calls (through the web API: at most the "
                                                          "server's cap)")
    where: str | None = Field(None, description="filter expression (album filter language)")
    sort: Literal["score", "time"] = "score"
    like: str | Path | SkipJsonSchema[RecordObject] | None = Field(
        None, description="more like this photo (a gallery id), instead of a text")
    collapse_duplicates: bool = Field(False, description="one photo per duplicate group (imagent duplicates)")
    read_query: bool = Field(False, description="read the question first: people, places and dates it names become "
                                                "filters, the rest is searched (the plain-words search box)")
    unlink: list[Annotated[str, Field(max_length=300)]] = Field(
        default_factory=list, max_length=50, description="understood filters to read as words ('place:Kyoto')")
    index: SkipJsonSchema[str | Path | None] = None
    query: SkipJsonSchema[QueryObject | None] = None

    def __init__(self, text: str | None = None, /, **fields: Any) -> None:
        """``SearchRequest("a penguin", method="caption")``: the text may come first, every other field by name."""
        if text is not None:
            fields["text"] = text
        super().__init__(**fields)

    @field_validator("text", "method", "where")
    @classmethod
    def _unicode(cls, value: str | None) -> str | None:
        if value is not None and not is_unicode(value):
            raise ValueError("not valid Unicode text (it holds a lone surrogate)")
        return value

    @model_validator(mode="after")
    def _something_to_search(self) -> SearchRequest:
        if not (self.text.strip() or self.reference or self.reference_upload or self.like or self.where is not None
                or self.query is not None):
            raise ValueError("give a query text, a reference, a like photo or a where filter")
        return self

    @property
    def task(self) -> str:
        if self.query is not None:
            return self.query.task
        return "tir" if self.reference is None else "cir"

    @property
    def uses_method(self) -> bool:
        """False for "more like this" and for a filter alone: they rank without the method."""
        return self.like is None and (self.query is not None or bool(self.text.strip())
                                      or self.reference is not None or self.where is None)

    def wire(self) -> dict[str, Any]:
        """The request as a JSON body for a server (:attr:`LOCAL_FIELDS` left out)."""
        return self.model_dump(mode="json", exclude=set(self.LOCAL_FIELDS))


@dataclass
class PreparedMethod:
    """A method ready to search: its class and its config (validated once), and the method over its context
    (gallery, encoders, roles, tools), built on first use of :attr:`method` and then shared by every search
    prepared with it. :meth:`Workspace.prepare` makes one per search; an evaluation one per run."""

    method_class: type[Method]
    config: MethodConfig
    params: dict[str, Any]
    index: str | Path | None
    build: Callable[[PreparedMethod], Method] = field(repr=False, compare=False)
    _built: Method | None = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def method(self) -> Method:
        with self._lock:  # concurrent searches (an eval's worker threads) build it once
            if self._built is None:
                self._built = self.build(self)
            return self._built


@dataclass
class PreparedSearch:
    """A validated search, ready to run: the request, its prepared method (config validated once, the method
    built on first use of :attr:`method`) and the query. The method's preflight for this query runs once, on
    first use of :attr:`warnings` (:meth:`Workspace.run` uses both)."""

    request: SearchRequest
    prepared_method: PreparedMethod
    query: Query
    like: ImageRecord | None = None  # the photo "more like this" ranks by (request.like resolved)
    reading: Any = None  # what the query reader understood (request.read_query), a QueryReading

    @property
    def method_class(self) -> type[Method]:
        return self.prepared_method.method_class

    @property
    def config(self) -> MethodConfig:
        return self.prepared_method.config

    @property
    def uses_method(self) -> bool:
        return self.request.uses_method

    @property
    def method(self) -> Method:
        return self.prepared_method.method

    @property
    def context(self) -> MethodContext:
        return self.method.ctx

    @cached_property
    def warnings(self) -> list[str]:
        """The method's preflight for this query: warnings a user must see (it may also refuse the query), and
        whether anything sees the pixels of the photos it searches (:func:`pixel_notice`)."""
        return [*pixel_notice(self.method), *self.method.preflight(self.query)]

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


@dataclass
class WorkspaceParts:
    """What a :class:`Workspace` builds on first use and then shares, in one place: the models
    (:class:`~imagent.index.parts.Models`), the call cache, the chat models and roles, the extra encoders, the
    galleries by folder and their duplicate groups. One re-entrant lock guards them all: concurrent searches (an eval's
    worker threads, the web server's) build each part once, and building one part may build another."""

    models: Models
    lock: threading.RLock = field(default_factory=threading.RLock)
    call_cache: DiskCache | None = None
    call_cache_ready: bool = False  # call_cache is decided (None: caching is off)
    roles: Roles | None = None
    chat_models: dict[str, ChatModel] = field(default_factory=dict)
    extra_encoders: list[ExtraEncoder] | None = None
    galleries: dict[Path, Gallery] = field(default_factory=dict)
    duplicates: dict[Path, tuple[int, list[Any]]] = field(default_factory=dict)  # root -> (generation, groups)


class Workspace:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        register_secret_env_names(self.settings)  # settings built in code skip load_settings
        self.parts = WorkspaceParts(Models(self.settings))

    @classmethod
    def from_config(
        cls, config_file: str | Path | None = None, sets: list[str] | None = None, **overrides: Any
    ) -> Workspace:
        return cls(load_settings(config_file, overrides or None, sets))

    # ------------------------------------------------------------------ parts
    @property
    def call_cache(self) -> DiskCache | None:
        p = self.parts
        with p.lock:
            if not p.call_cache_ready:
                on = self.settings.cache_calls
                p.call_cache = DiskCache(self.settings.cache_dir / "calls.sqlite") if on else None
                p.call_cache_ready = True
            return p.call_cache

    def use_call_cache(self, cache: DiskCache | None) -> None:
        """Serve every model and tool call through ``cache`` (a pack's replay: its calls, and no other); before any
        role is built."""
        p = self.parts
        with p.lock:
            if p.roles is not None:
                raise RuntimeError("the call cache is chosen before any role is built")
            p.call_cache, p.call_cache_ready = cache, True

    @property
    def text_embedder(self) -> Any:
        return self.parts.models.text_embedder

    @property
    def dual_encoder(self) -> Any:
        return self.parts.models.dual_encoder

    @property
    def pixel_model(self) -> Any:
        """The ImageNet classifier (:class:`~imagent.models.pixels.EffNetLite`: the pixel dual encoder's model, else
        ``pixels.model``), loaded on first use and shared by the index's labels and the pixel dual encoder."""
        return self.parts.models.pixel_model

    def encoder(self, name: str) -> Any:
        """The extra encoder ``[encoders.<name>]``, loaded on first use and then shared. A text embedder, or a
        caption-mode dual encoder, with the main text embedder's model shares its loaded instance."""
        return self.parts.models.encoder(name)

    @property
    def extra_encoders(self) -> list[ExtraEncoder]:
        """Every ``[encoders.*]`` entry as an :class:`ExtraEncoder` whose model loads on first use."""
        p = self.parts
        with p.lock:
            if p.extra_encoders is None:
                p.extra_encoders = extra_encoders(self.settings, self.encoder)
            return p.extra_encoders

    def chat_model(self, entry: str) -> ChatModel:
        p = self.parts
        with p.lock:
            model = p.chat_models.get(entry)
            if model is None:
                cfg = self.settings.models[entry]
                model = p.chat_models[entry] = build_chat_model(cfg, cache_dir=self.settings.cache_dir)
            return model

    @property
    def roles(self) -> Roles:
        def factory(role: str) -> tuple[str, ChatModel]:
            entry, _cfg = self.settings.model_for_role(role)
            return entry, self.chat_model(entry)

        p = self.parts
        with p.lock:
            if p.roles is None:
                p.roles = Roles(factory, self.call_cache)
            return p.roles

    def gallery(self, index: str | Path | None = None, create: bool = False, fresh: bool = False) -> Gallery:
        """The gallery at ``index`` (the configured one by default), opened once and then shared. ``fresh``: reopened
        first when a build committed since it was opened (a server serving the newest index without a restart;
        searches still running keep the object they started with)."""
        root = Path(index).expanduser() if index else self.settings.index
        p = self.parts
        with p.lock:
            g = p.galleries.get(root)
            if g is None or (fresh and not g.is_current()):
                g = p.galleries[root] = Gallery(root, create=create)
                g.configure(self.settings.indexing, self.settings.ann)
                g.labels_as_text = self.settings.pixels.labels_as_text  # read by the album tools and DISBench's track
                g.label_min_p = self.settings.pixels.label_min_p
                g.pixel_options = self.settings.pixels  # result cards' labels, pixel descriptions (label_show_p)
                g.ocr_options = self.settings.ocr  # the album tools' text clues (search_boost_z)
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
            results=self.settings.results,
        )

    def method(self, name: str, index: str | Path | None = None, **overrides: Any) -> Method:
        """The method ``name`` over the gallery at ``index`` with ``overrides`` over its configured parameters."""
        return self.prepare_method(name, overrides, index).method

    def method_config(self, cls: type[Method], params: dict[str, Any] | None = None) -> MethodConfig:
        """``cls``'s config: the configured parameters (``[methods.<name>]``) with ``params`` over them, validated
        (the one place a method's config is validated: searches, eval runs, packs, OSCAR's library)."""
        return cls.Config.model_validate({**self.settings.methods.get(cls.name, {}), **(params or {})})

    # ------------------------------------------------------------------ the request path
    def prepare_method(self, name: str, params: dict[str, Any] | None = None, index: str | Path | None = None, *,
                       check_params: Callable[[type[MethodConfig], dict[str, Any]], None] | None = None
                       ) -> PreparedMethod:
        """Look the method up (a did-you-mean on a miss) and validate its config once (pydantic's
        ``ValidationError`` names the bad key); the method itself is built on first use. ``check_params`` (the
        web server's bounds) sees the config class and ``params`` before they are validated."""
        cls = get_method(name)
        params = dict(params or {})
        if check_params is not None:
            check_params(cls.Config, params)
        return PreparedMethod(cls, self.method_config(cls, params), params, index, build=self._build_method)

    def prepare(self, request: SearchRequest | str, *,
                check_params: Callable[[type[MethodConfig], dict[str, Any]], None] | None = None,
                method: PreparedMethod | None = None, **fields: Any) -> PreparedSearch:
        """Validate a search once: the method and its config (:meth:`prepare_method`, unless ``method`` is
        given: a method prepared before, for the same method, parameters and index, as an evaluation run does),
        the query's kind against the method's tasks (:class:`TaskMismatch`), then the reference
        (:class:`UnknownReference`). ``request`` may be the text, with the other :class:`SearchRequest` fields as
        keywords. ``check_params`` (the web server's bounds) sees the config class and the request's parameters
        before they are validated.

        A reference that is itself in the gallery is left out of the results unless ``keep_reference``:
        "this, but red" asks for other images, and CIRR's evaluation removes it the same way. A request's
        ``query`` (built already) is taken as it is."""
        req = request if isinstance(request, SearchRequest) else _request(request, fields)
        if req.reference_upload is not None:
            raise ValueError("reference_upload names an upload of the web server; give the reference itself here")
        if method is None:
            method = self.prepare_method(req.method, req.params, req.index, check_params=check_params)
        elif get_method(req.method) is not method.method_class or req.params not in ({}, method.params) \
                or req.index != method.index:
            raise ValueError(f"the request ({req.method!r}, its parameters, index) is not the prepared method's "
                             f"({method.method_class.name!r})")
        cls = method.method_class
        from imagent.tools import photo_search

        req, reading = self._read(req, cls)
        if req.like is not None and (req.text.strip() or req.reference is not None or req.query is not None):
            raise ValueError("like ranks by the photo alone: give no text and no reference with it")
        if req.uses_method and req.task not in cls.tasks:
            raise TaskMismatch(req.method, req.task, cls.tasks)
        g = self.gallery(req.index)
        if req.query is not None:
            query = req.query
        else:
            ref = self.resolve_reference(req.reference, req.index) if req.reference is not None else None
            exclude = [ref.id] if ref is not None and not req.keep_reference and ref.id in g else []
            query = Query(text=req.text, reference=ref, exclude=exclude)
        if reading is not None:
            query.extra["reading"] = reading
        like = self.resolve_reference(req.like, req.index) if req.like is not None else None
        return PreparedSearch(req, method, photo_search.apply_filter(query, g, req.where), like, reading)

    def _read(self, req: SearchRequest, cls: type[Method]) -> tuple[SearchRequest, Any]:
        """``req`` as searched once its question is read (``read_query``, a plain question only), and the reading."""
        if not req.read_query or not req.text.strip() or req.query or req.reference is not None or req.like:
            return req, None
        from imagent.tools.query_reader import search_words

        text, where, reading = search_words(req.text, req.where, self.gallery(req.index), unlink=req.unlink,
                                            whole=cls.reads_question)
        return req.model_copy(update={"text": text, "where": where}), reading

    def _build_method(self, prepared: PreparedMethod) -> Method:
        return prepared.method_class(self.context(prepared.index), prepared.config)

    def run(self, prepared: PreparedSearch, trace: Trace | None = None) -> Result:
        """Run a prepared search. ``trace`` (optional) observes the search while it runs (listeners), caps its
        model calls (``max_calls``, and the request's under it) or cancels it (``cancel_event``). The photo
        options (filter, order, more like this, duplicates collapsed) apply here
        (:mod:`imagent.tools.photo_search`)."""
        from imagent.tools import photo_search

        req = prepared.request
        if req.max_calls is not None:
            trace = trace or Trace()
            trace.max_calls = req.max_calls if trace.max_calls is None else min(trace.max_calls, req.max_calls)
        g = self.gallery(req.index)
        if prepared.reading is not None:  # what the question was read as, the first step of the trace
            trace = trace or Trace()
            prepared.reading.record(trace, applied=not prepared.method_class.reads_question)
        top_k = req.top_k * 4 + 10 if req.collapse_duplicates else req.top_k  # room for the ones collapsed
        if prepared.like is not None:  # more like this photo: its own vector
            space = photo_search.like_space(g, req.method)
            vec = photo_search.like_vector(g, prepared.like, space, self.dual_encoder, self.text_embedder,
                                           lambda: self.pixel_model)
            result = photo_search.more_like(g, prepared.like, vec, space, prepared.query, top_k, trace,
                                            self.settings.results)
            result.spaces = [space]
        elif not prepared.uses_method:  # a filter alone: the matching photos in time order
            result = photo_search.listing(g, prepared.query, top_k, trace)
        else:
            result = prepared.method.search(prepared.query, top_k=top_k, trace=trace, warnings=prepared.warnings)
            result.spaces = list(prepared.method.search_spaces() or [])
            if prepared.reading is not None:  # the words read in the photos (quoted: exactly), with the content
                from imagent.tools.text_search import with_text

                result = with_text(result, g, prepared.query, prepared.reading, top_k, self.settings.ocr)
        result = photo_search.finish(result, g, prepared.query, req.sort)
        if req.collapse_duplicates:
            result = photo_search.collapse_duplicates(result, g, self.duplicate_groups(req.index), req.top_k)
        if prepared.reading is not None:
            result.understood = {**prepared.reading.to_dict(),
                                 "filtered": not prepared.method_class.reads_question}
        return result

    # ------------------------------------------------------------------ one-call search
    def search(self, text: str = "", *, trace: Trace | None = None, **fields: Any) -> Result:
        """Rank the gallery for ``text``: :meth:`prepare`, then :meth:`run`. ``fields`` are the other
        :class:`SearchRequest` fields (``method="caption"``, ``top_k=5``, ``reference=...``, ``params={"k": 10}``,
        ``where=...``); ``trace`` as in :meth:`run`."""
        return self.run(self.prepare(_request(text, fields)), trace)

    def duplicate_groups(self, index: str | Path | None = None) -> list[Any]:
        """The gallery's duplicate groups (:func:`imagent.index.duplicates.duplicate_groups`), computed once per
        state of the index (perceptual hashes are stored in it after the first time)."""
        from imagent.index.duplicates import duplicate_groups

        g = self.gallery(index)
        p = self.parts
        with p.lock:
            hit = p.duplicates.get(g.root)
        if hit is None or hit[0] != g.generation():  # computed outside the lock: other searches go on meanwhile
            hit = (g.generation(), duplicate_groups(g, self.settings.indexing))
            with p.lock:
                p.duplicates[g.root] = hit
        return hit[1]

    # ------------------------------------------------------------------ indexing
    def index(self, source: str | Path, index: str | Path | None = None, *, caption_missing: bool = False,
              captions: str | Path | None = None, ray: str | None = None, ray_actors: int = 2, ray_gpus: float = 0.0,
              ray_chunk: int = 64, progress: Callable[[int, int, str], None] | None = None) -> IndexReport:
        """Index ``source`` (a folder of images, or a manifest) into ``index`` (None: the configured one):
        records, metadata, embeddings, labels, faces; incremental and resumable. Returns the builder's report.

        The build's parts come from :func:`imagent.index.parts.compose_index` (the one composition every index
        build goes through) over this workspace's models: they load only when something must be computed (a run
        that finds nothing new loads none), and are then shared with its searches. With ``caption_missing`` the
        captioner role captions uncaptioned images, unless its model cannot see images: then captioning is refused
        (first warning of the report). ``captions`` imports captions from a file. ``ray`` ("local", "auto" or
        HOST:PORT) computes every per-photo stage on a Ray cluster, on ``ray_actors`` actors (``ray_gpus`` each),
        ``ray_chunk`` photos a task."""
        import contextlib
        import os

        from imagent.core.text import display_path
        from imagent.index.builder import build_index
        from imagent.index.parts import RayPlan, compose_index

        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(f"no such file or folder: {display_path(source)}")
        if captions is not None and not Path(captions).is_file():
            raise FileNotFoundError(f"no such caption file: {display_path(Path(captions))}")
        s = self.settings
        root = Path(index).expanduser() if index else s.index
        options = s.indexing.model_copy(update={"caption_missing": caption_missing or s.indexing.caption_missing})
        captioner, refusal = self._captioner(options.caption_missing)
        if refusal:
            options = options.model_copy(update={"caption_missing": False})
        # A CPU an actor on a cluster; on this machine alone (local) the actors share its cores.
        cpus = min(1.0, (os.cpu_count() or 1) / ray_actors) if ray == "local" else 1.0
        plan = RayPlan(ray_actors, ray_chunk, cpus, ray_gpus) if ray else None
        cluster: Any = contextlib.nullcontext()
        if plan is not None:
            from imagent.index.distributed import ray_cluster

            cluster = ray_cluster(ray or "local")
            options = options.model_copy(update={"batch_size": max(options.batch_size, plan.chunk_size * ray_actors)})
        with cluster:
            parts = compose_index(s, self.parts.models, captioner=captioner, ray=plan)
            try:
                report = build_index(source, root, parts, options, progress=progress,
                                     captions=Path(captions) if captions is not None else None)
            finally:
                parts.close()
        if refusal:
            report.warnings.insert(0, refusal)
        return report

    def _captioner(self, wanted: bool) -> tuple[Role | None, str]:
        """The captioner role for ``--caption-missing`` and, when its model cannot see images, the refusal (checked
        from the config, so the blind model is not even loaded)."""
        if not wanted:
            return None, ""
        entry, model_cfg = self.settings.model_for_role("captioner")
        if model_cfg.vision:
            return self.roles["captioner"], ""
        return None, (f"captioning refused: the captioner role uses model entry {entry!r} ({model_cfg.model}), "
                      "which does not see images (vision = false); a model that cannot see an image must not "
                      "describe it. Configure a captioner with vision (an OpenAI-compatible vision model, "
                      "vision = true) or import captions with --captions FILE")

    def mark_answer_correct(self, query: str, trace: Any, index: str | Path | None = None,
                            params: dict[str, Any] | None = None) -> Any:
        """The user says a PhotoCraft search's answer is right (the web UI's button): its trajectory is
        distilled into the user's skill library (PhotoCraft Sec. 3.2). ``trace`` is the search's
        :class:`~imagent.core.trace.Trace` or its ``to_dict()``. Returns the stored (or merged) skill, or
        None when no de-entified skill could be distilled (the reason is in the returned trace notes)."""
        return self.method("photocraft", index, **(params or {})).mark_answer_correct(query, trace)

    def resolve_reference(self, reference: str | Path | ImageRecord, index: str | Path | None = None) -> ImageRecord:
        """A reference given as a gallery id, an image file, or the file name (or the end of the path) of one photo
        the index holds, from any working folder (:func:`records_named`); :class:`UnknownReference` (with the
        closest names) when it is none of them, or names several photos."""
        if isinstance(reference, ImageRecord):
            return reference
        from imagent.index.builder import record_for_file

        g = self.gallery(index)
        ref = str(reference)
        if ref in g:
            return g.record(ref)
        if not Path(ref).expanduser().exists():
            from imagent.tools.photo_search import records_named

            named = records_named(g, ref)
            if len(named) == 1:  # a file name the index knows (IMG_0053.jpg from any folder)
                return named[0]
            raise UnknownReference(ref, g, named)
        return record_for_file(Path(ref), g)


def _request(text: str, fields: dict[str, Any]) -> SearchRequest:
    """A request from keyword arguments; a name that is no field of it is an error (``metod=`` is a typo, not a
    wish to ignore)."""
    unknown = sorted(set(fields) - set(SearchRequest.model_fields))
    if unknown:
        raise TypeError(f"a search has no field {', '.join(map(repr, unknown))} (fields: "
                        f"{', '.join(SearchRequest.model_fields)})")
    return SearchRequest(text, **fields)


def route_method(text: str, gallery: Gallery, unlink: list[str] | None = None) -> Any:
    """The method a plain-words query goes to (the web UI's search box, ``imagent search`` without ``--method``),
    once the query reader read it (``unlink`` as in :class:`SearchRequest`): album-style queries ("the birds from the
    day I saw the penguin") to the ``album`` method, others to the best content search ``gallery`` supports, or to
    the listing of the photos a question names only people, places and dates of; a
    :class:`~imagent.methods.routing.Route` (the search then goes with ``read_query=True``)."""
    from imagent.methods.base import METHODS
    from imagent.methods.routing import route
    from imagent.tools.query_reader import read_query

    reading = read_query(text, gallery, unlink=unlink or []) if text.strip() else None
    return route(text, gallery, lambda name: name in METHODS, reading)
