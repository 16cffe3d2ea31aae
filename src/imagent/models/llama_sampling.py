"""Grammar-constrained greedy sampling for llama-cpp-python that checks the grammar lazily, as llama.cpp's own
``common_sampler`` does.

llama-cpp-python's sampler chain applies a JSON-schema grammar to the *whole* vocabulary before every token
(151,936 candidates for Qwen): measured on this project's 2-core machine, 48 ms a token, about as long as the
0.5B model's forward pass, so an agent turn under a grammar spent half its generation time in the grammar
(``benchmarks/agent_tokens.py``: cProfile of two ImageSeeker queries, 119 s of 465 s in ``sample``).

:class:`LazyGrammarGreedy` does what llama.cpp's ``common_sampler_sample`` does: apply the repetition
penalties, take the best token, and ask the grammar about that one token only; when the grammar rejects it, ask
about the 64 best (the best allowed among them is the best allowed of all, if there is one), and only when it
rejects them all apply the grammar to the whole vocabulary. For greedy decoding (temperature
0, imagent's default) this picks exactly the token the stock chain picks (the best token the grammar allows), so
replies are unchanged, only faster. Other settings (temperature > 0, mirostat, logits processors) keep
llama-cpp-python's own chain.

:func:`llama_class` gives the ``Llama`` subclass that uses it (llama-cpp-python is imported on first use).
"""

from __future__ import annotations

import ctypes
import math
from functools import cache
from typing import Any

import numpy as np

# Candidates the grammar sees when it rejects the best token, before it sees the whole vocabulary.
SHORTLIST = 64
# llama_token_data as numpy sees it: int32 id, float logit, float p (12 bytes, no padding).
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class LazyGrammarGreedy:
    """Penalties, then greedy, under a grammar checked on the chosen token first (see the module doc). Has the
    one method ``Llama.sample`` calls (``sample(ctx, idx)``); like llama.cpp's chain it accepts the token it
    returns into its penalties and grammar state."""

    def __init__(self, llama: Any, grammar: Any, *, repeat_penalty: float, frequency_penalty: float,
                 presence_penalty: float) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.n_vocab = int(llama._n_vocab)
        self.penalties = llama_cpp.llama_sampler_init_penalties(
            self.n_vocab, llama.last_n_tokens_size, repeat_penalty, frequency_penalty, presence_penalty)
        self.grammar = llama_cpp.llama_sampler_init_grammar(
            llama._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not self.grammar:
            self.close()
            raise ValueError("llama.cpp could not parse the grammar")
        self.cur = np.zeros(self.n_vocab, dtype=TOKEN_DATA)
        self.cur["id"] = np.arange(self.n_vocab, dtype=np.int32)
        self.one = np.zeros(1, dtype=TOKEN_DATA)
        self.short_passes = 0  # tokens the grammar chose among the shortlist
        self.full_passes = 0  # tokens for which the grammar had to see the whole vocabulary
        self.tokens = 0

    def _array(self, buf: np.ndarray) -> Any:
        data = buf.ctypes.data_as(ctypes.POINTER(self._lib.llama_token_data))
        return self._lib.llama_token_data_array(data=data, size=len(buf), selected=-1, sorted=False)

    def sample(self, ctx: Any, idx: int = -1) -> int:
        lib = self._lib
        logits = lib.llama_get_logits_ith(ctx.ctx, idx)
        self.cur["logit"] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))  # "p" stays 0: nothing here sets it
        # The penalties sampler changes logits in place and keeps the order: ids stay equal to positions.
        lib.llama_sampler_apply(self.penalties, ctypes.byref(self._array(self.cur)))
        token = int(np.argmax(self.cur["logit"]))
        self.one[0] = self.cur[token]
        lib.llama_sampler_apply(self.grammar, ctypes.byref(self._array(self.one)))
        if not math.isfinite(float(self.one["logit"][0])):
            token = self._best_allowed()
        lib.llama_sampler_accept(self.penalties, token)
        lib.llama_sampler_accept(self.grammar, token)
        self.tokens += 1
        return token

    def _best_allowed(self) -> int:
        """The best token the grammar allows: among the :data:`SHORTLIST` best first (if the grammar allows any
        of them, the best of those is the best of all, every other token scoring lower), else among all."""
        lib = self._lib
        logits = self.cur["logit"]
        top = np.argpartition(-logits, SHORTLIST)[:SHORTLIST]
        short = self.cur[top]  # a copy: the grammar marks it, not the whole row
        lib.llama_sampler_apply(self.grammar, ctypes.byref(self._array(short)))
        if np.isfinite(short["logit"]).any():
            self.short_passes += 1
            return int(short["id"][int(np.argmax(short["logit"]))])
        self.full_passes += 1
        lib.llama_sampler_apply(self.grammar, ctypes.byref(self._array(self.cur)))
        token = int(np.argmax(logits))
        if not math.isfinite(float(logits[token])):
            raise RuntimeError("the grammar allows no token here")
        return token

    def close(self) -> None:
        for name in ("penalties", "grammar"):
            smpl = getattr(self, name, None)
            if smpl:
                self._lib.llama_sampler_free(smpl)
            setattr(self, name, None)

    def __del__(self) -> None:
        self.close()


@cache
def llama_class() -> type:
    """``llama_cpp.Llama`` with :class:`LazyGrammarGreedy` for greedy grammar-constrained generation."""
    from llama_cpp import Llama

    class LazyGrammarLlama(Llama):  # type: ignore[misc]
        """A ``Llama`` whose greedy grammar-constrained sampling checks the grammar lazily (module doc)."""

        last_sampler: LazyGrammarGreedy | None = None

        def _init_sampler(self, *args: Any, **kw: Any) -> Any:
            lazy = (not args and kw.get("grammar") is not None and kw.get("temp") == 0.0
                    and not kw.get("logits_processor") and not kw.get("mirostat_mode"))
            if not lazy:
                return super()._init_sampler(*args, **kw)
            sampler = LazyGrammarGreedy(self, kw["grammar"], repeat_penalty=kw.get("repeat_penalty", 1.0),
                                        frequency_penalty=kw.get("frequency_penalty", 0.0),
                                        presence_penalty=kw.get("presence_penalty", 0.0))
            self.last_sampler = sampler
            return sampler

    return LazyGrammarLlama


__all__ = ["TOKEN_DATA", "LazyGrammarGreedy", "llama_class"]
