"""Real Qwen2.5 0.5B fixtures: the assembled GGUF, an in-process model, and a real llama.cpp server.

``qwen_path`` and ``qwen_local`` live in the top-level conftest (shared by the method tests); this file
adds the real llama.cpp server and the HTTP client pointing at it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def qwen_server(qwen_path: Path, tmp_path_factory: pytest.TempPathFactory, start_llama_server) -> Iterator[str]:
    """A real ``python -m llama_cpp.server`` on a free local port; yields its base URL (no ``/v1``)."""
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    with start_llama_server(qwen_path, log_path, "--n_ctx", "2048", "--logits_all", "true") as base_url:
        yield base_url


@pytest.fixture(scope="session")
def qwen_http(qwen_server: str):
    from imagent.models.chat_openai import OpenAIChatModel

    model = OpenAIChatModel(f"{qwen_server}/v1", "qwen", json_mode="json_object", timeout_s=120.0,
                            max_retries=1, concurrency=1)
    yield model
    model.close()
