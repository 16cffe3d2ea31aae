"""Robust JSON from model output.

Small models wrap JSON in prose or code fences, leave trailing commas, use single quotes or Python
literals, stop mid-object, or give a string where a list was asked. ``parse_json`` extracts the
first JSON value, repairs what can be repaired safely, then coerces it to the schema (a subset of
JSON Schema: type, properties, required, items, enum, maxItems, maxLength). What cannot be
repaired raises :class:`JSONParseError` so the caller can retry and then fall back.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any


class JSONParseError(ValueError):
    pass


_FENCE = re.compile(r"```(?:json|JSON|javascript)?\s*(.*?)```", re.S)


def _candidates(text: str) -> list[str]:
    """Substrings that may hold the JSON value, most likely first."""
    out: list[str] = []
    for m in _FENCE.finditer(text):
        out.append(m.group(1))
    # An unclosed fence (truncated output).
    if "```" in text and not out:
        out.append(text.split("```", 1)[1].removeprefix("json"))
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start >= 0:
        out.append(text[start:])
    out.append(text)
    return out


def _scan_value(s: str) -> str | None:
    """The first balanced {...} or [...] in ``s`` (string-aware); if unbalanced, the rest of ``s``."""
    start = min((i for i in (s.find("{"), s.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    depth = 0
    in_str: str | None = None
    esc = False
    for i in range(start, len(s)):
        ch = s[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == in_str:
                in_str = None
            continue
        if ch in "\"'":
            in_str = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return s[start : i + 1]
    return s[start:]


def _close_truncated(s: str) -> str:
    """Close an unterminated string and any open brackets (output cut by max_tokens)."""
    stack: list[str] = []
    in_str = False
    esc = False
    for ch in s:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    out = s + ('"' if in_str else "")
    out = re.sub(r"[,:\s]+$", "", out)
    # A dangling key without value: `{"a": 1, "b"` -> drop it.
    out = re.sub(r',\s*"[^"]*"$', "", out)
    return out + "".join(reversed(stack))


def _repairs(s: str) -> list[str]:
    s = s.strip()
    fixed = re.sub(r",\s*([}\]])", r"\1", s)  # trailing commas
    fixed = re.sub(r"//[^\n\"]*\n", "\n", fixed)  # line comments outside strings (best effort)
    variants = [s, fixed]
    variants.append(_close_truncated(fixed))
    variants.append(re.sub(r",\s*([}\]])", r"\1", _close_truncated(fixed)))
    return variants


def _loads_lenient(s: str) -> Any:
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    # Python literals: single quotes, True/False/None.
    try:
        value = ast.literal_eval(s)
        if isinstance(value, dict | list):
            return value
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    # JSON words inside a Python-ish literal.
    try:
        py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", s)))
        value = ast.literal_eval(py)
        if isinstance(value, dict | list):
            return value
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    raise JSONParseError("not JSON")


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``, repaired where safe."""
    if not text or not text.strip():
        raise JSONParseError("empty output")
    errors = 0
    for cand in _candidates(text):
        body = _scan_value(cand)
        if body is None:
            continue
        for variant in _repairs(body):
            try:
                return _loads_lenient(variant)
            except JSONParseError:
                errors += 1
    raise JSONParseError(f"no JSON value found in output: {text[:120]!r}")


_TYPE_NAMES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": float}


def coerce(value: Any, schema: dict[str, Any] | None, path: str = "$") -> Any:
    """Coerce ``value`` to ``schema`` where the intent is unambiguous; raise JSONParseError otherwise."""
    if not schema:
        return value
    typ = schema.get("type")
    if isinstance(typ, list):
        for t in typ:
            try:
                return coerce(value, {**schema, "type": t}, path)
            except JSONParseError:
                continue
        raise JSONParseError(f"{path}: {value!r} matches none of {typ}")
    if typ == "object":
        if not isinstance(value, dict):
            raise JSONParseError(f"{path}: expected an object, got {type(value).__name__}")
        props = schema.get("properties", {})
        out = dict(value)
        # Keys in another case or with spaces ("Target Description") map to the schema's names.
        norm = {re.sub(r"[\s_-]+", "_", k.strip().lower()): k for k in value}
        for name, sub in props.items():
            key = name if name in value else norm.get(re.sub(r"[\s_-]+", "_", name.lower()))
            if key is not None:
                out.pop(key, None)
                out[name] = coerce(value[key], sub, f"{path}.{name}")
        missing = [r for r in schema.get("required", []) if r not in out]
        if missing:
            raise JSONParseError(f"{path}: missing required field(s) {missing}")
        return out
    if typ == "array":
        if isinstance(value, str | dict | int | float | bool):
            value = [value]  # a single item where a list was asked
        if not isinstance(value, list):
            raise JSONParseError(f"{path}: expected an array")
        items = [coerce(v, schema.get("items"), f"{path}[{i}]") for i, v in enumerate(value)]
        if "maxItems" in schema:
            items = items[: schema["maxItems"]]
        if len(items) < schema.get("minItems", 0):
            raise JSONParseError(f"{path}: fewer than {schema['minItems']} items")
        return items
    if typ == "string":
        if isinstance(value, bool | int | float):
            value = json.dumps(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if not isinstance(value, str):
            raise JSONParseError(f"{path}: expected a string")
        if "enum" in schema:
            match = next((e for e in schema["enum"] if e.lower() == value.strip().lower()), None)
            if match is None:
                raise JSONParseError(f"{path}: {value!r} not in {schema['enum']}")
            value = match
        if "maxLength" in schema:
            value = value[: schema["maxLength"]]
        return value
    if typ == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"true", "yes"}:
            return True
        if isinstance(value, str) and value.strip().lower() in {"false", "no"}:
            return False
        raise JSONParseError(f"{path}: expected a boolean, got {value!r}")
    if typ in {"integer", "number"}:
        if isinstance(value, bool):
            raise JSONParseError(f"{path}: expected a number, got a boolean")
        try:
            num = float(value)
        except (TypeError, ValueError):
            raise JSONParseError(f"{path}: expected a number, got {value!r}") from None
        if typ == "integer":
            if num != int(num):
                raise JSONParseError(f"{path}: expected an integer, got {value!r}")
            return int(num)
        return num
    return value


def parse_json(text: str, schema: dict[str, Any] | None = None) -> Any:
    """Extract, repair and coerce. Raises JSONParseError when the output is unusable."""
    value = extract_json(text)
    if schema and schema.get("type") == "object" and isinstance(value, list) and len(value) == 1:
        value = value[0]
    return coerce(value, schema)
