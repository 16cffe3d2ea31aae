"""The discovery file and the CLI's use of a running server (issue 15 item 9): written 0600, trusted only
when its process lives and its port answers, removed by its writer only; a served search is used only
when the server can answer what was asked, and its result is the server's result, rebuilt."""

from __future__ import annotations

import json
import os
import stat

import pytest

pytest.importorskip("fastapi")

from imagent.cli.served import find_server, result_from_payload, served_search_allowed
from imagent.server.discovery import discovery_path, read_discovery, remove_discovery, write_discovery


def test_discovery_file_lifecycle(tmp_path):
    path = write_discovery(tmp_path, "0.0.0.0", 8123, "tok")
    assert path == discovery_path(tmp_path) and stat.S_IMODE(path.stat().st_mode) == 0o600
    info = read_discovery(path)
    assert info["port"] == 8123 and info["host"] == "127.0.0.1" and info["pid"] == os.getpid()
    assert info["url"] == "http://127.0.0.1:8123" and info["token"] == "tok"
    # another server took over the index: this process leaves its file alone
    path.write_text(json.dumps({**info, "pid": info["pid"] + 1}))
    remove_discovery(tmp_path)
    assert path.exists()
    path.write_text(json.dumps(info))
    remove_discovery(tmp_path)
    assert not path.exists()
    assert write_discovery(tmp_path / "missing" / "dir", "127.0.0.1", 1, None) is None  # not writable: skipped


@pytest.mark.parametrize("content", ["", "{", "[]", '{"port": "80", "pid": 1}', '{"port": 80}', "x" * 70000])
def test_broken_discovery_files_are_ignored(tmp_path, content):
    discovery_path(tmp_path).write_text(content)
    assert find_server(tmp_path) is None


def test_a_dead_or_silent_server_is_ignored(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    discovery_path(tmp_path).write_text(json.dumps({"port": port, "pid": 2**22 + 99, "host": "127.0.0.1"}))
    assert find_server(tmp_path) is None  # dead pid
    discovery_path(tmp_path).write_text(json.dumps({"port": port, "pid": os.getpid(), "host": "127.0.0.1"}))
    assert find_server(tmp_path) is None  # live pid, nothing answers


def test_served_search_only_when_the_server_can_answer(monkeypatch, tmp_path):
    for key in [k for k in os.environ if k.upper().startswith("IMAGENT__")]:
        monkeypatch.delenv(key)
    assert served_search_allowed(None, [], "caption", no_server=False)
    assert served_search_allowed(None, ["methods.imagescope.k=5"], "imagescope", no_server=False)
    assert not served_search_allowed(None, [], "caption", no_server=True)
    assert not served_search_allowed(tmp_path / "imagent.toml", [], "caption", no_server=False)
    assert not served_search_allowed(None, ["roles.default=vllm"], "caption", no_server=False)
    assert not served_search_allowed(None, ["methods.xr.k_prime=5"], "caption", no_server=False)
    monkeypatch.setenv("IMAGENT__ROLES__DEFAULT", "vllm")
    assert not served_search_allowed(None, [], "caption", no_server=False)


def test_the_served_result_is_rebuilt_faithfully():
    from imagent.core.trace import CallRecord, Trace
    from imagent.core.types import Ranking, Result

    trace = Trace(method="m", query={"text": "q"})
    with trace.step("retrieve", k=3) as step:
        step.outputs["ranking"] = [["a", 0.5]]
        step.add_call(CallRecord("chat", "reasoner", "scripted", 0.1, 10, 2))
        step.note("a note")
    result = Result(Ranking(["a/b", "c"], [0.9, 0.1]), trace, {"stage1": Ranking(["c"], [1.0])}, answer_set=["c"])
    rows = [{"rank": 1, "id": "a/b", "score": 0.9}, {"rank": 2, "id": "c", "score": 0.1}]
    payload = json.loads(json.dumps({"results": rows, "trace": trace.to_dict(),
                                     "stages": {"stage1": result.stages["stage1"].to_dict()}, "answer_set": ["c"]}))
    back = result_from_payload(payload)
    assert back.ranking.ids == ["a/b", "c"] and back.ranking.scores == [0.9, 0.1]
    assert back.trace.to_dict() == trace.to_dict()
    assert back.stages["stage1"].ids == ["c"] and back.answer_set == ["c"]
    assert back.ranking.cut is None
    # where the matches stop comes back with the rows (the CLI's levels and cut of a served search)
    from imagent.core.types import MatchCut

    cut = MatchCut(strong=0.8, possible=0.5, median=0.2, spread=0.1, photos=40)
    again = result_from_payload({**payload, "answer_set": None, "match_cut": cut.to_dict()})
    assert again.ranking.cut == cut and again.ranking.cut.level(0.9) == "strong"
