"""LlamaCppChatModel: model resolution and load errors, the arguments handed to llama.cpp, then real Qwen
in-process (``qwen_local``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagent.core.config import ChatModelConfig
from imagent.models import chat_llamacpp
from imagent.models.base import ChatParams, ImagePart, Message
from imagent.models.chat_llamacpp import LlamaCppChatModel, ModelLoadError, resolve_model_path
from imagent.models.registry import build_chat_model
from testkit import run_in_threads

# --------------------------------------------------------------------------- without loading weights


def test_missing_gguf_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="GGUF model file not found"):
        resolve_model_path(str(tmp_path / "nope.gguf"))


def test_unknown_offline_name_lists_the_known_ones() -> None:
    with pytest.raises(ModelLoadError, match=r"offline:qwen2\.5-0\.5b-instruct"):
        resolve_model_path("offline:llama-70b")


def test_offline_name_resolves_through_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "models" / "q.gguf"
    seen: list[Path] = []
    monkeypatch.setattr(chat_llamacpp, "ensure_offline_model", lambda d, m: seen.append(d) or fake)
    cfg = ChatModelConfig(backend="llama.cpp", model="offline:qwen2.5-0.5b-instruct", n_ctx=1024, n_threads=1,
                          logprobs=False)
    model = build_chat_model(cfg, cache_dir=tmp_path)  # the registry's call; nothing is loaded yet
    assert isinstance(model, LlamaCppChatModel)
    assert seen == [tmp_path] and model.model_path == fake
    assert model.model_id == "offline:qwen2.5-0.5b-instruct"  # machine-independent cache key
    assert (model.n_ctx, model.n_threads, model.logprobs, model.sees_images) == (1024, 1, False, False)


def test_path_model_with_prefix_and_default_threads(tmp_path: Path) -> None:
    import os

    f = tmp_path / "tiny.gguf"
    f.write_bytes(b"x")
    model = LlamaCppChatModel.from_config(ChatModelConfig(backend="llama.cpp", model=f"llama.cpp:{f}"))
    assert model.model_path == f and model.model_id == "tiny.gguf"
    assert model.n_threads == (os.cpu_count() or 1)


def test_corrupt_gguf_fails_to_load_clearly(tmp_path: Path) -> None:
    f = tmp_path / "broken.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 64)
    model = LlamaCppChatModel(f, n_ctx=256, n_threads=1)
    with pytest.raises(ModelLoadError, match="could not load"):
        model.chat([Message.user("hi")], ChatParams(max_tokens=1))


def test_missing_llama_cpp_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    f = tmp_path / "m.gguf"
    f.write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` raise ImportError
    with pytest.raises(ModelLoadError, match=r"pip install 'imagent\[offline\]'"):
        LlamaCppChatModel(f).load()


def test_request_kwargs_map_params(tmp_path: Path) -> None:
    model = LlamaCppChatModel(tmp_path / "m.gguf", seed=5)
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 4}}}
    kw = model.request_kwargs(
        [Message.system("sys"), Message.user("a ", ImagePart(description="a cat"), " b")],
        ChatParams(max_tokens=7, json_schema=schema, top_logprobs=5, stop=["\n"], repeat_penalty=1.1),
    )
    assert kw["messages"] == [{"role": "system", "content": "sys"},
                              {"role": "user", "content": "a [Image, described in text: a cat] b"}]
    assert kw["max_tokens"] == 7 and kw["temperature"] == 0.0 and kw["seed"] == 5
    assert kw["response_format"] == {"type": "json_object", "schema": schema}
    # logprobs are read by a logits processor in chat(), not asked of llama.cpp (that needs logits_all)
    assert "logprobs" not in kw and "top_logprobs" not in kw
    assert kw["stop"] == ["\n"] and kw["repeat_penalty"] == 1.1
    plain = model.request_kwargs([Message.user("q")], ChatParams(seed=2))
    assert plain["seed"] == 2
    # the model entry's temperature applies unless a call sets its own; it is part of the cache tag
    warm = LlamaCppChatModel(tmp_path / "m.gguf", temperature=0.7)
    assert warm.request_kwargs([Message.user("q")], ChatParams())["temperature"] == 0.7
    assert warm.request_kwargs([Message.user("q")], ChatParams(temperature=0.0))["temperature"] == 0.0
    assert warm.cache_tag != model.cache_tag
    assert not {"response_format", "logprobs", "top_logprobs", "repeat_penalty", "stop"} & set(plain)


def test_flash_attention_is_a_config_field_passed_to_llama_cpp_and_keyed(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from imagent.core.config import ChatModelConfig
    from imagent.models import llama_sampling

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    seen: list[dict] = []

    class FakeLlama:
        def __init__(self, **kw: object) -> None:
            seen.append(kw)

    monkeypatch.setattr(llama_sampling, "llama_class", lambda: FakeLlama)
    off = LlamaCppChatModel.from_config(ChatModelConfig(backend="llama.cpp", model=str(gguf)))
    on = LlamaCppChatModel.from_config(ChatModelConfig(backend="llama.cpp", model=str(gguf), flash_attn=True))
    assert ChatModelConfig(backend="llama.cpp", model="x").flash_attn is False  # off: the measured numbers hold
    # its other summation order can change a greedy reply: cached replies of one never answer the other
    assert on.cache_tag != off.cache_tag and off.cache_tag == LlamaCppChatModel(gguf).cache_tag
    off.load()
    on.load()
    assert [kw["flash_attn"] for kw in seen] == [False, True]


def test_no_logprobs_requested_of_a_model_loaded_without_them(tmp_path: Path) -> None:
    # logprobs=false: the call must still answer, just unscored (no logits processor either; see chat()).
    model = LlamaCppChatModel(tmp_path / "m.gguf", logprobs=False)
    kw = model.request_kwargs([Message.user("q")], ChatParams(top_logprobs=20))
    assert "logprobs" not in kw and "top_logprobs" not in kw


# --------------------------------------------------------------------------- real Qwen, in-process

SKY = [Message.user("Is the sky blue on a clear day? Answer yes or no.")]


@pytest.mark.real_model
def test_real_top_logprobs_per_position(qwen_local: LlamaCppChatModel) -> None:
    resp = qwen_local.chat(SKY, ChatParams(max_tokens=2, top_logprobs=5))
    assert 1 <= len(resp.top_logprobs) <= 2
    first = resp.top_logprobs[0]
    assert 1 <= len(first) <= 5 and all(t.logprob <= 0.0 for t in first)
    assert [t.logprob for t in first] == sorted((t.logprob for t in first), reverse=True)
    assert {"yes", "no"} <= {t.token.strip().lower() for t in first}


@pytest.mark.real_model
def test_real_concurrent_calls_are_serialised(qwen_local: LlamaCppChatModel) -> None:
    # One Llama is not thread-safe; the backend's lock must make parallel callers safe.
    out: list[str] = []

    def ask() -> None:
        out.append(qwen_local.chat([Message.user("Say the word 'blue'.")], ChatParams(max_tokens=4)).text)

    errors = run_in_threads(ask, 3)
    assert errors == [] and len(out) == 3
    assert len(set(out)) == 1  # greedy decoding of one prompt: the same text every time


def test_grammar_bounds_are_kept_small_for_llama_cpp():
    """A maxLength of thousands builds a grammar llama.cpp's parser cannot hold (a segfault): bounded, noted."""
    from imagent.core.trace import Trace
    from imagent.models.chat_llamacpp import GRAMMAR_MAX_CHARS, grammar_safe_schema

    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 2000},
                                               "b": {"type": "array", "items": {"type": "string", "maxLength": 10}}}}
    trace = Trace()
    with trace.step("s") as step:
        safe = grammar_safe_schema(schema)
    assert safe["properties"]["a"]["maxLength"] == GRAMMAR_MAX_CHARS
    assert safe["properties"]["b"]["items"]["maxLength"] == 10
    assert schema["properties"]["a"]["maxLength"] == 2000  # the caller's schema is untouched
    assert any("bounded" in n for n in step.notes)


def test_calls_go_to_the_slot_sharing_their_prompt_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two contexts: a long planner prompt and short verifier prompts alternate without evicting each other.
    model = LlamaCppChatModel(tmp_path / "m.gguf", slots=2)
    monkeypatch.setattr(model, "_new_llama", lambda: object())
    planner, verifier = "P" * 300, "V" * 300
    a = model._load_locked(planner + " query 1")
    b = model._load_locked(verifier + " candidate 1")
    assert a is not b
    assert model._load_locked(verifier + " candidate 2") is b
    assert model._load_locked(planner + " query 2") is a
    assert model._load_locked(verifier + " candidate 3") is b
    # a prompt sharing nothing goes to the least recently used slot (here the planner's)
    assert model._load_locked("other " * 60) is a


def test_evaluated_prompt_tokens_follows_llama_cpps_prefix_reuse() -> None:
    from imagent.models.chat_llamacpp import evaluated_prompt_tokens

    # a fresh context: every prompt token is evaluated
    assert evaluated_prompt_tokens([], [1, 2, 3, 9, 9], 3) == 3
    # the previous prompt + reply share 3 tokens with the new prompt of 5: 2 evaluated
    assert evaluated_prompt_tokens([1, 2, 3, 7, 8], [1, 2, 3, 4, 5, 6], 5) == 2
    # an identical prompt: its last token is evaluated again (llama-cpp-python compares tokens[:-1])
    assert evaluated_prompt_tokens([1, 2, 3, 4], [1, 2, 3, 4, 5], 4) == 1
    # a prompt that differs at the start: all of it
    assert evaluated_prompt_tokens([5, 2, 3], [1, 2, 3, 4], 3) == 3
    assert evaluated_prompt_tokens([1], [1], 0) == 0


# A schema with free text, fixed keys and an enum: the grammar both lets the model's best token through and forces
# tokens the model ranks low (keys, enum values), so every path of the lazy check runs.
LAZY_SCHEMA = {"type": "object", "properties": {
    "thought": {"type": "string", "maxLength": 120},
    "tool": {"type": "string", "enum": ["ImageSearch", "FilterMetadata"]},
    "photo_ids": {"type": "array", "items": {"type": "string", "enum": ["u1/123", "u1/456", "u2/789"]},
                  "maxItems": 3}}, "required": ["thought", "tool", "photo_ids"], "additionalProperties": False}


@pytest.mark.real_model
def test_real_lazy_grammar_check_gives_the_stock_samplers_tokens(qwen_local: LlamaCppChatModel,
                                                                   qwen_path: Path) -> None:
    """Greedy JSON calls check the grammar on the chosen token first (imagent.models.llama_sampling): the reply is
    token for token what llama-cpp-python's own chain (grammar over the whole vocabulary) gives."""
    import json

    from llama_cpp import Llama

    msgs = [Message.user("Find photos of a penguin at the zoo. Reply as JSON: a thought, a tool and photo ids.")]
    stock = Llama(model_path=str(qwen_path), n_ctx=1024, n_threads=2, seed=0, logits_all=False, verbose=False)
    try:
        for penalty in (1.0, 1.1):
            params = ChatParams(max_tokens=80, json_schema=LAZY_SCHEMA, repeat_penalty=penalty)
            for slot in qwen_local._slots:  # the shared model's slots keep earlier tests' samplers
                if slot.llama is not None:
                    slot.llama.last_sampler = None
            mine = qwen_local.chat(msgs, params)
            sampler = next(s.llama.last_sampler for s in qwen_local._slots
                           if s.llama is not None and s.llama.last_sampler is not None)
            assert sampler.tokens == mine.completion_tokens + (mine.finish_reason == "stop")
            assert sampler.short_passes + sampler.full_passes < sampler.tokens  # most tokens: one check only
            kw = qwen_local.request_kwargs(msgs, params)
            theirs = stock.create_chat_completion(**kw)["choices"][0]["message"]["content"]
            assert mine.text == theirs
            assert set(json.loads(mine.text, strict=False)) == {"thought", "tool", "photo_ids"}
    finally:
        stock.close()
