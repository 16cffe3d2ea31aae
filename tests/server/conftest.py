"""Fixtures for the web server's tests: a test-only *scripted slow* method (its steps sleep and call the
scripted chat backend, so a long search is fast, deterministic and cancellable), a workspace over the
stamps gallery configured with that backend, and a page in a real headless Chromium (a real uvicorn server on
127.0.0.1 is the root conftest's ``serve_app``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import Field

from imagent.api import Workspace
from imagent.core.config import ChatModelConfig, Settings
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking, Result
from imagent.methods.base import METHODS, Method, MethodConfig
from imagent.models.base import Message
from testkit import chromium_path


class ScriptedSlowConfig(MethodConfig):
    steps: int = Field(3, ge=1, description="agent turns to take")
    delay_s: float = Field(0.2, ge=0.0, description="sleep per turn: stands in for a slow model")
    answer_size: int = Field(2, ge=0)


class ScriptedSlowMethod(Method):
    """NOT a retrieval method: a test double shaped like an agent. Each turn sleeps ``delay_s``, asks the
    scripted reasoner one question and records a ``turn.<n>`` step with the photos it "returned" (the
    first gallery ids), then answers with a set. It exists so the page's streaming, cancel and turn
    rendering are tested quickly and deterministically."""

    name = "scripted_slow"
    tasks = frozenset({"tir", "cir"})
    Config: ClassVar[type[MethodConfig]] = ScriptedSlowConfig
    description = "test double: slow scripted agent turns"

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        return int(getattr(config, "steps", 3))

    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        cfg: ScriptedSlowConfig = self.config  # type: ignore[assignment]
        ids = list(self.ctx.gallery.ids)
        for n in range(1, cfg.steps + 1):
            with trace.step(f"turn.{n}", turn=n) as step:
                time.sleep(cfg.delay_s)
                reply = self.ctx.roles["reasoner"].text([Message.user(f"turn {n}: {query.text}")], max_tokens=16)
                photos = ids[n - 1: n + 2]
                step.outputs.update({"reasoning": reply, "tool": "ImageSearch",
                                     "arguments": {"query": query.text, "top_k": 3},
                                     "observation": f"{len(photos)} photos", "photos": photos})
        ranking = Ranking(ids[:top_k], [1.0 / (i + 1) for i in range(min(top_k, len(ids)))])
        return Result(ranking=ranking, trace=trace, answer_set=ids[: cfg.answer_size])


@pytest.fixture
def scripted_slow(monkeypatch):
    """Registers the test double under the name ``scripted_slow`` for this test only."""
    monkeypatch.setitem(METHODS, ScriptedSlowMethod.name, ScriptedSlowMethod)
    return ScriptedSlowMethod


@pytest.fixture
def scripted_workspace(stamps_gallery, tmp_path, scripted_slow) -> Workspace:
    """The stamps gallery with every role on the scripted chat backend (no LLM is loaded)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [["turn \\d+", "looking for it"]], "default": "ok"}))
    settings = Settings(index=stamps_gallery.root, cache_dir=tmp_path / "cache", cache_calls=False,
                        models={"scripted": ChatModelConfig(backend="scripted", model=str(script))},
                        roles={"default": "scripted"})
    return Workspace(settings)


def _make_png(path: Path, color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (32, 24)) -> Path:
    from PIL import Image

    Image.new("RGB", size, color).save(path)
    return path


@pytest.fixture
def make_png():
    """``make_png(path, color=(r, g, b), size=(w, h))`` writes a real PNG and returns its path."""
    return _make_png


@pytest.fixture
def page():
    """A page in a real headless Chromium; a JavaScript error on it fails the test."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium_path(), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page
        browser.close()
        assert not errors, f"JavaScript errors on the page: {errors}"
