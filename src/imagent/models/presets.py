"""Model presets: a few known setups a user with internet access can switch to in one command.

``imagent models presets`` lists them, ``imagent models use NAME`` writes one into the config file.
Nothing is downloaded when a preset is chosen: the first search or index that needs the weights
fetches them through the libraries' own hub support (transformers / huggingface_hub, with its
progress bar) into the usual Hugging Face cache. A machine without network access gets one message
naming the preset and how to bring its files over (:func:`load_error_hint`).

Download sizes are those of the hub repositories' weight files (safetensors, float32 for CLIP/SigLIP).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagent.core.config import OFFLINE_CHAT_MODEL, OFFLINE_TEXT_EMBEDDER, ConfigError, deep_merge

OFFLINE_15B_MODEL = "offline:qwen2.5-coder-1.5b-instruct"


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    download: str  # what the first use fetches, in words and sizes
    settings: dict[str, Any]  # the config tree it writes (merged into the file's)
    hub_models: tuple[str, ...] = ()  # hub ids fetched on first use (for the offline hint)
    notes: tuple[str, ...] = field(default_factory=tuple)
    offline_model: str = ""  # an offline GGUF (models/offline.py) that `use` assembles before writing


def _hf_dual(model: str) -> dict[str, Any]:
    return {"dual_encoder": {"backend": "hf", "model": model, "device": "auto"}}


PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset(
        "offline",
        "the default: caption mode (MiniLM), the EfficientNet-Lite0 pixel model for photos without captions (labels, "
        "ConSE, looks) and Qwen2.5 0.5B in-process; no chat model sees pixels",
        "nothing (PyPI packages of the offline extra)",
        {"dual_encoder": {"backend": "caption", "model": OFFLINE_TEXT_EMBEDDER},
         "text_embedder": {"backend": "sentence-transformers", "model": OFFLINE_TEXT_EMBEDDER},
         "pixels": {"model": "effnet-lite0"},
         "roles": {"default": "offline"}},
        offline_model=OFFLINE_CHAT_MODEL,
    ),
    Preset(
        "offline-1.5b",
        "caption mode (MiniLM) and Qwen2.5-Coder 1.5B in-process for every chat role: three times the default's "
        "parameters, about 1.6x slower per token",
        "nothing (PyPI packages of the offline-15b extra, 1.1 GB; joined and checked now)",
        {"dual_encoder": {"backend": "caption", "model": OFFLINE_TEXT_EMBEDDER},
         "text_embedder": {"backend": "sentence-transformers", "model": OFFLINE_TEXT_EMBEDDER},
         "models": {"offline-1.5b": {"backend": "llama.cpp", "model": OFFLINE_15B_MODEL}},
         "roles": {"default": "offline-1.5b"}},
        notes=("install its parts first: pip install 'imagent[offline-15b]'",),
        offline_model=OFFLINE_15B_MODEL,
    ),
    Preset(
        "clip-b32",
        "small CLIP (ViT-B/32): content search over pixels on a CPU",
        "openai/clip-vit-base-patch32, about 605 MB",
        _hf_dual("openai/clip-vit-base-patch32"),
        ("openai/clip-vit-base-patch32",),
    ),
    Preset(
        "clip-l14",
        "large CLIP (ViT-L/14), the papers' retrieval encoder; a GPU helps",
        "openai/clip-vit-large-patch14, about 1.7 GB",
        _hf_dual("openai/clip-vit-large-patch14"),
        ("openai/clip-vit-large-patch14",),
    ),
    Preset(
        "siglip-so400m",
        "large SigLIP (So400m/14 at 384 px): stronger zero-shot retrieval; a GPU helps",
        "google/siglip-so400m-patch14-384, about 3.5 GB",
        _hf_dual("google/siglip-so400m-patch14-384"),
        ("google/siglip-so400m-patch14-384",),
    ),
    Preset(
        "paper-vllm",
        "the papers' setup: CLIP ViT-L/14 + Qwen2.5-VL-7B (sees pixels) served by vLLM for every role",
        "openai/clip-vit-large-patch14 (about 1.7 GB) here; Qwen/Qwen2.5-VL-7B-Instruct (about 16.6 GB) "
        "by the vLLM server",
        {**_hf_dual("openai/clip-vit-large-patch14"),
         "models": {"vllm": {"backend": "openai", "base_url": "http://127.0.0.1:8000/v1",
                             "model": "Qwen/Qwen2.5-VL-7B-Instruct", "vision": True, "concurrency": 8}},
         "roles": {"default": "vllm"}},
        ("openai/clip-vit-large-patch14",),
        ("start the server first: vllm serve Qwen/Qwen2.5-VL-7B-Instruct --port 8000",),
    ),
]}


def _served(model: str, port: int, vision: bool = True) -> dict[str, Any]:
    """A model served by vLLM (OpenAI-compatible) on this machine's ``port``."""
    return {"backend": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": model, "vision": vision,
            "concurrency": 8}


def _openai(model: str) -> dict[str, Any]:
    """A model of the OpenAI API (the key in OPENAI_API_KEY)."""
    return {"backend": "openai", "base_url": "https://api.openai.com/v1", "model": model, "vision": True,
            "api_key_env": "OPENAI_API_KEY", "concurrency": 8}


def _paper(name: str, paper: str, summary: str, download: str, encoder: str, models: dict[str, dict[str, Any]],
           roles: dict[str, str], sources: list[str], serve: list[str], extra: dict[str, Any] | None = None,
           hub: tuple[str, ...] = ()) -> Preset:
    """A paper's setup: its models per role, each line of ``sources`` saying which table or section names it
    (or that the choice is imagent's own where the paper names none)."""
    settings = {**_hf_dual(encoder), "models": models, "roles": roles, **(extra or {})}
    notes = (f"{paper}: " + "; ".join(sources), *serve)
    return Preset(name, summary, download, settings, hub or (encoder,), notes)


# One preset per paper: the models each paper reports per role, with where it says so (docs/reproduction.md).
PAPER_PRESETS: list[Preset] = [
    _paper(
        "paper-imagescope", "ImageScope (WWW 2025)",
        "ImageScope's models: CLIP ViT-L/14, captioner LLaVA-v1.6-7B, reasoner Llama-3-8B, verifier PaliGemma-3B, "
        "evaluator InternVL2-8B, each served by vLLM",
        "openai/clip-vit-large-patch14 (about 1.7 GB) here; the four chat models (about 16, 16, 6 and 16 GB) by vLLM",
        "openai/clip-vit-large-patch14",
        {"llava": _served("llava-hf/llava-v1.6-vicuna-7b-hf", 8001),
         "llama3": _served("meta-llama/Meta-Llama-3-8B-Instruct", 8002, vision=False),
         "paligemma": _served("google/paligemma-3b-mix-224", 8003),
         "internvl2": _served("OpenGVLab/InternVL2-8B", 8004)},
        {"default": "llama3", "captioner": "llava", "reasoner": "llama3", "verifier": "paligemma",
         "evaluator": "internvl2"},
        ["VLM CLIP-ViT-L/14, captioner LLaVA-v1.6-7B, reasoner LLaMA3-8B, verifier PaliGemma-3B-mix-224, evaluator "
         "InternVL2-8B (Sec. 4.1, Implementation Details); the LLaVA-v1.6 7B variant (vicuna) and the Instruct "
         "Llama are imagent's reading, the paper names no checkpoint"],
        ["serve each: vllm serve <model> --port 8001..8004 (llava, llama3, paligemma, internvl2)"],
    ),
    _paper(
        "paper-xr", "X^R (2025)",
        "X^R's models: CLIP ViT-L/14 similarity agents and InternVL3-8B for every imagination, question and "
        "verification agent, served by vLLM",
        "openai/clip-vit-large-patch14 (about 1.7 GB) here; OpenGVLab/InternVL3-8B (about 16 GB) by vLLM",
        "openai/clip-vit-large-patch14",
        {"internvl3": {**_served("OpenGVLab/InternVL3-8B", 8000), "temperature": 0.0}},
        {"default": "internvl3"},
        ["dual encoder CLIP-ViT-L/14 (also B/32), InternVL3-8B for imagination and question-based verification, "
         "temperature 0, top-p 1 (Sec. 4.1, Implementation Details); the captioner of C_a is not named: "
         "imagent uses InternVL3-8B"],
        ["start the server first: vllm serve OpenGVLab/InternVL3-8B --port 8000"],
    ),
    _paper(
        "paper-tacir", "TaCIR (2025)",
        "TaCIR's models: CLIP ViT-L/14 and GPT-4.1 (temperature 0) through the OpenAI API",
        "openai/clip-vit-large-patch14 (about 1.7 GB) here; GPT-4.1 is an API (OPENAI_API_KEY)",
        "openai/clip-vit-large-patch14",
        {"gpt41": {**_openai("gpt-4.1"), "temperature": 0.0}},
        {"default": "gpt41"},
        ["default MLLM GPT-4.1 at temperature 0 (Sec. 4, Implementation Details); backbone ViT-L/14 for the "
         "baseline comparison (Sec. 4, Table 1; ViT-B/32 and OpenCLIP ViT-G/14 also reported)"],
        ["export OPENAI_API_KEY first"],
    ),
    _paper(
        "paper-oscar", "OSCAR (2026)",
        "OSCAR's models: Qwen3-VL-32B as planner, verifier and captioner (vLLM), Qwen3-Embedding-8B for text; "
        "CLIP ViT-L/14 stands in for its multimodal embedding tools",
        "openai/clip-vit-large-patch14 and Qwen/Qwen3-Embedding-8B (about 1.7 and 16 GB) here; "
        "Qwen/Qwen3-VL-32B-Instruct (about 66 GB) by vLLM",
        "openai/clip-vit-large-patch14",
        {"qwen3vl": _served("Qwen/Qwen3-VL-32B-Instruct", 8000)},
        {"default": "qwen3vl", "planner": "qwen3vl", "verifier": "qwen3vl", "captioner": "qwen3vl",
         "rewriter": "qwen3vl"},
        ["planner and verifier Qwen3-VL-32B (App. E, Implementation Details), captions by Qwen3-VL-32B and "
         "library keys by Qwen3-Embedding-8B (Sec. 3.5), caption-based retrieval tools bge-m3 / Qwen3-Embed-4B/8B "
         "(App. E); its embedding tools (Ops-MM-v1-7B, RzenEmbed-v2-7B, QQMM-embed-v2) are not supported here: "
         "CLIP ViT-L/14 is imagent's stand-in, and the rewriter role is imagent's (the paper's planner writes "
         "the queries)"],
        ["start the server first: vllm serve Qwen/Qwen3-VL-32B-Instruct --port 8000"],
        extra={"text_embedder": {"backend": "sentence-transformers", "model": "Qwen/Qwen3-Embedding-8B"}},
        hub=("openai/clip-vit-large-patch14", "Qwen/Qwen3-Embedding-8B"),
    ),
    _paper(
        "paper-photocraft", "PhotoCraft (2026)",
        "PhotoCraft's ablation setup: Qwen3-VL-32B-Instruct as the agent (vLLM), GPT-4o compressing memory; "
        "CLIP ViT-L/14 stands in for Qwen3-VL-Embedding-2B",
        "openai/clip-vit-large-patch14 (about 1.7 GB) here; Qwen/Qwen3-VL-32B-Instruct (about 66 GB) by vLLM; "
        "GPT-4o is an API (OPENAI_API_KEY)",
        "openai/clip-vit-large-patch14",
        {"qwen3vl": _served("Qwen/Qwen3-VL-32B-Instruct", 8000), "gpt4o": _openai("gpt-4o")},
        {"default": "qwen3vl", "agent": "qwen3vl", "memory": "gpt4o"},
        ["agent Qwen3-VL-32B-Instruct with Qwen3-VL-Embedding-2B (Sec. 4, Table 2, the ablation setting; Table 1 "
         "reports nine agents), context compression by GPT-4o, 30 turns, ImageSearch top 20 (App. A.2.2); "
         "Qwen3-VL-Embedding-2B is not supported here: CLIP ViT-L/14 is imagent's stand-in"],
        ["start the server first: vllm serve Qwen/Qwen3-VL-32B-Instruct --port 8000; export OPENAI_API_KEY"],
    ),
]
PRESETS.update({p.name: p for p in PAPER_PRESETS})


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, list(PRESETS), n=1)
        raise ConfigError(f"unknown preset {name!r}{f' (did you mean {close[0]!r}?)' if close else ''}; "
                          f"known: {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_for_model(model: str) -> Preset | None:
    """The preset that fetches hub id ``model`` (for the offline hint), if any."""
    return next((p for p in PRESETS.values() if model in p.hub_models), None)


def load_error_hint(exc: BaseException) -> str:
    """What to do when a preset's weights could not be loaded (offline, no network): ``""`` when the
    error is not about a preset's hub model."""
    from imagent.models.encoders import EncoderLoadError

    if not isinstance(exc, EncoderLoadError):
        return ""
    text = str(exc)
    preset = next((p for p in PRESETS.values() for m in p.hub_models if m in text), None)
    if preset is None:
        return ""
    model = next(m for m in preset.hub_models if m in text)
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
    why = "HF_HUB_OFFLINE=1 is set" if offline else "the hub could not be reached"
    return (f"preset {preset.name!r} fetches {model} from the Hugging Face hub on first use, and {why}. "
            f"Connect and run the command again (unset HF_HUB_OFFLINE), or on a machine with internet run "
            f"`hf download {model} --local-dir {model.split('/')[-1]}`, copy that folder here and set "
            f"dual_encoder.model to its path; `imagent models use offline` goes back to the offline setup")


def default_config_path() -> Path:
    """The file ``imagent models use`` writes: the config file read now, else the user config file."""
    import platformdirs

    from imagent.core.config import find_config_file

    found = find_config_file()
    return found if found is not None else Path(platformdirs.user_config_dir("imagent")) / "config.toml"


def prepare_preset(name: str, cache_dir: Path) -> Path | None:
    """Make what preset ``name`` needs locally before it is written: its offline GGUF is joined from the
    installed part packages and checked (resumable; :class:`OfflineModelError` with the install command when
    they are missing or corrupt). Returns the model file, or None when the preset has none."""
    preset = get_preset(name)
    if not preset.offline_model:
        return None
    from imagent.models.offline import ensure_offline_model, get_offline_model

    return ensure_offline_model(cache_dir, get_offline_model(preset.offline_model))


def apply_preset(name: str, path: Path) -> dict[str, Any]:
    """Merge preset ``name`` into the config file ``path`` (created if absent; a previous file is kept as
    ``<path>.bak``) and return what was written. The result is validated before the file is replaced.
    A preset that maps roles replaces the file's ``roles`` table, so its model serves every chat role."""
    from imagent.core.config import Settings

    preset = get_preset(name)
    path = Path(path).expanduser()
    yaml_file = path.suffix.lower() in {".yaml", ".yml"}
    current: dict[str, Any] = {}
    if path.is_file():
        from imagent.core.config import read_config_file

        current = read_config_file(path)
    merged = deep_merge(current, preset.settings)
    if "roles" in preset.settings:  # a preset's roles replace the file's: its model serves every chat role
        merged["roles"] = dict(preset.settings["roles"])
    if name == "offline" and isinstance(merged.get("models"), dict):
        merged["models"].setdefault("offline", {"backend": "llama.cpp", "model": OFFLINE_CHAT_MODEL})
    try:
        Settings.model_validate(merged)
    except Exception as exc:
        raise ConfigError(f"preset {name!r} does not combine with {path}: {exc}") from exc
    text = _dump_yaml(merged) if yaml_file else dump_toml(merged)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        shutil.copyfile(path, path.with_name(path.name + ".bak"))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return preset.settings


def _dump_yaml(tree: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(tree, sort_keys=False)


# --------------------------------------------------------------------------- a small TOML writer


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if v is None:
        raise ConfigError("TOML has no null value")
    return json.dumps(str(v))


def dump_toml(tree: dict[str, Any]) -> str:
    """Plain values first, then one ``[table]`` per nested mapping (mappings of mappings become
    ``[a.b]`` tables). Enough for imagent's config; round-trips through :mod:`tomllib`."""
    lines: list[str] = []

    def table(prefix: str, node: dict[str, Any]) -> None:
        plain = {k: v for k, v in node.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in node.items() if isinstance(v, dict)}
        # an all-scalar dict under a table reads better inline when it is small (options = {...})
        inline = {k: v for k, v in nested.items() if prefix and v and not any(isinstance(x, dict) for x in v.values())
                  and len(v) <= 3 and k in ("options", "extra_body")}
        if prefix and (plain or inline or not nested):
            lines.append(f"\n[{prefix}]")
        for k, v in plain.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in inline.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in nested.items():
            if k not in inline:
                table(f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k), v)

    table("", tree)
    text = "\n".join(lines).lstrip("\n") + "\n"
    tomllib.loads(text)  # never write a file imagent cannot read back
    return text


__all__ = ["PRESETS", "Preset", "apply_preset", "default_config_path", "dump_toml", "get_preset",
           "load_error_hint", "preset_for_model"]
