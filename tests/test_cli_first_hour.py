"""The first hour with the CLI (issue 15): errors that say what to do, results with paths, the live status
line and call estimates, model presets, and blind models that never describe what they cannot see.

Real parts: the stamps gallery in caption mode with the real MiniLM (the session fixture), the scripted
chat model for the LLM roles (counts and prompts, not quality)."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from imagent.cli.main import app
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def index(stamps_gallery) -> str:
    return str(stamps_gallery.root)


@pytest.fixture
def scripted_sets(tmp_path) -> list[str]:
    """--set flags that route every role to a scripted model answering "a red bird"."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": "a red bird"}))
    return ["--set", "models.s.backend=scripted", "--set", f"models.s.model={script}", "--set", "roles.default=s"]


def no_model_loads(monkeypatch) -> None:
    """Make any encoder or chat model load fail loudly: checks must come before them."""
    import imagent.api
    import imagent.index.parts

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded before the argument check")

    for name in ("build_text_embedder", "build_dual_encoder"):
        monkeypatch.setattr(imagent.index.parts, name, boom)  # the composition's models load through these
    monkeypatch.setattr(imagent.api, "build_chat_model", boom)


# ----------------------------------------------------------------------------- errors that say what to do


def test_set_typo_names_the_method_class_and_its_keys(runner, index, monkeypatch):
    no_model_loads(monkeypatch)
    out = runner.invoke(app, ["search", "x", "-m", "imagescope", "--set", "tua=0.2", "--index", index])
    assert out.exit_code == 2
    assert "methods.imagescope.tua: unknown key (did you mean 'tau'?)" in out.output
    assert "valid keys of ImageScopeConfig:" in out.output and "alpha" in out.output
    assert "errors.pydantic.dev" not in out.output and "validation error for" not in out.output


def test_set_unknown_section_blames_the_section_not_the_method(runner, index, monkeypatch):
    no_model_loads(monkeypatch)
    out = runner.invoke(app, ["search", "x", "--set", "nosuch.key=1", "--index", index])
    assert out.exit_code == 2
    assert "'nosuch' is not a settings section, a method or a benchmark" in out.output
    assert "ClipConfig" not in out.output
    near = runner.invoke(app, ["search", "x", "--set", "dual_encodr.device=cpu", "--index", index])
    assert "did you mean 'dual_encoder'?" in near.output


def test_settings_typo_lists_the_entry_keys_and_partial_entries_work(runner):
    out = runner.invoke(app, ["config", "show", "--set", "dual_encoder.batch_sise=3"])
    assert out.exit_code == 2
    assert "dual_encoder.batch_sise: unknown key (did you mean 'batch_size'?)" in out.output
    assert "valid keys of EncoderConfig" in out.output
    assert "Field required" not in out.output  # a partial entry changes the default one
    ok = runner.invoke(app, ["config", "show", "--json", "--set", "dual_encoder.batch_size=3",
                             "--set", "models.offline.n_ctx=8192"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["dual_encoder"]["batch_size"] == 3 and data["dual_encoder"]["backend"] == "caption"
    assert data["models"]["offline"]["n_ctx"] == 8192 and data["models"]["offline"]["backend"] == "llama.cpp"


def test_method_and_reference_did_you_mean_before_any_model_loads(runner, index, monkeypatch):
    no_model_loads(monkeypatch)
    bad = runner.invoke(app, ["search", "x", "-m", "cirvel", "--index", index])
    assert bad.exit_code == 2 and "did you mean 'cirevl'?" in bad.output
    needs_ref = runner.invoke(app, ["search", "make it red", "-m", "cirevl", "--index", index])
    assert needs_ref.exit_code == 2
    assert "needs a reference image" in needs_ref.output and "add --ref IMAGE" in needs_ref.output
    ref = runner.invoke(app, ["search", "x", "-m", "cirevl", "--ref", "animals__birds__pengiun", "--index", index])
    assert ref.exit_code == 2 and "did you mean 'animals__birds__penguin'?" in ref.output
    assert "file not found" not in ref.output.lower()


def test_json_errors_are_json(runner, index, monkeypatch):
    no_model_loads(monkeypatch)
    out = runner.invoke(app, ["search", "x", "-m", "cirevl", "--index", index, "--json"])
    assert out.exit_code == 2
    payload = json.loads(out.stdout)
    assert "needs a reference image" in payload["error"] and "--ref" in payload["hint"]
    missing = runner.invoke(app, ["search", "x", "--index", str(Path(index) / "nope"), "--json"])
    assert "no gallery index" in json.loads(missing.stdout)["error"]
    bad = runner.invoke(app, ["config", "show", "--json", "--set", "dual_encoder.batch_size=0"])
    err = json.loads(bad.stdout)
    assert err["error"].startswith("invalid configuration") and "dual_encoder.batch_size" in err["error"]


# ----------------------------------------------------------------------------- results


def test_results_show_paths_and_score_meaning_and_paths_only_output(runner, index):
    human = runner.invoke(app, ["search", "a penguin", "-m", "caption", "--index", index, "-k", "3"])
    assert human.exit_code == 0, human.output
    # a wide terminal's path column, or a narrow one's photo block with the path on its own line
    assert ("path" in human.stdout or "photo" in human.stdout) and "penguin.jpg" in human.stdout.replace(
        "\n", "").replace("│", "")
    assert "score: cosine similarity of the query text and the image's captions" in " ".join(human.stdout.split())
    only = runner.invoke(app, ["search", "a penguin", "-m", "caption", "--index", index, "-k", "3", "--paths"])
    lines = only.stdout.splitlines()
    assert len(lines) == 3 and all(Path(p).is_absolute() and Path(p).is_file() for p in lines)
    assert "penguin" in Path(lines[0]).name
    assert "cosine" in runner.invoke(app, ["search", "--help"]).stdout


def test_places_dates_and_short_paths():
    from datetime import datetime

    from imagent.api import record_place
    from imagent.cli.render import short_path

    rec = ImageRecord(id="a", path="/x/a.jpg", latitude=48.8584, longitude=2.2945,
                      taken_time=datetime(2024, 5, 1, 12, 0))
    assert record_place(rec) == "48.85840, 2.29450"
    rec.address = "Paris"
    assert record_place(rec) == "Paris"
    assert record_place(ImageRecord(id="b", path="")) is None
    long = "/very/long/folder/name/that/goes/on/and/on/and/on/holiday/IMG_0001.jpg"
    shown = short_path(long, limit=30)
    assert shown.endswith("holiday/IMG_0001.jpg") and shown.startswith("…/") and len(shown) <= 30


# ----------------------------------------------------------------------------- estimates, status line, cap


def test_estimates_follow_the_settings():
    from imagent.methods.base import get_method

    def est(name, **params):
        cls = get_method(name)
        return cls.estimate_calls(cls.Config(**params))

    assert est("clip") == 0 and est("caption") == 0 and est("cirevl") == 1
    assert est("imagescope", stages=[1]) == 1
    assert est("imagescope", k=5, alpha=2) == 1 + 1 + 5 * 3 + 2
    assert est("xr", k_prime=10) == 3 + 10 * 2 * 3
    assert est("xr", k_prime=10, batch_questions=True) == 3 + 10 * 2
    assert est("xr", text_questions=False, visual_questions=False) == 2
    assert est("tacir", tool_policy="none") == 1 and est("tacir", max_iterations=3) == 3


def test_status_line_follows_the_trace(make_context, scripted, stamps_gallery):
    from imagent.cli.progress import SearchStatus
    from imagent.methods.baselines import CIReVL

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    status = SearchStatus(console, "cirevl", 1)
    ctx = make_context(scripted(default="a red bird"))
    ref = stamps_gallery.record("animals__birds__penguin")
    with status:
        CIReVL(ctx).search(Query(text="make it red", reference=ref), top_k=3, trace=Trace(listeners=[status]))
    assert status.calls == 1 and status.step == "retrieve"
    assert "cirevl: retrieve | model calls 1/~1" in status.line()
    assert "model calls" in buf.getvalue()  # drawn on a terminal
    quiet = io.StringIO()
    with SearchStatus(Console(file=quiet, force_terminal=False), "clip", 0):
        pass
    assert quiet.getvalue() == ""  # pipes and logs get no live line


def test_search_prints_the_estimate_and_passes_the_cap(runner, index, scripted_sets, monkeypatch):
    seen: list[Trace] = []
    from imagent.api import Workspace

    original = Workspace.run

    def spy(self, *a, trace=None, **k):
        seen.append(trace)
        return original(self, *a, trace=trace, **k)

    monkeypatch.setattr(Workspace, "run", spy)
    out = runner.invoke(app, ["search", "make it red", "-m", "cirevl", "--ref", "animals__birds__penguin",
                              "--index", index, "--max-calls", "5", "--no-server", *scripted_sets])
    assert out.exit_code == 0, out.output
    assert "cirevl: up to ~1 model call at the current settings, capped at 5" in out.output
    assert seen and seen[0].max_calls == 5 and seen[0].listeners


# ----------------------------------------------------------------------------- blind models


def test_blind_model_never_describes_an_image(make_context, scripted):
    from imagent.methods.base import BlindDescriptionError

    blind = scripted(default="a large colourful painting of a woman")
    ctx = make_context(blind)
    trace = Trace()
    bare = ImageRecord(id="cat", path="/photos/IMG_1.jpg")
    with trace.activate(), trace.step("describe"), pytest.raises(BlindDescriptionError, match="vision model"):
        ctx.describe_image(bare)
    named = ImageRecord(id="cat2", path="/photos/cats/cat_on_sofa.jpg", derived_text="cats cat on sofa")
    with trace.step("describe2") as step:
        assert ctx.describe_image(named) == "cats cat on sofa"
    assert any("derived text" in n for n in step.notes)
    assert blind.calls == []  # the blind model was never asked
    seeing = scripted(default="a tabby cat on a sofa", sees_images=True)
    assert make_context(seeing).describe_image(bare) == "a tabby cat on a sofa"


def test_clip_does_not_fuse_a_reference_that_adds_nothing(make_context, scripted):
    from imagent.methods.baselines import ClipBaseline

    ctx = make_context(scripted(default="x"))
    plain = ClipBaseline(ctx).search(Query(text="a penguin"), top_k=5)
    blank = ImageRecord(id="ext", path="/tmp/unknown.jpg")
    fused = ClipBaseline(ctx).search(Query(text="a penguin", reference=blank), top_k=5)
    step = fused.trace.steps[0]
    assert step.outputs["fused_with_reference"] is None
    assert any("adds nothing" in n for n in step.notes)
    assert fused.ranking.ids == plain.ranking.ids


# ----------------------------------------------------------------------------- presets


def test_presets_list_and_use_merges_into_the_config(runner, tmp_path):
    listed = runner.invoke(app, ["models", "presets", "--json"])
    assert listed.exit_code == 0
    presets = {p["name"]: p for p in json.loads(listed.stdout)}
    assert {"clip-b32", "clip-l14", "siglip-so400m", "paper-vllm", "offline"} <= set(presets)
    assert "MB" in presets["clip-b32"]["downloads"] and "GB" in presets["paper-vllm"]["downloads"]
    cfg = tmp_path / "imagent.toml"
    cfg.write_text('index = "~/gal"\n\n[methods.imagescope]\ntau = 0.3\n')
    used = runner.invoke(app, ["models", "use", "paper-vllm", "--to", str(cfg)])
    assert used.exit_code == 0, used.output
    assert "Qwen/Qwen2.5-VL-7B-Instruct" in used.stdout and str(cfg) in used.stdout.replace("\n", "")
    data = tomllib.loads(cfg.read_text())
    assert data["index"] == "~/gal" and data["methods"]["imagescope"]["tau"] == 0.3  # kept
    assert data["dual_encoder"]["model"] == "openai/clip-vit-large-patch14"
    assert data["models"]["vllm"]["vision"] is True and data["roles"]["default"] == "vllm"
    assert (tmp_path / "imagent.toml.bak").read_text().startswith('index = "~/gal"')
    check = runner.invoke(app, ["models", "--json", "--config", str(cfg)])
    rows = {r["part"]: r for r in json.loads(check.stdout)}
    assert rows["dual_encoder"]["sees_pixels"] and rows["role.verifier"]["sees_pixels"]
    assert rows["role.verifier"]["model"] == "vllm"
    bad = runner.invoke(app, ["models", "use", "clip-b23", "--to", str(cfg)])
    assert bad.exit_code == 2 and "did you mean 'clip-b32'?" in bad.output


def test_default_setup_says_no_role_sees_pixels(runner):
    out = runner.invoke(app, ["models", "--json"])
    rows = {r["part"]: r for r in json.loads(out.stdout)}
    assert not rows["dual_encoder"]["sees_pixels"] and not rows["role.captioner"]["sees_pixels"]
    human = runner.invoke(app, ["models"])
    assert "roles that see pixels: none" in human.stdout


def test_offline_preset_load_names_the_preset_and_how_to_install(runner, tmp_path, index, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty hub cache: the weights are not here
    cfg = tmp_path / "imagent.toml"
    assert runner.invoke(app, ["models", "use", "clip-b32", "--to", str(cfg)]).exit_code == 0
    out = runner.invoke(app, ["search", "a cat", "--index", index, "--config", str(cfg), "--json", "--no-server"])
    assert out.exit_code == 2
    err = json.loads(out.stdout)
    assert "openai/clip-vit-base-patch32" in err["error"]
    assert "preset 'clip-b32'" in err["hint"] and "hf download openai/clip-vit-base-patch32" in err["hint"]
    assert "HF_HUB_OFFLINE=1" in err["hint"]


def test_offline_model_assembly_says_what_it_is_doing(tmp_path, monkeypatch, capsys):
    import hashlib

    from imagent.models import offline

    parts = [tmp_path / "p1", tmp_path / "p2"]
    parts[0].write_bytes(b"GGUF" + b"a" * 100)
    parts[1].write_bytes(b"b" * 50)
    joined = parts[0].read_bytes() + parts[1].read_bytes()
    import dataclasses

    monkeypatch.setattr(offline, "part_paths", lambda _model: parts)
    fake = dataclasses.replace(offline.QWEN_05B, sha256=hashlib.sha256(joined).hexdigest(), size=len(joined))
    path = offline.ensure_offline_model(tmp_path / "cache", fake)
    assert path.read_bytes() == joined
    err = capsys.readouterr().err
    assert "assembling the offline chat model" in err and str(path) in err and "ready" in err
    offline.ensure_offline_model(tmp_path / "cache", fake)
    assert capsys.readouterr().err == ""  # once only
