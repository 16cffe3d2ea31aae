"""The wire formats of the agent runtime: how tool calls and answers are written to and read from a model's text.

Functions only (parsing a reply, writing a call or a result, the prompt sections, the JSON protocol's turn schema);
the protocols themselves, one class each behind one interface, are :mod:`imagent.agents.protocols`, which uses
them. Two paths:

- **native**: tools are offered as OpenAI ``tools``; the backend returns ``tool_calls``
  (vLLM with a tool parser, llama.cpp server with ``--jinja``, Ollama, OpenAI);
- **text**: the system prompt describes the tools (:func:`text_protocol_prompt`) and the model writes
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (the format Qwen and Hermes-style
  models are trained on); results come back as ``<tool_response>...</tool_response>`` user messages.

Text-protocol parsing is lenient where intent is clear (a missing closing tag, code fences inside the
block, single quotes, trailing commas, an output cut short: repaired by
:mod:`imagent.models.json_output`; ``parameters``/``args`` for ``arguments``; arguments given as a JSON
string), and strict otherwise: a block that cannot be read becomes a :class:`ToolCall` with ``error``
set, which the runtime reports back to the model instead of guessing.

The answer is parsed from ``The final answer is: ["id", ...]`` (PhotoCraft's and ImageSeeker's answer
format, A.3.3); the last such statement in a reply counts.

A third path serves small local models, which follow a free-text protocol poorly (the offline Qwen 0.5B
answered with invented ids and never called a tool):

- **json**: every reply is one JSON object, decoded under a grammar built from :func:`json_turn_schema`
  (llama.cpp's JSON-schema grammars; any backend with schema-constrained output): either a tool call
  ``{"thought": ..., "tool": NAME, "arguments": {...}}`` or the answer ``{"thought": ..., "final_answer":
  [ids]}``. The schema is rebuilt each turn from the runtime's state: photo-id arguments and the answer
  may only name ids the tools have returned, subset names only saved subsets, and the answer is not
  offered before any tool returned a photo (the agent searches first). :func:`json_protocol_prompt` is the
  system-prompt section: a short tool list with one example call each and one worked example.

In the text path a call written as a function call (``ImageSearch(query="pink flamingo")``, keyword
arguments as Python literals, read by :func:`ast.literal_eval`, never evaluated) is accepted when it names
an offered tool and no ``<tool_call>`` block is present.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from imagent.agents.state import OneOf, ToolCall
from imagent.models.json_output import JSONParseError, extract_json, parse_json

if TYPE_CHECKING:
    from imagent.agents.tools import Tool

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.S | re.I)
_FENCED = re.compile(r"```(?:json|JSON)?\s*(\{.*?\})\s*```", re.S)
_FINAL = re.compile(r"final\s+answer\s*(?:is)?\s*[:：]?\s*", re.I)
_ID_TOKEN = re.compile(r"[A-Za-z0-9][\w.:/-]*")


_THINK_TAG = re.compile(r"<(/?)think>", re.I)


def _strip_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks (each from an opening tag to the first closing tag
    after it; an unclosed block is kept), in one pass: the regex ``<think>.*?</think>`` took 35 s on a reply of
    20,000 unclosed ``<think>`` tags (quadratic), this takes milliseconds."""
    text = text or ""
    if "<" not in text:
        return text
    out: list[str] = []
    pos, opened = 0, -1
    for m in _THINK_TAG.finditer(text):
        if not m.group(1):
            if opened < 0:
                opened = m.start()
        elif opened >= 0:
            out.append(text[pos:opened])
            pos, opened = m.end(), -1
    out.append(text[pos:])
    return "".join(out)


def _call_from_value(value: Any, raw: str, index: int) -> ToolCall:
    """A ToolCall from a parsed JSON value, accepting the usual aliases."""
    cid = f"call_{index}"
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        return ToolCall("", id=cid, raw=raw, error="the tool call is not a JSON object")
    if isinstance(value.get("function"), dict):  # {"function": {"name", "arguments"}} (OpenAI shape)
        value = value["function"]
    name = value.get("name") or value.get("tool") or value.get("tool_name")
    if not isinstance(name, str) or not name.strip():
        return ToolCall("", id=cid, raw=raw, error='the tool call has no "name"')
    args: Any = None
    for key in ("arguments", "parameters", "args", "input"):
        if key in value:
            args = value[key]
            break
    if args is None:
        args = {k: v for k, v in value.items() if k not in {"name", "tool", "tool_name", "id"}}
    if isinstance(args, str):
        parsed = parse_arguments(args)
        if isinstance(parsed, str):
            return ToolCall(name.strip(), id=cid, raw=raw, error=parsed)
        args = parsed
    if not isinstance(args, dict):
        return ToolCall(name.strip(), id=cid, raw=raw, error='"arguments" must be a JSON object')
    return ToolCall(name.strip(), args, id=cid, raw=raw)


def parse_arguments(text: str) -> dict[str, Any] | str:
    """A tool call's ``arguments`` JSON string as a dict (repaired where safe), or an error message."""
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = parse_json(text, {"type": "object"})
        except JSONParseError as exc:
            return f"the arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return '"arguments" must be a JSON object'
    return value


def parse_tool_calls(text: str, tool_names: Collection[str] | None = None) -> list[ToolCall]:
    """Every ``<tool_call>`` block in ``text``, in order.

    Without any block, a fenced or bare JSON object ``{"name": ..., "arguments": ...}`` also counts,
    but only when ``tool_names`` is given and it names one of them (so an answer that quotes JSON is
    not mistaken for a call)."""
    text = _strip_think(text)
    calls: list[ToolCall] = []
    for i, m in enumerate(_BLOCK.finditer(text)):
        body = m.group(1).strip()
        if not body:
            calls.append(ToolCall("", id=f"call_{i}", raw=m.group(0), error="the <tool_call> block is empty"))
            continue
        try:
            value = extract_json(body)
        except JSONParseError as exc:
            calls.append(ToolCall("", id=f"call_{i}", raw=body, error=f"the tool call is not valid JSON ({exc})"))
            continue
        calls.append(_call_from_value(value, body, i))
    if calls or not tool_names:
        return calls
    names = set(tool_names)
    candidates = [m.group(1) for m in _FENCED.finditer(text)] or [text]
    for body in candidates:
        try:
            value = extract_json(body)
        except JSONParseError:
            continue
        if not isinstance(value, dict):
            continue
        fn = value.get("function")
        if value.get("name") in names or (isinstance(fn, dict) and fn.get("name") in names):
            calls.append(_call_from_value(value, body, len(calls)))
    return calls or _function_calls(text, names)


def _function_calls(text: str, names: set[str]) -> list[ToolCall]:
    """Calls written as ``Name(key="value", ...)`` naming one of ``names`` (keyword arguments only)."""
    if not names:
        return []
    pattern = _call_pattern(frozenset(names))
    calls: list[ToolCall] = []
    for m in pattern.finditer(text):
        end = _closing_paren(text, m.end())
        if end < 0:
            continue
        raw = text[m.start(): end + 1]
        try:
            node = ast.parse(f"f({text[m.end(): end]})", mode="eval").body
        except SyntaxError:
            continue  # prose that mentions a tool, e.g. "ImageSearch (the search tool)"
        assert isinstance(node, ast.Call)
        cid = f"call_{len(calls)}"
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except (ValueError, SyntaxError):
            calls.append(ToolCall(m.group(1), id=cid, raw=raw, error="the arguments must be literals, e.g. "
                                  f'{m.group(1)}(query="keywords")'))
            continue
        if node.args:
            calls.append(ToolCall(m.group(1), id=cid, raw=raw, error="name every argument, e.g. "
                                  f'{m.group(1)}(query="keywords")'))
            continue
        calls.append(ToolCall(m.group(1), args, id=cid, raw=raw))
    return calls


@lru_cache(maxsize=64)
def _call_pattern(names: frozenset[str]) -> re.Pattern[str]:
    return re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\s*\(")


def _closing_paren(text: str, start: int) -> int:
    """The index of the ``)`` closing the call whose arguments start at ``start`` (quote-aware), or -1."""
    depth, quote, esc = 1, "", False
    for i in range(start, min(len(text), start + 4000)):
        ch = text[i]
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def native_tool_calls(raw_calls: Sequence[dict[str, Any]]) -> list[ToolCall]:
    """A backend's ``tool_calls`` (``{"id", "name", "arguments": JSON string}``) as ToolCalls."""
    calls = []
    for i, c in enumerate(raw_calls):
        cid = str(c.get("id") or f"call_{i}")
        name = str(c.get("name") or "").strip()
        args: Any = c.get("arguments")
        if isinstance(args, str):
            args = parse_arguments(args)
        if isinstance(args, str):
            calls.append(ToolCall(name, id=cid, raw=str(c.get("arguments")), error=args))
        elif not isinstance(args, dict):
            calls.append(ToolCall(name, id=cid, raw=json.dumps(args), error='"arguments" must be a JSON object'))
        elif not name:
            calls.append(ToolCall("", args, id=cid, error="the tool call has no name"))
        else:
            calls.append(ToolCall(name, args, id=cid))
    return calls


def strip_tool_calls(text: str) -> str:
    """The reply without its ``<tool_call>`` blocks and ``<think>`` drafts: the model's reasoning text."""
    return _BLOCK.sub("", _strip_think(text)).strip()


def parse_final_answer(text: str) -> list[str] | None:
    """The ids in the last ``The final answer is: [...]`` of ``text``; None when there is none.

    Ids may be quoted or bare (``[5890572248, 6782065157]``); duplicates are dropped, order kept.
    An explicit empty list gives ``[]`` (the caller applies the never-empty rule)."""
    text = _strip_think(text)
    matches = list(_FINAL.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end():]
    start = rest.find("[")
    if start < 0:
        return None
    end = rest.find("]", start)
    body = rest[start:] if end < 0 else rest[start: end + 1]
    ids: list[str] = []
    try:
        value = parse_json(body, {"type": "array", "items": {"type": "string"}})
        ids = [str(v).strip() for v in value]
    except JSONParseError:
        inner = body.strip("[]")
        ids = [t for t in (_ID_TOKEN.findall(inner))]
    out: list[str] = []
    for i in ids:
        i = i.strip().strip("'\"")
        if i and i not in out:
            out.append(i)
    return out


def tools_as_openai(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` list for these tools."""
    return [t.spec() for t in tools]


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A call written in the text protocol (how a native call is replayed to a text-only backend)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def format_tool_response(name: str, text: str) -> str:
    """A tool's result in the text protocol."""
    return f"<tool_response>\n[{name}]\n{text}\n</tool_response>"


def text_protocol_prompt(tools: Sequence[Tool]) -> str:
    """The system-prompt section that offers ``tools`` through the text protocol."""
    lines = [
        "# Tools",
        "",
        "You can call the tools below. To call one, write a block like this (JSON inside, nothing else):",
        "<tool_call>",
        '{"name": "<tool name>", "arguments": {<arguments as JSON>}}',
        "</tool_call>",
        "You may write several blocks in one reply. Each result comes back to you inside "
        "<tool_response></tool_response>. When you have the answer, reply without any <tool_call> block.",
        "",
        "Available tools (arguments as JSON Schema):",
    ]
    for t in tools:
        lines.append(f"- {t.name}: {t.description}")
        lines.append(f"  arguments: {json.dumps(t.parameters, ensure_ascii=False)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the JSON protocol

JSON_THOUGHT_CHARS = 300  # the reasoning a turn writes before its action (bounded: the grammar needs a bound)
JSON_ANSWER_KEY = "final_answer"


def fix_arguments(params: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """A tool's grammar parameters with ``fixed`` arguments set: each becomes a required constant (a list one of
    exactly its items, in order; a :class:`~imagent.agents.state.OneOf` one of its values)."""
    props = dict(params.get("properties") or {})
    for key, value in fixed.items():
        if isinstance(value, OneOf):
            props[key] = {"enum": list(value.values)}
        elif isinstance(value, list):
            props[key] = {"type": "array", "prefixItems": [{"const": v} for v in value], "items": False,
                          "minItems": len(value), "maxItems": len(value)}
        else:
            props[key] = {"const": value}
    required = list(dict.fromkeys([*(params.get("required") or []), *fixed]))
    return {**params, "properties": props, "required": required}


def json_turn_schema(tools: Sequence[Tool], ids: Sequence[str], subsets: Sequence[str], *, tools_allowed: bool = True,
                     answer_allowed: bool = True, max_answer: int = 20,
                     used: dict[str, Collection[str]] | None = None,
                     fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The schema of one JSON-protocol reply: one of the offered tools' calls, or the final answer.

    ``ids`` (the photos the tools returned so far) bound every photo-id argument and the answer;
    ``subsets`` the subset names; ``used`` (tool name -> ids it was called on) removes those ids from
    the tools that do not take a photo twice (``Tool.repeat_ids``). ``answer_allowed=False`` (no photo seen
    yet) leaves only tool calls; ``tools_allowed=False`` (the budget is spent) only the answer. ``fixed``: arguments
    every offered call must have (:func:`fix_arguments`; a hook's :class:`~imagent.agents.state.NextCall`). Raises
    ValueError when nothing is left."""
    thought = {"type": "string", "maxLength": JSON_THOUGHT_CHARS}
    alternatives: list[dict[str, Any]] = []
    used = used or {}
    if tools_allowed:
        for t in tools:
            done = used.get(t.name) if not t.repeat_ids else None
            params = t.grammar_parameters([i for i in ids if i not in done] if done else ids, subsets)
            if params is None:
                continue
            if fixed:
                params = fix_arguments(params, fixed)
            alternatives.append({"type": "object",
                                 "properties": {"thought": thought, "tool": {"const": t.name}, "arguments": params},
                                 "required": ["thought", "tool", "arguments"], "additionalProperties": False})
    if answer_allowed and ids:
        answer = {"type": "array", "items": {"enum": list(ids)}, "minItems": 1, "maxItems": max_answer}
        alternatives.append({"type": "object", "properties": {"thought": thought, JSON_ANSWER_KEY: answer},
                             "required": ["thought", JSON_ANSWER_KEY], "additionalProperties": False})
    if not alternatives:
        raise ValueError("no tool can be called and no photo was seen: nothing to offer")
    return alternatives[0] if len(alternatives) == 1 else {"oneOf": alternatives}


def parse_json_turn(text: str, index: int = 0) -> tuple[str, list[ToolCall], list[str] | None]:
    """A JSON-protocol reply as ``(thought, calls, answer)``: one call, or the answer ids, or (a reply that
    is not such an object) one unreadable call whose error goes back to the model."""
    try:
        value = extract_json(_strip_think(text))
    except JSONParseError as exc:
        return "", [ToolCall("", id=f"call_{index}", raw=text, error=f"the reply is not a JSON object ({exc})")], None
    if not isinstance(value, dict):
        return "", [ToolCall("", id=f"call_{index}", raw=text, error="the reply is not a JSON object")], None
    thought = str(value.get("thought") or "").strip()
    if JSON_ANSWER_KEY in value and "tool" not in value:
        raw = value[JSON_ANSWER_KEY]
        items = raw if isinstance(raw, list) else [raw]
        return thought, [], list(dict.fromkeys(str(i).strip() for i in items if str(i).strip()))
    call = _call_from_value({"name": value.get("tool") or value.get("name"),
                             "arguments": value.get("arguments", {})}, text, index)
    return thought, [call], None


def render_worked_example(example: dict[str, Any], mode: str) -> str:
    """A worked example (``{"query", "steps": [{"thought", "tool", "arguments", "result"}], "answer": {"thought",
    "ids"}}``) written in the protocol ``mode`` speaks ("json" or "text"), so a small model sees the exact turns
    it must write."""
    lines = [f"User: {example['query']}"]
    for st in example.get("steps") or []:
        if mode == "json":
            body = json.dumps({"thought": st["thought"], "tool": st["tool"], "arguments": st["arguments"]},
                              ensure_ascii=False)
            lines.append(f"You: {body}")
        else:
            lines.append(f"You: {st['thought']}\n{format_tool_call(st['tool'], st['arguments'])}")
        lines.append(f"Tool: {format_tool_response(st['tool'], st['result'])}")
    ans = example.get("answer") or {}
    if ans:
        ids = json.dumps(list(ans["ids"]), ensure_ascii=False)
        if mode == "json":
            lines.append("You: " + json.dumps({"thought": ans["thought"], JSON_ANSWER_KEY: list(ans["ids"])},
                                              ensure_ascii=False))
        else:
            lines.append(f"You: {ans['thought']} The final answer is: {ids}")
    return "\n".join(lines)


def _example_args(tool: Tool) -> dict[str, Any]:
    if tool.example is not None:
        return tool.example
    props = tool.parameters.get("properties") or {}
    return {k: f"<{k}>" for k in tool.parameters.get("required") or [] if k in props}


def compact_tool_list(tools: Sequence[Tool], name_key: str = "tool") -> str:
    """One line per tool (signature, description) and an example call (``name_key`` names the tool: "tool" in
    the JSON protocol, "name" in the text protocol): what a small model can take in."""
    lines = []
    for t in tools:
        lines.append(f"- {t.signature()}: {t.description}")
        lines.append(f'  e.g. {json.dumps({name_key: t.name, "arguments": _example_args(t)}, ensure_ascii=False)}')
    return "\n".join(lines)


def json_protocol_prompt(tools: Sequence[Tool], worked_example: str = "") -> str:
    """The system-prompt section of the JSON protocol: the reply format, the tools, one worked example."""
    lines = [
        "# How to reply",
        "",
        "Every reply is ONE JSON object, either a tool call:",
        '{"thought": "<what you know and what you do next>", "tool": "<tool name>", "arguments": {...}}',
        "or, when you are done, your answer:",
        '{"thought": "<why these photos>", "final_answer": ["<photo id>", "<photo id>"]}',
        "Call a tool first: photo ids come only from tool results. The result comes back inside "
        "<tool_response></tool_response>. This JSON answer replaces any other answer format named above.",
        "",
        "# Tools",
        "",
        compact_tool_list(tools),
    ]
    if worked_example.strip():
        lines += ["", "# Worked example", "", worked_example.strip()]
    return "\n".join(lines)


def text_protocol_prompt_compact(tools: Sequence[Tool], worked_example: str = "") -> str:
    """The text protocol's section for a small model: the short tool list instead of full JSON Schemas."""
    lines = [
        "# Tools",
        "",
        "To call a tool, write exactly one block like this:",
        "<tool_call>",
        '{"name": "<tool name>", "arguments": {...}}',
        "</tool_call>",
        "Call a tool first: photo ids come only from tool results, which come back inside "
        "<tool_response></tool_response>. When you are done, reply without a <tool_call> block.",
        "",
        compact_tool_list(tools, "name"),
    ]
    if worked_example.strip():
        lines += ["", "# Worked example", "", worked_example.strip()]
    return "\n".join(lines)


__all__ = [
    "JSON_ANSWER_KEY",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ToolCall",
    "compact_tool_list",
    "fix_arguments",
    "format_tool_call",
    "format_tool_response",
    "json_protocol_prompt",
    "json_turn_schema",
    "native_tool_calls",
    "parse_arguments",
    "parse_final_answer",
    "parse_json_turn",
    "parse_tool_calls",
    "render_worked_example",
    "strip_tool_calls",
    "text_protocol_prompt",
    "text_protocol_prompt_compact",
    "tools_as_openai",
]
