"""The real Qwen2.5 0.5B through both chat paths users run: in-process llama.cpp and a real
`llama_cpp.server` over HTTP (the OpenAI-compatible backend). Same checks on each: plain chat, the JSON
helper, the yes/no logprob score, and the call cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagent.core.cache import DiskCache
from imagent.core.trace import Trace
from imagent.models.base import ChatParams, Message
from imagent.models.roles import Role

pytestmark = pytest.mark.real_model

SKY = [Message.user("Is the sky blue on a clear day? Answer yes or no.")]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "colors": {"type": "array", "items": {"type": "string", "maxLength": 15}, "maxItems": 3},
    },
    "required": ["name", "colors"],
}


@pytest.fixture(params=["in-process", "server"])
def qwen(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("qwen_local" if request.param == "in-process" else "qwen_http")


def test_plain_chat(qwen: Any) -> None:
    resp = qwen.chat([Message.user("What is the capital of France? Answer in one word.")], ChatParams(max_tokens=8))
    assert "paris" in resp.text.lower()
    assert resp.prompt_tokens > 0 and resp.completion_tokens > 0


def test_json_helper(qwen: Any) -> None:
    value, ok = Role("describer", qwen).json(
        [Message.user("Describe a ripe banana as JSON: its name and up to 3 colors.")], SCHEMA, max_tokens=80)
    assert ok and isinstance(value, dict)
    assert isinstance(value["name"], str) and value["name"]
    assert isinstance(value["colors"], list) and len(value["colors"]) <= 3


def test_yes_no_score(qwen: Any) -> None:
    yn = Role("verifier", qwen).yes_no(SKY)
    assert yn.answer is True
    assert yn.probability is not None and 0.0 < yn.probability < 1.0


class Spy:
    """Delegates to a model and counts calls, to prove a cache hit never reaches it."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.backend, self.model_id, self.sees_images = model.backend, model.model_id, model.sees_images
        self.calls = 0

    def chat(self, messages: list[Message], params: ChatParams) -> Any:
        self.calls += 1
        return self.model.chat(messages, params)


def test_call_cache(qwen: Any, tmp_path: Path) -> None:
    spy = Spy(qwen)
    role = Role("reasoner", spy, DiskCache(tmp_path / "calls.sqlite"))
    trace = Trace()
    with trace.step("twice") as step:
        first = role.chat([Message.user("Name one fruit.")], ChatParams(max_tokens=6))
        second = role.chat([Message.user("Name one fruit.")], ChatParams(max_tokens=6))
    assert spy.calls == 1
    assert [c.cached for c in step.calls] == [False, True]
    assert second.text == first.text and second.completion_tokens == first.completion_tokens
