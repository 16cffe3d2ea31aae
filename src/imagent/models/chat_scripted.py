"""ScriptedChatModel: a test double that answers from a script, for testing orchestration logic.

It is not a model and is never a default. Tests use it to check exactly which prompts each role
receives, how many calls a method makes and how each branch behaves; the same methods are also
tested against the real offline Qwen model.

Rules are ``(regex, reply)`` pairs tried in order against the whole conversation text (system and
user parts joined by newlines); ``reply`` is a string or a function of that text. A reply of
``yes``/``no`` (any case) also comes with first-token logprobs, like a real backend.

Native tool calls (for agent tests): a reply may also be a dict ``{"text": ..., "tool_calls": [{"name",
"arguments", "id"?}]}`` (arguments a dict or a JSON string), returned as ``ChatResponse.tool_calls``
like an OpenAI-compatible server's. ``supports_tools=True`` makes the model advertise native tool
calling (agents then send ``tools``); each call's ``ChatParams.tools`` are kept in :attr:`calls`.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagent.models.base import ChatError, ChatParams, ChatResponse, Message, TokenLogprob

ReplyValue = str | dict[str, Any]
Reply = ReplyValue | Callable[[str], ReplyValue]


class ScriptedChatModel:
    backend = "scripted"

    def __init__(
        self,
        rules: list[tuple[str, Reply]] | None = None,
        default: Reply | None = None,
        sees_images: bool = False,
        model_id: str = "scripted",
        yes_probability: float = 0.9,
        supports_tools: bool = False,
    ) -> None:
        self.rules = [(re.compile(p, re.S | re.I), r) for p, r in (rules or [])]
        self.default = default
        self.sees_images = sees_images
        self.model_id = model_id
        self.yes_probability = yes_probability
        self.supports_tools = supports_tools
        self.calls: list[tuple[list[Message], ChatParams]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Any, **_: Any) -> ScriptedChatModel:
        """``model`` names a JSON file: ``{"rules": [[regex, reply], ...], "default": reply}``
        (optionally ``"supports_tools": true``)."""
        path = Path(config.model)
        if not path.is_file():
            raise ChatError(f"scripted backend needs a JSON script file, not {config.model!r}")
        data = json.loads(path.read_text())
        return cls([tuple(r) for r in data.get("rules", [])], data.get("default"),
                   sees_images=config.vision, model_id=f"scripted:{path.name}",
                   supports_tools=bool(data.get("supports_tools", False)))

    @staticmethod
    def conversation_text(messages: list[Message]) -> str:
        return "\n".join(m.text for m in messages)

    def prompts(self) -> list[str]:
        """The conversation text of every call so far, in order."""
        return [self.conversation_text(m) for m, _ in self.calls]

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        with self._lock:
            self.calls.append((list(messages), params))  # a snapshot: callers keep appending
        text = self.conversation_text(messages)
        reply: Reply | None = None
        for pattern, r in self.rules:
            if pattern.search(text):
                reply = r
                break
        if reply is None:
            reply = self.default
        if reply is None:
            raise ChatError(f"scripted model: no rule matches the prompt: {text[:200]!r}")
        value = reply(text) if callable(reply) else reply
        tool_calls: list[dict[str, Any]] = []
        if isinstance(value, dict):
            for n, c in enumerate(value.get("tool_calls") or []):
                args = c.get("arguments", {})
                tool_calls.append({"id": str(c.get("id") or f"call_{len(self.calls)}_{n}"), "name": c["name"],
                                   "arguments": args if isinstance(args, str) else json.dumps(args)})
            out = str(value.get("text") or "")
        else:
            out = value
        top: list[list[TokenLogprob]] = []
        word = out.strip().split()[0].strip(".,!").lower() if out.strip() else ""
        if word in {"yes", "no"}:
            p_yes = self.yes_probability if word == "yes" else 1 - self.yes_probability
            top = [[TokenLogprob("Yes", math.log(p_yes)), TokenLogprob("No", math.log(1 - p_yes))]]
        return ChatResponse(text=out, prompt_tokens=len(text.split()), completion_tokens=len(out.split()),
                            top_logprobs=top, finish_reason="tool_calls" if tool_calls else "stop",
                            tool_calls=tool_calls)
