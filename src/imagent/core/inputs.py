"""Reading a user's input file (predictions, configuration) without hanging, exhausting memory or guessing.

A file named on the command line may be anything: a directory, a FIFO that never delivers (reading it
blocks forever), a symlink to ``/dev/zero`` (reading never ends), a 2 GB log, JSON nested 100,000 deep
(``RecursionError``), a YAML alias bomb, or JSON with the same key twice (which ``json`` silently merges,
so half a predictions file could vanish). Every reader here:

- opens without blocking and refuses anything but a regular file (:func:`read_text_file`), reading at most
  ``max_bytes`` (one byte more tells it the file is too large);
- parses with duplicate keys refused and nesting bounded: JSON and YAML mapping keys must be unique, the
  parsed value may be at most ``max_depth`` levels deep and hold at most :data:`MAX_VALUES` values;
- raises :class:`InputFileError` (a ``ValueError``) whose message names the file and what is wrong.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_DEPTH = 64
MAX_VALUES = 5_000_000  # values a parsed file may hold (a YAML alias bomb references one list billions of times)


class InputFileError(ValueError):
    """An input file that cannot be used; the message names the file and the reason."""


def read_text_file(path: str | Path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of ``path``, which must be a regular file of at most ``max_bytes`` bytes."""
    p = Path(path).expanduser()
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except FileNotFoundError:
        raise InputFileError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise InputFileError(f"{what} {p} is a directory, not a file") from None
    except OSError as exc:
        raise InputFileError(f"cannot open {what} {p}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise InputFileError(f"{what} {p} is a directory, not a file")
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise InputFileError(f"{what} {p} is {kind}; give a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputFileError(f"{what} {p} is larger than {max_bytes:,} bytes; is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} {p} is not UTF-8 text (byte {exc.start:,})") from None


def check_shape(value: Any, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` if it nests at most ``max_depth`` levels and holds at most :data:`MAX_VALUES` values once
    expanded (YAML aliases share one object: counted per reference, computed once per object)."""
    memo: dict[int, tuple[int, int]] = {}  # id -> (values once expanded, depth)
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, dict | list | tuple) or (not children_done and id(node) in memo):
            continue
        items = node.values() if isinstance(node, dict) else node
        children = [c for c in items if isinstance(c, dict | list | tuple)]
        if not children_done:
            active.add(id(node))
            stack.append((node, True))
            for child in children:
                if id(child) in active:
                    raise InputFileError(f"{what} refers to itself (a recursive YAML alias)")
                stack.append((child, False))
            continue
        active.discard(id(node))
        size = len(node) + 1 + sum(memo[id(c)][0] for c in children)
        depth = 1 + max((memo[id(c)][1] for c in children), default=0)
        if depth > max_depth:
            raise InputFileError(f"{what} is nested deeper than {max_depth} levels")
        if size > MAX_VALUES:
            raise InputFileError(f"{what} holds more than {MAX_VALUES:,} values (a YAML alias bomb?)")
        memo[id(node)] = (size, depth)
    return value


def _unique_keys(what: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise InputFileError(f"{what} has the key {key[:100]!r} twice; which one is meant is not clear")
            out[key] = value
        return out

    return hook


def parse_json(text: str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON with duplicate keys refused and nesting bounded."""
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys(what))
    except RecursionError:
        raise InputFileError(f"{what} is nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{what} is not valid JSON: {exc}") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise InputFileError(f"{what}: {exc}") from None
    return check_shape(value, what, max_depth)


def parse_yaml(text: str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """YAML (safe loader) with duplicate mapping keys refused and nesting bounded."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            mark = key if isinstance(key, str | int | float | bool | None) else repr(key)
            if mark in seen:
                raise InputFileError(f"{what} has the key {str(key)[:100]!r} twice; which one is meant is not clear")
            seen.add(mark)
        return loader.construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    try:
        value = yaml.load(text, Loader=UniqueKeyLoader)
    except RecursionError:
        raise InputFileError(f"{what} is nested deeper than {max_depth} levels") from None
    except yaml.YAMLError as exc:
        raise InputFileError(f"{what} is not valid YAML: {exc}") from None
    return check_shape(value, what, max_depth)


def parse_toml(text: str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """TOML (which itself refuses duplicate keys) with nesting bounded."""
    import tomllib

    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise InputFileError(f"{what} is nested deeper than {max_depth} levels") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError(f"{what} is not valid TOML: {exc}") from None
    return check_shape(value, what, max_depth)


__all__ = ["MAX_DEPTH", "MAX_VALUES", "InputFileError", "check_shape", "parse_json", "parse_toml", "parse_yaml",
           "read_text_file"]


def jsonl_objects(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL log imagent appends to itself (run results, the OSCAR library, exemplar
    titles), in file order. A missing file has none; blank lines, torn lines (a kill mid-write) and lines that
    are not objects are skipped, so whatever they held is simply done again."""
    path = Path(path)
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                yield value
