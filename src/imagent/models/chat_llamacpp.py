"""LlamaCppChatModel: a GGUF model run in-process by llama-cpp-python (``backend = "llama.cpp"``).

``model`` is a ``.gguf`` path (a ``llama.cpp:`` prefix is accepted) or an offline model assembled from its
PyPI parts (see :mod:`imagent.models.offline`): ``offline:qwen2.5-0.5b-instruct`` (``imagent[offline]``) or
``offline:qwen2.5-coder-1.5b-instruct`` (``imagent[offline-15b]``).

- ``logprobs`` (config): calls asking for token logprobs (yes/no scores) get each generated token's top
  alternatives, read from that step's logits by a logits processor (:class:`_TopLogprobs`), the same numbers
  llama.cpp's own ``logprobs`` gives. The model is loaded without ``logits_all``: that option keeps a vocabulary
  row per *prompt* token (151,936 floats each for Qwen) and log-softmaxes all of them on every call, which made
  a 0.5B yes/no call ~6x slower (measured 8 s against 1.3 s per verifier call on this 2-core machine) and the
  planner's long prompts ~30% slower. With ``logprobs = false`` calls still answer, with no probabilities.
- Prompt cache: a ``Llama`` reuses the previous prompt's KV cache for the longest common token prefix, so a
  caller puts what many calls share first. Each reply's ``raw["usage"]["prompt_tokens_evaluated"]`` says how
  many prompt tokens were evaluated, not reused (``benchmarks/agent_tokens.py`` reads it). The model keeps
  ``slots`` contexts (default 2; the weights are memory-mapped once and shared) and sends each call to the one
  whose last prompt shares the longest prefix with it (at least :data:`SLOT_MIN_PREFIX` characters, else the
  least recently used): a method alternating one long planner prompt with many short verifier prompts (OSCAR)
  keeps both prefixes warm, instead of re-reading the planner's ~1,100 shared tokens on every query.
- JSON output is constrained by a grammar built from the schema
  (``response_format={"type": "json_object", "schema": S}``); greedy calls check it lazily, on the chosen token
  first (:mod:`imagent.models.llama_sampling`: the same tokens, without a grammar pass over the whole vocabulary
  for most of them). Small models loop inside strings unless every
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

import numpy as np

from imagent.core.cache import stable_key
from imagent.core.trace import note_once
from imagent.models.base import ChatError, ChatParams, ChatResponse, Message, TokenLogprob
from imagent.models.offline import (
    INSTALL_HINT,
    OFFLINE_GGUFS,
    OFFLINE_QWEN_NAME,
    ensure_offline_model,
    get_offline_model,
)

OFFLINE_MODELS = tuple(OFFLINE_GGUFS)


class ModelLoadError(RuntimeError):
    """The model file cannot be found or loaded (not retried: a call would fail the same way again)."""


def resolve_model_path(model: str, cache_dir: Path | None = None) -> tuple[Path, str]:
    """``(path of the .gguf, model_id)`` for a config's ``model`` value.

    The model id names the model in cache keys and traces: the offline name for the offline model
    (the same on every machine, since the file is hash-checked), else the file name."""
    if model.startswith("offline:"):
        if model not in OFFLINE_GGUFS:
            raise ModelLoadError(f"unknown offline model {model!r}; known: {', '.join(OFFLINE_MODELS)}")
        if cache_dir is None:
            from imagent.core.config import user_cache_dir

            cache_dir = user_cache_dir()
        return ensure_offline_model(cache_dir, get_offline_model(model)), model
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
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        temperature: float = 0.0,
        logprobs: bool = True,
        verbose: bool = False,
        slots: int = 2,
        flash_attn: bool = False,
    ) -> None:
        self.model_path = Path(model_path)
        self.model_id = model_id or self.model_path.name
        self.n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.seed = seed
        self.temperature = temperature
        # The call cache keys on this beside the model id: another default temperature or seed answers differently.
        # Flash attention sums in another order: a near-tie can turn out differently, so it keys too.
        self.flash_attn = flash_attn
        self.cache_tag = stable_key(seed, temperature, flash_attn) if flash_attn else stable_key(seed, temperature)
        self.logprobs = logprobs
        self.verbose = verbose
        self._slots: list[_Slot] = [_Slot() for _ in range(max(1, slots))]
        self._clock = 0
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Any, cache_dir: Path | None = None, **_: Any) -> LlamaCppChatModel:
        path, model_id = resolve_model_path(config.model, cache_dir)
        return cls(path, model_id=model_id, n_ctx=config.n_ctx, n_threads=config.n_threads,
                   seed=config.seed, temperature=config.temperature, logprobs=config.logprobs,
                   flash_attn=config.flash_attn)

    def __repr__(self) -> str:
        return f"LlamaCppChatModel({str(self.model_path)!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"

    def load(self) -> None:
        """Load the weights now (otherwise the first chat call does)."""
        with self._lock:
            self._load_locked()

    def _load_locked(self, prompt: str = "") -> Any:
        """The ``Llama`` of the slot for ``prompt`` (module docstring), loaded if it is not yet."""
        slot = max(self._slots, key=lambda sl: sl.shared_prefix(prompt))
        if slot.shared_prefix(prompt) < min(SLOT_MIN_PREFIX, len(prompt)) or not prompt:
            slot = min(self._slots, key=lambda sl: sl.used)
        self._clock += 1
        slot.used, slot.prompt = self._clock, prompt
        if slot.llama is None:
            slot.llama = self._new_llama()
        return slot.llama

    def _new_llama(self) -> Any:
        try:
            import llama_cpp  # noqa: F401 (the error below when it is missing)

            from imagent.models.llama_sampling import llama_class

            Llama = llama_class()  # llama_cpp.Llama, with lazy grammar checks for greedy JSON turns
        except ImportError as exc:
            raise ModelLoadError(
                f"the llama.cpp backend needs llama-cpp-python ({exc}); install it with: {INSTALL_HINT}"
            ) from exc
        if not self.model_path.is_file():
            raise ModelLoadError(f"GGUF model file not found: {self.model_path}")
        try:
            return Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                flash_attn=self.flash_attn,
                seed=self.seed,
                logits_all=False,  # logprobs come from _TopLogprobs (see the module docstring)
                verbose=self.verbose,
            )
        except Exception as exc:  # llama.cpp reports bad files as ValueError/RuntimeError with little detail
            raise ModelLoadError(
                f"llama.cpp could not load {self.model_path} ({type(exc).__name__}: {exc}); "
                "is it a complete GGUF file that this llama-cpp-python version supports?"
            ) from exc

    def close(self) -> None:
        with self._lock:
            for slot in self._slots:
                close = getattr(slot.llama, "close", None)
                if close is not None:
                    close()
                slot.llama, slot.prompt, slot.used = None, "", 0

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
        return kw

    def chat(self, messages: list[Message], params: ChatParams) -> ChatResponse:
        kw = self.request_kwargs(messages, params)
        if params.top_logprobs > 0 and not self.logprobs:
            from imagent.core.trace import note

            note(f"{self.model_id}: loaded without logprobs (config logprobs=false); no token probabilities")
        with self._lock:
            llama = self._load_locked(json.dumps(kw["messages"], ensure_ascii=False))
            top = _TopLogprobs(llama, params.top_logprobs) if params.top_logprobs > 0 and self.logprobs else None
            if top is not None:
                kw["logits_processor"] = [top]
            before = _kv_tokens(llama)
            try:
                out = llama.create_chat_completion(**kw)
            except (ValueError, RuntimeError) as exc:  # e.g. prompt longer than n_ctx
                raise ChatError(f"llama.cpp ({self.model_id}): {exc}") from exc
            usage = out.get("usage") or {}
            out["usage"] = usage
            if isinstance(usage, dict):
                usage["prompt_tokens_evaluated"] = evaluated_prompt_tokens(
                    before, _kv_tokens(llama), int(usage.get("prompt_tokens") or 0))
        choice = out["choices"][0]
        return ChatResponse(
            text=(choice.get("message") or {}).get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            top_logprobs=top.rows if top is not None else [],
            finish_reason=choice.get("finish_reason") or "",
            raw=out,
        )


def _kv_tokens(llama: Any) -> list[int]:
    """The token ids whose keys and values the ``Llama`` context holds now (its last prompt and reply)."""
    ids = getattr(llama, "input_ids", None)
    return [] if ids is None else [int(t) for t in ids]


def evaluated_prompt_tokens(before: list[int], after: list[int], prompt_tokens: int) -> int:
    """How many of a call's ``prompt_tokens`` llama.cpp actually evaluated: those after the longest prefix
    its context already held (``before``), as llama-cpp-python's ``generate`` reuses it; the prompt's last
    token is always evaluated again. ``after`` is the context after the call (prompt, then reply)."""
    if prompt_tokens <= 0:
        return 0
    shared = 0
    for a, b in zip(before, after[: prompt_tokens - 1], strict=False):
        if a != b:
            break
        shared += 1
    return prompt_tokens - shared


# A call goes to the slot whose last prompt shares at least this many characters with it (else the least
# recently used slot): more than the chat template's common opening, less than any instruction worth keeping.
SLOT_MIN_PREFIX = 200


_SIBLINGS: dict[tuple[Any, ...], LlamaCppChatModel] = {}
_SIBLINGS_LOCK = threading.Lock()


def offline_sibling(model: LlamaCppChatModel, name: str) -> LlamaCppChatModel:
    """``model``'s settings (context, threads, seed, temperature) with another offline GGUF, ``name``
    (``offline:...``), assembled beside ``model``'s own file on first use: one instance per process and settings,
    so every search that asks again shares the loaded weights. :class:`OfflineModelError` when its parts are not
    installed (the message names the extra to install)."""
    key = (str(model.model_path), name, model.n_ctx, model.n_threads, model.seed, model.temperature, model.logprobs,
           model.flash_attn)
    with _SIBLINGS_LOCK:
        hit = _SIBLINGS.get(key)
        if hit is None:
            spec = get_offline_model(name)
            path = ensure_offline_model(model.model_path.parent.parent, spec)  # <cache>/models/<file>, as its own
            hit = _SIBLINGS[key] = LlamaCppChatModel(
                path, model_id=name, n_ctx=model.n_ctx, n_threads=model.n_threads, seed=model.seed,
                temperature=model.temperature, logprobs=model.logprobs, flash_attn=model.flash_attn)
        return hit


class _Slot:
    """One llama.cpp context of a model: its ``Llama`` (None until used), last prompt and last use."""

    def __init__(self) -> None:
        self.llama: Any = None
        self.prompt = ""
        self.used = 0

    def shared_prefix(self, prompt: str) -> int:
        return len(os.path.commonprefix([self.prompt, prompt]))  # noqa: RUF071 (characters, not paths, wanted)


class _TopLogprobs:
    """A llama-cpp-python logits processor that records, at each generated position, the ``n`` most likely
    tokens with their log-probabilities (log-softmax of that step's raw logits, before penalties and grammar,
    as llama.cpp's ``logprobs`` reports them) and leaves the logits unchanged."""

    def __init__(self, llama: Any, n: int) -> None:
        self.llama, self.n = llama, n
        self.rows: list[list[TokenLogprob]] = []

    def __call__(self, _input_ids: Any, logits: Any) -> Any:
        s = np.asarray(logits, dtype=np.float64)
        m = float(s.max())
        lse = m + float(np.log(np.exp(s - m).sum()))
        n = min(self.n, s.shape[0])
        best = np.argpartition(-s, n - 1)[:n]
        best = best[np.argsort(-s[best], kind="stable")]
        self.rows.append([TokenLogprob(self.llama.detokenize([int(t)]).decode("utf-8", "replace"),
                                       float(s[t]) - lse) for t in best])
        return logits


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
        note_once(f"llama.cpp grammar: strings bounded at {GRAMMAR_MAX_CHARS} characters (the schema asked up to "
             f"{max(lowered)}; larger bounds crash llama.cpp's grammar parser)")
    return safe
