"""The Python API: a :class:`Workspace` turns settings into ready parts, lazily.

>>> from imagent.api import Workspace
>>> ws = Workspace.from_config()                       # defaults <- file <- env
>>> result = ws.search("a penguin", method="caption", top_k=5)
>>> result.ranking.ids, result.trace.to_dict()

Encoders, chat backends and the gallery are built on first use and then shared, so one workspace
serves many queries (and an eval run) without reloading models.
"""

from __future__ import annotations

import json
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

from imagent.core.cache import DiskCache
from imagent.core.config import Settings, load_settings, register_secret_env_names
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Result
from imagent.index.embedding import ExtraEncoder, LazyEncoder
from imagent.index.gallery import Gallery
from imagent.methods.base import Method, MethodContext, get_method
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
        params = dict(self.settings.methods.get(name, {}))
        params.update(overrides)
        return cls(self.context(index), cls.Config.model_validate(params))

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
        """Rank the gallery for ``text`` (with ``reference``: a composed query). ``params`` are the
        method's hyper-parameters for this search (``{"k": 10}``), on top of the configured ones.
        ``trace`` (optional) observes the search while it runs (listeners), caps its model calls
        (``max_calls``) or cancels it (``cancel_event``).

        ``like``: a photo (gallery id or image file) to find more like, instead of text.
        ``collapse_duplicates``: one photo per duplicate group (:mod:`imagent.index.duplicates`) in the results.
        ``where``: a filter expression (the album filter language: ``"place ~ 'Vienna' and time >= '2019-07'"``,
        ``near('Vienna', 5)``); the method ranks only the photos it allows, and with no ``text`` the matching
        photos are listed in time order. ``sort``: ``score`` (the method's order) or ``time`` (when taken).
        See :mod:`imagent.tools.photo_search`.

        A reference that is itself in the gallery is left out of the results unless ``keep_reference``:
        "this, but red" asks for other images, and CIRR's evaluation removes it the same way."""
        from imagent.tools import photo_search

        photo_search.check_sort(sort)
        if collapse_duplicates:  # rank more, keep one photo per duplicate group, then cut to top_k
            result = self.search(text, method, top_k * 4 + 10, reference, index, keep_reference, params, trace,
                                 where, sort, like)
            return photo_search.collapse_duplicates(result, self.gallery(index), self.duplicate_groups(index), top_k)
        g = self.gallery(index)
        ref = self.resolve_reference(reference, index) if reference is not None else None
        exclude = [ref.id] if ref is not None and not keep_reference and ref.id in g else []
        query = photo_search.apply_filter(Query(text=text, reference=ref, exclude=exclude), g, where)
        if like is not None:  # more like this photo: no text, no reference
            if text.strip() or ref is not None:
                raise ValueError("like ranks by the photo alone: give no text and no reference with it")
            rec = self.resolve_reference(like, index)
            space = photo_search.like_space(g, method)
            vec = photo_search.like_vector(g, rec, space, self.dual_encoder, self.text_embedder)
            return photo_search.finish(photo_search.more_like(g, rec, vec, space, query, top_k, trace), g, query,
                                       sort)
        if not text.strip() and ref is None and where is not None:
            return photo_search.finish(photo_search.listing(g, query, top_k, trace), g, query, sort)
        m = self.method(method, index, **(params or {}))
        return photo_search.finish(m.search(query, top_k=top_k, trace=trace), g, query, sort)

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

    def mark_answer_correct(self, query: str, trace: Any, index: str | Path | None = None,
                            params: dict[str, Any] | None = None) -> Any:
        """The user says a PhotoCraft search's answer is right (the web UI's button): its trajectory is
        distilled into the user's skill library (PhotoCraft Sec. 3.2). ``trace`` is the search's
        :class:`~imagent.core.trace.Trace` or its ``to_dict()``. Returns the stored (or merged) skill, or
        None when no de-entified skill could be distilled (the reason is in the returned trace notes)."""
        return self.method("photocraft", index, **(params or {})).mark_answer_correct(query, trace)

    def resolve_reference(self, reference: str | Path | ImageRecord, index: str | Path | None = None) -> ImageRecord:
        """A reference given as a gallery id, a path inside the gallery, or any image file."""
        if isinstance(reference, ImageRecord):
            return reference
        from imagent.index.builder import record_for_file

        g = self.gallery(index)
        ref = str(reference)
        if ref in g:
            return g.record(ref)
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
