"""`imagent eval --ray local`: queries run as Ray actor tasks on a real local cluster, with the same results,
one record per query in results.jsonl, and the same metrics as a local run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")

STAMPS = Path(__file__).resolve().parents[3] / "shared" / "data" / "stamps"


@pytest.mark.real_model
def test_eval_on_a_local_ray_cluster_equals_the_local_run(tmp_path):
    env = {**os.environ, "IMAGENT_CACHE_DIR": str(tmp_path / "cache")}
    base = [sys.executable, "-m", "imagent.cli.main", "eval", "stamps", "--split", "tir", "--method", "caption",
            "--images-root", str(STAMPS), "--limit", "6", "--sample", "first", "--index", str(tmp_path / "index"),
            "--json"]
    runs = {}
    for name, extra in (("local", []), ("ray", ["--ray", "local", "--workers", "2"])):
        out = subprocess.run([*base, "--run-dir", str(tmp_path / name), *extra], env=env, capture_output=True,
                             text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        lines = [json.loads(x) for x in (tmp_path / name / "results.jsonl").read_text().splitlines() if x.strip()]
        runs[name] = {r["qid"]: r for r in lines}
        assert len(lines) == 6 and all(r["error"] is None for r in lines)
    assert runs["ray"].keys() == runs["local"].keys()
    for qid, local in runs["local"].items():
        remote = runs["ray"][qid]
        # The query is encoded in another process: the same cosines up to float rounding, so only
        # near-ties deep in the list may swap.
        assert remote["ids"][:10] == local["ids"][:10], qid
        assert np.allclose(remote["scores"], local["scores"], atol=1e-5), qid
    m_local = json.loads((tmp_path / "local" / "metrics.json").read_text())
    m_ray = json.loads((tmp_path / "ray" / "metrics.json").read_text())
    assert m_ray.keys() == m_local.keys()
