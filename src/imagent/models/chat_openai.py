"""OpenAIChatModel: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, Ollama, llama.cpp server, OpenAI).

Config (a ``[models.NAME]`` entry with ``backend = "openai"``):

- ``base_url``: required, up to and including the API prefix, e.g. ``http://localhost:8000/v1``;
  requests go to ``{base_url}/chat/completions``.
- ``api_key_env``: the environment variable holding the API key (optional for local servers). The key is
  sent as ``Authorization: Bearer ...`` and never logged or put in error messages: servers echo request
  headers (and so the key) into their error bodies, so the key is registered with
  :mod:`imagent.core.redact` and every :class:`~imagent.models.base.ChatError` message is redacted.
- ``vision``: whether the served model sees pixels. When true, image parts are sent inline as base64
  ``data:`` URLs; otherwise roles send captions instead (caption mode).
- ``json_mode``: how JSON output is requested when a call gives a schema:
  ``json_schema`` (OpenAI / vLLM structured outputs), ``json_object`` (llama.cpp server, which takes the
  schema inside ``response_format``), or ``none`` (the prompt alone asks for JSON; replies are parsed leniently).
- ``extra_body``: fields merged into every request body, after the ones this backend sets (so they win).
  Servers differ on sampling extras: vLLM takes ``repetition_penalty``, llama.cpp server ``repeat_penalty``,
  OpenAI rejects unknown fields. ``ChatParams.repeat_penalty`` is therefore sent (as ``repeat_penalty``) only
  with ``json_mode = "json_object"``, i.e. to a llama.cpp server; for vLLM put ``repetition_penalty`` here.
- ``timeout_s``, ``max_retries``, ``concurrency``: each attempt's deadline (connect, send, and every byte of
  the reply: a server dripping one byte a second is cut off at ``timeout_s``, not held forever); retries on
  429, 5xx, timeouts and connection errors (exponential backoff with jitter, honouring ``Retry-After`` up to
  60 s); and the most requests this instance has in flight at once.
- ``deadline_s``: the whole call, every attempt and backoff included (default ``timeout_s * (max_retries +
  1)``); no retry starts that could not finish before it.
- ``max_reply_bytes``: the largest reply read, on the wire and once decompressed. Every reply is read
  through :mod:`imagent.models.openai_reply` (size cap, strict JSON against a schema, secrets masked);
  anything else ends the call in one :class:`~imagent.models.base.ChatError` saying what was wrong.

The deadline is enforced on every socket operation: the connection pool's network backend is wrapped so
each connect, read and write waits at most until the calling thread's deadline (:class:`_DeadlineBackend`).
"""

from __future__ import annotations

import base64
import email.utils
import io
import math
import mimetypes
import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import httpcore
import httpx

from imagent.core.cache import stable_key
from imagent.core.config import ConfigError
from imagent.core.redact import register_env_names, register_secret
from imagent.models.base import ChatError, ChatParams, ChatResponse, ImagePart, Message
from imagent.models.openai_reply import (
    DEFAULT_MAX_REPLY_BYTES,
    ERROR_BODY_BYTES,
    ReplyError,
    ReplyTimeout,
    error_text,
    parse_completion,
    read_body,
)

JsonMode = Literal["json_schema", "json_object", "none"]

# OpenAI's limit for top_logprobs; vLLM and llama.cpp accept at least as many.
MAX_TOP_LOGPROBS = 20
MAX_RETRY_AFTER_S = 60.0
_MAX_BACKOFF_S = 30.0


def guess_image_mime(data: bytes, path: str | None = None, default: str = "image/jpeg") -> str:
    """The MIME type from the bytes (PIL reads only the header), else from the file extension."""
    try:
        from PIL import Image

        from imagent.core.imageio import ALLOWED_FORMATS

        with Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS) as im:  # header only, allowed parsers only
            mime = Image.MIME.get(im.format or "")
        if mime:
            return mime
    except Exception:  # not an image PIL knows; the extension or the part's own mime may still tell
        pass
    if path:
        guessed, _ = mimetypes.guess_type(path)
        if guessed and guessed.startswith("image/"):
            return guessed
    return default


def image_data_url(part: ImagePart) -> str:
    """``data:<mime>;base64,...`` from the part's bytes or the file it points to."""
    path = part.resolved_path()
    data = part.data
    if data is None:
        if not path:
            raise ChatError("an image part has neither bytes nor a path, so it cannot be sent")
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ChatError(f"cannot read image {path}: {exc}") from exc
    mime = guess_image_mime(data, path, part.mime)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def message_content(message: Message, vision: bool) -> str | list[dict[str, Any]]:
    """OpenAI ``content``: a plain string when there are no images (some servers accept only that),
    else text and ``image_url`` parts. Without vision, images become their text surrogates."""
    if not message.has_images():
        return message.text
    if not vision:
        return "".join(
            p if isinstance(p, str) else f"[Image, described in text: {p.surrogate()}]" for p in message.parts
        )
    parts: list[dict[str, Any]] = []
    for p in message.parts:
        if isinstance(p, str):
            if not p:
                continue
            if parts and parts[-1]["type"] == "text":  # adjacent strings form one text part
                parts[-1]["text"] += p
            else:
                parts.append({"type": "text", "text": p})
        else:
            parts.append({"type": "image_url", "image_url": {"url": image_data_url(p)}})
    return parts


def openai_message(message: Message, vision: bool) -> dict[str, Any]:
    """One message in the chat-completions format, native tool calls included: an assistant message's
    ``tool_calls`` (``{"id", "name", "arguments"}``) become ``{"id", "type": "function", "function"}``
    entries, and a ``tool`` message carries its ``tool_call_id`` (text only, as the protocol requires)."""
    out: dict[str, Any] = {"role": message.role, "content": message_content(message, vision)}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in message.tool_calls
        ]
        out["content"] = out["content"] or None
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id or ""
        out["content"] = message.text
    return out


def _retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds (a number or an HTTP date), capped; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):  # "nan", "inf": unreadable, so the usual backoff applies
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


_deadline = threading.local()  # the calling thread's deadline (time.monotonic()), read by every socket operation


@contextmanager
def call_deadline(at: float) -> Iterator[None]:
    """Every connect, read and write this thread makes through a :class:`_DeadlineBackend` ends by ``at``."""
    previous = getattr(_deadline, "at", None)
    _deadline.at = at
    try:
        yield
    finally:
        _deadline.at = previous


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    at = getattr(_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _clamp(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with each socket operation's timeout cut to the thread's deadline: a
    server that drips one byte a second (in its headers or its body) cannot outlast the call."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _clamp(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _clamp(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _deadline_client(timeout_s: float, headers: dict[str, str]) -> httpx.Client:
    """An httpx client whose every transport (the default one and any proxy from the environment) reads
    and writes through :class:`_DeadlineBackend`."""
    client = httpx.Client(timeout=timeout_s, headers=headers)
    for transport in [client._transport, *client._mounts.values()]:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return client


class OpenAIChatModel:
    backend = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        vision: bool = False,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        concurrency: int = 4,
        seed: int | None = 0,
        temperature: float = 0.0,
        json_mode: JsonMode = "json_schema",
        extra_body: dict[str, Any] | None = None,
        backoff_s: float = 0.5,
        deadline_s: float | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if not base_url:
            raise ConfigError(
                "the openai chat backend needs base_url, e.g. http://localhost:8000/v1 (vLLM), "
                "http://localhost:11434/v1 (Ollama) or https://api.openai.com/v1"
            )
        if json_mode not in ("json_schema", "json_object", "none"):
            raise ConfigError(f"json_mode must be json_schema, json_object or none, not {json_mode!r}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model_id = model
        self.sees_images = vision
        # Native tool calls: ``tools`` are sent and ``tool_calls`` read back. A server without a tool
        # parser answers in text; the agent runtime then reads the ``<tool_call>`` text protocol.
        self.supports_tools = True
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.deadline_s = deadline_s if deadline_s is not None else timeout_s * (max_retries + 1)
        self.max_reply_bytes = max_reply_bytes
        self.seed = seed
        self.temperature = temperature
        self.json_mode: JsonMode = json_mode
        self.extra_body = dict(extra_body or {})
        self.backoff_s = backoff_s
        # What besides the model name changes the answers: the call cache keys on it, so the same
        # model name on two servers, or another JSON mode / extra body, never shares entries.
        self.cache_tag = stable_key(self.base_url, json_mode, self.extra_body, seed, temperature)
        self.concurrency = concurrency
        self._semaphore = threading.BoundedSemaphore(concurrency)
        # Only encodings read_body decodes under its cap (httpx would also offer br/zstd when installed).
        headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip, deflate"}
        if api_key:
            register_secret(api_key)
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = _deadline_client(timeout_s, headers)

    @classmethod
    def from_config(cls, config: Any, cache_dir: Path | None = None, **_: Any) -> OpenAIChatModel:
        if not config.base_url:
            raise ConfigError(
                f"chat model {config.model!r} uses backend 'openai' but has no base_url; set it to the server's "
                "API root, e.g. base_url = \"http://localhost:8000/v1\""
            )
        if config.api_key_env:
            register_env_names([config.api_key_env])
        return cls(
            config.base_url,
            config.model,
            api_key=os.environ.get(config.api_key_env) if config.api_key_env else None,
            vision=config.vision,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            concurrency=config.concurrency,
            seed=config.seed,
            temperature=config.temperature,
            json_mode=config.json_mode,
            extra_body=config.extra_body,
            deadline_s=config.deadline_s,
            max_reply_bytes=config.max_reply_bytes,
        )

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIChatModel(base_url={self.base_url!r}, model={self.model_id!r}, vision={self.sees_images})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChatModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ request

    def request_body(self, messages: list[Message], params: ChatParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": [openai_message(m, self.sees_images) for m in messages],
            "max_tokens": params.max_tokens,
            "temperature": params.temperature if params.temperature is not None else self.temperature,
        }
        seed = params.seed if params.seed is not None else self.seed
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.top_logprobs > 0:
            body["logprobs"] = True
            body["top_logprobs"] = min(params.top_logprobs, MAX_TOP_LOGPROBS)
        if params.json_schema is not None:
            if self.json_mode == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": params.json_schema, "strict": False},
                }
            elif self.json_mode == "json_object":
                body["response_format"] = {"type": "json_object", "schema": params.json_schema}
        # Only llama.cpp server (json_object mode) is known to take this name; OpenAI rejects unknown fields.
        if params.repeat_penalty is not None and self.json_mode == "json_object":
            body["repeat_penalty"] = params.repeat_penalty
        if params.tools:
            body["tools"] = params.tools
            if params.tool_choice:
                body["tool_choice"] = params.tool_choice
            if params.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = params.parallel_tool_calls
        body.update(self.extra_body)
        return body

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        body = self.request_body(messages, params)
        attempts = self.max_retries + 1
        clock: list[float] = []  # the call's start: when its first attempt got a slot (queueing is not the server's)
        last, tried = "", 0
        for attempt in range(attempts):
            tried += 1
            try:
                return self._post_once(body, clock)
            except _Retryable as exc:
                last = exc.reason
                if attempt + 1 >= attempts:
                    break
                delay = self._delay(attempt, exc.retry_after)
                if time.monotonic() + delay >= clock[0] + self.deadline_s:
                    last += f"; no time left for another attempt within deadline_s = {self.deadline_s:g} s"
                    break
                time.sleep(delay)
        spent = time.monotonic() - clock[0] if clock else 0.0
        raise ChatError(f"{self.url}: request failed after {tried} attempt(s) in {spent:.1f} s: {last}")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        # Exponential backoff with jitter, so many clients do not retry in lockstep.
        base = min(_MAX_BACKOFF_S, self.backoff_s * (2**attempt))
        return base * (0.5 + random.random() / 2)

    def _post_once(self, body: dict[str, Any], clock: list[float]) -> ChatResponse:
        # The semaphore bounds requests in flight; backoff sleeps happen outside it.
        with self._semaphore:
            now = time.monotonic()
            if not clock:
                clock.append(now)
            end = min(now + self.timeout_s, clock[0] + self.deadline_s)
            if end <= now:
                raise _Retryable(f"timed out: deadline_s = {self.deadline_s:g} s passed before the attempt started")
            try:
                with call_deadline(end), self._client.stream("POST", self.url, json=body) as response:
                    return self._answer(response, end)
            except ReplyTimeout as exc:
                raise _Retryable(f"timed out: {exc} ({self._limits()})") from None
            except httpx.TimeoutException as exc:
                raise _Retryable(f"timed out ({type(exc).__name__}; {self._limits()})") from None
            except httpx.TransportError as exc:
                raise _Retryable(f"connection error: {type(exc).__name__}: {exc}") from None

    def _limits(self) -> str:
        return f"timeout_s = {self.timeout_s:g} s per attempt, deadline_s = {self.deadline_s:g} s per call"

    def _answer(self, response: httpx.Response, end: float) -> ChatResponse:
        status = response.status_code
        if status >= 400:
            text = error_text(_read(response, ERROR_BODY_BYTES, end, cut=True), response.reason_phrase)
            if status == 429 or status >= 500:
                raise _Retryable(f"HTTP {status}: {text}", _retry_after_seconds(response.headers.get("Retry-After")))
            raise ChatError(f"{self.url} answered HTTP {status}: {text}")
        try:
            return parse_completion(_read(response, self.max_reply_bytes, end))
        except ReplyError as exc:
            raise ReplyError(f"{self.url} returned HTTP {status} without a chat completion: {exc}") from None


def _read(response: httpx.Response, limit: int, end: float, *, cut: bool = False) -> bytes:
    """``response``'s body under :func:`read_body`'s caps. A response a transport handed over already read
    (httpx reads a body given as bytes on construction, as mock and ASGI transports do) is capped as it is:
    its content is decoded already, so its Content-Encoding no longer applies."""
    if response.is_stream_consumed:
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-encoding"}
        return read_body([response.content], headers, limit, end, cut=cut)
    return read_body(response.iter_raw(), response.headers, limit, end, cut=cut)
