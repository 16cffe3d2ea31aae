"""The eval loop's serial part (issue 44): a run's results log writes each record's line at once (flushed, so a
killed run keeps it) and fsyncs the records that finished together once; the workers build their records' lines."""

from __future__ import annotations

import json
import threading
import time

import pytest

from imagent.eval import records as records_mod
from imagent.eval.records import ResultsLog, RunRecord
from imagent.eval.runner import _answered


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync the results log makes (the call still happens)."""
    calls: list[int] = []
    real = records_mod.os.fsync

    def counted(fd):
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(records_mod.os, "fsync", counted)
    return calls


def test_lines_are_flushed_at_once_and_synced_together(tmp_path, fsyncs):
    path = tmp_path / "results.jsonl"
    with ResultsLog(path) as log:
        log.write([ResultsLog.line(RunRecord(qid=q, ids=["a"])) for q in ("1", "2", "3")])
        assert len(fsyncs) == 1  # three records, one fsync
        log.append({"qid": "4", "ids": ["b"]}, sync=False)
        assert len(fsyncs) == 1
        # written and flushed: a reader (or a run resumed after a kill) sees it before any fsync
        assert [json.loads(x)["qid"] for x in path.read_text().splitlines()] == ["1", "2", "3", "4"]
        log.sync()
        log.sync()  # nothing new: no fsync
        assert len(fsyncs) == 2
        log.append({"qid": "5", "ids": ["c"]}, sync=False)
    assert len(fsyncs) == 3  # the run ends synced
    assert set(ResultsLog(path).load()) == {"1", "2", "3", "4", "5"}


def test_the_log_without_a_with_block_still_syncs_each_append(tmp_path, fsyncs):
    log = ResultsLog(tmp_path / "results.jsonl")
    log.append({"qid": "1", "ids": ["a"]})
    assert len(fsyncs) == 1 and set(log.load()) == {"1"}


def test_records_that_finish_together_share_one_fsync_and_workers_build_the_lines(tmp_path, monkeypatch):
    """While the first record's fsync runs, the other workers finish: their records are written as one batch with
    one fsync (before: one fsync each, in the main thread, holding the log's lock)."""
    done: list[str] = []
    fsyncs: list[int] = []
    real = records_mod.os.fsync

    def slow_first_fsync(fd):
        if not fsyncs:  # the first batch: hold its fsync until every worker has finished
            deadline = time.monotonic() + 10
            while len(done) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
        fsyncs.append(fd)
        real(fd)

    monkeypatch.setattr(records_mod.os, "fsync", slow_first_fsync)
    line_threads: list[str] = []
    real_line = ResultsLog.line

    def line(record):
        line_threads.append(threading.current_thread().name)
        return real_line(record)

    monkeypatch.setattr(ResultsLog, "line", staticmethod(line))
    first = threading.Event()

    def one(item):
        if item != "q0":
            first.wait(10)  # the others finish after the first one
            time.sleep(0.05)
        else:
            first.set()
        done.append(item)
        return RunRecord(qid=item, ids=["a"])

    path = tmp_path / "results.jsonl"
    with ResultsLog(path) as log:
        got = [r.qid for r in _answered(one, ["q0", "q1", "q2", "q3"], 4, log)]
    assert sorted(got) == ["q0", "q1", "q2", "q3"]
    assert len(fsyncs) == 2  # q0 alone, then q1-q3 together
    assert sorted(json.loads(x)["qid"] for x in path.read_text().splitlines()) == ["q0", "q1", "q2", "q3"]
    assert line_threads and threading.main_thread().name not in line_threads


def test_one_worker_syncs_each_record(tmp_path, fsyncs):
    with ResultsLog(tmp_path / "results.jsonl") as log:
        got = [r.qid for r in _answered(lambda q: RunRecord(qid=q, ids=["a"]), ["a", "b", "c"], 1, log)]
    assert got == ["a", "b", "c"] and len(fsyncs) == 3
