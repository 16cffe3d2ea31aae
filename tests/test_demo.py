"""`imagent demo` end to end, as a user runs it: the installed entry point, real photos, real MiniLM and
the real Qwen 0.5B (in-process llama.cpp), offline."""

from __future__ import annotations

import json
import os
import subprocess

import pytest


@pytest.mark.real_model
def test_demo_runs_offline_and_prints_rankings_and_traces(tmp_path, offline_model_cache):
    env = dict(os.environ, IMAGENT_CACHE_DIR=str(offline_model_cache), IMAGENT_DATA_DIR=str(tmp_path / "data"),
               HF_HUB_OFFLINE="1")
    env.pop("IMAGENT_CONFIG", None)
    out = subprocess.run(["imagent", "demo", "--json"], capture_output=True, text=True, env=env, timeout=600,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    text = data["text_query"]
    assert text["results"][0]["id"] == "chelsea"  # the cat photo
    composed = data["composed_query"]
    steps = {s["name"]: s for s in composed["trace"]["steps"]}
    assert steps["edit_description"]["model_calls"] == 1
    assert steps["edit_description"]["outputs"]["target_description"]
    assert all(r["id"] != "motorcycle_left" for r in composed["results"])  # the reference is excluded
    assert len(composed["results"]) == 3

    human = subprocess.run(["imagent", "demo"], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert human.returncode == 0, human.stderr[-2000:]
    assert "composed query" in human.stdout and "trace" in human.stdout
