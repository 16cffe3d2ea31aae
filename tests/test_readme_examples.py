"""Every example in the README runs as written (issue 15): the fenced ``bash`` commands in a shell, the
``python`` blocks in Python, and the ``toml`` blocks validate as configuration.

The commands run in a temporary working folder laid out as they assume: ``~/Pictures`` (a few uncaptioned
photos and a portrait for the people examples) with ``caps.jsonl`` (captions for them), ``data/captions.jsonl``
(a captioned manifest), ``dress.jpg``, ``circo/val.json`` with ``my_submission.json``, and ``../shared`` (the
stamps). The index is ``$IMAGENT_INDEX``,
and the config file ``$IMAGENT_CONFIG`` routes every chat role to a scripted model, so LLM examples cost no model
time; the real MiniLM does the encoding and ``imagent models --check`` loads the real offline Qwen too. A command
that cannot run here (installs, the test suite, a server that runs until stopped) is listed in ``SKIP`` with
the reason; any other command, including ones added to the README later, must run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("IMAGENT_SHARED", REPO.parent / "shared"))
README = REPO / "README.md"

# Commands (by how they start) that are not run here, and why.
SKIP: dict[str, str] = {
    "pip install": "installs packages",
    "python -m pytest": "the test suite itself",
    "imagent demo": "tests/test_demo.py runs it and the commands it prints (real Qwen, minutes)",
    "imagent models use offline-1.5b": "joins the 1.1 GB GGUF from the offline-1.5b extra's packages; "
                                       "tests/models/test_offline.py runs the command on small fake parts",
    "imagent serve": "a server that runs until stopped; tests/test_demo.py starts it and waits for its URL",
    "python benchmarks/pixels.py": "a script of the repository (run from a clone); tests/index/test_pixels.py runs "
                                   "the camera-folder path on 16 stamps",
    "imagent index ~/camera": "the 627-photo camera folder of the command before (benchmarks/pixels.py runs it)",
    'imagent search "birds" --index ~/camera': "the camera folder's index (benchmarks/pixels.py runs it)",
}

PENGUIN = "animals__birds__penguin"
PICTURES = ["animals__mammals__cats__tiger", "food__fruit__apple_red", "animals__amphibians__frog"]


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def bash_commands(text: str) -> list[str]:
    out = []
    for block in fenced(text, "bash"):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def skipped(command: str) -> str | None:
    return next((why for prefix, why in SKIP.items() if command.startswith(prefix)), None)


def test_readme_has_examples_and_skips_only_what_it_must():
    text = README.read_text(encoding="utf-8")
    commands = bash_commands(text)
    assert any(c.startswith("imagent search") for c in commands)
    assert any(c.startswith("imagent eval") for c in commands)
    assert all(c.split()[0] in {"imagent", "pip", "python"} for c in commands), commands
    assert fenced(text, "python") and fenced(text, "toml")


def test_readme_toml_examples_are_valid_configuration(tmp_path):
    from imagent.core.config import load_settings

    for n, block in enumerate(fenced(README.read_text(encoding="utf-8"), "toml")):
        path = tmp_path / f"example{n}.toml"
        path.write_text(block)
        tomllib.loads(block)
        load_settings(path)  # raises ConfigError on an unknown key or a bad value


def _stamp(stamps: Path, stem: str) -> Path:
    found = list((stamps / "images").rglob(f"{stem}.*")) or list(stamps.rglob(f"{stem}.*"))
    assert found, stem
    return found[0]


@pytest.fixture
def workdir(tmp_path, stamps_dir, offline_model_cache):
    """The folder layout and environment the README's commands assume."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "Pictures").mkdir(parents=True)
    (work / "data" / "images").mkdir(parents=True)
    (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)  # ../shared from the working folder
    captions = {json.loads(x)["id"]: json.loads(x) for x in (stamps_dir / "captions.jsonl").read_text().splitlines()}
    caps = []
    for stem in PICTURES:
        src = _stamp(stamps_dir, stem)
        shutil.copyfile(src, home / "Pictures" / src.name)
        caps.append({"file": src.name, "caption": captions[stem]["caption"]})  # named relative to ~/Pictures
    shutil.copyfile(REPO / "tests" / "data" / "faces" / "obama.jpg", home / "Pictures" / "portrait.jpg")  # a face
    (work / "caps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in caps))
    rows = []
    for stem in [PENGUIN, *list(captions)[:9]]:
        src = _stamp(stamps_dir, stem)
        shutil.copyfile(src, work / "data" / "images" / src.name)
        rows.append({"id": stem, "file": f"images/{src.name}", "caption": captions[stem]["caption"]})
    (work / "data" / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copyfile(_stamp(stamps_dir, list(captions)[20]), work / "dress.jpg")
    (work / "instance.json").write_text(json.dumps({  # `imagent oscar solve instance.json`
        "gallery": ["a", "b", "c", "d"], "positives": ["a", "b"],
        "retrievals": [{"id": "r1", "tool": "image", "query": "q", "polarity": "+", "k": 2, "results": ["a", "c"]},
                       {"id": "r2", "tool": "caption_text", "query": "q", "polarity": "+", "k": 2,
                        "results": ["b", "d"]},
                       {"id": "r3", "tool": "image", "query": "not x", "polarity": "-", "k": 1, "results": ["c"]}]}))
    (work / "circo").symlink_to(SHARED / "data" / "benchmarks" / "circo", target_is_directory=True)
    shutil.copyfile(SHARED / "data" / "benchmarks" / "circo" / "submission_val.json", work / "my_submission.json")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [["answer with yes or no|true or false", "yes"]],
                                  "default": "a red sleeveless dress"}))
    config = tmp_path / "imagent.toml"
    config.write_text(f'[models.s]\nbackend = "scripted"\nmodel = "{script}"\n\n[roles]\ndefault = "s"\n')
    env = dict(os.environ, HOME=str(home), IMAGENT_INDEX=str(tmp_path / "index"), IMAGENT_CONFIG=str(config),
               IMAGENT_CACHE_DIR=str(offline_model_cache), IMAGENT_DATA_DIR=str(tmp_path / "data"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               COLUMNS="200")
    return {"work": work, "env": env, "config": config}


@pytest.mark.real_model
def test_readme_bash_and_python_examples_run_as_written(workdir):
    text = README.read_text(encoding="utf-8")
    work, env, config = workdir["work"], workdir["env"], workdir["config"]
    ran = []
    for command in bash_commands(text):
        if skipped(command):
            continue
        before = config.read_text()
        out = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"README example failed: {command}\n{out.stdout[-1500:]}\n{out.stderr[-3000:]}"
        if command.startswith("imagent models use"):
            # It wrote the preset into the config file; the later examples run on the offline setup again.
            assert config.read_text() != before and "dual_encoder" in config.read_text()
            config.write_text(before)
        ran.append(command)
    assert any(c.startswith("imagent search") and "--ref" in c for c in ran)
    assert any(c.startswith("imagent eval") for c in ran) and any(c.startswith("imagent index") for c in ran)
    for block in fenced(text, "python"):
        out = subprocess.run([sys.executable, "-c", block], cwd=work, env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, f"README python example failed:\n{block}\n{out.stderr[-3000:]}"
