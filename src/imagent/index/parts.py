"""The parts of an index build, composed once from the settings: :func:`compose_index` -> :class:`IndexParts`.

Every way an index is built (``imagent index``, :meth:`imagent.api.Workspace.index`, an evaluation's benchmark index,
the web) gets its parts here and hands them to :func:`imagent.index.builder.build_index` as one object:

- the encoders (the dual encoder, the text embedder, the extra encoders of ``[encoders.*]``), each a
  :class:`~imagent.index.embedding.LazyEncoder` whose model id is known from the config, so a run that finds nothing
  new loads no model;
- the per-photo stages, in the order they run (:mod:`imagent.index.stages`): the pixel model
  (:class:`~imagent.index.pixels.PixelStage`, ``[pixels]``), the encoders' embedding
  (:class:`~imagent.index.embedding.EmbedStage`), the text in photos (:class:`~imagent.index.ocr.TextStage`,
  ``[ocr]``) and faces (:class:`~imagent.index.faces.FaceStage`, ``[faces]``);
- the captioner role (``--caption-missing``), the place names (``[places]``) and the approximate store (``[ann]``);
- the runner the stages compute on: this process, or Ray actors (``--ray``:
  :class:`~imagent.index.distributed.RayRunner`, each actor composing its own parts from the same settings).

The models themselves are :class:`Models` (each loaded on first use, once, and shared with the workspace's searches).
Adding a per-photo pass is one module (its :class:`~imagent.index.stages.Stage` class and a factory from a
:class:`StageContext`) and one line in :data:`STAGES` (docs/architecture.md, "Adding a stage").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from imagent.core.config import (
    PIXEL_MODEL_NAMES,
    AnnOptions,
    EncoderConfig,
    FaceOptions,
    IndexOptions,
    PixelOptions,
    PlaceOptions,
    Settings,
)
from imagent.index.embedding import EmbedStage, ExtraEncoder, LazyEncoder
from imagent.index.faces import FaceStage
from imagent.index.ocr import text_stage
from imagent.index.pixels import PixelStage
from imagent.index.stages import LocalRunner, Runner, Stage
from imagent.models.base import DualEncoder, TextEmbedder
from imagent.models.registry import build_dual_encoder, build_text_embedder, model_id_for, sees_pixels_for
from imagent.models.roles import Role

T = TypeVar("T")


class Models:
    """The configured models, each loaded on first use and then shared (one re-entrant lock: concurrent searches load
    a model once, and a model may load another: the caption-mode dual encoder its text embedder)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.RLock()
        self._loaded: dict[str, Any] = {}

    def _once(self, key: str, make: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = make()
            return self._loaded[key]

    @property
    def text_embedder(self) -> TextEmbedder:
        return self._once("text", lambda: build_text_embedder(self.settings.text_embedder))

    @property
    def dual_encoder(self) -> DualEncoder:
        return self._once("dual", lambda: self._build_dual(self.settings.dual_encoder))

    @property
    def pixel_model(self) -> Any:
        """The ImageNet classifier (:class:`~imagent.models.pixels.EffNetLite`): the pixel dual encoder's model when
        ``dual_encoder.backend`` names one, else ``pixels.model``; shared by the index's labels and the pixel dual
        encoder (:func:`~imagent.models.pixels.pixel_model_name`)."""

        def make() -> Any:
            from imagent.models.pixels import EffNetLite, pixel_model_name

            s = self.settings
            name = pixel_model_name(s.pixels, s.dual_encoder.backend)
            device = s.dual_encoder.device if s.dual_encoder.backend == name else "cpu"
            return EffNetLite(s.pixels, device, max_pixels=s.indexing.max_pixels, max_bytes=s.indexing.max_file_bytes,
                              name=name)

        return self._once("pixels", make)

    def encoder(self, name: str) -> Any:
        """The extra encoder ``[encoders.<name>]``. A text embedder, or a caption-mode dual encoder, with the main text
        embedder's model shares its loaded instance."""
        cfg = self.settings.encoders.get(name)
        if cfg is None:
            raise KeyError(f"no encoder {name!r} under [encoders] (configured: "
                           f"{', '.join(self.settings.encoders) or 'none'})")

        def make() -> Any:
            main = self.settings.text_embedder
            if cfg.kind == "text":
                same = (cfg.backend, cfg.model, cfg.device) == (main.backend, main.model, main.device)
                return self.text_embedder if same else build_text_embedder(cfg)
            return self._build_dual(cfg)

        return self._once(f"encoder:{name}", make)

    def _build_dual(self, cfg: EncoderConfig) -> Any:
        if cfg.backend == "caption":
            return build_dual_encoder(cfg, text_embedder=self._text_embedder_for(cfg))
        limits = self.settings.indexing
        if cfg.backend in PIXEL_MODEL_NAMES:  # the pixel model, shared with the index's labels (one pass a photo)
            return build_dual_encoder(cfg, text_embedder=self._text_embedder_for(cfg), pixel_model=self.pixel_model,
                                      pixel_options=self.settings.pixels)
        return build_dual_encoder(cfg, max_pixels=limits.max_pixels, max_bytes=limits.max_file_bytes)

    def _text_embedder_for(self, cfg: EncoderConfig) -> Any:
        """Caption mode with the configured text embedder's model shares the loaded instance."""
        if not cfg.model or cfg.model == self.settings.text_embedder.model:
            return self.text_embedder
        return build_text_embedder(self.settings.text_embedder.model_copy(update={"model": cfg.model}))


def extra_encoders(settings: Settings, load: Callable[[str], Any]) -> list[ExtraEncoder]:
    """The configured extra encoders (``[encoders.*]``), each a :class:`LazyEncoder` over ``load(name)`` with its
    model id (and whether it sees pixels) known from the config, so nothing loads until a vector is needed."""
    out = []
    for name, cfg in settings.encoders.items():
        kind = cfg.kind or "dual"
        lazy = LazyEncoder(lambda n=name: load(n), model_id_for(kind, cfg, settings.text_embedder),
                           sees_pixels=sees_pixels_for(kind, cfg))
        out.append(ExtraEncoder(name, kind, lazy))
    return out


@dataclass
class IndexParts:
    """Everything a build uses besides the source and the per-run options (see the module doc). ``stages`` in the
    order they run; ``embed`` is one of them."""

    embed: EmbedStage
    stages: list[Stage]
    captioner: Role | None = None
    places: PlaceOptions = field(default_factory=PlaceOptions)
    ann: AnnOptions = field(default_factory=AnnOptions)
    runner: Runner = field(default_factory=LocalRunner)

    @property
    def dual(self) -> Any:
        return self.embed.dual

    @property
    def text(self) -> Any:
        return self.embed.text

    @property
    def extras(self) -> list[ExtraEncoder]:
        return self.embed.extras

    @property
    def pixels(self) -> PixelStage | None:
        found = [s for s in self.stages if isinstance(s, PixelStage)]
        return found[0] if found else None

    @property
    def inline(self) -> list[Stage]:
        """The stages that run with each batch of new records, in their transaction."""
        return [s for s in self.stages if s.inline]

    @property
    def after(self) -> list[Stage]:
        """The stages that run after the records and the snapshot (faces)."""
        return [s for s in self.stages if not s.inline]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} in this index's parts ({', '.join(s.name for s in self.stages)})")

    def describe(self) -> dict[str, dict[str, Any]]:
        """name -> what each stage needs and stores, its version and whether it runs inline (no model is loaded)."""
        return {s.name: {"needs": s.needs, "stores": list(s.stores), "version": s.version, "inline": s.inline}
                for s in self.stages}

    def close(self) -> None:
        for s in self.stages:
            s.close()
        self.runner.close()

    @classmethod
    def of(cls, dual: DualEncoder | None, text: TextEmbedder | None, *, extras: Sequence[ExtraEncoder] = (),
           pixel_model: Any = None, pixel_options: PixelOptions | None = None,
           faces: FaceOptions | None = None, places: PlaceOptions | None = None, ann: AnnOptions | None = None,
           captioner: Role | None = None, limits: IndexOptions | None = None, runner: Runner | None = None,
           settings: Settings | None = None) -> IndexParts:
        """Parts around encoders (and a pixel model) already made: tests, benchmarks, the Python API. ``faces``
        (default ``FaceOptions()``, mode auto) configures the face stage; ``limits`` bound its decodes; ``runner``
        (default: this process) is where the stages compute; ``settings`` gives the sections not named here (a
        stage's own, e.g. ``[ocr]``), the named ones replacing its."""
        caption_mode = False
        if pixel_model is not None and dual is not None and not getattr(dual, "sees_pixels", True):
            caption_mode = hasattr(dual.get() if isinstance(dual, LazyEncoder) else dual, "text_embedder")
        base = settings or Settings()
        named = {"pixels": pixel_options, "faces": faces, "places": places, "ann": ann, "indexing": limits}
        s = base.model_copy(update={k: v for k, v in named.items() if v is not None})
        ctx = StageContext(s, dual, text, list(extras), (lambda: pixel_model) if pixel_model is not None else None,
                           getattr(pixel_model, "name", None) or "effnet-lite0", caption_mode)
        return _assemble(ctx, captioner, runner or LocalRunner())


@dataclass(frozen=True)
class StageContext:
    """What the per-photo stages are built from (:data:`STAGES`): the settings (a stage reads its own section,
    ``settings.faces``, ``settings.ocr``, and the decode limits ``settings.indexing``), the encoders, the pixel
    model's loader and name, and ``workers``: the processes a stage may start for itself (1 on Ray: the actors are
    the workers). Building a stage loads nothing: a model loads on the stage's first compute."""

    settings: Settings
    dual: Any
    text: Any
    extras: list[ExtraEncoder]
    load_pixels: Callable[[], Any] | None = None
    pixel_name: str = "effnet-lite0"
    caption_mode: bool = False
    workers: int = 1


StageFactory = Callable[[StageContext], Stage | None]


def _pixel_stage(ctx: StageContext) -> PixelStage | None:
    from imagent.models.pixels import FEATURE_DIM, feature_model_id

    if ctx.load_pixels is None:
        return None
    return PixelStage(ctx.load_pixels, ctx.settings.pixels, ctx.caption_mode, feature_model_id(ctx.pixel_name),
                      FEATURE_DIM)


def _embed_stage(ctx: StageContext) -> EmbedStage:
    conse = None
    if ctx.load_pixels is not None and ctx.caption_mode:  # ConSE vectors of captionless photos (its text model)
        from imagent.models.pixels import Conse

        conse = partial(_conse, ctx.dual, ctx.settings.pixels, Conse)
    return EmbedStage(ctx.dual, ctx.text, ctx.extras, conse)


def _face_stage(ctx: StageContext) -> FaceStage:
    from imagent.models import faces as face_models

    limits = ctx.settings.indexing
    load = partial(face_models.FaceModel, ctx.settings.faces, max_pixels=limits.max_pixels,
                   max_file_bytes=limits.max_file_bytes)
    return FaceStage(ctx.settings.faces, load, ctx.workers)


# The per-photo stages in the order they run: a stage sees the results of those before it in a chunk (the embedding
# reads the pixel model's labels and top classes). A factory returns None when its stage is off. A new pass is one
# line here: its factory, defined beside its Stage class in its own module (docs/architecture.md, "Adding a stage").
STAGES: tuple[StageFactory, ...] = (_pixel_stage, _embed_stage, text_stage, _face_stage)


def _assemble(ctx: StageContext, captioner: Role | None, runner: Runner) -> IndexParts:
    stages = [stage for make in STAGES if (stage := make(ctx)) is not None]
    embed = next(s for s in stages if isinstance(s, EmbedStage))
    return IndexParts(embed, stages, captioner, ctx.settings.places, ctx.settings.ann, runner)


def _conse(dual: Any, options: PixelOptions, conse_class: Any) -> Any:
    enc = dual.get() if isinstance(dual, LazyEncoder) else dual
    return conse_class(enc.text_embedder, options)


@dataclass(frozen=True)
class RayPlan:
    """``--ray``: the cluster (``local``, ``auto`` or an address, joined by the caller) and the actors: how many, the
    photos each task computes, the CPUs and GPUs each reserves."""

    actors: int = 2
    chunk_size: int = 64
    cpus_per_actor: float = 1.0
    gpus_per_actor: float = 0.0


def compose_index(settings: Settings, models: Models | None = None, *, captioner: Role | None = None,
                  ray: RayPlan | None = None) -> IndexParts:
    """The index's parts from ``settings`` (see the module doc); ``models`` shares loaded models (a workspace's);
    ``ray``: the stages compute on Ray actors (the caller has joined the cluster), each composing its parts from these
    settings (:func:`actor_parts`)."""
    s = settings
    models = models or Models(s)
    text = LazyEncoder(lambda: models.text_embedder, model_id_for("text", s.text_embedder))
    dual = LazyEncoder(lambda: models.dual_encoder, model_id_for("dual", s.dual_encoder, s.text_embedder),
                       sees_pixels=sees_pixels_for("dual", s.dual_encoder))
    extras = extra_encoders(s, models.encoder)
    from imagent.models.pixels import pixel_model_name

    pixel_name = pixel_model_name(s.pixels, s.dual_encoder.backend)
    runner: Runner = LocalRunner()
    if ray is not None:
        from imagent.index.distributed import RayRunner

        runner = RayRunner(partial(actor_parts, _actor_settings(s, ray)), ray.actors, ray.chunk_size,
                           ray.cpus_per_actor, ray.gpus_per_actor)
    ctx = StageContext(s, dual, text, extras, (lambda: models.pixel_model) if pixel_name else None,
                       pixel_name or "effnet-lite0", s.dual_encoder.backend == "caption",
                       1 if ray is not None else s.faces.workers)
    return _assemble(ctx, captioner, runner)


def actor_parts(settings: Settings) -> IndexParts:
    """What a Ray actor composes: the same parts, computing in the actor's process."""
    return compose_index(settings)


def _actor_settings(settings: Settings, ray: RayPlan) -> Settings:
    """The settings an actor composes from: its torch (and onnxruntime: OCR) threads bounded by the CPUs it
    reserves, faces scanned in the actor itself (the actors are the parallel workers)."""
    threads = max(1, int(ray.cpus_per_actor)) if ray.cpus_per_actor else settings.pixels.threads
    ocr_threads = max(1, int(ray.cpus_per_actor)) if ray.cpus_per_actor else settings.ocr.threads
    return settings.model_copy(update={"pixels": settings.pixels.model_copy(update={"threads": threads}),
                                       "ocr": settings.ocr.model_copy(update={"threads": ocr_threads}),
                                       "faces": settings.faces.model_copy(update={"workers": 1})})


def stages_key(settings: Settings, from_folder: bool) -> dict[str, str]:
    """stage name -> version for the stages a build of a folder (or a manifest) runs besides the embedding (whose
    spaces the encoders' settings name): a cache key of what the index holds. Nothing is loaded."""
    from imagent.index.faces import faces_wanted

    parts = compose_index(settings)
    out = {}
    for stage in parts.stages:
        if stage is parts.embed or (isinstance(stage, FaceStage) and not faces_wanted(settings.faces, from_folder)[0]):
            continue
        out[stage.name] = stage.version
    return out


__all__ = ["STAGES", "IndexParts", "Models", "RayPlan", "StageContext", "StageFactory", "actor_parts",
           "compose_index", "extra_encoders", "stages_key"]
