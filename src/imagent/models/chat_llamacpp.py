"""LlamaCppChatModel: a GGUF model run in-process by llama-cpp-python (``backend = "llama.cpp"``).

``model`` is a ``.gguf`` path (a ``llama.cpp:`` prefix is accepted) or ``offline:qwen2.5-0.5b-instruct``,
the model assembled from the ``imagent[offline]`` packages (see :mod:`imagent.models.offline`).

- ``logprobs`` (config) keeps all logits (``logits_all``); llama.cpp cannot return token logprobs without it,
  and yes/no scores need them. Without it, calls asking for logprobs still answer, with no probabilities.
- JSON output is constrained by a grammar built from the schema
  (``response_format={"type": "json_object", "schema": S}``). Small models loop inside strings unless every
  string has ``maxLength``, every array ``maxItems``, and ``repeat_penalty`` is ~1.1; :meth:`Role.json` sets
  the penalty by default.
- The model sees no pixels (``sees_images = False``): roles send captions instead.
- Tool calls: llama-cpp-python renders ``tools`` through the GGUF's chat template but returns the model's
  calls as text, so ``supports_tools = False`` and agents use the ``<tool_call>`` text protocol (Qwen's
  own format). ``ChatParams.tools`` are still passed to the template when given, and a history with
  native tool messages is replayed as text (``<tool_call>`` blocks, ``<tool_response>`` user turns).
- One ``Llama`` is not thread-safe, so calls are serialised by a lock. The weights load on the first call.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from imagent.core.cache import stable_key
from imagent.core.trace import note
from imagent.models.base import ChatError, ChatParams, ChatResponse, Message
from imagent.models.chat_openai import parse_openai_logprobs
from imagent.models.offline import INSTALL_HINT, OFFLINE_QWEN_NAME, ensure_offline_qwen

OFFLINE_MODELS = (OFFLINE_QWEN_NAME,)


class ModelLoadError(RuntimeError):
    """The model file cannot be found or loaded (not retried: a call would fail the same way again)."""


def resolve_model_path(model: str, cache_dir: Path | None = None) -> tuple[Path, str]:
    """``(path of the .gguf, model_id)`` for a config's ``model`` value.

    The model id names the model in cache keys and traces: the offline name for the offline model
    (the same on every machine, since the file is hash-checked), else the file name."""
    if model.startswith("offline:"):
        if model != OFFLINE_QWEN_NAME:
            raise ModelLoadError(f"unknown offline model {model!r}; known: {', '.join(OFFLINE_MODELS)}")
        if cache_dir is None:
            from imagent.core.config import user_cache_dir

            cache_dir = user_cache_dir()
        return ensure_offline_qwen(cache_dir), model
    path = Path(model.removeprefix("llama.cpp:")).expanduser()
    if not path.is_file():
        raise ModelLoadError(
            f"GGUF model file not found: {path} (the llama.cpp backend takes a .gguf path or {OFFLINE_QWEN_NAME!r})"
        )
    return path, path.name


def _text_protocol_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat dicts for the template, with native tool-call messages written in the text protocol."""
    out: list[dict[str, Any]] = []
    for m in messages:
        text = m.text
        if m.role == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
            continue
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    args = json.loads(c.get("arguments") or "{}")
                except ValueError:
                    args = c.get("arguments")
                body = json.dumps({"name": c.get("name"), "arguments": args})
                calls.append(f"<tool_call>\n{body}\n</tool_call>")
            text = "\n".join([text, *calls]) if text else "\n".join(calls)
        out.append({"role": m.role, "content": text})
    return out


class LlamaCppChatModel:
    backend = "llama.cpp"
    sees_images = False
    supports_tools = False

    def __init__(
        self,
        model_path: str | Path,
        *,
        model_id: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        temperature: float = 0.0,
        logprobs: bool = True,
        verbose: bool = False,
    ) -> None:
        self.model_path = Path(model_path)
        self.model_id = model_id or self.model_path.name
        self.n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.seed = seed
        self.temperature = temperature
        # The call cache keys on this beside the model id: another default temperature or seed answers differently.
        self.cache_tag = stable_key(seed, temperature)
        self.logprobs = logprobs
        self.verbose = verbose
        self._llama: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Any, cache_dir: Path | None = None, **_: Any) -> LlamaCppChatModel:
        path, model_id = resolve_model_path(config.model, cache_dir)
        return cls(path, model_id=model_id, n_ctx=config.n_ctx, n_threads=config.n_threads,
                   seed=config.seed, temperature=config.temperature, logprobs=config.logprobs)

    def __repr__(self) -> str:
        return f"LlamaCppChatModel({str(self.model_path)!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"

    def load(self) -> None:
        """Load the weights now (otherwise the first chat call does)."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> Any:
        if self._llama is not None:
            return self._llama
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelLoadError(
                f"the llama.cpp backend needs llama-cpp-python ({exc}); install it with: {INSTALL_HINT}"
            ) from exc
        if not self.model_path.is_file():
            raise ModelLoadError(f"GGUF model file not found: {self.model_path}")
        try:
            self._llama = Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                seed=self.seed,
                logits_all=self.logprobs,
                verbose=self.verbose,
            )
        except Exception as exc:  # llama.cpp reports bad files as ValueError/RuntimeError with little detail
            raise ModelLoadError(
                f"llama.cpp could not load {self.model_path} ({type(exc).__name__}: {exc}); "
                "is it a complete GGUF file that this llama-cpp-python version supports?"
            ) from exc
        return self._llama

    def close(self) -> None:
        with self._lock:
            if self._llama is not None:
                close = getattr(self._llama, "close", None)
                if close is not None:
                    close()
                self._llama = None

    def request_kwargs(self, messages: list[Message], params: ChatParams) -> dict[str, Any]:
        """The keyword arguments for ``Llama.create_chat_completion``."""
        from imagent.models.roles import to_caption_mode

        if any(m.has_images() for m in messages):  # a direct call with images (roles convert already)
            messages = to_caption_mode(messages)
        kw: dict[str, Any] = {
            "messages": _text_protocol_messages(messages),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature if params.temperature is not None else self.temperature,
            "seed": params.seed if params.seed is not None else self.seed,
        }
        if params.stop:
            kw["stop"] = list(params.stop)
        if params.repeat_penalty is not None:
            kw["repeat_penalty"] = params.repeat_penalty
        if params.json_schema is not None:
            kw["response_format"] = {"type": "json_object", "schema": grammar_safe_schema(params.json_schema)}
        if params.tools:
            kw["tools"] = params.tools
        # llama.cpp raises if logprobs are asked of a model loaded without logits_all.
        if params.top_logprobs > 0 and self.logprobs:
            kw["logprobs"] = True
            kw["top_logprobs"] = params.top_logprobs
        return kw

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        kw = self.request_kwargs(messages, params)
        if params.top_logprobs > 0 and not self.logprobs:
            from imagent.core.trace import note

            note(f"{self.model_id}: loaded without logprobs (config logprobs=false); no token probabilities")
        with self._lock:
            llama = self._load_locked()
            try:
                out = llama.create_chat_completion(**kw)
            except (ValueError, RuntimeError) as exc:  # e.g. prompt longer than n_ctx
                raise ChatError(f"llama.cpp ({self.model_id}): {exc}") from exc
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return ChatResponse(
            text=(choice.get("message") or {}).get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            top_logprobs=parse_openai_logprobs(choice.get("logprobs")),
            finish_reason=choice.get("finish_reason") or "",
            raw=out,
        )


# llama.cpp turns a string's maxLength into that many nested optional repetitions in its grammar; a bound
# of thousands (the GPT-4-class room methods ask for, e.g. TaCIR's 2,000 characters) builds a grammar whose
# parsing overflows the native stack and kills the process (a segfault, seen here with the 0.5B Qwen). The
# in-process backend therefore bounds each constrained string at GRAMMAR_MAX_CHARS; the trace says so.
GRAMMAR_MAX_CHARS = 256


def grammar_safe_schema(schema: Any) -> Any:
    """``schema`` with every ``maxLength`` above :data:`GRAMMAR_MAX_CHARS` lowered to it (a copy)."""
    lowered: list[int] = []

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
            if isinstance(out.get("maxLength"), int) and out["maxLength"] > GRAMMAR_MAX_CHARS:
                lowered.append(out["maxLength"])
                out["maxLength"] = GRAMMAR_MAX_CHARS
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    safe = walk(schema)
    if lowered:
        note(f"llama.cpp grammar: strings bounded at {GRAMMAR_MAX_CHARS} characters (the schema asked up to "
             f"{max(lowered)}; larger bounds crash llama.cpp's grammar parser)")
    return safe
