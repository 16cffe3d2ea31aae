"""OpenAIChatModel: request mapping and robustness against a real local HTTP server, then real Qwen
behind a real llama.cpp server (``qwen_http``)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from imagent.core.config import ChatModelConfig, ConfigError
from imagent.models.base import ChatError, ChatParams, ImagePart, Message
from imagent.models.chat_openai import OpenAIChatModel, _retry_after_seconds, guess_image_mime
from imagent.models.registry import build_chat_model

# --------------------------------------------------------------------------- a real local HTTP server


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; str -> raw text; None -> a default completion
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(text: str = "ok", logprobs: Any = None, prompt_tokens: int = 7, completion_tokens: int = 1) -> dict:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {"id": "x", "object": "chat.completion", "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


class FakeServer:
    """Answers each POST with ``script(n)`` (n = 0-based request count) and records every request."""

    def __init__(self, script: Callable[[int], Reply]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with fake._lock:
                    n = len(fake.requests)
                    fake.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(raw or b"{}")})
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    reply = fake.script(n)
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    body = reply.body if reply.body is not None else completion()
                    data = (json.dumps(body) if isinstance(body, dict) else str(body)).encode()
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass
                finally:
                    with fake._lock:
                        fake.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int], Reply]], FakeServer]]:
    servers: list[FakeServer] = []

    def start(script: Callable[[int], Reply]) -> FakeServer:
        s = FakeServer(script)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def client(server: FakeServer, **kw: Any) -> OpenAIChatModel:
    kw.setdefault("backoff_s", 0.01)
    return OpenAIChatModel(server.base_url, kw.pop("model", "m"), **kw)


HELLO = [Message.system("Be brief."), Message.user("Say hi.")]

# --------------------------------------------------------------------------- request mapping


def test_request_body_and_response_parsing(serve) -> None:
    logprobs = {"content": [
        {"token": "Yes", "logprob": -0.1, "top_logprobs": [{"token": "Yes", "logprob": -0.1},
                                                          {"token": "No", "logprob": -2.4},
                                                          {"token": "maybe", "logprob": None}]},
        {"token": ".", "logprob": -0.01},  # no alternatives: the chosen token stands alone
    ]}
    server = serve(lambda n: Reply(body=completion("Yes.", logprobs, 11, 2)))
    model = client(server, seed=3)
    resp = model.chat(HELLO, ChatParams(max_tokens=5, top_logprobs=50, stop=["\n"], repeat_penalty=1.1,
                                        json_schema={"type": "object"}))
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    body = req["body"]
    assert body["model"] == "m"
    # No images: plain string content (some servers accept nothing else).
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    assert body["max_tokens"] == 5 and body["temperature"] == 0.0 and body["seed"] == 3 and body["stop"] == ["\n"]
    assert body["logprobs"] is True and body["top_logprobs"] == 20  # capped at OpenAI's limit
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": {"type": "object"},
                                                       "strict": False}}
    assert "repeat_penalty" not in body  # OpenAI/vLLM would reject or ignore it
    assert "authorization" not in {k.lower() for k in req["headers"]}
    assert resp.text == "Yes." and resp.prompt_tokens == 11 and resp.completion_tokens == 2
    assert resp.finish_reason == "stop"
    assert [[(t.token, t.logprob) for t in pos] for pos in resp.top_logprobs] == [
        [("Yes", -0.1), ("No", -2.4)], [(".", -0.01)]]


def test_json_object_mode_sends_schema_and_repeat_penalty(serve) -> None:
    server = serve(lambda n: Reply())
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}}}
    client(server, json_mode="json_object").chat(HELLO, ChatParams(json_schema=schema, repeat_penalty=1.1, seed=9))
    body = server.requests[0]["body"]
    assert body["response_format"] == {"type": "json_object", "schema": schema}
    assert body["repeat_penalty"] == 1.1 and body["seed"] == 9
    assert "logprobs" not in body


def test_json_mode_none_and_extra_body(serve) -> None:
    server = serve(lambda n: Reply())
    model = client(server, json_mode="none", extra_body={"repetition_penalty": 1.05, "temperature": 0.3})
    model.chat(HELLO, ChatParams(json_schema={"type": "object"}, repeat_penalty=1.1))
    body = server.requests[0]["body"]
    assert "response_format" not in body and "repeat_penalty" not in body
    assert body["repetition_penalty"] == 1.05
    assert body["temperature"] == 0.3  # extra_body is applied last: the user's explicit choice wins


def test_from_config_through_registry(serve) -> None:
    server = serve(lambda n: Reply(body=completion("fine")))
    cfg = ChatModelConfig(backend="openai", model="served", base_url=server.base_url + "/", json_mode="json_object",
                          extra_body={"top_k": 1}, vision=True, max_retries=0)
    model = build_chat_model(cfg, cache_dir=Path("/nonexistent"))
    assert isinstance(model, OpenAIChatModel) and model.sees_images and model.model_id == "served"
    assert model.chat(HELLO, ChatParams()).text == "fine"
    assert server.requests[0]["path"] == "/v1/chat/completions"  # trailing slash in base_url tolerated
    assert server.requests[0]["body"]["top_k"] == 1


def test_missing_base_url_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        build_chat_model(ChatModelConfig(backend="openai", model="gpt-4o-mini"))


def test_api_key_header_comes_from_the_env_var(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve(lambda n: Reply())
    monkeypatch.setenv("MY_TEST_KEY", "sk-test-123")
    cfg = ChatModelConfig(backend="openai", model="m", base_url=server.base_url, api_key_env="MY_TEST_KEY")
    model = OpenAIChatModel.from_config(cfg)
    model.chat(HELLO, ChatParams())
    assert server.requests[0]["headers"].get("Authorization") == "Bearer sk-test-123"
    assert "sk-test-123" not in repr(model)


def png_bytes(color: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(buf, format="PNG")
    return buf.getvalue()


def test_image_parts_are_sent_as_base64_data_urls(serve, tmp_path: Path) -> None:
    server = serve(lambda n: Reply())
    png = png_bytes()
    path = tmp_path / "red.img"  # an extension that says nothing: the type comes from the bytes
    path.write_bytes(png)
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (0, 0, 255)).save(buf, format="JPEG")
    jpeg = buf.getvalue()
    msg = Message.user("Compare ", ImagePart(path=str(path)), "with", " this: ", ImagePart(data=jpeg, mime="x/y"))
    client(server, vision=True).chat([msg], ChatParams())
    content = server.requests[0]["body"]["messages"][0]["content"]
    assert [c["type"] for c in content] == ["text", "image_url", "text", "image_url"]
    assert content[0]["text"] == "Compare " and content[2]["text"] == "with this: "
    url1, url2 = content[1]["image_url"]["url"], content[3]["image_url"]["url"]
    assert url1.startswith("data:image/png;base64,") and base64.b64decode(url1.split(",", 1)[1]) == png
    assert url2.startswith("data:image/jpeg;base64,") and base64.b64decode(url2.split(",", 1)[1]) == jpeg


def test_without_vision_images_become_text(serve) -> None:
    server = serve(lambda n: Reply())
    msg = Message.user("Look: ", ImagePart(data=png_bytes(), description="a red square"))
    client(server, vision=False).chat([msg], ChatParams())
    assert server.requests[0]["body"]["messages"][0]["content"] == "Look: [Image, described in text: a red square]"


def test_unreadable_image_is_a_chat_error(serve, tmp_path: Path) -> None:
    server = serve(lambda n: Reply())
    with pytest.raises(ChatError, match="cannot read image"):
        client(server, vision=True).chat([Message.user(ImagePart(path=str(tmp_path / "gone.png")))], ChatParams())
    assert server.requests == []


def test_guess_image_mime_falls_back_to_extension() -> None:
    assert guess_image_mime(png_bytes()) == "image/png"
    assert guess_image_mime(b"not an image", "a.webp") == "image/webp"
    assert guess_image_mime(b"not an image", None, "image/gif") == "image/gif"


# --------------------------------------------------------------------------- robustness


def test_429_with_retry_after_then_success(serve) -> None:
    server = serve(lambda n: Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}) if n == 0
                   else Reply(body=completion("after retry")))
    t0 = time.perf_counter()
    resp = client(server, max_retries=3).chat(HELLO, ChatParams())
    elapsed = time.perf_counter() - t0
    assert resp.text == "after retry"
    assert len(server.requests) == 2
    assert elapsed >= 0.95  # waited as Retry-After said, not the tiny test backoff


def test_repeated_500_fails_after_max_retries(serve) -> None:
    server = serve(lambda n: Reply(500, {"error": {"message": "boom"}}))
    with pytest.raises(ChatError) as err:
        client(server, max_retries=2).chat(HELLO, ChatParams())
    assert len(server.requests) == 3  # the first try + 2 retries
    assert "500" in str(err.value) and "boom" in str(err.value) and "3 attempt" in str(err.value)


def test_400_fails_at_once_with_the_server_message(serve) -> None:
    server = serve(lambda n: Reply(400, {"error": {"message": "unknown field 'foo'"}}))
    with pytest.raises(ChatError) as err:
        client(server, max_retries=4).chat(HELLO, ChatParams())
    assert len(server.requests) == 1
    assert "400" in str(err.value) and "unknown field 'foo'" in str(err.value)


def test_non_json_200_is_a_chat_error(serve) -> None:
    server = serve(lambda n: Reply(200, "<html>proxy page</html>"))
    with pytest.raises(ChatError, match="without a chat completion"):
        client(server).chat(HELLO, ChatParams())


def test_slow_server_times_out(serve) -> None:
    server = serve(lambda n: Reply(delay_s=1.5))
    t0 = time.perf_counter()
    with pytest.raises(ChatError, match="timed out"):
        client(server, timeout_s=0.3, max_retries=1).chat(HELLO, ChatParams())
    assert len(server.requests) == 2
    assert time.perf_counter() - t0 < 1.4  # gave up on its own, not when the server answered


def test_connection_refused_is_retried_then_a_chat_error() -> None:
    import socket

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(ChatError, match="connection error"):
        model.chat(HELLO, ChatParams())


def test_concurrency_is_bounded(serve) -> None:
    both = threading.Barrier(2)

    def script(n: int) -> Reply:
        # The first two requests wait for each other: two in flight at once however loaded the machine (a client
        # that sends one at a time breaks the barrier after 10 s, and max_in_flight says so below).
        if n < 2:
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait(timeout=10)
        return Reply(delay_s=0.3)

    server = serve(script)
    model = client(server, concurrency=2)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: model.chat([Message.user(f"q{i}")], ChatParams()), range(6)))
    assert len(results) == 6 and len(server.requests) == 6
    assert server.max_in_flight == 2


def test_retry_after_parsing() -> None:
    from email.utils import formatdate

    assert _retry_after_seconds("2") == 2.0
    assert _retry_after_seconds("3600") == 60.0  # capped
    assert _retry_after_seconds(None) is None and _retry_after_seconds("soon") is None
    assert _retry_after_seconds("nan") is None and _retry_after_seconds("inf") is None  # not a sleep of NaN
    in_10s = _retry_after_seconds(formatdate(time.time() + 10, usegmt=True))
    assert in_10s is not None and 8 <= in_10s <= 11
