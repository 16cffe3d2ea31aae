"""How tool calls and answers travel between the runtime and a model.

Two paths:

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
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from imagent.models.json_output import JSONParseError, extract_json, parse_json

if TYPE_CHECKING:
    from imagent.agents.tools import Tool

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.S | re.I)
_FENCED = re.compile(r"```(?:json|JSON)?\s*(\{.*?\})\s*```", re.S)
_FINAL = re.compile(r"final\s+answer\s*(?:is)?\s*[:：]?\s*", re.I)
_ID_TOKEN = re.compile(r"[A-Za-z0-9][\w.:/-]*")


@dataclass
class ToolCall:
    """One call the model asked for. ``error`` is set when the call could not be read; ``raw`` is
    the text it was read from (for the trace)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    error: str | None = None
    raw: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.error:
            d["error"] = self.error
        return d

    def openai(self) -> dict[str, Any]:
        """The ``{"id", "name", "arguments"}`` form an assistant :class:`~imagent.models.base.Message` carries."""
        return {"id": self.id, "name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}


def _strip_think(text: str) -> str:
    return _THINK.sub("", text or "")


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
    return calls


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


__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ToolCall",
    "format_tool_call",
    "format_tool_response",
    "native_tool_calls",
    "parse_arguments",
    "parse_final_answer",
    "parse_tool_calls",
    "strip_tool_calls",
    "text_protocol_prompt",
    "tools_as_openai",
]
