"""One request path: the CLI (in process and through a running server), the web server, the Python API and the
evaluation runner prepare a search through ``Workspace.prepare`` and run it through ``Workspace.run``, stated as
one :class:`~imagent.api.SearchRequest`; a search validates its method's config once, an eval run once for all its
queries. The same query through each of them gives the same ranking and the same trace shape."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from imagent.api import PreparedSearch, SearchRequest, Workspace
from imagent.cli.main import app
from imagent.core.trace import Trace
from imagent.core.types import Ranking, Result
from imagent.eval.records import RunFolder
from imagent.eval.runner import RunSpec, run_eval
from imagent.methods.base import get_method
from imagent.server import create_app
from imagent.server.discovery import remove_discovery, write_discovery

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
    prepared = ws.prepare(SearchRequest(TEXT, method=METHOD, top_k=TOP_K, reference=REF, params={"max_tokens": 64}))
    assert recorded["validations"] == 1
    assert prepared.warnings == [] and prepared.estimate == 1  # the preflight and the estimate: no new validation
    result = ws.run(prepared, Trace())
    assert result.ranking.ids and REF not in result.ranking.ids
    assert recorded["validations"] == 1  # the method was built, checked and run on the one validated config
    assert prepared.method is prepared.method and prepared.method.config.max_tokens == 64


def test_the_request_model_is_one_contract_for_python_and_json(sets, stamps_gallery):
    from pydantic import ValidationError

    from imagent.core.types import ImageRecord, Query

    req = SearchRequest("a penguin", method="caption", top_k=3, index=stamps_gallery.root)
    assert (req.text, req.task, req.uses_method) == ("a penguin", "tir", True)
    body = req.wire()  # what the CLI sends a server: every field but the local ones, as JSON
    assert "index" not in body and "query" not in body and body["top_k"] == 3
    assert SearchRequest.model_validate(body) == req.model_copy(update={"index": None})
    # JSON never builds a record or a query (a client must not name a file that way)
    for bad in ({"text": "x", "reference": {"id": "a", "path": "/etc/passwd"}},
                {"text": "x", "query": {"text": "x"}}, {"text": "x", "top_k": 0}, {"text": ""}):
        with pytest.raises(ValidationError):
            SearchRequest.model_validate(bad)
    assert SearchRequest(reference=ImageRecord("a", "/x.jpg")).task == "cir"
    assert SearchRequest(query=Query(text="x", reference=ImageRecord("a", ""))).task == "cir"
    with pytest.raises(ValidationError, match="lone surrogate"):
        SearchRequest("\ud800")
    # a keyword that is no field is a typo, not something to ignore
    with pytest.raises(TypeError, match="metod"):
        Workspace.from_config(sets=sets).search("x", metod="clip")


def test_the_server_chooses_its_index_and_bounds_the_request(sets, tmp_path):
    ws = Workspace.from_config(sets=sets)
    client = TestClient(create_app(ws), base_url="http://127.0.0.1:8765")
    other = tmp_path / "elsewhere"
    res = client.post("/api/search", json={"text": "a penguin", "method": "clip", "top_k": 3, "index": str(other)})
    assert res.status_code == 200 and not other.exists()  # the body's index is not the server's to take
    for body, field in (({"text": "a", "top_k": 201}, "top_k"), ({"text": "a", "where": "x" * 2001}, "where"),
                        ({"text": "a", "like": "\ud800"}, "like"), ({"text": "a", "method": "m" * 101}, "method")):
        res = client.post("/api/search", content=json.dumps(body).encode(),  # ASCII JSON: "\\ud800" as sent
                          headers={"Content-Type": "application/json"})
        assert res.status_code == 422 and res.json()["detail"][0]["loc"] == ["body", field], (body, res.text)


# --------------------------------------------------------------------------- the same query everywhere

# (method, split, query text, reference): a method that calls no model, and one whose every call is scripted
PARITY = [("clip", "tir", "a penguin", None),
          ("cirevl", "cir", "make it a flamingo", "animals__birds__penguin")]


@pytest.fixture(scope="module")
def site(tmp_path_factory, stamps_dir):
    """A small gallery in the stamps benchmark's layout (the birds among the stamps), one query per method, and
    the settings every interface gets (the scripted chat model on every role)."""
    base = tmp_path_factory.mktemp("parity")
    gallery = base / "gallery"
    (gallery / "images").mkdir(parents=True)
    rows = [json.loads(line) for line in (stamps_dir / "captions.jsonl").read_text().splitlines()]
    birds = [r for r in rows if r["category"] == "animals/birds"]
    for r in birds:
        shutil.copyfile(stamps_dir / r["file"], gallery / r["file"])
    (gallery / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in birds))
    queries = [{"pairid": f"q-{method}", "task": task, "reference": ref, "caption": text,
                "target_hard": "animals__birds__pink_flamingo", "target_soft": {"animals__birds__pink_flamingo": 1}}
               for method, task, text, ref in PARITY]
    (base / "queries.json").write_text(json.dumps(queries))
    script = base / "script.json"
    script.write_text(json.dumps({"default": "a pink flamingo standing in water"}))
    sets = [f"cache_dir={base / 'cache'}", "cache_calls=false", "models.s.backend=scripted",
            f"models.s.model={script}", "roles.default=s"]
    return {"base": base, "gallery": gallery, "queries": base / "queries.json", "index": base / "index",
            "sets": sets, "birds": len(birds)}


def _shape(trace: dict) -> list:
    """What a trace did, without its timings: the method, each step's name, output keys and model calls."""
    return [trace["method"], trace["model_calls"],
            [(s["name"], sorted(s["outputs"]), s["model_calls"]) for s in trace["steps"]]]


def _cli(*args: str) -> dict:
    out = CliRunner().invoke(app, ["search", *args, "--json"])
    assert out.exit_code == 0, out.output
    return {**json.loads(out.stdout), "stderr": out.stderr}


@pytest.mark.real_model
def test_the_same_query_ranks_and_traces_alike_through_cli_server_api_and_eval(site, serve_app, monkeypatch):
    """MiniLM (caption mode) on the stamps' birds; cirevl's calls answered by the scripted backend."""
    counted = {"prepare_method": 0, "prepare": 0, "built": 0}
    for name in counted:
        original = getattr(Workspace, name if name != "built" else "_build_method")

        def counting(self, *a, _original=original, _name=name, **k):
            counted[_name] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(Workspace, name if name != "built" else "_build_method", counting)

    index, sets = site["index"], site["sets"]
    for method, task, text, ref in PARITY:
        # eval: the benchmark's query through the runner (it builds the index the others search)
        run_dir = site["base"] / f"run-{method}"
        before = dict(counted)
        run_eval(Workspace.from_config(sets=sets), RunSpec("stamps", method, split=task, annotations=site["queries"],
                                                           images_root=site["gallery"], index=index, top_k=TOP_K,
                                                           run_dir=run_dir))
        ran = {k: counted[k] - before[k] for k in counted}
        assert ran == {"prepare_method": 1, "prepare": 1, "built": 1}, ran  # one validation, one method per run
        record = RunFolder(run_dir).results().load()[f"q-{method}"]
        assert record.error is None and record.source == "method"
        seen = {"eval": (record.ids, record.scores, _shape(record.trace))}

        # the Python API
        result = Workspace.from_config(sets=sets).search(text, method=method, top_k=TOP_K, reference=ref,
                                                         index=index)
        seen["api"] = (result.ranking.ids, result.ranking.scores, _shape(result.trace.to_dict()))

        # the CLI, in this process
        args = [text, "-m", method, "-k", str(TOP_K), "--index", str(index), *(["--ref", ref] if ref else [])]
        local = _cli(*args, "--no-server", *[x for s in sets for x in ("--set", s)])
        seen["cli"] = ([r["id"] for r in local["results"]], [r["score"] for r in local["results"]],
                       _shape(local["trace"]))

        # the web server, over real HTTP; then the CLI again, which hands the search to that server
        url = serve_app(create_app(Workspace.from_config(sets=sets), index))
        body = {"text": text, "method": method, "top_k": TOP_K, **({"reference": ref} if ref else {})}
        web = httpx.post(f"{url}/api/search", json=body, timeout=120).json()
        seen["server"] = ([r["id"] for r in web["results"]], [r["score"] for r in web["results"]],
                          _shape(web["trace"]))
        write_discovery(index, "127.0.0.1", int(url.rsplit(":", 1)[1]), None)
        try:
            served = _cli(*args)  # no --set, no --config: the server's settings answer
        finally:
            remove_discovery(index)
        assert "answered by imagent serve" in served["stderr"]
        seen["cli served"] = ([r["id"] for r in served["results"]], [r["score"] for r in served["results"]],
                              _shape(served["trace"]))

        ids, scores, shape = seen["eval"]
        assert len(ids) == TOP_K and (ref is None or ref not in ids)
        assert shape[1] == (1 if method == "cirevl" else 0)  # the scripted call, or none
        for where, (other_ids, other_scores, other_shape) in seen.items():
            assert other_ids == ids, (method, where)
            assert other_scores == pytest.approx(scores, abs=1e-5), (method, where)
            assert other_shape == shape, (method, where)
