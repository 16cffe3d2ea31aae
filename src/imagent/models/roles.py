"""Roles: what methods talk to. A role wraps a chat backend with caption mode, the call cache,
trace recording and the structured-output helpers (JSON, yes/no score).

A method asks for ``roles["verifier"]``; the config maps role names to model entries, and one
backend instance is shared by every role that names the same entry.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagent.core.cache import DiskCache, stable_key
from imagent.core.text import clean_text
from imagent.core.trace import CallRecord, current_trace, note, record_call
from imagent.models.base import ChatError, ChatModel, ChatParams, ChatResponse, ImagePart, Message, TokenLogprob
from imagent.models.json_output import JSONParseError, parse_json
from imagent.models.yesno import yes_no_probability

# Bump when the meaning of a cached response changes (so old entries are not reused).
CACHE_VERSION = 1
# Role.json: a reply cut by max_tokens is asked again with twice the room, up to this many tokens.
MAX_JSON_TOKENS = 8192


# Trace counter of model calls that failed (a ChatError) where the caller went on with a stand-in; a search
# that counts any, or whose calls the cap refused, is an error of its method (``Method.search``).
MODEL_CALL_FAILED = "model_call_failed"


class CallBudgetExceeded(ChatError):
    """The query's cap on uncached model calls (``Trace.max_calls``) is reached; no call was made.

    A :class:`ChatError`, so every fallback that handles a failed call applies; :meth:`Role.json` falls back
    at once (a retry cannot succeed) and :meth:`imagent.methods.base.Method.search` returns the method's best
    ranking so far."""


def to_caption_mode(messages: list[Message]) -> list[Message]:
    """Replace every image part by its text surrogate, marked so the model knows it is an image."""
    out = []
    for m in messages:
        parts: list[str | ImagePart] = []
        for p in m.parts:
            if isinstance(p, ImagePart):
                parts.append(f"[Image, described in text: {p.surrogate()}]")
            else:
                parts.append(p)
        out.append(Message(m.role, parts, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id))
    return out


def pixel_described(messages: list[Message]) -> int:
    """How many image parts of ``messages`` reach a blind model as their pixel description (a record without a caption
    that the pixel model has seen: :mod:`imagent.index.describe`)."""
    return sum(1 for m in messages for p in m.parts if isinstance(p, ImagePart) and p.record is not None
               and not p.record.captions and p.record.description)


def _message_key(messages: list[Message]) -> list[Any]:
    out: list[Any] = []
    for m in messages:
        key: list[Any] = [m.role, [p if isinstance(p, str) else {"image": p.content_id()} for p in m.parts]]
        if m.tool_calls or m.tool_call_id:  # only then, so keys of plain conversations stay unchanged
            key.append({"tool_calls": m.tool_calls, "tool_call_id": m.tool_call_id})
        out.append(key)
    return out


@dataclass
class YesNo:
    """A verifier's answer: ``answer`` is True/False, or None when the reply was neither."""

    answer: bool | None
    probability: float | None  # P(yes) from token logprobs, when the backend gives them
    text: str


class Role:
    def __init__(self, name: str, model: ChatModel, cache: DiskCache | None = None) -> None:
        self.name = name
        self.model = model
        self.cache = cache

    @property
    def caption_mode(self) -> bool:
        return not self.model.sees_images

    @property
    def concurrency(self) -> int:
        """How many calls the backend takes at once (a served model's configured ``concurrency``; an
        in-process model serialises its calls: 1). Methods fan verification out to this many threads."""
        return max(1, int(getattr(self.model, "concurrency", 1) or 1))

    def chat(self, messages: list[Message], params: ChatParams | None = None) -> ChatResponse:
        """One call through the cache. A cache miss counts against the open trace's ``max_calls``: past
        the cap :class:`CallBudgetExceeded` is raised (noted in the trace) and the model is not called.
        The reply's text enters the system here, so lone surrogates are replaced (U+FFFD) before the
        cache stores it or a method reads it."""
        params = params or ChatParams()
        trace = current_trace()
        if trace is not None:
            trace.check_cancelled()
        # Verifiers make hundreds of calls per query: the checks below stay cheap on purpose.
        caption_mode = not self.model.sees_images and any(m.has_images() for m in messages)
        if caption_mode:
            described = pixel_described(messages)
            messages = to_caption_mode(messages)
            note(f"caption mode: role {self.name!r} received image captions instead of pixels"
                 + (f" ({described} image(s) without a caption as their pixel description: what the pixel model saw, "
                    "not a caption)" if described else ""))
            if described and trace is not None:
                trace.count("pixel_descriptions", described)
        t0 = time.perf_counter()
        error: str | None = None

        fresh: list[ChatResponse] = []  # the reply this call computed (no round trip through its dict)

        def call() -> ChatResponse:
            if trace is not None and not trace.claim_call():
                raise CallBudgetExceeded(f"call cap {trace.max_calls} reached")
            fresh.append(_clean_response(self.model.chat(messages, params)))
            return fresh[-1]

        try:
            if self.cache is not None:
                key = stable_key(
                    "chat", CACHE_VERSION, self.model.backend, self.model.model_id,
                    getattr(self.model, "cache_tag", ""), _message_key(messages), params.to_dict(),
                )
                data, cached = self.cache.get_or_compute(key, lambda: call().to_dict(), namespace="chat")
            else:
                data, cached = None, False
                call()
        except CallBudgetExceeded as exc:
            note(f"{exc}: role {self.name!r} was not called")
            if trace is not None:
                trace.count("call_cap_refused")
            raise exc from None
        except ChatError as exc:
            error = str(exc)
            raise
        finally:
            if error is not None:
                record_call(CallRecord("chat", self.name, self.model.model_id,
                                       time.perf_counter() - t0, error=error,
                                       caption_mode=caption_mode))
        # From the cache: cleaned again (entries cached before cleaning existed); computed here: as it came.
        resp = _clean_response(ChatResponse.from_dict(data)) if cached or not fresh else fresh[-1]
        record_call(
            CallRecord(
                "chat", self.name, self.model.model_id, time.perf_counter() - t0,
                resp.prompt_tokens, resp.completion_tokens, cached, caption_mode,
            )
        )
        return resp

    def text(self, messages: list[Message], **params: Any) -> str:
        """The reply's text. One cut by ``max_tokens`` is returned as it is (free text has no closing to wait
        for, and the caller chose the length) but never silently: the cut is noted and counted."""
        p = ChatParams(**params)
        resp = self.chat(messages, p)
        if resp.finish_reason == "length":
            note(f"role {self.name!r}: reply cut at max_tokens={p.max_tokens}")
            trace = current_trace()
            if trace is not None:
                trace.count("text_cut_by_max_tokens")
        return resp.text.strip()

    def json(
        self,
        messages: list[Message],
        schema: dict[str, Any],
        *,
        fallback: Callable[[], Any] | None = None,
        retries: int = 2,
        validate: Callable[[Any], Any] | None = None,
        **params: Any,
    ) -> tuple[Any, bool]:
        """Ask for JSON matching ``schema``; parse robustly; retry; then fall back.

        Returns ``(value, ok)``. ``ok`` is False when every attempt failed and ``fallback()`` was
        used (the failure is noted in the trace). Without a fallback the last error is raised
        (:class:`CallBudgetExceeded` as itself, so the method stops with its best ranking).
        ``validate`` may coerce the parsed value or raise ``ValueError`` to trigger a retry.
        Retries vary the seed so a deterministic backend does not return the same broken text.

        A reply cut by ``max_tokens`` (``finish_reason == "length"``) is never accepted half-written: only a
        JSON value that closed before the cut counts (no repair of the cut end), and otherwise the next try
        gets twice the room (up to :data:`MAX_JSON_TOKENS`); each cut is noted and counted
        (``json_cut_by_max_tokens``). Past the cap on model calls there is no retry: the fallback is used.
        """
        params.setdefault("max_tokens", 512)
        params.setdefault("repeat_penalty", 1.1)
        last_error: Exception | None = None
        tries = 0
        for attempt in range(retries + 1):
            tries = attempt + 1
            p = ChatParams(json_schema=schema, **params)
            if attempt:
                p.seed = (p.seed or 0) + attempt
            try:
                resp = self.chat(messages, p)
            except CallBudgetExceeded as exc:
                last_error = exc
                break  # no retry can succeed
            except ChatError as exc:
                last_error = exc
                continue
            cut = resp.finish_reason == "length"
            try:
                value = parse_json(resp.text, schema, complete_only=cut)
                if validate is not None:
                    value = validate(value)
                return value, True
            except (JSONParseError, ValueError) as exc:
                last_error = exc
            if cut:
                room = min(2 * p.max_tokens, max(MAX_JSON_TOKENS, p.max_tokens))
                note(f"role {self.name!r}: reply cut at max_tokens={p.max_tokens} before its JSON closed; "
                     + (f"asked again with max_tokens={room}" if attempt < retries else "not accepted"))
                trace = current_trace()
                if trace is not None:
                    trace.count("json_cut_by_max_tokens")
                params["max_tokens"] = room
                last_error = JSONParseError(f"reply cut by max_tokens={p.max_tokens} ({last_error})")
        if fallback is None:
            if isinstance(last_error, CallBudgetExceeded):
                raise last_error
            raise JSONParseError(f"role {self.name!r}: no usable JSON after {tries} tries: {last_error}")
        note(f"role {self.name!r}: output unusable after {tries} tries ({last_error}); fell back")
        if isinstance(last_error, ChatError):  # the model call failed: not the model's answer but a stand-in
            trace = current_trace()
            if trace is not None:
                trace.count(MODEL_CALL_FAILED)
        return fallback(), False

    def yes_no(self, messages: list[Message], **params: Any) -> YesNo:
        """Ask a yes/no question. The answer is parsed strictly from the reply's first word;
        the probability is sigmoid(logprob_yes - logprob_no) over the first token's alternatives
        (case and space variants summed), when the backend returns logprobs."""
        params.setdefault("max_tokens", 3)
        params.setdefault("top_logprobs", 20)
        resp = self.chat(messages, ChatParams(**params))
        prob = yes_no_probability(resp.top_logprobs[0]) if resp.top_logprobs else None  # none: neither word
        return YesNo(parse_yes_no(resp.text), prob, resp.text)


def _clean_response(resp: ChatResponse) -> ChatResponse:
    """``resp`` with lone surrogates in its text, tokens and tool calls replaced (U+FFFD): where model output
    enters."""
    resp.text = clean_text(resp.text)
    if resp.top_logprobs:
        resp.top_logprobs = [[TokenLogprob(clean_text(t.token), t.logprob) for t in pos]
                             for pos in resp.top_logprobs]
    if resp.tool_calls:
        resp.tool_calls = [{k: clean_text(v) if isinstance(v, str) else v for k, v in c.items()}
                           for c in resp.tool_calls]
    return resp


_FIRST_WORD = re.compile(r"\W*([A-Za-z]+)")


def parse_yes_no(text: str) -> bool | None:
    """Strict: the first word must be yes/no (or true/false); anything else is unanswered."""
    m = _FIRST_WORD.match(text or "")
    if not m:
        return None
    word = m.group(1).lower()
    if word in {"yes", "true"}:
        return True
    if word in {"no", "false"}:
        return False
    return None


class Roles:
    """Role name -> :class:`Role`, built lazily from the settings; backends shared per model entry."""

    def __init__(self, factory: Callable[[str], tuple[str, ChatModel]], cache: DiskCache | None) -> None:
        self._factory = factory
        self._cache = cache
        self._roles: dict[str, Role] = {}

    def __getitem__(self, name: str) -> Role:
        role = self._roles.get(name)
        if role is None:
            _entry, model = self._factory(name)
            role = self._roles[name] = Role(name, model, self._cache)
        return role

    @classmethod
    def from_models(cls, models: dict[str, ChatModel], cache: DiskCache | None = None) -> Roles:
        """Direct mapping (tests, Python API): ``{"default": m}`` serves every role."""

        def factory(name: str) -> tuple[str, ChatModel]:
            if name in models:
                return name, models[name]
            if "default" in models:
                return "default", models["default"]
            raise KeyError(f"no model for role {name!r}")

        return cls(factory, cache)
