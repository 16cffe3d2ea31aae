"""Offline image search over exemplars the user provides (papers/README decision 5).

TaCIR's ``search`` tool asks the web for an exemplar of the target. Without the internet, this
backend answers the same request from a user-given collection of reference images with titles:

- an **imagent index** directory (``records.sqlite``): titles are the records' captions; when the index
  holds ``caption_text`` vectors from the same text embedder, they are used as they are;
- a **folder** of images: titles come from a ``titles.jsonl`` or ``captions.jsonl`` beside them (rows with
  ``file`` and ``title`` or ``caption``), else from the file name (``red_vintage-car.jpg`` ->
  "red vintage car").

The query is embedded with the text embedder and matched to the titles by cosine; best first.
The collection must be held apart from the gallery being searched (an exemplar that *is* a
gallery image would leak the answer into the score).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from imagent.core.inputs import jsonl_objects
from imagent.index.scoring import top_k
from imagent.tools.base import Provenance, ToolError, ToolImage

_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"}
_TITLE_FILES = ("titles.jsonl", "captions.jsonl")


class ExemplarOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: Path = Field(description="a folder of images with titles, or an imagent index directory")
    min_score: float | None = Field(None, description="drop matches whose cosine is below this")
    recursive: bool = Field(True, description="folder source: include sub-folders")
    max_images: int = Field(200_000, ge=1, description="folder source: refuse larger folders")


def title_from_filename(path: Path) -> str:
    return " ".join(path.stem.replace("_", " ").replace("-", " ").split())


class ExemplarSearchTool:
    kind: ClassVar[str] = "search"
    backend: ClassVar[str] = "exemplar"
    Options = ExemplarOptions

    def __init__(
        self,
        source: str | Path,
        embedder: Any = None,
        embedder_factory: Callable[[], Any] | None = None,
        embedder_id: str | None = None,
        min_score: float | None = None,
        recursive: bool = True,
        max_images: int = 200_000,
    ) -> None:
        if embedder is None and embedder_factory is None:
            raise ValueError("the exemplar search needs a text embedder (or a factory for one)")
        self.source = Path(source).expanduser().resolve()
        self._embedder = embedder
        self._factory = embedder_factory
        self.embedder_id = embedder_id or getattr(embedder, "model_id", "")
        self.min_score = min_score
        self.recursive = recursive
        self.max_images = max_images
        self._lock = threading.Lock()
        self._entries: list[tuple[str, str, str]] | None = None  # (path, title, record id)
        self._vectors: np.ndarray | None = None

    @classmethod
    def from_options(cls, options: dict[str, Any], settings: Any = None, text_embedder: Any = None,
                     **_: Any) -> ExemplarSearchTool:
        opts = ExemplarOptions.model_validate(options)
        factory = None
        embedder_id = getattr(text_embedder, "model_id", None)
        if text_embedder is None:
            if settings is None:
                raise ValueError("the exemplar search needs settings or a text embedder")
            from imagent.models.registry import build_text_embedder

            cfg = settings.text_embedder
            embedder_id = cfg.model

            def factory() -> Any:
                return build_text_embedder(cfg)

        return cls(opts.source, embedder=text_embedder, embedder_factory=factory, embedder_id=embedder_id,
                   min_score=opts.min_score, recursive=opts.recursive, max_images=opts.max_images)

    def identity(self) -> str:
        return f"exemplar:{self.source}:{self.embedder_id}"

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            assert self._factory is not None
            self._embedder = self._factory()
        return self._embedder

    # ------------------------------------------------------------------ loading (once, lazily)
    def _load(self) -> tuple[list[tuple[str, str, str]], np.ndarray]:
        with self._lock:
            if self._entries is None or self._vectors is None:
                if (self.source / "records.sqlite").is_file():
                    self._entries, self._vectors = self._load_index()
                elif self.source.is_dir():
                    self._entries, self._vectors = self._load_folder()
                else:
                    raise ToolError(f"exemplar source not found (need a folder or an imagent index): {self.source}")
            return self._entries, self._vectors

    def _load_index(self) -> tuple[list[tuple[str, str, str]], np.ndarray]:
        from imagent.index.gallery import SPACE_CAPTION_TEXT, Gallery

        g = Gallery(self.source)
        records = g.records()
        entries = [(r.path, " ".join(c.strip() for c in r.captions if c.strip()), r.id) for r in records]
        info = g.spaces().get(SPACE_CAPTION_TEXT)
        if info is not None and info.model_id == self.embedder.model_id:
            vectors = np.asarray(g.vectors(SPACE_CAPTION_TEXT), dtype=np.float32)
        else:
            vectors = self._embed([t for _, t, _ in entries])
        return entries, vectors

    def _load_folder(self) -> tuple[list[tuple[str, str, str]], np.ndarray]:
        titles: dict[str, str] = {}
        for name in _TITLE_FILES:
            f = self.source / name
            if f.is_file():
                for row in jsonl_objects(f):
                    if row.get("file"):
                        title = row.get("title") or row.get("caption") or ""
                        titles[str((self.source / str(row["file"])).resolve())] = str(title)
                break
        pattern = "**/*" if self.recursive else "*"
        files = sorted(p for p in self.source.glob(pattern) if p.is_file() and p.suffix.lower() in _IMAGE_SUFFIXES)
        if len(files) > self.max_images:
            raise ToolError(f"exemplar folder has {len(files)} images, more than max_images={self.max_images}")
        entries = []
        for p in files:
            rp = str(p.resolve())
            entries.append((rp, titles.get(rp) or title_from_filename(p), str(p.relative_to(self.source))))
        return entries, self._embed([t for _, t, _ in entries])

    def _embed(self, titles: list[str]) -> np.ndarray:
        vecs = np.zeros((len(titles), self.embedder.dim), dtype=np.float32)
        idx = [i for i, t in enumerate(titles) if t.strip()]
        if idx:
            vecs[idx] = self.embedder.encode_texts([titles[i] for i in idx])
        return vecs

    # ------------------------------------------------------------------ the tool
    def search(self, query: str, n: int = 1) -> list[ToolImage]:
        entries, vectors = self._load()
        if not entries:
            return []
        q = np.asarray(self.embedder.encode_texts([query])[0], dtype=np.float32)
        scores = vectors @ q
        out = []
        for i in top_k(scores, n):
            score = float(scores[int(i)])
            if self.min_score is not None and score < self.min_score:
                continue
            path, title, rid = entries[int(i)]
            out.append(ToolImage(provenance=Provenance(self.backend, source=path,
                                                       extra={"score": round(score, 6), "id": rid,
                                                              "collection": str(self.source)}),
                                 path=path, title=title))
        return out


__all__ = ["ExemplarOptions", "ExemplarSearchTool", "title_from_filename"]
