"""One preset per paper (ImageScope, X^R, TaCIR, OSCAR, PhotoCraft): valid settings naming each paper's model per
role with the table or section it comes from, listed by ``imagent models presets`` and written by ``models use``."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from imagent.cli.main import app
from imagent.core.config import load_settings
from imagent.models.presets import PAPER_PRESETS, PRESETS

PAPERS = {"paper-imagescope": ("ImageScope", {"captioner": "llava", "reasoner": "Llama-3-8B", "verifier": "paligemma",
                                              "evaluator": "InternVL2-8B"}),
          "paper-xr": ("X^R", {"default": "InternVL3-8B"}),
          "paper-tacir": ("TaCIR", {"default": "gpt-4.1"}),
          "paper-oscar": ("OSCAR", {"planner": "Qwen3-VL-32B", "verifier": "Qwen3-VL-32B"}),
          "paper-photocraft": ("PhotoCraft", {"agent": "Qwen3-VL-32B", "memory": "gpt-4o"})}


def test_each_paper_has_a_preset_with_its_models_per_role_and_sources():
    assert {p.name for p in PAPER_PRESETS} == set(PAPERS)
    for name, (paper, roles) in PAPERS.items():
        preset = PRESETS[name]
        settings = load_settings(None, preset.settings)  # a valid configuration
        assert settings.dual_encoder.model == "openai/clip-vit-large-patch14"
        for role, model in roles.items():
            _entry, cfg = settings.model_for_role(role)
            assert model.lower() in cfg.model.lower(), (name, role, cfg.model)
        source = preset.notes[0]
        assert source.startswith(paper) and re.search(r"(Sec\.|Table|App\.) ?[A-Z0-9]", source), source


def test_presets_are_listed_and_written_with_their_sources(tmp_path):
    listed = CliRunner().invoke(app, ["models", "presets", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert set(PAPERS) <= set(rows)
    assert "Sec. 4.1" in rows["paper-imagescope"]["notes"][0]
    cfg = tmp_path / "imagent.toml"
    used = CliRunner().invoke(app, ["models", "use", "paper-oscar", "--to", str(cfg)])
    assert used.exit_code == 0, used.output
    settings = load_settings(cfg)
    assert settings.model_for_role("planner")[1].model == "Qwen/Qwen3-VL-32B-Instruct"
    assert settings.text_embedder.model == "Qwen/Qwen3-Embedding-8B"


def test_config_methods_marks_each_field_as_the_papers_or_imagents_own():
    out = CliRunner().invoke(app, ["config", "methods", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for name, info in data.items():
        assert set(info["fields"]) == set(info["defaults"]), name
        for field, f in info["fields"].items():
            assert f["origin"] in ("paper", "imagent") and f["source"], (name, field)
            assert f["default"] == info["defaults"][field]
    assert data["imagescope"]["fields"]["tau"]["origin"] == "paper"
    assert "Sec. 4.1" in data["imagescope"]["fields"]["tau"]["source"]
    assert data["photocraft"]["fields"]["theta_conf"]["origin"] == "paper"
    for knob in ("loop_guard", "fallback_k", "tool_mode"):  # the knobs the issue names
        assert data["photocraft"]["fields"][knob]["origin"] == "imagent"
    assert all(f["origin"] == "imagent" for f in data["cirevl"]["fields"].values())
