"""The OpenAI-compatible images-edit backend against a real local HTTP server."""

from __future__ import annotations

import base64
import json

import pytest

from imagent.core.types import ImageRecord
from imagent.tools import ToolError, ToolRejected
from imagent.tools.edit_openai import OpenAIImageEditTool


@pytest.fixture
def source(tmp_path, img):
    p = tmp_path / "ref.jpg"
    p.write_bytes(img.jpeg(size=(40, 20)))
    return ImageRecord(id="ref", path=str(p), captions=["A blue box."])


def tool(server, **options):
    return OpenAIImageEditTool.from_options({"base_url": f"{server.base_url}/v1", **options})


def test_edit_posts_multipart_and_decodes_b64(http_server, img, source, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    out_png = img.png((0, 255, 0), (32, 32))
    http_server.routes["/v1/images/edits"] = img.Reply(
        200, {"Content-Type": "application/json"},
        json.dumps({"data": [{"b64_json": base64.b64encode(out_png).decode()}]}).encode())
    result = tool(http_server, size="1024x1024").edit(source, "paint the box red; keep its shape")
    assert result.data == out_png and result.mime == "image/png" and (result.width, result.height) == (32, 32)
    assert result.provenance.backend == "openai" and result.provenance.extra["model"] == "gpt-image-1"
    assert result.description == "A blue box., edited: paint the box red; keep its shape"
    [req] = http_server.requests
    assert req.method == "POST" and req.headers["authorization"] == "Bearer sk-secret"
    assert req.headers["content-type"].startswith("multipart/form-data")
    body = req.body
    for field, value in (("model", b"gpt-image-1"), ("prompt", b"paint the box red; keep its shape"),
                         ("n", b"1"), ("size", b"1024x1024")):
        assert f'name="{field}"'.encode() in body and value in body
    assert b'name="image"; filename="image.png"' in body and b"\x89PNG" in body  # input re-encoded as PNG


def test_edit_errors(http_server, img, source, monkeypatch):
    R = img.Reply
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ToolError, match=r"\$OPENAI_API_KEY"):
        tool(http_server).edit(source, "x")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    http_server.routes["/v1/images/edits"] = R(400, {"Content-Type": "application/json"},
                                               b'{"error": {"message": "bad key sk-secret"}}')
    with pytest.raises(ToolError) as info:
        tool(http_server).edit(source, "x")
    assert "HTTP 400" in str(info.value) and "sk-secret" not in str(info.value)
    http_server.routes["/v1/images/edits"] = R(200, {"Content-Type": "application/json"},
                                               b'{"data": [{"b64_json": "%%% not base64"}]}')
    with pytest.raises(ToolRejected, match="base64"):
        tool(http_server).edit(source, "x")
    http_server.routes["/v1/images/edits"] = R(
        200, {"Content-Type": "application/json"},
        json.dumps({"data": [{"b64_json": base64.b64encode(b"<html>no</html>").decode()}]}).encode())
    with pytest.raises(ToolRejected, match="not a usable image"):
        tool(http_server).edit(source, "x")
    missing = ImageRecord(id="gone", path=str(source.path) + ".missing")
    with pytest.raises(ToolError, match="cannot read"):
        tool(http_server).edit(missing, "x")


def test_edit_url_answer_is_downloaded_with_the_same_checks(http_server, img, source, monkeypatch):
    R = img.Reply
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    answer = json.dumps({"data": [{"url": f"{http_server.base_url}/out.png"}]}).encode()
    http_server.routes["/v1/images/edits"] = R(200, {"Content-Type": "application/json"}, answer)
    http_server.routes["/out.png"] = R(200, {"Content-Type": "image/png"}, img.png())
    with pytest.raises(ToolRejected, match="non-public"):
        tool(http_server).edit(source, "x")
    result = tool(http_server, allow_private_hosts=True).edit(source, "x")
    assert result.provenance.source == f"{http_server.base_url}/out.png"
