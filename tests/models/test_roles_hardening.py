"""Role and JSON-output hardening (issues 11 and 12): linear <think> stripping, replies cut by max_tokens never
accepted half-written, the per-query cap on model calls, and lone surrogates in model output."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagent.core.cache import DiskCache
from imagent.core.concurrency import map_threads
from imagent.core.trace import Trace
from imagent.models.base import ChatError, ChatParams, ChatResponse, Message
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.json_output import JSONParseError, parse_json, strip_think
from imagent.models.roles import CallBudgetExceeded, Role

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}
MSGS = [Message.user("Describe the target as JSON.")]
_OLD_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)  # the former implementation, as the reference


# --------------------------------------------------------------------------- <think> stripping


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(["<think>", "</think>", "<THINK>", "</Think>", "a", "{\"target\": \"x\"}", "\n",
                                 "<thin", "k>", "</", "İ"]), max_size=40))
def test_strip_think_matches_the_former_regex(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert strip_think(text) == _OLD_THINK.sub("", text)


ADVERSARIAL = {
    "unclosed open tags": "<think>" * 30_000,
    "unclosed tags between words": "<think> draft {\"target\": \"a\"} " * 7_000,
    "nested opens, one close at the end": "<think>" * 28_000 + "</think>{\"target\": \"cat\"}",
    "stray closes": "</think>x" * 22_000,
    "open then many closes": "<think>" + "</think>" * 25_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_think_stripping_of_200kb_adversarial_output_is_linear(name: str) -> None:
    # The former regex rescanned the rest of the text from every unclosed tag: 140 KB took 11 s and 35 KB with
    # 40,000 tags 46 s. The ceiling below is ~100x what a linear pass needs on a busy machine.
    text = ADVERSARIAL[name]
    assert len(text) >= 190_000
    t0 = time.perf_counter()
    with contextlib.suppress(JSONParseError):
        parse_json(text, SCHEMA)
    assert time.perf_counter() - t0 < 2.0


def test_trailing_separator_run_is_not_quadratic() -> None:
    # re.sub(r"[,:\s]+$", ...) used while closing a cut value retried a long run of spaces from every position.
    t0 = time.perf_counter()
    assert parse_json('{"target": "cat", "x": [1,' + " " * 100_000 + "2", SCHEMA) == {"target": "cat", "x": [1, 2]}
    assert time.perf_counter() - t0 < 2.0


def test_nested_think_block_is_removed_whole() -> None:
    assert parse_json('<think>a <think> {"target": "draft"}</think>{"target": "final"}', SCHEMA) == {"target": "final"}


# --------------------------------------------------------------------------- replies cut by max_tokens


class CutModel:
    """Answers each call from a list of (text, finish_reason); records the max_tokens asked."""

    backend = "test"
    model_id = "cut"
    sees_images = False

    def __init__(self, replies: list[tuple[str, str]]) -> None:
        self.replies = list(replies)
        self.max_tokens: list[int] = []

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        self.max_tokens.append(params.max_tokens)
        text, reason = self.replies.pop(0)
        return ChatResponse(text=text, finish_reason=reason)


def test_a_reply_cut_by_max_tokens_is_retried_with_more_room_not_repaired() -> None:
    model = CutModel([('{"target": "a red car with', "length"), ('{"target": "a red car with a roof rack"}', "stop")])
    trace = Trace()
    with trace.step("s") as step:
        value, ok = Role("r", model).json(MSGS, SCHEMA, fallback=lambda: {"target": "?"}, max_tokens=100)
    assert (value, ok) == ({"target": "a red car with a roof rack"}, True)
    assert model.max_tokens == [100, 200]
    assert trace.counters["json_cut_by_max_tokens"] == 1
    assert any("cut at max_tokens=100" in n and "max_tokens=200" in n for n in step.notes)


def test_a_reply_always_cut_falls_back_and_says_so() -> None:
    model = CutModel([('{"target": "a red', "length")] * 3)
    trace = Trace()
    with trace.step("s") as step:
        value, ok = Role("r", model).json(MSGS, SCHEMA, fallback=lambda: {"target": "fb"}, retries=2, max_tokens=64)
    assert (value, ok) == ({"target": "fb"}, False)
    assert model.max_tokens == [64, 128, 256]
    assert trace.counters["json_cut_by_max_tokens"] == 3
    assert any("fell back" in n for n in step.notes)
    assert any("not accepted" in n for n in step.notes)


def test_a_cut_reply_whose_json_closed_before_the_cut_is_accepted() -> None:
    model = CutModel([('{"target": "cat"} and then the model kept talking until it was cut', "length")])
    assert Role("r", model).json(MSGS, SCHEMA) == ({"target": "cat"}, True)


def test_the_same_cut_text_is_repaired_when_the_model_stopped_by_itself() -> None:
    # Without finish_reason=length the repair of an unterminated value still applies (models do stop early).
    model = CutModel([('{"target": "a red car', "stop")])
    assert Role("r", model).json(MSGS, SCHEMA) == ({"target": "a red car"}, True)


def test_parse_json_complete_only() -> None:
    with pytest.raises(JSONParseError):
        parse_json('{"target": "a red', SCHEMA, complete_only=True)
    assert parse_json('{"target": "a red', SCHEMA) == {"target": "a red"}


# --------------------------------------------------------------------------- the cap on model calls


def test_role_refuses_uncached_calls_past_the_cap_and_notes_it() -> None:
    model = ScriptedChatModel(default="yes")
    role = Role("verifier", model)
    trace = Trace(max_calls=2)
    with trace.step("verify") as step:
        assert role.yes_no(MSGS).answer is True
        assert role.yes_no([Message.user("again?")]).answer is True
        with pytest.raises(CallBudgetExceeded, match="call cap 2 reached"):
            role.yes_no([Message.user("third?")])
    assert len(model.calls) == 2
    assert step.model_calls == 2  # the refused call is not recorded as a call
    assert any("call cap 2 reached" in n for n in step.notes)
    assert trace.counters["call_cap_refused"] == 1
    assert issubclass(CallBudgetExceeded, ChatError)


def test_cache_hits_do_not_count_against_the_cap(tmp_path: Any) -> None:
    model = ScriptedChatModel(default="yes")
    role = Role("verifier", model, DiskCache(tmp_path / "calls.sqlite"))
    with Trace().step("warm"):
        role.yes_no(MSGS)
    trace = Trace(max_calls=0)
    with trace.step("verify"):
        assert role.yes_no(MSGS).answer is True  # cached: free
        with pytest.raises(CallBudgetExceeded):
            role.yes_no([Message.user("new question")])
    assert len(model.calls) == 1


def test_concurrent_calls_never_overshoot_the_cap() -> None:
    lock = threading.Lock()
    started = []

    def reply(text: str) -> str:
        with lock:
            started.append(text)
        time.sleep(0.01)
        return "no"

    role = Role("verifier", ScriptedChatModel(default=reply))
    trace = Trace(max_calls=7)

    def ask(i: int) -> bool | None:
        try:
            return role.yes_no([Message.user(f"question {i}")]).answer
        except CallBudgetExceeded:
            return None

    with trace.step("verify"):
        answers = map_threads(ask, list(range(40)), 8)
    assert len(started) == 7
    assert sum(a is not None for a in answers) == 7


def test_role_json_falls_back_at_once_past_the_cap_and_raises_it_without_fallback() -> None:
    model = ScriptedChatModel(default='{"target": "cat"}')
    role = Role("reasoner", model)
    trace = Trace(max_calls=0)
    with trace.step("reason") as step:
        value, ok = role.json(MSGS, SCHEMA, fallback=lambda: {"target": "fb"}, retries=2)
        assert (value, ok) == ({"target": "fb"}, False)
        with pytest.raises(CallBudgetExceeded):
            role.json(MSGS, SCHEMA)
    assert model.calls == []
    assert any("call cap 0 reached" in n for n in step.notes)


# --------------------------------------------------------------------------- lone surrogates


def test_lone_surrogates_in_model_output_are_replaced_and_cache_safely(tmp_path: Any) -> None:
    bad = 'caf\udce9 {"target": "a \ud800 cat"}'
    model = ScriptedChatModel(default=bad)
    cache = DiskCache(tmp_path / "calls.sqlite")
    role = Role("reasoner", model, cache)
    for _ in range(2):  # a miss, then a hit read back from SQLite
        trace = Trace()
        with trace.step("s"):
            text = role.text(MSGS)
            value, ok = role.json([Message.user("json please")], SCHEMA)
        text.encode("utf-8")
        assert "\ufffd" in text and ok and value == {"target": "a \ufffd cat"}
    assert len(model.calls) == 2  # both calls were cached
    assert cache.hits == 2


def test_json_escapes_that_decode_to_lone_surrogates_are_replaced() -> None:
    # The text is valid UTF-8; json.loads turns the escapes into lone surrogates.
    value = parse_json('{"target": "a \\ud800 cat", "\\udfff": ["\\udce9"]}', None)
    assert value == {"target": "a \ufffd cat", "\ufffd": ["\ufffd"]}
    json.dumps(value, ensure_ascii=False).encode("utf-8")


def test_a_text_reply_cut_by_max_tokens_is_recorded() -> None:
    trace = Trace()
    with trace.step("s") as step:
        assert Role("r", CutModel([("a red car with a", "length")])).text(MSGS, max_tokens=5) == "a red car with a"
        assert Role("r", CutModel([("a red car.", "stop")])).text(MSGS) == "a red car."
    assert trace.counters == {"text_cut_by_max_tokens": 1}
    assert any("cut at max_tokens=5" in n for n in step.notes)
