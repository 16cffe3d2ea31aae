"""`imagent demo` end to end, as a user runs it: the installed entry point, real photos, real MiniLM and
the real Qwen 0.5B (in-process llama.cpp), offline."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from pathlib import Path

import pytest

from testkit import free_port


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

    # It says where its index is and what to try next, and the next commands work as printed.
    index = data["index"]
    assert index in " ".join(human.stdout.split()) and (Path(index) / "records.sqlite").is_file()
    commands = data["next_commands"]
    assert len(commands) == 3 and all(c in human.stdout for c in commands)
    searches = [c for c in commands if c.startswith("imagent search")]
    assert len(searches) == 2
    for command in searches:
        out = subprocess.run([*shlex.split(command), "--json"], capture_output=True, text=True, env=env,
                             timeout=600, cwd=tmp_path)
        assert out.returncode == 0, (command, out.stderr[-2000:])
        assert json.loads(out.stdout)["results"], command
    serve = [c for c in commands if c.startswith("imagent serve")]
    assert serve == [f"imagent serve --index {shlex.quote(index)}"]
    port = free_port()
    proc = subprocess.Popen([*shlex.split(serve[0]), "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        line = _read_until(proc, "http://", timeout=120)
        assert f"http://127.0.0.1:{port}/" in line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _read_until(proc: subprocess.Popen, marker: str, timeout: float) -> str:
    """The first output line of ``proc`` holding ``marker`` (a thread reads, so a silent process cannot hang us)."""
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if marker in line:
                found.append(line)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found, f"no {marker!r} line within {timeout} s"
    return found[0]
