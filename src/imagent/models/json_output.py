"""Robust JSON from model output.

Small models wrap JSON in prose or code fences, leave trailing commas, use single quotes or Python
literals, stop mid-object, or give a string where a list was asked. ``parse_json`` finds the JSON
values in the output (fenced blocks first, then bracketed values left to right, after dropping
``<think>`` blocks), repairs what can be repaired safely, and returns the first one that coerces to
the schema (a subset of JSON Schema: type, properties, required, items, enum, maxItems, maxLength).
Repairs only ever edit text outside string literals, so valid JSON comes through unchanged. What
cannot be repaired raises :class:`JSONParseError` so the caller can retry and then fall back.

Length bounds. ``maxLength`` and ``maxItems`` are bounds for *generation* (a grammar or a server's
structured output stops a small model looping inside a string or list); after generation a cut stops no
loop and can only lose content, such as a tool tag at the end of a rationale. So a string longer than its
``maxLength`` is kept whole, up to :data:`MAX_FIELD_CHARS` (generous for GPT-4-class output), and noted;
a list longer than its ``maxItems`` keeps its first ``maxItems`` items (the extra ones were not asked for).
Every cut and every overrun is noted in the open trace step and counted (``json_cuts``).

``complete_only=True`` (a reply cut by ``max_tokens``) accepts only a value that closed before the cut:
the repair that closes a cut-off value is never applied to it.

All scanning is linear in the text's length: ``<think>`` blocks are removed in one pass over the tags
(the former ``<think>.*?</think>`` regex rescanned the rest of the text for every unclosed tag).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from imagent.core.text import MAX_JSON_NESTING, clean_text, nested_deeper_than
from imagent.core.trace import current_trace, note


class JSONParseError(ValueError):
    pass


# The longest string a parsed field keeps (the rest is cut, and the cut noted): model output beyond this is a
# runaway, not an answer. Far above any schema's maxLength, so no decision-carrying text is ever cut.
MAX_FIELD_CHARS = 20_000


_FENCE = re.compile(r"```(?:json|JSON|javascript)?\s*(.*?)```", re.S)
# Reasoning models put drafts inside <think>...</think>; the answer follows it.
_THINK_TAG = re.compile(r"<(/?)think>", re.I)
# How many top-level bracketed values of one candidate are tried before giving up (bounds the work).
_MAX_VALUES = 16
# Bracket nesting a reply's JSON value may have (every schema imagent asks for needs fewer than 8 levels).
MAX_NESTING = MAX_JSON_NESTING
_NOTHING = object()


def _candidates(text: str) -> list[str]:
    """Substrings that may hold the JSON value, most likely first."""
    out: list[str] = []
    for m in _FENCE.finditer(text):
        out.append(m.group(1))
    # An unclosed fence (truncated output).
    if "```" in text and not out:
        out.append(text.split("```", 1)[1].removeprefix("json"))
    out.append(text)
    return out


def _first_bracket(s: str, pos: int = 0) -> int:
    return min((i for i in (s.find("{", pos), s.find("[", pos)) if i >= 0), default=-1)


def _scan_value(s: str, start: int) -> tuple[str, bool]:
    """The balanced {...} or [...] starting at ``start`` (string-aware) and True; if it never closes
    (output cut short), the rest of ``s`` and False."""
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
                return s[start : i + 1], True
    return s[start:], False


def _segments(s: str) -> list[tuple[str | None, str]]:
    """Split into ``(quote, text)`` pieces: quote is ``"`` or ``'`` for a string literal (text with its
    quotes; an unterminated last string lacks the closing one), None for the code between strings.
    Every repair below edits code pieces only, so text inside strings is never rewritten."""
    out: list[tuple[str | None, str]] = []
    i, n, code_start = 0, len(s), 0
    while i < n:
        ch = s[i]
        if ch in "\"'":
            if code_start < i:
                out.append((None, s[code_start:i]))
            j, esc = i + 1, False
            while j < n:
                c = s[j]
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == ch:
                    break
                j += 1
            out.append((ch, s[i : j + 1]))
            i = code_start = j + 1
        else:
            i += 1
    if code_start < n:
        out.append((None, s[code_start:]))
    return out


_PY_WORDS = {"True": "true", "TRUE": "true", "False": "false", "FALSE": "false",
             "None": "null", "NULL": "null", "Null": "null"}


def _fix_code(code: str) -> str:
    code = re.sub(r"//[^\n]*", "", code)  # line comments
    code = re.sub(r"\b(True|TRUE|False|FALSE|None|NULL|Null)\b", lambda m: _PY_WORDS[m.group(1)], code)
    code = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*):", r'\1"\2"\3:', code)  # unquoted keys
    return re.sub(r",(\s*[}\]])", r"\1", code)  # trailing commas


def _json_string(quote: str, text: str) -> str:
    """One string literal as a JSON string; an unterminated one is closed (output cut short)."""
    closed = len(text) >= 2 and text.endswith(quote) and not _ends_in_escape(text[:-1])
    inner = text[1:-1] if closed else text[1:]
    if _ends_in_escape(inner):
        inner = inner[:-1]  # a dangling backslash would escape the closing quote
    if quote == '"':
        # JSON has no \' escape; models write it anyway.
        return '"' + re.sub(r"\\(.)", lambda m: "'" if m.group(1) == "'" else m.group(0), inner, flags=re.S) + '"'

    def swap(m: re.Match[str]) -> str:
        tok = m.group(0)
        if tok == '"':
            return '\\"'
        return "'" if tok == "\\'" else tok

    return '"' + re.sub(r'\\.|"', swap, inner, flags=re.S) + '"'


def _ends_in_escape(s: str) -> bool:
    return (len(s) - len(s.rstrip("\\"))) % 2 == 1


def _normalize(body: str) -> str:
    """Rewrite JSON-ish text as JSON: Python literals, single quotes, comments, unquoted keys,
    trailing commas, a missing comma between two strings, unterminated strings closed.
    Valid JSON comes out unchanged."""
    segs = _segments(body)
    out: list[str] = []
    for i, (quote, text) in enumerate(segs):
        if quote is None:
            between_strings = 0 < i < len(segs) - 1 and segs[i - 1][0] and segs[i + 1][0]
            if between_strings and text.strip() == "":
                text = "," + text  # `"a" "b"`: two strings with only space between lack a comma
            out.append(_fix_code(text))
        else:
            out.append(_json_string(quote, text))
    return "".join(out)


def _open_brackets(s: str) -> list[str]:
    """Closers still owed by ``s`` (which has no unterminated string), innermost last."""
    stack: list[str] = []
    for quote, text in _segments(s):
        if quote is None:
            for ch in text:
                if ch in "{[":
                    stack.append("}" if ch == "{" else "]")
                elif ch in "}]" and stack:
                    stack.pop()
    return stack


_CUT_LITERAL = re.compile(r"(?<![\w.])(?:t|tr|tru|f|fa|fal|fals|n|nu|nul)$")
_DANGLING_KEY = re.compile(r'([{,])\s*"(?:[^"\\]|\\.)*"$')


def _strip_separators(s: str) -> str:
    """``s`` without trailing commas, colons and whitespace. (A ``[,:\\s]+$`` regex is quadratic on a long run
    of them that does not reach the end: it retries the run from each of its positions.)"""
    while True:
        t = s.rstrip().rstrip(",:")
        if t == s:
            return s
        s = t


def _close_truncated(s: str) -> str:
    """Close the open brackets of JSON cut by max_tokens (strings are already closed by
    :func:`_normalize`), dropping what is cut mid-token: a partial ``true``/``false``/``null``,
    a number's dangling ``.``/``e``/``-``, a key without its value."""
    s = s.rstrip()
    for _ in range(8):
        prev = s
        s = _strip_separators(s)
        s = _CUT_LITERAL.sub("", s)
        s = re.sub(r"(\d)[.eE+-]+$", r"\1", s)
        s = re.sub(r"(?<=[\[{,:\s])-$", "", s)
        stack = _open_brackets(s)
        if stack and stack[-1] == "}":
            # Inside an object, a trailing string right after `{` or `,` is a key whose value was cut.
            s = _DANGLING_KEY.sub(lambda m: "{" if m.group(1) == "{" else "", s)
        if s == prev:
            break
    return s + "".join(reversed(_open_brackets(s)))


def _loads(s: str) -> Any:
    # strict=False: raw newlines and tabs inside strings are common in model output.
    return json.loads(s, strict=False)


def _parse_value(body: str, balanced: bool) -> Any:
    """Parse one bracketed value, repairing in increasing order of boldness. A value nested deeper than
    :data:`MAX_NESTING` is unusable and never reaches a parser (they recurse per level: see
    :func:`imagent.core.text.nested_deeper_than`)."""
    body = body.strip()
    if nested_deeper_than(body, MAX_NESTING):
        raise JSONParseError(f"nested deeper than {MAX_NESTING} levels")
    try:
        return _loads(body)
    except (json.JSONDecodeError, RecursionError):  # absurd nesting is unusable too
        pass
    fixed = _normalize(body)
    attempts = [fixed] if balanced else [fixed, _close_truncated(fixed)]
    for variant in attempts:
        try:
            return _loads(variant)
        except (json.JSONDecodeError, RecursionError):  # absurd nesting is unusable too
            pass
    # Last resort for Python reprs the rewrite above cannot express (e.g. tuples).
    try:
        value = ast.literal_eval(body)
        if isinstance(value, dict | list):
            return value
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    raise JSONParseError("not JSON")


def strip_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks, in one pass over the tags.

    The same result as ``re.sub(r"<think>.*?</think>", "", text, flags=re.S | re.I)``: a block runs from an
    opening tag to the first closing tag after it (opening tags inside are part of the block); an opening tag
    that is never closed, and everything after it, stays; a closing tag with no opening tag stays."""
    if not _THINK_TAG.search(text):
        return text
    out: list[str] = []
    pos = 0  # start of the text not yet copied
    start = -1  # start of the open block, -1 outside one
    for m in _THINK_TAG.finditer(text):
        if start < 0 and not m.group(1):
            start = m.start()
        elif start >= 0 and m.group(1):
            out.append(text[pos:start])
            pos, start = m.end(), -1
    out.append(text[pos:])
    return "".join(out)


def _clean_strings(value: Any) -> Any:
    """``value`` with lone surrogates replaced in every string and key: clean text can still decode to them
    (``"\\ud800"`` is a valid JSON escape), and parsed values are where model output enters a method."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_strings(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean_strings(v) for k, v in value.items()}
    return value


def _values(text: str, complete_only: bool = False) -> Iterator[Any]:
    """Every JSON value found in ``text``, in order of likelihood: fenced blocks first, then
    top-level bracketed values left to right. A value cut short ends its candidate (and, with
    ``complete_only``, is not repaired into one)."""
    text = strip_think(text)
    for cand in _candidates(text):
        pos = _first_bracket(cand)
        tried = 0
        while pos >= 0 and tried < _MAX_VALUES:
            tried += 1
            body, balanced = _scan_value(cand, pos)
            if not balanced and complete_only:
                break
            try:
                value = _clean_strings(_parse_value(body, balanced))
            except (JSONParseError, RecursionError):
                value = _NOTHING
            if value is not _NOTHING:
                yield value
            if not balanced:
                break  # everything after is inside this value; an inner fragment is not the answer
            pos = _first_bracket(cand, pos + len(body))


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``, repaired where safe."""
    if not text or not text.strip():
        raise JSONParseError("empty output")
    for value in _values(text):
        return value
    raise JSONParseError(f"no JSON value found in output: {text[:120]!r}")


def _record_cuts(cuts: list[str]) -> None:
    if not cuts:
        return
    shown = "; ".join(cuts[:5]) + (f"; and {len(cuts) - 5} more" if len(cuts) > 5 else "")
    note(f"model JSON over its schema's bounds: {shown}")
    trace = current_trace()
    if trace is not None:
        trace.count("json_cuts", len(cuts))


_TYPE_NAMES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": float}


def coerce(value: Any, schema: dict[str, Any] | None, path: str = "$", cuts: list[str] | None = None) -> Any:
    """Coerce ``value`` to ``schema`` where the intent is unambiguous; raise JSONParseError otherwise.
    Length bounds are applied as the module doc says; each cut or overrun is appended to ``cuts``."""
    if cuts is None:
        cuts = []
    if not schema:
        return value
    typ = schema.get("type")
    if isinstance(typ, list):
        for t in typ:
            try:
                return coerce(value, {**schema, "type": t}, path, cuts)
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
        required = set(schema.get("required", []))
        for name, sub in props.items():
            key = name if name in value else norm.get(re.sub(r"[\s_-]+", "_", name.lower()))
            if key is not None:
                out.pop(key, None)
                if value[key] is None and name not in required:
                    continue  # `"tags": null` for an optional field means "not given"
                out[name] = coerce(value[key], sub, f"{path}.{name}", cuts)
        missing = [r for r in schema.get("required", []) if r not in out]
        if missing:
            raise JSONParseError(f"{path}: missing required field(s) {missing}")
        return out
    if typ == "array":
        if isinstance(value, str | dict | int | float | bool):
            value = [value]  # a single item where a list was asked
        if not isinstance(value, list):
            raise JSONParseError(f"{path}: expected an array")
        items = [coerce(v, schema.get("items"), f"{path}[{i}]", cuts) for i, v in enumerate(value)]
        if "maxItems" in schema and len(items) > schema["maxItems"]:
            cuts.append(f"{path}: kept the first {schema['maxItems']} of {len(items)} items")
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
        if len(value) > MAX_FIELD_CHARS:
            cuts.append(f"{path}: cut from {len(value)} to {MAX_FIELD_CHARS} characters")
            value = value[:MAX_FIELD_CHARS]
        elif len(value) > schema.get("maxLength", MAX_FIELD_CHARS):
            cuts.append(f"{path}: {len(value)} characters, over maxLength {schema['maxLength']}: kept whole")
        return value
    if typ == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"true", "yes"}:
            return True
        if isinstance(value, str) and value.strip().lower() in {"false", "no"}:
            return False
        if isinstance(value, int | float) and value in (0, 1):
            return bool(value)
        raise JSONParseError(f"{path}: expected a boolean, got {value!r}")
    if typ in {"integer", "number"}:
        if isinstance(value, bool):
            raise JSONParseError(f"{path}: expected a number, got a boolean")
        try:
            num = float(value)
        except (TypeError, ValueError):
            raise JSONParseError(f"{path}: expected a number, got {value!r}") from None
        if not math.isfinite(num):
            raise JSONParseError(f"{path}: expected a finite number, got {value!r}")  # NaN would poison rankings
        if typ == "integer":
            if num != int(num):
                raise JSONParseError(f"{path}: expected an integer, got {value!r}")
            return int(num)
        return num
    return value


def parse_json(text: str, schema: dict[str, Any] | None = None, complete_only: bool = False) -> Any:
    """Extract, repair and coerce: the first value in ``text`` that fits ``schema``.
    Raises JSONParseError when the output is unusable. ``complete_only``: accept only a value that
    closed (for a reply cut by ``max_tokens``). Length cuts and overruns are noted in the open trace step."""
    if not text or not text.strip():
        raise JSONParseError("empty output")
    first_error: JSONParseError | None = None
    for value in _values(text, complete_only):
        if schema and schema.get("type") == "object" and isinstance(value, list) and len(value) == 1:
            value = value[0]  # `[{...}]` where one object was asked
        cuts: list[str] = []
        try:
            out = coerce(value, schema, cuts=cuts)
        except JSONParseError as exc:
            first_error = first_error or exc
            continue
        _record_cuts(cuts)
        return out
    if first_error is not None:
        raise first_error
    raise JSONParseError(f"no JSON value found in output: {text[:120]!r}")
