"""PhotoCraft's semantic memory: a library of de-entified search skills the user owns (Sec. 3.2).

A skill is a strategy distilled from a successful episode: ``task_pattern``, ``strategy``,
``key_insight``, ``applicable_when`` and ``confidence`` (the episode's F1, or 1.0 when the user marked
the answer right), plus the query it came from. The library is one JSONL file (a skill per line),
default ``<user data dir>/skills.jsonl``: readable and editable by hand, listed and removed with
``imagent skills list | show ID | rm ID``. Every change re-reads the file first and replaces it
atomically, so an edit made meanwhile is kept and a crash never leaves half a file.

Pipeline (paper Sec. 3.2, defaults in the method's config):

1. **Distillation** (:func:`distill_skill`): an episode whose F1 exceeds ``theta_conf`` (0.85) is
   turned into a skill by one model call (prompt A.3.2). De-entification is *checked*, not only asked
   for (:func:`skill_problems`): a skill naming a photo id, a date, a number of 4+ digits or a proper
   noun / quoted phrase of its source query is asked for again once, then dropped.
2. **Consolidation** (:meth:`SkillLibrary.add`): when the cosine of the source queries' sentence
   embeddings exceeds ``merge_threshold`` (0.8, Eq. 4) the new skill is merged into the incumbent
   (its support grows, its confidence is the higher one, and the text of the more confident one is
   kept); otherwise it is a new entry.
3. **Retrieval** (:meth:`SkillLibrary.best_for`): the entry whose source query is most similar to the new
   query (the query text alone, not the task message around it) is injected as a hint only when the similarity
   exceeds ``theta_retr`` (0.65); an entry distilled from the same query is never offered to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from string import Template
from typing import Any

import numpy as np

from imagent.core.trace import note
from imagent.models.base import Message, TextEmbedder

SKILL_FIELDS = ("task_pattern", "strategy", "key_insight", "applicable_when")
# Bounded strings keep a small model's constrained JSON from looping (models/README.md).
SKILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task_pattern": {"type": "string", "maxLength": 300},
        "strategy": {"type": "string", "maxLength": 500},
        "key_insight": {"type": "string", "maxLength": 250},
        "applicable_when": {"type": "string", "maxLength": 250},
    },
    "required": list(SKILL_FIELDS),
}

_DATE = re.compile(r"\b\d{4}-\d{1,2}(?:-\d{1,2})?\b|\b(?:19|20)\d{2}\b")
_LONG_NUMBER = re.compile(r"\b\d{4,}\b")
_QUOTED = re.compile(r"[\"“']([^\"”']{3,})[\"”']")
_WORD = re.compile(r"[A-Za-zÀ-ÿ][\w'’-]*")
# Capitalised words that are not entities when they start a sentence or are common in queries.
_NOT_ENTITIES = {"i", "the", "a", "an", "my", "find", "show", "photos", "photo", "pictures", "all", "which",
                 "what", "when", "where", "identify", "then", "on", "in", "at", "from", "of", "and", "or"}


class SkillLibraryError(ValueError):
    """The skill file cannot be read (bad JSON on a line, a skill without its fields)."""


@dataclass
class Skill:
    """One entry of the library."""

    id: str
    task_pattern: str
    strategy: str
    key_insight: str
    applicable_when: str
    confidence: float
    source_query: str
    source_queries: list[str] = field(default_factory=list)  # every query merged into this entry
    support: int = 1
    origin: str = "evaluation"  # "evaluation" (F1 > theta_conf) or "user" (marked right)
    created: str = ""
    updated: str = ""

    def hint(self) -> str:
        """How the skill is shown to the agent (prepended to the user message)."""
        return (f"Past-experience hint (a strategy that worked for a similar query; use it only if it fits):\n"
                f"- pattern: {self.task_pattern}\n- strategy: {self.strategy}\n- key insight: {self.key_insight}\n"
                f"- applies when: {self.applicable_when}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Skill:
        missing = [k for k in ("id", *SKILL_FIELDS, "source_query") if not isinstance(d.get(k), str)]
        if missing:
            raise SkillLibraryError(f"a skill lacks {', '.join(missing)}")
        return cls(
            id=d["id"], task_pattern=d["task_pattern"], strategy=d["strategy"], key_insight=d["key_insight"],
            applicable_when=d["applicable_when"], confidence=float(d.get("confidence", 0.0)),
            source_query=d["source_query"], source_queries=[str(q) for q in d.get("source_queries") or []],
            support=int(d.get("support", 1)), origin=str(d.get("origin", "evaluation")),
            created=str(d.get("created", "")), updated=str(d.get("updated", "")),
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def same_query_key(query: str) -> str:
    """What two queries share when they are the same query (case and spacing ignored)."""
    return " ".join(query.lower().split())


def new_skill_id(source_query: str, created: str) -> str:
    return "sk-" + hashlib.sha256(f"{source_query}\n{created}".encode()).hexdigest()[:8]


# --------------------------------------------------------------------------- de-entification


def entity_terms(query: str) -> set[str]:
    """Surface entities of a query a skill must not repeat: quoted phrases and capitalised words that
    do not open a sentence (names, places, brands), lower-cased."""
    out = {m.group(1).strip().lower() for m in _QUOTED.finditer(query)}
    for sentence in re.split(r"(?<=[.!?])\s+", query):
        words = _WORD.findall(sentence)
        for w in words[1:]:
            if w[0].isupper() and w.lower() not in _NOT_ENTITIES and len(w) > 1:
                out.add(w.lower())
    return out


def skill_problems(fields: dict[str, str], source_query: str, forbidden_ids: Iterable[str] = ()) -> list[str]:
    """Why a distilled skill is not de-entified (empty: it is). Checks every text field for photo ids,
    dates and years, numbers of 4+ digits, and the source query's entities."""
    problems = []
    for k in SKILL_FIELDS:
        if not str(fields.get(k, "")).strip():
            problems.append(f"{k} is empty")
    text = " ".join(str(fields.get(k, "")) for k in SKILL_FIELDS)
    lower = text.lower()
    ids = [i for i in forbidden_ids if i and (i.lower() in lower or i.split("/")[-1].lower() in lower)]
    if ids:
        problems.append(f"names photo ids ({', '.join(sorted(ids)[:3])})")
    if _DATE.search(text):
        problems.append(f"names a date ({_DATE.search(text).group(0)})")  # type: ignore[union-attr]
    elif _LONG_NUMBER.search(text):
        problems.append(f"names a number ({_LONG_NUMBER.search(text).group(0)})")  # type: ignore[union-attr]
    words = {w.lower() for w in _WORD.findall(text)}
    ents = sorted(e for e in entity_terms(source_query) if (e in words if " " not in e else e in lower))
    if ents:
        problems.append(f"names entities of the query ({', '.join(ents[:3])})")
    return problems


# --------------------------------------------------------------------------- the library


def default_skills_path() -> Path:
    from imagent.core.config import user_data_dir

    return user_data_dir() / "skills.jsonl"


class SkillLibrary:
    """The skill file and the operations on it. ``embedder`` (a sentence-transformer, Sec. 3.2 phi)
    is needed only for :meth:`best` and :meth:`add`; listing and removing work without it."""

    def __init__(self, path: str | Path | None = None, embedder: TextEmbedder | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_skills_path()
        self.embedder = embedder
        self._lock = threading.Lock()
        self._vectors: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ file
    def load(self) -> list[Skill]:
        """Every skill in the file (none when it does not exist yet)."""
        if not self.path.is_file():
            return []
        skills: list[Skill] = []
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                skills.append(Skill.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                raise SkillLibraryError(f"{self.path} line {n}: {exc}; fix or remove that line") from exc
        return skills

    def save(self, skills: Sequence[Skill]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for s in skills:
                f.write(json.dumps(s.to_dict(), ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def get(self, skill_id: str) -> Skill:
        for s in self.load():
            if s.id == skill_id:
                return s
        raise KeyError(f"no skill {skill_id!r} in {self.path}")

    def remove(self, skill_id: str) -> Skill:
        with self._lock:
            skills = self.load()
            keep = [s for s in skills if s.id != skill_id]
            if len(keep) == len(skills):
                raise KeyError(f"no skill {skill_id!r} in {self.path}")
            self.save(keep)
            return next(s for s in skills if s.id == skill_id)

    # ------------------------------------------------------------------ similarity
    def _vector(self, text: str) -> np.ndarray:
        if self.embedder is None:
            raise ValueError("the skill library needs a text embedder to compare queries")
        v = self._vectors.get(text)
        if v is None:
            v = self._vectors[text] = np.asarray(self.embedder.encode_texts([text])[0], dtype=np.float32)
        return v

    def similarities(self, query: str, skills: Sequence[Skill] | None = None) -> list[tuple[Skill, float]]:
        """Cosine of ``query`` with each skill's source query (embeddings are L2-normalised)."""
        skills = self.load() if skills is None else skills
        if not skills:
            return []
        q = self._vector(query)
        return [(s, float(np.dot(q, self._vector(s.source_query)))) for s in skills]

    def best_for(self, query: str, threshold: float) -> tuple[Skill | None, float, list[str]]:
        """:meth:`best` over the skills not distilled from ``query`` itself (no source query equal to it, ignoring
        case and spacing); also returns the ids of the skills left out for that reason."""
        key = same_query_key(query)
        skills = self.load()
        own = [s for s in skills if key in {same_query_key(q) for q in [s.source_query, *s.source_queries]}]
        sims = self.similarities(query, [s for s in skills if s not in own])
        if not sims:
            return None, 0.0, [s.id for s in own]
        skill, sim = max(sims, key=lambda p: p[1])
        return (skill if sim > threshold else None), sim, [s.id for s in own]

    def best(self, query: str, threshold: float) -> tuple[Skill | None, float]:
        """The most similar skill and its similarity; the skill is None unless similarity > threshold."""
        sims = self.similarities(query)
        if not sims:
            return None, 0.0
        skill, sim = max(sims, key=lambda p: p[1])
        return (skill if sim > threshold else None), sim

    def add(self, skill: Skill, merge_threshold: float) -> tuple[Skill, bool, float]:
        """Admit ``skill``, or merge it into the incumbent whose source query's cosine exceeds
        ``merge_threshold`` (Eq. 4). Returns (the stored entry, merged?, best similarity)."""
        with self._lock:
            skills = self.load()
            sims = self.similarities(skill.source_query, skills)
            best, sim = max(sims, key=lambda p: p[1]) if sims else (None, 0.0)
            if best is not None and sim > merge_threshold:
                best.support += 1
                best.source_queries = list(dict.fromkeys([*best.source_queries, skill.source_query]))
                if skill.confidence > best.confidence:  # the more confident episode's wording wins
                    for k in SKILL_FIELDS:
                        setattr(best, k, getattr(skill, k))
                    best.confidence = skill.confidence
                best.updated = skill.updated or _now()
                self.save(skills)
                return best, True, sim
            skills.append(skill)
            self.save(skills)
            return skill, False, sim


# --------------------------------------------------------------------------- distillation


def trajectory_text(trace: dict[str, Any], max_chars: int = 6000) -> str:
    """An abbreviated trajectory from a trace (``Trace.to_dict()``), every step in order under its name as a
    label (the paper's distiller reads the entire trajectory): a step's reasoning, each call with its arguments
    and observation summary and a proposed answer where it has them, else its outputs in short. No step is picked
    or skipped by its name. The newest steps are kept when it is too long."""
    lines: list[str] = []
    for step in trace.get("steps", []):
        out = step.get("outputs") or {}
        row = f"[{step.get('name', '')}]"
        calls = out.get("calls") or []
        if "reasoning" in out or calls:
            row = f"{row} {' '.join(str(out.get('reasoning') or '').split())[:300]}".rstrip()
            for c in calls:
                args = json.dumps(c.get("arguments"), ensure_ascii=False)[:200]
                row += f"\n  -> {c.get('tool')}({args}): {str(c.get('observation', ''))[:200]}"
            if out.get("answer") is not None:
                row += f"\n  answer: {out.get('answer')}"
        else:
            row += f" {json.dumps(out, ensure_ascii=False, default=str)[:200]}"
        lines.append(row)
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "...\n" + text[-max_chars:]


def distill_skill(role: Any, prompt: str, query: str, trajectory: str, confidence: float, *,
                  forbidden_ids: Iterable[str] = (), origin: str = "evaluation", retries: int = 1) -> Skill | None:
    """One model call (prompt A.3.2, placeholders ``$query`` and ``$trajectory``) -> a de-entified
    skill, or None when the model's skills still name entities after ``retries`` more tries (the
    reasons go into the trace)."""
    forbidden = list(forbidden_ids)
    text = Template(prompt).safe_substitute(query=query, trajectory=trajectory)
    messages = [Message.user(text)]
    problems: list[str] = []
    for _attempt in range(retries + 1):
        value, ok = role.json(messages, SKILL_SCHEMA, fallback=lambda: None, retries=1, max_tokens=400)
        if not ok or not isinstance(value, dict):
            problems = ["the model gave no usable skill"]
            continue
        fields = {k: " ".join(str(value.get(k, "")).split()) for k in SKILL_FIELDS}
        problems = skill_problems(fields, query, forbidden)
        copied = [k for k, v in fields.items() if len(v) > 15 and v.lower() in " ".join(prompt.split()).lower()]
        if copied:  # a small model may echo the prompt's field descriptions instead of writing a skill
            problems.append(f"copies the instructions instead of describing the episode ({', '.join(copied)})")
        if not problems:
            now = _now()
            return Skill(id=new_skill_id(query, now), confidence=round(float(confidence), 4), source_query=query,
                         source_queries=[query], origin=origin, created=now, updated=now, **fields)
        messages = [Message.user(text + "\n\nYour previous answer was rejected: it " + "; ".join(problems)
                                 + ". Remove every photo id, date, name and place; describe only the structure.")]
    note(f"skill distillation dropped: {'; '.join(problems)}")
    return None


__all__ = [
    "SKILL_FIELDS",
    "SKILL_SCHEMA",
    "Skill",
    "SkillLibrary",
    "SkillLibraryError",
    "default_skills_path",
    "distill_skill",
    "entity_terms",
    "same_query_key",
    "skill_problems",
    "trajectory_text",
]
