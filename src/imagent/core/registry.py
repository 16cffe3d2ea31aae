"""One registry type for everything found by name: model backends, tool backends, methods, benchmarks.

A :class:`Registry` maps names to entries; an entry is an import path (``"package.module:attr.attr"``),
imported on first use, so the base install needs no optional dependency until a config names it, or the
object itself (what :meth:`Registry.register` and a class decorator add)::

    BACKENDS = Registry("tool backend", {"brave": "imagent.tools.web_search:BraveImageSearch"},
                        error=ToolBackendError)
    BACKENDS.register("mine", MyTool)      # third-party entries
    BACKENDS.lookup("brav")                # ToolBackendError: unknown tool backend 'brav' (did you mean 'brave'?)

It is a mutable mapping (``name in reg``, ``reg[name]``, ``reg[name] = obj``, ``del reg[name]``): ``reg[name]``
raises a plain ``KeyError``; :meth:`Registry.lookup` raises the registry's own error with a did-you-mean and the
known names.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def import_path(path: str) -> Any:
    """The object at ``"package.module:attr.attr"``."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


class Registry(MutableMapping[str, T], Generic[T]):
    """Names -> entries resolved lazily by import path (see the module doc).

    - ``kind``: what the entries are, for messages ("method", "chat backend");
    - ``entries``: the built-in names and their import paths (or objects);
    - ``error``: the exception :meth:`lookup` raises on a miss (``KeyError`` by default);
    - ``loader``: called once before the first listing or miss (e.g. importing a package whose modules register
      themselves), so third-party registrations made on import are seen."""

    def __init__(self, kind: str, entries: Mapping[str, str | T] | None = None, *,
                 error: type[Exception] = KeyError, loader: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.error = error
        self._entries: dict[str, str | T] = dict(entries or {})
        self._loader = loader

    # ------------------------------------------------------------------ the mapping
    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = import_path(entry)
        return entry

    def __setitem__(self, name: str, entry: str | T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self._load()
        return name in self._entries

    # ------------------------------------------------------------------ registering and finding
    def register(self, name: str, entry: str | T, *, replace: bool = True) -> None:
        """Add ``name``; with ``replace=False`` a different entry already under ``name`` is an error (an import
        path counts as the object it names)."""
        old = self._entries.get(name)
        if not replace and old is not None and old is not entry and not (
                isinstance(old, str) and not isinstance(entry, str) and _names(old, entry)):
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = entry

    def names(self) -> list[str]:
        """Every name, sorted (nothing is imported)."""
        return sorted(self)

    def lookup(self, name: str) -> T:
        """The entry for ``name`` (imported on first use); on a miss the registry's error names the closest name
        and the known ones."""
        if name not in self:
            close = difflib.get_close_matches(name, list(self._entries), n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.error(f"unknown {self.kind} {name!r}{guess}; known: {', '.join(self.names())}")
        return self[name]

    def _load(self) -> None:
        if self._loader is not None:
            loader, self._loader = self._loader, None
            loader()


def _names(path: str, obj: Any) -> bool:
    """Whether the import path ``path`` names ``obj`` (by module and qualified name; nothing is imported)."""
    module, _, attr = path.partition(":")
    return getattr(obj, "__module__", None) == module and getattr(obj, "__qualname__", None) == attr


__all__ = ["Registry", "import_path"]
