"""What an OpenAI-compatible server may send back, and the one way imagent reads it.

A model server is not trusted: it may answer megabytes, a gzip bomb, a body that never ends, JSON of any
shape (``choices`` as a string, ``usage`` with infinity, logprobs as a number, nesting 100,000 deep) or
bytes that are not UTF-8. Everything that reaches :class:`~imagent.models.base.ChatResponse` goes
through this module:

1. :func:`read_body`: the body is read chunk by chunk, counting the bytes on the wire *and* the bytes
   after ``Content-Encoding`` (gzip and deflate are decoded here, a bounded piece at a time), and
   refused once either passes the cap (``max_reply_bytes`` of the model entry). A body that is still
   arriving at the call's deadline is cut off there (the deadline itself is enforced per socket read by
   :mod:`imagent.models.chat_openai`; the loop re-checks it between chunks).
2. :func:`parse_completion`: strict UTF-8, JSON without ``NaN``/``Infinity``/overflowing numbers, at
   most :data:`MAX_DEPTH` levels deep, then validated against :class:`Completion` (pydantic).
3. The fields imagent uses are copied out with every configured secret masked
   (:func:`imagent.core.redact.mask_secrets`): a server that echoes the key into its answer, its tool
   call arguments or its logprob tokens cannot carry it into a trace, the call cache, a log or the web.

Any deviation raises :class:`ReplyError` (a :class:`~imagent.models.base.ChatError`) whose message
names what was wrong (the field path and the rule, never the offending value), which every method
already handles: a retry or fallback, an error in the trace, a failed query in eval, a 502 on the web.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagent.core.redact import mask_secrets, redact
from imagent.core.text import MAX_JSON_NESTING, nested_deeper_than
from imagent.models.base import ChatError, ChatResponse, TokenLogprob

MAX_DEPTH = MAX_JSON_NESTING  # JSON nesting a reply may have (a chat completion needs about 8)
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
ERROR_BODY_BYTES = 64 * 1024  # what is read of an error reply (its text is quoted, then cut)
MAX_TOKENS_FIELD = 10**9


class ReplyError(ChatError):
    """A reply imagent will not use: too large, not UTF-8, not JSON, too deep, or the wrong shape."""


class ReplyTimeout(Exception):
    """The call's deadline passed while the body was still arriving (the caller may retry)."""


# --------------------------------------------------------------------------- reading the body


class _Inflate:
    """Incremental gzip/deflate decoding that never produces more than it is allowed to."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._d: Any = zlib.decompressobj(31) if encoding == "gzip" else None

    def feed(self, data: bytes, room: int) -> bytes:
        """Decoded bytes of ``data``; at most ``room + 1`` (one more than allowed tells the caller to stop)."""
        if self._d is None:  # deflate: zlib-wrapped (RFC 1950) or, from some servers, raw
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._d = zlib.decompressobj(15 if wrapped else -15)
        out = bytearray()
        while data and len(out) <= room:
            try:
                out += self._d.decompress(data, room + 1 - len(out))
            except zlib.error as exc:
                raise ReplyError(f"the reply's {self.encoding} body is corrupt ({exc})") from None
            if self._d.eof and self._d.unused_data and self.encoding == "gzip":  # a next gzip member
                data = self._d.unused_data
                self._d = zlib.decompressobj(31)
            else:
                data = self._d.unconsumed_tail
        return bytes(out)


def read_body(chunks: Iterable[bytes], headers: Any, limit: int, deadline: float | None, *,
              cut: bool = False) -> bytes:
    """The body from ``chunks`` (raw, still encoded), decoded and at most ``limit`` bytes both on the wire
    and decoded. Past the limit: :class:`ReplyError`, or with ``cut`` the first ``limit`` bytes (error
    replies, whose text is only quoted). Past ``deadline`` (``time.monotonic()``): :class:`ReplyTimeout`."""
    declared = str(headers.get("content-length") or "").strip()
    if not cut and declared.isdigit() and int(declared) > limit:
        raise ReplyError(f"the reply declares {int(declared):,} bytes, more than the {limit:,} allowed "
                         "(max_reply_bytes of the model entry)")
    encoding = str(headers.get("content-encoding") or "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
        raise ReplyError(f"the reply uses Content-Encoding {encoding[:40]!r}; imagent asks for and reads only "
                         "gzip or deflate")
    inflate = _Inflate("gzip" if encoding in ("gzip", "x-gzip") else "deflate") \
        if encoding not in ("identity", "") else None
    out = bytearray()
    wire = 0
    for chunk in chunks:
        wire += len(chunk)
        piece = inflate.feed(chunk, limit - len(out)) if inflate is not None else chunk
        out += piece
        if wire > limit or len(out) > limit:
            if cut:
                return bytes(out[:limit])
            what = "on the wire" if wire > limit else "once decompressed"
            raise ReplyError(f"the reply is larger than the {limit:,} bytes allowed {what} (max_reply_bytes "
                             "of the model entry); it was cut off there")
        if deadline is not None and time.monotonic() > deadline:
            raise ReplyTimeout(f"the reply was still arriving at the deadline ({wire:,} bytes so far)")
    return bytes(out)


# --------------------------------------------------------------------------- the schema


class _Lenient(BaseModel):
    # Servers add fields of their own (system_fingerprint, reasoning_content, ...): ignored, never kept.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class _TextPart(_Lenient):
    type: str | None = None
    text: str = ""


class _Function(_Lenient):
    name: str = ""
    arguments: str | dict[str, Any] | None = None


class _ToolCall(_Lenient):
    id: str | None = None
    type: str | None = None
    function: _Function


class _Message(_Lenient):
    role: str | None = None
    content: str | list[_TextPart] | None = None
    tool_calls: list[_ToolCall] | None = None


class _Alternative(_Lenient):
    token: str
    logprob: float | None = None  # null: some servers' way of writing -inf


class _Position(_Lenient):
    token: str | None = None
    logprob: float | None = None
    top_logprobs: list[_Alternative] | None = None


class _Logprobs(_Lenient):
    content: list[_Position] | None = None


class _Choice(_Lenient):
    index: int | None = None
    message: _Message
    logprobs: _Logprobs | None = None
    finish_reason: str | None = None


class _Usage(_Lenient):
    prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS_FIELD)
    completion_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS_FIELD)


class Completion(_Lenient):
    """The part of an OpenAI chat completion imagent reads (``choices[0]`` and ``usage``)."""

    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


# --------------------------------------------------------------------------- parsing


def _no_constant(name: str) -> Any:
    raise ValueError(f"the reply holds {name}, which JSON does not allow")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the reply holds the number {text[:40]}, too large for a float")
    return value


def decode_json(data: bytes) -> Any:
    """Strict UTF-8 JSON: no NaN/Infinity, finite numbers, at most :data:`MAX_DEPTH` levels deep."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReplyError(f"the reply is not valid UTF-8 (byte {exc.start:,}: {exc.reason})") from None
    if nested_deeper_than(text, MAX_DEPTH):  # before the parser, which recurses per level
        raise ReplyError(f"the reply's JSON is nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ReplyError(f"the reply's JSON is nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        snippet = redact(text)[:200]  # masked before it is cut: a cut key would escape the mask
        raise ReplyError(f"the body is not JSON ({exc.msg} at character {exc.pos:,}): {snippet!r}") from None
    except ValueError as exc:  # NaN/Infinity, 1e999, an integer of thousands of digits
        raise ReplyError(f"the reply's JSON has an unusable number: {str(exc)[:200]}") from None
    return value


def describe_validation(exc: ValidationError, limit: int = 3) -> str:
    """Where the reply deviates from the schema and how; never the offending value (it may be huge)."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False)[:limit]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "the body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def parse_completion(data: bytes) -> ChatResponse:
    """A validated, secret-masked :class:`ChatResponse` from a 200 reply's (decoded) body."""
    value = decode_json(data)
    if not isinstance(value, dict):
        raise ReplyError(f"the body is a JSON {type(value).__name__}, not an object")
    try:
        reply = Completion.model_validate(value)
    except ValidationError as exc:
        raise ReplyError(f"the reply has the wrong shape: {describe_validation(exc)}") from None
    choice = reply.choices[0]
    message = choice.message
    content = message.content
    text = "".join(p.text for p in content) if isinstance(content, list) else content or ""
    tool_calls = []
    for n, call in enumerate(message.tool_calls or []):
        args = call.function.arguments
        tool_calls.append({"id": mask_secrets(call.id or f"call_{n}"), "name": mask_secrets(call.function.name),
                           "arguments": mask_secrets(args if isinstance(args, str) else json.dumps(args or {}))})
    logprobs: list[list[TokenLogprob]] = []
    for pos in (choice.logprobs.content or []) if choice.logprobs else []:
        alts = pos.top_logprobs or []
        if not alts and pos.token is not None:
            alts = [_Alternative(token=pos.token, logprob=pos.logprob)]
        logprobs.append([TokenLogprob(mask_secrets(a.token), a.logprob) for a in alts if a.logprob is not None])
    usage = reply.usage or _Usage()
    return ChatResponse(
        text=mask_secrets(text),
        prompt_tokens=usage.prompt_tokens or 0,
        completion_tokens=usage.completion_tokens or 0,
        top_logprobs=logprobs,
        finish_reason=mask_secrets(choice.finish_reason or ""),
        raw={"usage": usage.model_dump(), "finish_reason": choice.finish_reason or ""},
        tool_calls=tool_calls,
    )


def error_text(data: bytes, reason: str) -> str:
    """The message a failing server sent (OpenAI ``{"error": {"message"}}``, FastAPI ``detail``, or raw
    text), masked, then cut to 500 characters (masking first, so a cut key cannot escape it)."""
    text = data.decode("utf-8", "replace").strip()
    try:
        value = json.loads(text, parse_constant=lambda name: name)
    except (ValueError, RecursionError):
        value = None
    message: Any = text or reason
    if isinstance(value, dict):
        err = value.get("error")
        if isinstance(err, dict) and err.get("message"):
            message = err["message"]
        elif isinstance(err, str) and err:
            message = err
        elif "detail" in value:
            message = value["detail"] if isinstance(value["detail"], str) else _dumps(value["detail"])
        elif value.get("message"):
            message = value["message"]
        else:
            message = _dumps(value)
    elif value is not None:
        message = _dumps(value)
    return redact(message if isinstance(message, str) else _dumps(message))[:500]


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value)
    except (ValueError, RecursionError, TypeError):
        return str(type(value).__name__)


__all__ = ["DEFAULT_MAX_REPLY_BYTES", "ERROR_BODY_BYTES", "MAX_DEPTH", "Completion", "ReplyError", "ReplyTimeout",
           "decode_json", "error_text", "parse_completion", "read_body"]
