"""Gallery captions: the prompts a captioner is asked with, and captions imported from a file.

Prompts are files (``imagent/index/prompts/caption/<name>.txt``), chosen with ``indexing.caption_prompt``
(a shipped name or a path): ``default`` (one factual sentence: subject, action, setting), ``fashioniq``
(colour, design and style, what FashionIQ's modifications talk about), ``oscar`` (OSCAR's appendix
"Image Captioning Prompt", which answers in JSON ``{"caption": ...}``). The captioner's model id and a hash
of the prompt's text form its *identity* (:func:`captioner_identity`): it is stored in the fingerprint of
every record it captioned, so changing either re-captions those records on the next
``imagent index --caption-missing``.

Imported captions (``imagent index SRC --captions FILE``): JSONL, JSON or CSV rows naming a record by ``id``
or by ``file``/``path`` (relative to the caption file's folder, or to the indexed folder) with ``caption``
(or ``captions``, a list; ``|``-separated in CSV). They are stored with ``caption_source = "given"`` and the
caption spaces of those records are embedded again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from imagent.core.config import ConfigError
from imagent.core.text import clean_text

PROMPT_DIR = "prompts/caption"


@dataclass(frozen=True)
class CaptionPrompt:
    name: str  # the shipped name, or the file's path
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:12]


def shipped_prompts() -> list[str]:
    folder = files("imagent.index").joinpath(PROMPT_DIR)
    return sorted(p.name.removesuffix(".txt") for p in folder.iterdir() if p.name.endswith(".txt"))


def load_caption_prompt(spec: str | None) -> CaptionPrompt:
    """A shipped prompt by name (``default``, ``fashioniq``, ...) or a prompt file by path."""
    spec = (spec or "default").strip()
    if os.sep not in spec and "/" not in spec and not spec.endswith(".txt"):
        res = files("imagent.index").joinpath(PROMPT_DIR, f"{spec}.txt")
        if not res.is_file():
            raise ConfigError(f"unknown caption prompt {spec!r}: use one of {', '.join(shipped_prompts())} "
                              "or the path of a .txt file (indexing.caption_prompt)")
        return CaptionPrompt(spec, res.read_text(encoding="utf-8").strip())
    path = Path(spec).expanduser()
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read caption prompt file {path} (indexing.caption_prompt): {exc}") from None
    if not text:
        raise ConfigError(f"caption prompt file {path} is empty")
    return CaptionPrompt(str(path), text)


def captioner_identity(model_id: str, prompt: CaptionPrompt) -> str:
    """What a captioned record's fingerprint stores: a new model or prompt text means new captions."""
    return f"{model_id}#prompt={prompt.digest}"


def parse_caption_reply(reply: str) -> str:
    """The caption in a reply: a JSON ``{"caption": ...}`` (the OSCAR prompt), else its first non-empty line."""
    text = clean_text(reply or "").strip()
    if "{" in text and "caption" in text:
        start, end = text.find("{"), text.rfind("}")
        try:
            data = json.loads(text[start : end + 1])
            if isinstance(data, dict) and isinstance(data.get("caption"), str):
                return " ".join(data["caption"].split())
        except ValueError:
            pass
    line = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("```")), "")
    return line.strip("\"'` ").strip()


# --------------------------------------------------------------------------- imported captions


@dataclass
class CaptionRow:
    where: str  # "line N" / "row N"
    id: str | None
    path: str | None  # absolute, relative names resolved against the caption file's folder
    name: str | None  # the name as written (to try against the indexed folder too)
    captions: list[str]


def caption_rows(raw_rows: list[tuple[str, dict[str, Any] | None, str | None]], caption_file: Path,
                 is_csv: bool) -> tuple[list[CaptionRow], list[tuple[str, str]]]:
    """Checked rows, and ``(where, reason)`` for rows that cannot be used."""
    base = os.path.dirname(os.path.abspath(caption_file))
    rows: list[CaptionRow] = []
    bad: list[tuple[str, str]] = []
    for where, raw, error in raw_rows:
        if raw is None:
            bad.append((where, error or "unreadable row"))
            continue
        caps: list[str] = []
        for key in ("caption", "captions"):
            value = raw.get(key)
            if isinstance(value, str):
                caps += [value] if key == "caption" or not is_csv else value.split("|")
            elif isinstance(value, list):
                caps += [str(v) for v in value if v is not None]
        caps = list(dict.fromkeys(c for c in (" ".join(clean_text(c).split()) for c in caps) if c))
        rid = raw.get("id")
        name = raw.get("file") if isinstance(raw.get("file"), str) and raw["file"].strip() else raw.get("path")
        if not caps:
            bad.append((where, "no caption"))
            continue
        if not (isinstance(rid, (str, int)) and str(rid).strip()) and not (isinstance(name, str) and name.strip()):
            bad.append((where, "no 'id', 'file' or 'path' column"))
            continue
        path = os.path.abspath(os.path.join(base, name.strip())) if isinstance(name, str) and name.strip() else None
        rows.append(CaptionRow(where, clean_text(str(rid)).strip() if rid is not None and str(rid).strip() else None,
                               path, name.strip() if isinstance(name, str) else None, caps))
    return rows, bad
