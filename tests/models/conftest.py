"""Real Qwen2.5 0.5B fixtures: the assembled GGUF, an in-process model, and a real llama.cpp server.

``qwen_path`` and ``qwen_local`` live in the top-level conftest (shared by the method tests); this file
adds the real llama.cpp server and the HTTP client pointing at it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

SERVER_START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def qwen_server(qwen_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``python -m llama_cpp.server`` on a free local port; yields its base URL (no ``/v1``)."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(qwen_path), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "2", "--logits_all", "true", "--model_alias", "qwen",
    ]
    base_url = f"http://127.0.0.1:{port}"
    # The log goes to a file: a full pipe nobody reads would block the server.
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base_url}/v1/models", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server not up after {SERVER_START_TIMEOUT_S:g} s:\n"
                            f"{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture(scope="session")
def qwen_http(qwen_server: str):
    from imagent.models.chat_openai import OpenAIChatModel

    model = OpenAIChatModel(f"{qwen_server}/v1", "qwen", json_mode="json_object", timeout_s=120.0,
                            max_retries=1, concurrency=1)
    yield model
    model.close()
