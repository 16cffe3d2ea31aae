"""A sentence-transformers BERT text embedder run with numpy: the same vectors, without importing torch.

``imagent search`` from a cold shell spent 3.6 of its 5.3 s importing sentence-transformers (which imports
torch, transformers and scikit-learn) to encode one short query. A sentence-transformers model folder whose
pipeline is exactly *BERT -> mean pooling -> L2 normalisation* (``modules.json``; the offline default
all-MiniLM-L6-v2 is one) is small enough to run directly: its tokenizer with Hugging Face ``tokenizers`` (the
same ``tokenizer.json`` transformers' fast tokenizer reads), its weights with ``safetensors.numpy`` (memory-mapped),
and the encoder's forward pass (embeddings, then per layer self-attention, GELU feed-forward and layer norms, as
``transformers.BertModel`` computes them in eval mode) in float32 numpy. ``benchmarks/cli_start.py`` measures
the start-up; ``tests/models/test_bert_numpy.py`` checks the vectors against sentence-transformers' own
(within 1e-5) on varied texts, long and short, batched.

:func:`numpy_bert_folder` says whether a folder qualifies; anything else (another architecture or pooling, a
``device`` other than the CPU, a missing ``model.safetensors``) keeps the sentence-transformers runtime.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np

_POOLING = "sentence_transformers.models.Pooling"
_TRANSFORMER = "sentence_transformers.models.Transformer"
_NORMALIZE = "sentence_transformers.models.Normalize"


def numpy_bert_folder(path: str | Path) -> str:
    """Why the model folder at ``path`` cannot run here ("" when it can): modules Transformer -> Pooling (mean
    tokens only) -> Normalize, a BERT config with absolute positions and exact GELU, a ``tokenizer.json`` and a
    ``model.safetensors``."""
    root = Path(path)
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "not a local sentence-transformers folder with modules.json and config.json"
    if [m.get("type") for m in modules] != [_TRANSFORMER, _POOLING, _NORMALIZE] or modules[0].get("path"):
        return "its modules are not Transformer -> Pooling -> Normalize"
    try:
        pooling = json.loads((root / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError):
        return "no pooling config"
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        return f"pooling {sorted(modes)} is not mean pooling"
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu" \
            or config.get("position_embedding_type", "absolute") != "absolute":
        return "not a BERT encoder with absolute positions and GELU"
    for name in ("tokenizer.json", "model.safetensors"):
        if not (root / name).is_file():
            return f"no {name}"
    return ""


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the exact GELU BERT uses (not the tanh approximation)

    return 0.5 * x * (1.0 + erf(x * np.float32(1.0 / math.sqrt(2.0)))).astype(np.float32)


class NumpyBert:
    """The model at ``path`` (see :func:`numpy_bert_folder`): ``encode(texts)`` -> (n, dim) float32, L2-normalised
    rows, the vectors sentence-transformers' ``encode(..., normalize_embeddings=True)`` returns."""

    def __init__(self, path: str | Path, max_seq_length: int | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        root = Path(path)
        reason = numpy_bert_folder(root)
        if reason:
            raise ValueError(f"{root}: {reason}")
        cfg = json.loads((root / "config.json").read_text(encoding="utf-8"))
        st_cfg: dict[str, Any] = {}
        if (root / "sentence_bert_config.json").is_file():
            st_cfg = json.loads((root / "sentence_bert_config.json").read_text(encoding="utf-8"))
        tok_cfg: dict[str, Any] = {}
        if (root / "tokenizer_config.json").is_file():
            tok_cfg = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))
        # sentence-transformers' limit: its max_seq_length, within the tokenizer's and the model's
        limits = [max_seq_length or st_cfg.get("max_seq_length"), tok_cfg.get("model_max_length"),
                  cfg.get("max_position_embeddings")]
        self.max_seq_length = int(min(v for v in limits if isinstance(v, int) and v > 0))
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.no_padding()  # padded here, per batch
        self.tokenizer.enable_truncation(self.max_seq_length)
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.dim = int(cfg["hidden_size"])
        w = load_file(str(root / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        self.w = {k[len(prefix):]: v.astype(np.float32, copy=False) for k, v in w.items() if k.startswith(prefix)}
        # x @ W.T for every dense layer: transposed once here
        self._t = {k: np.ascontiguousarray(v.T) for k, v in self.w.items()
                   if k.endswith(".weight") and v.ndim == 2 and "embeddings" not in k}
        self._lock = threading.Lock()

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        weight = self._t[f"{name}.weight"]  # one 2-D product (BLAS) over every token of the batch
        y = x.reshape(-1, x.shape[-1]) @ weight
        y += self.w[f"{name}.bias"]
        return y.reshape(*x.shape[:-1], weight.shape[1])

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Token vectors (b, t, dim) of the last layer for padded ids (b, t) and their attention mask."""
        w = self.w
        b, t = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:t][None]
             + w["embeddings.token_type_embeddings.weight"][0][None, None])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        h, d = self.heads, self.dim // self.heads
        # padded keys get the most negative float: their softmax weight is exactly 0 (as in transformers)
        bias = np.where(mask[:, None, None, :] > 0, np.float32(0), np.finfo(np.float32).min).astype(np.float32)
        scale = np.float32(1.0 / math.sqrt(d))

        def heads(y: np.ndarray) -> np.ndarray:
            return y.reshape(b, t, h, d).transpose(0, 2, 1, 3)

        for n in range(self.layers):
            p = f"encoder.layer.{n}."
            q = heads(self._dense(x, p + "attention.self.query"))
            k = heads(self._dense(x, p + "attention.self.key"))
            v = heads(self._dense(x, p + "attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, self.dim)
            x = _layer_norm(self._dense(ctx, p + "attention.output.dense") + x,
                            w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                            self.eps)
            inner = _gelu(self._dense(x, p + "intermediate.dense"))
            x = _layer_norm(self._dense(inner, p + "output.dense") + x,
                            w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        return x

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """One forward at a time per model: concurrent callers (eval workers, a server's searches) take turns.
        The forward is hundreds of small numpy operations, each giving the GIL back and taking it again; threads
        interleaving them wait on each other's switch interval (measured with 8 eval workers on 2 busy cores: a
        query's encode and what follows took a median 55-108 ms against 27-44 ms taking turns)."""
        with self._lock:
            return self._encode(texts, batch_size)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch([str(s) for s in texts])
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))  # similar lengths batched
        for start in range(0, len(order), batch_size):
            part = order[start:start + batch_size]
            t = max(len(encodings[i].ids) for i in part)
            ids = np.zeros((len(part), t), dtype=np.int64)
            mask = np.zeros((len(part), t), dtype=np.float32)
            for row, i in enumerate(part):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1.0
            tokens = self._forward(ids, mask)
            summed = (tokens * mask[:, :, None]).sum(axis=1)
            pooled = summed / np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[part] = pooled / np.clip(norms, 1e-12, None)
        return out
