"""Property-based fuzzing of model replies for every registered method (issue 11, deliver 5).

A scripted chat model answers each call with the next reply Hypothesis drew: garbage, huge text, lone
surrogates, half-written or wrongly typed JSON, yes/no variants, ``<think>`` blocks, tool-call-like text.
Every method in :func:`imagent.methods.base.list_methods` (so methods added later are covered without
editing this file) runs ``search`` on a small caption-mode gallery, for each task it handles, with the call
cache off and on (the cache crashed on lone surrogates before). The properties:

- no exception escapes ``search``;
- the ranking is well-formed: ids from the query's pool, no duplicates, as long as ``top_k`` allows, finite
  scores, and its trace serialises as UTF-8 JSON;
- every fallback is recorded: a JSON answer that fell back leaves a "fell back" note, an unanswered yes/no
  leaves a note or counter;
- the method never makes more uncached model calls than its cap.

A method that needs more than a gallery and a chat model declares it in ``METHOD_SETUP`` below (config
overrides and tools), keyed by its registered name. Figures (searches, fuzzed replies served, crashes) are
printed at the end of the module. ``derandomize=True`` makes every run try the same examples.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from imagent.core.cache import DiskCache
from imagent.core.trace import Trace
from imagent.core.types import DialogueTurn, ImageRecord, Query, Result
from imagent.index.embedding import gallery_from_records
from imagent.index.gallery import Gallery
from imagent.methods.base import Method, MethodContext, list_methods
from imagent.models.base import ChatParams, ChatResponse, Message
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.encoders import CaptionDualEncoder
from imagent.models.roles import Role, Roles, YesNo
from imagent.tools.base import Provenance, ToolImage

TOP_K = 8
# Examples per method, task and cache setting: 12 keeps the module within a CI minute or two;
# IMAGENT_FUZZ_EXAMPLES=200 is a longer hunt.
EXAMPLES = int(os.environ.get("IMAGENT_FUZZ_EXAMPLES", "12"))

# --------------------------------------------------------------------------- a tiny deterministic gallery


class HashEmbedder:
    """Bag of hashed words, L2-normalised: deterministic, instant, and similar texts score higher."""

    model_id = "hash-64"
    dim = 64

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = str(text).lower().split() or ["<empty>"]
            for w in words:
                h = hashlib.blake2b(w.encode("utf-8", "replace"), digest_size=4).digest()
                out[row, h[0] % self.dim] += 1.0 if h[1] % 2 else -1.0
            norm = float(np.linalg.norm(out[row]))
            out[row] = out[row] / norm if norm > 0 else np.eye(self.dim, dtype=np.float32)[0]
        return out


CAPTIONS = [
    "a red vintage car parked on a street", "a blue bicycle leaning on a wall", "a black cat sleeping on a sofa",
    "a white dog running on the beach", "a green apple on a wooden table", "a yellow taxi in the rain",
    "a red dress with long sleeves", "a sleeveless blue dress", "a penguin standing on ice",
    "a bowl of fruit with bananas", "a mountain lake at sunrise", "a city skyline at night",
]


@pytest.fixture(scope="module")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> Gallery:
    text = HashEmbedder()
    records = [ImageRecord(id=f"img{i:02d}", path=f"/nonexistent/img{i:02d}.jpg", captions=[c])
               for i, c in enumerate(CAPTIONS)]
    return gallery_from_records(str(tmp_path_factory.mktemp("fuzz-gallery")), records, CaptionDualEncoder(text), text)


# --------------------------------------------------------------------------- tools for methods that use them


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


class EchoSearchTool:
    """An image search whose result title echoes the (model-written) query, plus a lone surrogate."""

    kind = "search"
    backend = "fuzz-search"

    def identity(self) -> str:
        return "fuzz-search"

    def search(self, query: str, n: int = 1) -> list[ToolImage]:
        return [ToolImage(Provenance(self.backend, "fuzz://result"), data=_png(), title=f"{query[:80]} \udc80",
                          mime="image/png")]


class EchoEditTool:
    kind = "edit"
    backend = "fuzz-edit"

    def identity(self) -> str:
        return "fuzz-edit"

    def edit(self, image: Any, instruction: str) -> ToolImage:
        return ToolImage(Provenance(self.backend, "fuzz-model"), data=_png(), description=instruction[:80],
                         mime="image/png")


# name -> (config overrides, tools). Methods not listed run with their defaults and no tools.
METHOD_SETUP: dict[str, Callable[[], tuple[dict[str, Any], dict[str, Any]]]] = {
    "tacir": lambda: ({}, {"search": EchoSearchTool(), "edit": EchoEditTool()}),
    # No golden library here: OSCAR with demonstrations refuses to run without one (issue 27), so the fuzz runs
    # its w/o Demo. ablation, which exercises the same planner, set operations and verifier.
    "oscar": lambda: ({"demonstrations": False}, {}),
}


# --------------------------------------------------------------------------- replies


class FuzzModel:
    """Answers call i with ``replies[i % len(replies)]``, through the real ScriptedChatModel (so yes/no replies
    carry first-token logprobs as a real backend's do)."""

    backend = "fuzz"
    sees_images = False

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.served = 0
        self.model_id = "fuzz-" + hashlib.sha256(json.dumps(replies, ensure_ascii=True).encode()).hexdigest()[:12]
        self._lock = threading.Lock()
        self._inner = ScriptedChatModel(default=self._next)

    def _next(self, _text: str) -> str:
        with self._lock:
            reply = self.replies[self.served % len(self.replies)]
            self.served += 1
        return reply

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        return self._inner.chat(messages, params)


SURROGATES = st.sampled_from(["\ud800", "\udfff", "\udce9", "\udc80x", "\ud83d"])
KEYS = ["step1", "step2", "target_caption", "modifications", "attributes", "questions", "answers", "question",
        "answer", "target_image_description", "original_image_description", "tool_usage", "thoughts",
        "reflections", "tool_evidence_description", "descriptions", "ids", "ranking", "tool", "query", "plan"]
WORDS = st.sampled_from(["red", "car", "dress", "sleeveless", "addition", "removal", "modification", "True", "False",
                         "yes", "no", "<search>red car</search>", "<edit>make it blue</edit>", "img03", "\ufffd"])
TEXTS = st.one_of(
    st.lists(WORDS, max_size=8).map(" ".join),
    st.text(max_size=40),
    st.tuples(st.text(max_size=10), SURROGATES).map("".join),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                    TEXTS)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                           max_leaves=12)
PLAUSIBLE_VALUES: list[Any] = [
    {"step1": [["addition", "make it red"], ["removal", "no sleeves"]], "step2": ["a red dress", "a red dress",
                                                                                  "a red sleeveless dress"]},
    {"step1": ["The dress is red.", "It has no sleeves."], "step2": [["Is the dress red?", "True"],
                                                                      ["Does it have sleeves?", "False"]]},
    {"modifications": ["make it red"], "target_caption": "a red car"},
    {"attributes": [{"attribute": "red", "present": True}], "target_caption": "a red car on a street"},
    {"questions": [{"question": "Is it red?", "answer": True}, {"question": "Is it a car?", "answer": "true"}]},
    {"answers": [True, False, True]},
    {"original_image_description": "a car", "thoughts": "t", "reflections": "r",
     "tool_usage": "<search>red vintage car</search>", "target_image_description": "a red vintage car"},
    {"target_image_description": "a blue dress", "tool_usage": "<edit>make the dress blue</edit>"},
]
PLAUSIBLE = st.sampled_from(PLAUSIBLE_VALUES)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


REPLIES = st.one_of(
    TEXTS,
    st.text(max_size=300),
    st.tuples(st.sampled_from(["a", "{", "[", "<think>", "\"", "yes ", " "]), st.integers(2_000, 60_000))
    .map(lambda t: t[0] * t[1]),  # huge output
    st.tuples(st.one_of(PLAUSIBLE, JSON_VALUES).map(_dump), st.floats(0, 1)).map(
        lambda t: t[0][: max(1, int(len(t[0]) * t[1]))]),  # half-written JSON
    JSON_VALUES.map(_dump),  # JSON of any shape and type
    PLAUSIBLE.map(_dump),
    PLAUSIBLE.map(lambda v: f"Sure! ```json\n{_dump(v)}\n``` hope this helps"),
    st.sampled_from(["Yes", "no.", "TRUE", "False, it is grey", " yes", "ANSWER: Yes", "**Answer: No**", "Y",
                     "nope", "", "Yes\nANSWER: No", "True/False", "1", "No\udc80"]),
    st.tuples(st.text(max_size=30), PLAUSIBLE.map(_dump)).map(lambda t: f"<think>{t[0]}</think>{t[1]}"),
    st.sampled_from(["<think>{\"step2\": [\"draft\"]}", "</think>yes", "<think><think>no</think>", "<THINK>x"]),
    st.sampled_from(['<tool_call>{"name": "search", "arguments": {"query": "red car"}}</tool_call>',
                     '{"tool_calls": [{"function": {"name": "edit", "arguments": "{}"}}]}',
                     "Action: search[red car]", "<search></search>", "<edit>", "<search>" * 50]),
    st.tuples(TEXTS, SURROGATES, PLAUSIBLE.map(_dump)).map("".join),
)


# --------------------------------------------------------------------------- what the suite records


class RecordingRole(Role):
    """A Role that counts what a method must record: JSON fallbacks and unanswered yes/no questions."""

    stats: Counter[str]

    def json(self, *args: Any, **kwargs: Any) -> tuple[Any, bool]:
        value, ok = super().json(*args, **kwargs)
        if not ok:
            self.stats["json_fallbacks"] += 1
        return value, ok

    def yes_no(self, *args: Any, **kwargs: Any) -> YesNo:
        answer = super().yes_no(*args, **kwargs)
        if answer.answer is None:
            self.stats["yes_no_unanswered"] += 1
        return answer


class RecordingRoles(Roles):
    def __init__(self, model: FuzzModel, cache: DiskCache | None) -> None:
        super().__init__(lambda name: ("default", model), cache)
        self.stats: Counter[str] = Counter()

    def __getitem__(self, name: str) -> Role:
        role = self._roles.get(name)
        if role is None:
            role = RecordingRole(name, self._factory(name)[1], self._cache)
            role.stats = self.stats
            self._roles[name] = role
        return role


FIGURES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_figures(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    line = (f"fuzzed replies: {FIGURES['searches']} searches over {len(list_methods())} methods, "
            f"{FIGURES['replies']} replies served, {FIGURES['crashed']} crashed, "
            f"{FIGURES['json_fallbacks']} JSON fallbacks, {FIGURES['yes_no_unanswered']} unanswered yes/no, "
            f"{FIGURES['capped']} stopped by the call cap")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # fd-level capture would swallow it otherwise
            reporter.write_line("\n" + line)


# --------------------------------------------------------------------------- the property


def _queries(method: type[Method], gallery: Gallery) -> list[tuple[str, Query]]:
    ref = gallery.record("img00")
    made = {
        "tir": Query(text="a red dress without sleeves", id="q-tir"),
        "cir": Query(text="make it blue and remove the street", id="q-cir", reference=ref, exclude=[ref.id]),
        "chat": Query(text="a dress", id="q-chat", dialogue=[DialogueTurn("what colour?", "red"),
                                                             DialogueTurn("sleeves?", "none")]),
    }
    return [(task, made[task]) for task in sorted(method.tasks) if task in made]


def _cases() -> list[tuple[str, str, bool]]:
    out = []
    for name, cls in list_methods().items():
        for task in sorted(cls.tasks & {"tir", "cir", "chat"}):
            for cache in (False, True):
                out.append((name, task, cache))
    return out


def assert_well_formed(result: Result, pool: list[str]) -> None:
    """Ids from the pool, no duplicates, finite scores, a UTF-8-serialisable trace; a ranked (not set-valued)
    answer is as long as ``TOP_K`` and the pool allow."""
    ids = result.ranking.ids
    assert len(ids) == len(set(ids)), "duplicate ids in the ranking"
    assert set(ids) <= set(pool), f"ids outside the pool: {set(ids) - set(pool)}"
    assert all(math.isfinite(s) for s in result.ranking.scores)
    if result.answer_set is None:
        assert len(ids) == min(TOP_K, len(pool))
    else:
        assert len(set(result.answer_set)) == len(result.answer_set) and set(result.answer_set) <= set(pool)
    json.dumps(result.trace.to_dict(), ensure_ascii=False, default=str).encode("utf-8")


def check_search(name: str, task: str, use_cache: bool, replies: list[str], gallery: Gallery,
                 cache_dir: Any) -> None:
    cls = list_methods()[name]
    overrides, tools = METHOD_SETUP.get(name, lambda: ({}, {}))()
    model = FuzzModel(replies)
    cache = DiskCache(cache_dir / "calls.sqlite") if use_cache else None
    roles = RecordingRoles(model, cache)
    text = HashEmbedder()
    ctx = MethodContext(gallery=gallery, dual=CaptionDualEncoder(text), text=text, roles=roles, tools=tools)
    query = dict(_queries(cls, gallery))[task]
    FIGURES["searches"] += 1
    try:
        method = cls(ctx, cls.Config.model_validate(overrides))
        trace = Trace()
        result = method.search(query, top_k=TOP_K, trace=trace)
    except Exception:
        FIGURES["crashed"] += 1
        raise
    finally:
        FIGURES["replies"] += model.served
    FIGURES.update(roles.stats)
    FIGURES["capped"] += int(bool(trace.counters.get("call_cap_stops")))

    assert_well_formed(result, [i for i in gallery.ids if i not in query.exclude])

    notes = [n for s in result.trace.steps for n in s.notes]
    if roles.stats["json_fallbacks"]:
        assert any("fell back" in n for n in notes), "a JSON fallback left no note"
    if roles.stats["yes_no_unanswered"]:
        assert result.trace.counters or notes, "an unanswered yes/no left no record"
    assert trace.max_calls is not None and model.served <= trace.max_calls


@pytest.mark.parametrize(("name", "task", "use_cache"), _cases())
def test_no_reply_crashes_a_search(name: str, task: str, use_cache: bool, gallery: Gallery,
                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    cache_dir = tmp_path_factory.mktemp(f"fuzz-cache-{name}-{task}")

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(replies=st.lists(REPLIES, min_size=1, max_size=10))
    def run(replies: list[str]) -> None:
        check_search(name, task, use_cache, replies, gallery, cache_dir)

    run()


# --------------------------------------------------------------------------- the cap on model calls


@pytest.mark.parametrize(("name", "task"), sorted({(n, t) for n, t, _ in _cases()}))
@pytest.mark.parametrize("cap", [0, 1, 3])
def test_a_tiny_call_cap_stops_every_method_with_a_full_ranking(name: str, task: str, cap: int,
                                                                gallery: Gallery) -> None:
    cls = list_methods()[name]
    overrides, tools = METHOD_SETUP.get(name, lambda: ({}, {}))()
    model = FuzzModel([_dump(v) for v in PLAUSIBLE_VALUES] + ["yes", "ANSWER: No"])
    text = HashEmbedder()
    ctx = MethodContext(gallery=gallery, dual=CaptionDualEncoder(text), text=text,
                        roles=RecordingRoles(model, None), tools=tools)
    method = cls(ctx, cls.Config.model_validate({**overrides, "max_calls": cap}))
    query = dict(_queries(cls, gallery))[task]
    result = method.search(query, top_k=TOP_K)
    pool = [i for i in gallery.ids if i not in query.exclude]
    assert model.served <= cap
    assert result.trace.model_calls <= cap
    assert_well_formed(result, pool)
    notes = [n for s in result.trace.steps for n in s.notes]
    refused = result.trace.counters.get("call_cap_refused", 0)
    if cap == 0 and cls.estimate_calls(method.config, query) > 0:
        assert refused  # the method needs a model: at cap 0 its first call is refused
    if refused:
        assert any(f"call cap {cap} reached" in n for n in notes), notes
        assert result.is_error and "call cap reached" in result.source_reason  # never scored as the method's


def test_the_default_cap_is_twice_the_expected_count(gallery: Gallery) -> None:
    for name, cls in list_methods().items():
        text = HashEmbedder()
        ctx = MethodContext(gallery=gallery, dual=CaptionDualEncoder(text), text=text,
                            roles=RecordingRoles(FuzzModel(["yes"]), None), tools={})
        method = cls(ctx, cls.Config())
        query = Query(text="x")
        assert method.call_cap(query) == 2 * cls.estimate_calls(method.config, query), name
    trace = Trace(max_calls=5)
    clip = list_methods()["clip"]
    text = HashEmbedder()
    ctx = MethodContext(gallery=gallery, dual=CaptionDualEncoder(text), text=text,
                        roles=RecordingRoles(FuzzModel(["yes"]), None), tools={})
    clip(ctx).search(Query(text="x"), top_k=3, trace=trace)
    assert trace.max_calls == 5  # a cap the caller set is kept
