"""One request path: the CLI, the web server and the Python API prepare a search through
``Workspace.prepare`` and run it through ``Workspace.run``; a search validates its method's config once."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from imagent.api import PreparedSearch, SearchRequest, Workspace
from imagent.cli.main import app
from imagent.core.trace import Trace
from imagent.core.types import Ranking, Result
from imagent.methods.base import get_method
from imagent.server import create_app

TEXT, METHOD, REF, TOP_K = "make it red", "cirevl", "animals__birds__penguin", 5


@pytest.fixture
def sets(tmp_path, stamps_gallery) -> list[str]:
    """Every role on a scripted model; the method's parameters as the request gives them."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": "a red bird"}))
    return [f"index={stamps_gallery.root}", f"cache_dir={tmp_path / 'cache'}", "cache_calls=false",
            "models.s.backend=scripted", f"models.s.model={script}", "roles.default=s"]


@pytest.fixture
def recorded(monkeypatch):
    """Every search prepared (and the config validations of the method's class) while the test runs; searches
    run for real unless ``recorded["stub_run"]`` is set."""
    seen: dict = {"prepared": [], "validations": 0, "stub_run": False}
    original_prepare, original_run = Workspace.prepare, Workspace.run

    def prepare(self, *a, **k):
        prepared = original_prepare(self, *a, **k)
        seen["prepared"].append(prepared)
        return prepared

    def run(self, prepared, trace=None):
        if seen["stub_run"]:
            return Result(ranking=Ranking([], []), trace=trace or Trace())
        return original_run(self, prepared, trace=trace)

    config_cls = get_method(METHOD).Config
    original_validate = config_cls.model_validate.__func__

    def validate(cls, *a, **k):
        seen["validations"] += 1
        return original_validate(cls, *a, **k)

    monkeypatch.setattr(Workspace, "prepare", prepare)
    monkeypatch.setattr(Workspace, "run", run)
    monkeypatch.setattr(config_cls, "model_validate", classmethod(validate))
    return seen


def test_cli_server_and_api_prepare_the_same_search(sets, recorded):
    recorded["stub_run"] = True  # what is prepared is compared, not run
    # the CLI: parameters by --set, the reference by id
    cli_sets = [*sets, f"methods.{METHOD}.max_tokens=64"]
    out = CliRunner().invoke(app, ["search", TEXT, "-m", METHOD, "--ref", REF, "-k", str(TOP_K), "--no-server",
                                   "--json", *[x for s in cli_sets for x in ("--set", s)]])
    assert out.exit_code == 0, out.output
    # the web server: parameters in the request
    ws = Workspace.from_config(sets=sets)
    client = TestClient(create_app(ws), base_url="http://127.0.0.1:8765")
    res = client.post("/api/search", json={"text": TEXT, "method": METHOD, "reference": REF, "top_k": TOP_K,
                                           "params": {"max_tokens": 64}})
    assert res.status_code == 200, res.text
    # the API
    Workspace.from_config(sets=sets).search(TEXT, method=METHOD, top_k=TOP_K, reference=REF,
                                            params={"max_tokens": 64})

    prepared: list[PreparedSearch] = recorded["prepared"]
    assert len(prepared) == 3
    cli, server, api = (p.describe() for p in prepared)
    assert cli == server == api
    assert cli["config"]["max_tokens"] == 64 and cli["exclude"] == [REF] and cli["query"]["reference"]["id"] == REF


def test_a_search_validates_its_config_once(sets, recorded):
    ws = Workspace.from_config(sets=sets)
    prepared = ws.prepare(SearchRequest(TEXT, METHOD, TOP_K, REF, params={"max_tokens": 64}))
    assert recorded["validations"] == 1
    assert prepared.warnings == [] and prepared.estimate == 1  # the preflight and the estimate: no new validation
    result = ws.run(prepared, Trace())
    assert result.ranking.ids and REF not in result.ranking.ids
    assert recorded["validations"] == 1  # the method was built, checked and run on the one validated config
    assert prepared.method is prepared.method and prepared.method.config.max_tokens == 64
