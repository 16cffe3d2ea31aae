"""No API key reaches any output (issue 11, item 2 and deliver 2).

A local HTTP server on 127.0.0.1 plays a hostile or careless model endpoint: it answers every chat request
with an error whose text echoes the request headers, ``Authorization: Bearer <key>`` included (as JSON with
HTTP 400, as plain text with HTTP 500, and in the ``api-key`` / ``?key=`` shapes). imagent is pointed at it
through a config file whose model entry names the key's environment variable, then run as a user would:
``imagent search`` and ``imagent eval`` in subprocesses (the error path and the trace path: a method whose
JSON answers fall back records the failures in its trace) and the web API's 502 path. The key must not
appear in stdout, stderr, the response body, or any file under the run, index, cache and data folders.
The server records that it did receive the key, so the test cannot pass by never sending it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest

from imagent.core.redact import redact, register_env_names
from testkit import caption_index, http_server

slow = pytest.mark.slow

KEY_ENV = "IMAGENT_TEST_SECRET_KEY"
KEY = "sk-live-" + secrets.token_hex(20)
CAPTIONS = {"img00": "a red vintage car on a street", "img01": "a blue bicycle by a wall",
            "img02": "a black cat on a sofa", "img03": "a blue vintage car on a street"}


class EchoHandler(BaseHTTPRequestHandler):
    """Every request fails, and the error text quotes the request's headers (what some proxies do)."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        auth = self.headers.get("Authorization", "")
        EchoHandler.seen.append(auth)
        token = auth.removeprefix("Bearer ")
        echoed = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
        if self.path.startswith("/json400/"):
            status, ctype = 400, "application/json"
            body = json.dumps({"error": {"message": f"invalid request. You sent: {echoed}"}})
        elif self.path.startswith("/text500/"):
            status, ctype = 500, "text/plain"
            body = f"upstream failed for {echoed}"
        else:  # other shapes servers use to quote a credential
            status, ctype = 401, "application/json"
            body = json.dumps({"detail": f"bad key {token} (api-key: {token}, url ?key={token}&x=1)"})
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:  # keep the test output clean
        pass


@pytest.fixture(scope="module")
def echo_server() -> Iterator[str]:
    with http_server(EchoHandler) as url:
        yield url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, echo_server: str, caption_dual, minilm) -> dict[str, Path]:
    """A config pointing every role at the echo server, a gallery index, and a tiny stamps-format benchmark."""
    from PIL import Image

    base = tmp_path_factory.mktemp("secrets")
    caption_index(base / "index", CAPTIONS, caption_dual, minilm)
    bench = base / "bench"
    (bench / "images").mkdir(parents=True)
    rows = []
    for n, (i, c) in enumerate(CAPTIONS.items()):
        Image.new("RGB", (16, 16), (40 * n, 80, 120)).save(bench / "images" / f"{i}.jpg")
        rows.append(json.dumps({"id": i, "file": f"images/{i}.jpg", "caption": c, "category": "things"}))
    (bench / "captions.jsonl").write_text("\n".join(rows) + "\n")
    (base / "queries.json").write_text(json.dumps([
        {"pairid": 0, "task": "cir", "reference": "img00", "caption": "make it blue", "target_hard": "img03"}]))
    models = "\n".join(
        f'[models.{name}]\nbackend = "openai"\nbase_url = "{echo_server}/{name}/v1"\nmodel = "m"\n'
        f'api_key_env = "{KEY_ENV}"\nmax_retries = 0\njson_mode = "none"\n'
        for name in ("json400", "text500", "other401"))
    (base / "imagent.toml").write_text(
        f'index = "{base / "index"}"\ncache_dir = "{base / "cache"}"\n{models}\n[roles]\ndefault = "json400"\n')
    return {"base": base, "config": base / "imagent.toml", "index": base / "index", "bench": bench,
            "queries": base / "queries.json"}


def run_cli(world: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KEY_ENV: KEY, "IMAGENT_DATA_DIR": str(world["base"] / "data"),
           "IMAGENT_CACHE_DIR": str(world["base"] / "cache"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "NO_COLOR": "1", "COLUMNS": "400"}
    env.pop("IMAGENT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "imagent.cli.main", *args, "--config", str(world["config"])],
                          capture_output=True, text=True, env=env, timeout=600, cwd=world["base"])


def assert_no_key_in_files(root: Path) -> int:
    """The key is in no file under ``root`` (bytes, so SQLite and binary files count too); returns files read."""
    n = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            n += 1
            assert KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"
    return n


def test_redact_masks_registered_keys_and_credential_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGENT_REDACT_UNIT_KEY", "abcdefgh12345678")
    register_env_names(["IMAGENT_REDACT_UNIT_KEY"])
    text = ("Authorization: Bearer tok-1234567890; 'authorization': 'Basic dXNlcjpwYXNz'; api-key: k-111111111; "
            "x-api-key: k-222222222; X-Subscription-Token: k-333333; GET /v1?key=k-4444444&cx=1 "
            "plain abcdefgh12345678 and Bearer eyJhbGciOi.payload.sig")
    out = redact(text)
    for secret in ("tok-1234567890", "dXNlcjpwYXNz", "k-111111111", "k-222222222", "k-333333", "k-4444444",
                   "abcdefgh12345678", "eyJhbGciOi"):
        assert secret not in out, (secret, out)
    assert "cx=1" in out and "GET /v1?key=***" in out  # the rest of the message stays readable
    assert redact(out) == out
    record = json.dumps({"error": 'HTTP 400: {"headers": "Authorization: Bearer tok-1234567890"} \\ "quoted"'})
    assert "tok-1234567890" not in redact(record) and json.loads(redact(record))  # serialised JSON stays JSON
    assert redact("a standard bearer holding a flag") == "a standard bearer holding a flag"
    assert redact("a caption about keys and tokens: key lime pie") == "a caption about keys and tokens: key lime pie"


@slow
def test_no_key_in_cli_search_output_or_files(world: dict[str, Path]) -> None:
    EchoHandler.seen.clear()
    outputs = []
    # The error path: CIReVL's edit call fails, the CLI prints the server's error (redacted). (Each response
    # shape is also run through the web API below, in-process: a CLI start costs seconds.)
    res = run_cli(world, "search", "make it blue", "--method", "cirevl", "--ref", "img00")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "HTTP 400" in res.stderr and "Bearer ***" in res.stderr, res.stderr
    outputs.append(res)
    # The trace path: TaCIR's JSON answers fail and fall back; the trace (printed with --json) quotes the errors.
    res = run_cli(world, "search", "make it blue", "--method", "tacir", "--ref", "img00", "--json",
                  "--set", "roles.default=text500")
    assert res.returncode == 0, res.stderr
    trace = json.loads(res.stdout)["trace"]
    assert any(c.get("error") for s in trace["steps"] for c in s["calls"])
    outputs.append(res)
    assert EchoHandler.seen and all(a == f"Bearer {KEY}" for a in EchoHandler.seen)  # the key was sent
    for r in outputs:
        assert KEY not in r.stdout and KEY not in r.stderr
    assert_no_key_in_files(world["base"])


@slow
def test_no_key_in_eval_files_or_output(world: dict[str, Path]) -> None:
    EchoHandler.seen.clear()
    for method in ("cirevl", "tacir"):  # a query that errors, and one whose trace records the failed calls
        run_dir = world["base"] / f"run-{method}"
        res = run_cli(world, "eval", "stamps", "--method", method, "--annotations", str(world["queries"]),
                      "--images-root", str(world["bench"]), "--index", str(world["base"] / "eval-index"),
                      "--run-dir", str(run_dir), "--set", "roles.default=text500")
        assert KEY not in res.stdout and KEY not in res.stderr
        results = (run_dir / "results.jsonl").read_text()
        assert "HTTP 500" in results, results[:2000]  # the failure is recorded, without the key
        assert_no_key_in_files(run_dir)
    assert EchoHandler.seen and all(a == f"Bearer {KEY}" for a in EchoHandler.seen)
    assert_no_key_in_files(world["base"])


def test_no_key_in_web_api_error_body(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from imagent.api import Workspace
    from imagent.server import create_app

    monkeypatch.setenv(KEY_ENV, KEY)
    EchoHandler.seen.clear()
    ws = Workspace.from_config(world["config"])
    client = TestClient(create_app(ws, world["index"]), base_url="http://127.0.0.1:8765",
                        raise_server_exceptions=False)
    for role_model in ("json400", "text500", "other401"):
        ws.settings.roles["default"] = role_model
        ws.parts.roles = None  # roles are built lazily from the settings
        res = client.post("/api/search", json={"text": "make it blue", "method": "cirevl", "reference": "img00"})
        assert res.status_code == 502, res.text
        assert KEY not in res.text and "model call failed" in res.text
    assert len(EchoHandler.seen) == 3 and all(a == f"Bearer {KEY}" for a in EchoHandler.seen)
    assert_no_key_in_files(world["base"])


def test_chat_and_tool_errors_are_redacted_on_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagent.models.base import ChatError
    from imagent.tools.base import ToolError

    monkeypatch.setenv(KEY_ENV, KEY)
    register_env_names([KEY_ENV])
    for exc_type in (ChatError, ToolError):
        exc = exc_type(f"HTTP 403: quota exceeded for {KEY}; Authorization: Bearer {KEY[:20]}")
        assert KEY not in str(exc) and KEY[:20] not in str(exc) and "HTTP 403" in str(exc)


def test_a_key_cut_before_masking_is_still_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text cut at a length limit before it was masked must not leave most of a key (issue 25, item 5)."""
    from imagent.core.redact import mask_secrets

    monkeypatch.setenv(KEY_ENV, KEY)
    register_env_names([KEY_ENV])
    for cut in (12, 16, 21, len(KEY) - 1):
        text = ("x" * 480 + f" you sent {KEY} as your key")[: 490 + cut]
        assert KEY[:cut] not in redact(text) and KEY[:cut] not in mask_secrets(text), cut
    assert KEY[:11] in redact("x " + KEY[:11])  # shorter than 12 characters: too common to mask
    # model answers: known values masked, credential-shaped ordinary text kept
    assert mask_secrets(f"set key=value and token=abc; {KEY}") == "set key=value and token=abc; ***"
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "zz-unregistered-0123456789")  # *_API_KEY counts unregistered
    assert mask_secrets("echo zz-unregistered-0123456789") == "echo ***"


def test_set_without_equals_keeps_its_hint() -> None:
    from imagent.cli.common import explain
    from imagent.core.config import ConfigError, load_settings

    with pytest.raises(ConfigError) as err:
        load_settings(None, sets=["noequals"])
    msg, _hint = explain(err.value)
    assert "dotted.key=value" in msg and "noequals" in msg and "***" not in msg, msg
