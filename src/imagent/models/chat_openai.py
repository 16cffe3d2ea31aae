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
- ``timeout_s``, ``max_retries``, ``concurrency``: per-request timeout; retries on 429, 5xx, timeouts and
  connection errors (exponential backoff with jitter, honouring ``Retry-After`` up to 60 s); and the most
  requests this instance has in flight at once.
"""

from __future__ import annotations

import base64
import email.utils
import io
import json
import mimetypes
import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Literal

import httpx

from imagent.core.cache import stable_key
from imagent.core.config import ConfigError
from imagent.core.redact import register_env_names, register_secret
from imagent.models.base import ChatError, ChatParams, ChatResponse, ImagePart, Message, TokenLogprob

JsonMode = Literal["json_schema", "json_object", "none"]

# OpenAI's limit for top_logprobs; vLLM and llama.cpp accept at least as many.
MAX_TOP_LOGPROBS = 20
MAX_RETRY_AFTER_S = 60.0
_MAX_BACKOFF_S = 30.0


def parse_openai_logprobs(logprobs: Any) -> list[list[TokenLogprob]]:
    """``choices[0].logprobs`` (chat format) -> per generated position, its top alternatives.

    A position without ``top_logprobs`` keeps just the chosen token. Entries with a null logprob
    (some servers write ``-inf`` that way) are dropped."""
    if not isinstance(logprobs, dict):
        return []
    out: list[list[TokenLogprob]] = []
    for pos in logprobs.get("content") or []:
        if not isinstance(pos, dict):
            continue
        alts = pos.get("top_logprobs") or []
        if not alts and "token" in pos:
            alts = [pos]
        row = []
        for alt in alts:
            if isinstance(alt, dict) and alt.get("logprob") is not None and alt.get("token") is not None:
                row.append(TokenLogprob(str(alt["token"]), float(alt["logprob"])))
        out.append(row)
    return out


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


def parse_openai_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """``choices[0].message.tool_calls`` as ``{"id", "name", "arguments": JSON string}`` (arguments a
    server sent as an object are serialised back, so every backend hands the runtime the same shape)."""
    out = []
    for n, c in enumerate(message.get("tool_calls") or []):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        out.append({"id": str(c.get("id") or f"call_{n}"), "name": str(fn.get("name") or ""),
                    "arguments": args if isinstance(args, str) else json.dumps(args or {})})
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
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _server_message(response: httpx.Response) -> str:
    """The error text a server sent back (OpenAI ``{"error": {"message"}}``, FastAPI ``detail``, or raw)."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
        if "detail" in data:
            return json.dumps(data["detail"])[:500]
        if data.get("message"):
            return str(data["message"])[:500]
    return json.dumps(data)[:500]


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


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
        headers = {"Content-Type": "application/json"}
        if api_key:
            register_secret(api_key)
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

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
        body.update(self.extra_body)
        return body

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        body = self.request_body(messages, params)
        attempts = self.max_retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                return self._post_once(body)
            except _Retryable as exc:
                last = exc.reason
                if attempt + 1 >= attempts:
                    break
                time.sleep(self._delay(attempt, exc.retry_after))
        raise ChatError(f"{self.url}: request failed after {attempts} attempt(s): {last}")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        # Exponential backoff with jitter, so many clients do not retry in lockstep.
        base = min(_MAX_BACKOFF_S, self.backoff_s * (2**attempt))
        return base * (0.5 + random.random() / 2)

    def _post_once(self, body: dict[str, Any]) -> ChatResponse:
        # The semaphore bounds requests in flight; backoff sleeps happen outside it.
        with self._semaphore:
            try:
                response = self._client.post(self.url, json=body)
            except httpx.TimeoutException as exc:
                raise _Retryable(f"timed out after {self.timeout_s:g} s ({type(exc).__name__})") from exc
            except httpx.TransportError as exc:
                raise _Retryable(f"connection error: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(
                f"HTTP {status}: {_server_message(response)}",
                _retry_after_seconds(response.headers.get("Retry-After")),
            )
        if status >= 400:
            raise ChatError(f"{self.url} answered HTTP {status}: {_server_message(response)}")
        return self._parse(response)

    def _parse(self, response: httpx.Response) -> ChatResponse:
        try:
            data = response.json()
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(
                f"{self.url} returned HTTP {response.status_code} without a chat completion: {response.text[:300]!r}"
            ) from exc
        message = choice.get("message") or {}
        usage = data.get("usage") or {}
        return ChatResponse(
            text=message.get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            top_logprobs=parse_openai_logprobs(choice.get("logprobs")),
            finish_reason=choice.get("finish_reason") or "",
            raw=data,
            tool_calls=parse_openai_tool_calls(message),
        )
