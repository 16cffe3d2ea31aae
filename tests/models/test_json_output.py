"""parse_json on the malformed output small models really produce, and Role.json's retry / fall-back."""

from __future__ import annotations

from typing import Any

import pytest

from imagent.core.trace import Trace
from imagent.models.base import ChatError, Message
from imagent.models.chat_scripted import ScriptedChatModel
from imagent.models.json_output import JSONParseError, extract_json, parse_json
from imagent.models.roles import Role

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "target": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ok": {"type": "boolean"},
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "kind": {"type": "string", "enum": ["Photo", "Drawing"]},
    },
    "required": ["target"],
}
BOUNDED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "target": {"type": "string", "maxLength": 5},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    },
    "required": ["target"],
}

# (model output, expected value under SCHEMA)
REPAIRED: list[tuple[str, dict[str, Any]]] = [
    # prose around the JSON
    ('Sure! Here is the JSON you asked for: {"target": "cat"} Hope this helps.', {"target": "cat"}),
    ('Answer:\n{"target": "cat", "n": 2}\nLet me know if you need anything else.', {"target": "cat", "n": 2}),
    # code fences
    ('```json\n{"target": "cat"}\n```', {"target": "cat"}),
    ('Here:\n```\n{"target": "cat", "ok": true}\n```\nDone.', {"target": "cat", "ok": True}),
    # unclosed fence (output cut short)
    ('```json\n{"target": "cat", "tags": ["a", "b"]}', {"target": "cat", "tags": ["a", "b"]}),
    ('```json\n{"target": "cat", "tags": ["a", "b', {"target": "cat", "tags": ["a", "b"]}),
    # trailing commas
    ('{"target": "cat", "tags": ["a", "b",],}', {"target": "cat", "tags": ["a", "b"]}),
    ('{\n  "target": "cat",\n  "n": 3,\n}', {"target": "cat", "n": 3}),
    # single quotes / Python literals
    ("{'target': 'cat', 'ok': True, 'tags': ['a']}", {"target": "cat", "ok": True, "tags": ["a"]}),
    ("{'target': \"it's\", 'ok': False}", {"target": "it's", "ok": False}),
    ('{"target": "cat", "ok": True, "n": None}', {"target": "cat", "ok": True}),  # None for optional = absent
    ('{"target": "cat", "ok": TRUE}', {"target": "cat", "ok": True}),
    ("{'target': 'null and void', 'ok': true}", {"target": "null and void", "ok": True}),
    # truncated object / string / literal (max_tokens cut)
    ('{"target": "cat", "tags": ["a"', {"target": "cat", "tags": ["a"]}),
    ('{"target": "a long descr', {"target": "a long descr"}),
    ('{"target": "cat", "n": 4, "ok": tr', {"target": "cat", "n": 4}),
    ('{"target": "cat", "tag', {"target": "cat"}),
    ('{"target": "cat", "tags":', {"target": "cat"}),
    ('{"target": "cat\\', {"target": "cat"}),
    ('{"target": "cat", "x": 2.', {"target": "cat", "x": 2.0}),
    # nested truncation
    ('{"target": "cat", "meta": {"a": [1, 2, {"b": "c', {"target": "cat", "meta": {"a": [1, 2, {"b": "c"}]}}),
    ('{"target": "cat", "meta": {"k": 1}, "tags": ["x", "y"', {"target": "cat", "meta": {"k": 1},
                                                               "tags": ["x", "y"]}),
    # wrong types coerced per schema
    ('{"target": "cat", "tags": "single"}', {"target": "cat", "tags": ["single"]}),
    ('{"target": "cat", "ok": "true"}', {"target": "cat", "ok": True}),
    ('{"target": "cat", "ok": "No"}', {"target": "cat", "ok": False}),
    ('{"target": "cat", "ok": 1}', {"target": "cat", "ok": True}),
    ('{"target": "cat", "n": "3", "x": "2.5"}', {"target": "cat", "n": 3, "x": 2.5}),
    ('{"target": "cat", "n": 2.0}', {"target": "cat", "n": 2}),
    ('{"target": ["a", "cat"]}', {"target": "a cat"}),
    ('{"target": 42, "tags": [1, 2]}', {"target": "42", "tags": ["1", "2"]}),
    # keys in another case / with spaces, enum case
    ('{"Target": "cat", "OK ": false}', {"target": "cat", "ok": False}),
    ('{"target": "cat", "kind": "photo"}', {"target": "cat", "kind": "Photo"}),
    ('{"target": "cat", "kind": " DRAWING "}', {"target": "cat", "kind": "Drawing"}),
    # two JSON objects: the first
    ('{"target": "first"} {"target": "second"}', {"target": "first"}),
    ('{"target": "first"}\n```json\n{"target": "fenced"}\n```', {"target": "fenced"}),  # a fence is the answer
    # array of one object for an object schema
    ('[{"target": "cat"}]', {"target": "cat"}),
    # unicode, escaped quotes, braces and commas inside strings
    ('{"target": "Zürich café ☕ 東京"}', {"target": "Zürich café ☕ 東京"}),
    ('{"target": "\\u00e9t\\u00e9"}', {"target": "été"}),
    ('{"target": "say \\"hi\\" {now}"}', {"target": 'say "hi" {now}'}),
    ('{"target": "a {weird} [string] with } and ]"}', {"target": "a {weird} [string] with } and ]"}),
    ('{"target": "x,]", "tags": ["a,}",]}', {"target": "x,]", "tags": ["a,}"]}),
    ('{"target": "see http://example.com/a"}', {"target": "see http://example.com/a"}),
    ('{"target": "it\\\'s"}', {"target": "it's"}),
    # raw newline inside a string, comments, unquoted keys, missing commas
    ('{"target": "line one\nline two"}', {"target": "line one\nline two"}),
    ('{\n  "target": "cat", // the main object\n  "n": 1\n}', {"target": "cat", "n": 1}),
    ('{target: "cat", n: 5}', {"target": "cat", "n": 5}),
    ('{"target": "cat"\n "tags": ["a" "b"]}', {"target": "cat", "tags": ["a", "b"]}),
    # prose with brackets before the JSON; reasoning before the answer
    ('Use the format {key: value}. [Note] {"target": "cat"}', {"target": "cat"}),
    ('<think>maybe {"target": "draft"}</think>\n{"target": "final"}', {"target": "final"}),
]


@pytest.mark.parametrize(("text", "expected"), REPAIRED)
def test_repaired(text: str, expected: dict[str, Any]) -> None:
    assert parse_json(text, SCHEMA) == expected


def test_max_length_is_a_generation_bound_strings_are_never_cut_below_the_hard_cap() -> None:
    # maxLength bounds generation (grammars); after it a cut only loses content (issue 12: a tool tag at the
    # end of a rationale). Strings are kept whole; extra list items are dropped; both are noted and counted.
    trace = Trace()
    with trace.step("parse") as step:
        value = parse_json('{"target": "abcdefgh", "tags": ["abcd", "b", "c", "d"]}', BOUNDED)
    assert value == {"target": "abcdefgh", "tags": ["abcd", "b"]}
    assert trace.counters["json_cuts"] == 3
    assert any("$.target: 8 characters, over maxLength 5: kept whole" in n for n in step.notes)
    assert any("$.tags: kept the first 2 of 4 items" in n for n in step.notes)
    with trace.step("parse2") as step2:
        assert parse_json('{"target": "ab"}', BOUNDED) == {"target": "ab"}
    assert step2.notes == []


def test_runaway_strings_are_cut_at_the_hard_cap_and_the_cut_recorded() -> None:
    from imagent.models.json_output import MAX_FIELD_CHARS

    trace = Trace()
    with trace.step("parse") as step:
        value = parse_json('{"target": "' + "a" * (MAX_FIELD_CHARS + 10) + '"}', SCHEMA)
    assert len(value["target"]) == MAX_FIELD_CHARS
    assert any(f"cut from {MAX_FIELD_CHARS + 10} to {MAX_FIELD_CHARS}" in n for n in step.notes)


def test_snake_case_schema_matches_spaced_keys() -> None:
    schema = {"type": "object", "properties": {"target_description": {"type": "string"}},
              "required": ["target_description"]}
    assert parse_json('{"Target Description": "a dog"}', schema) == {"target_description": "a dog"}
    assert parse_json('{"target-description": "a dog"}', schema) == {"target_description": "a dog"}


def test_first_value_that_fits_the_schema_wins() -> None:
    # A bracketed list in the prose parses but is not an object; the object after it is the answer.
    assert parse_json('Step [1] done. {"target": "cat"}', SCHEMA) == {"target": "cat"}


def test_array_schema() -> None:
    schema = {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    assert parse_json('["a", "b", "c", "d"]', schema) == ["a", "b", "c"]
    assert parse_json('Queries:\n["red car", "blue c', schema) == ["red car", "blue c"]


def test_no_schema_returns_the_value() -> None:
    assert parse_json('noise {"a": [1, {"b": null}]} noise') == {"a": [1, {"b": None}]}
    assert extract_json("x [1, 2,] y") == [1, 2]


def test_valid_json_is_untouched() -> None:
    text = '{"a": "True, None, // not a comment, {b: 1}", "c": [true, false, null], "d": "\'q\'"}'
    assert parse_json(text) == {"a": "True, None, // not a comment, {b: 1}", "c": [True, False, None], "d": "'q'"}


UNUSABLE: list[tuple[str, str]] = [
    ("", "empty"),
    ("   \n ", "empty"),
    ("I cannot help with that request.", "no JSON"),
    ("The answer is yes.", "no JSON"),
    ('{"tags": ["a"]}', "missing required"),  # required field absent
    ('{"target": null}', "expected a string"),  # required field null
    ('{"target": "cat", "kind": "sculpture"}', "not in"),  # enum miss
    ('{"target": "cat", "n": 2.5}', "integer"),
    ('{"target": "cat", "n": "three"}', "number"),
    ('{"target": "cat", "ok": "maybe"}', "boolean"),
    ('{"target": "cat", "ok": 2}', "boolean"),
    ('{"target": "cat", "x": NaN}', "finite"),
    ('{"target": {"nested": "object"}}', "string"),
    ('["a", "b"]', "object"),  # several items where one object was asked
]


@pytest.mark.parametrize(("text", "match"), UNUSABLE)
def test_unusable_raises(text: str, match: str) -> None:
    with pytest.raises(JSONParseError, match=match):
        parse_json(text, SCHEMA)


def test_json_parse_error_is_a_value_error() -> None:
    # Role.json catches ValueError from validators and parse errors alike.
    assert issubclass(JSONParseError, ValueError)


def test_pathological_input_is_bounded() -> None:
    # Many stray brackets must not make extraction quadratic or recursive without end.
    with pytest.raises(JSONParseError):
        parse_json("[x] " * 5000, SCHEMA)
    # Absurd nesting is refused as unusable, not as a RecursionError escaping to the caller.
    with pytest.raises(JSONParseError):
        extract_json("[" * 100_000 + "1" + "]" * 100_000)


@pytest.mark.parametrize("reply", ["[" * 60_000, "{" * 2_000, "[" * 65 + "1" + "]" * 65,
                                   '{"a": ' * 70 + "1" + "}" * 70, "Sure: " + "[{" * 40])
def test_absurd_nesting_never_reaches_a_recursive_parser(reply: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """json.loads and ast.literal_eval recurse per level: driven to the recursion limit, whatever else ran at
    that depth failed too (CI once failed on 49 garbage-collector finalizers that did, whose reports overflowed
    as well). Such a value is refused before either parser sees it."""
    import ast
    import json

    from imagent.models import json_output

    seen: list[str] = []
    real_loads, real_eval = json.loads, ast.literal_eval
    monkeypatch.setattr(json_output.json, "loads", lambda s, **kw: (seen.append(s), real_loads(s, **kw))[1])
    monkeypatch.setattr(json_output.ast, "literal_eval", lambda s: (seen.append(s), real_eval(s))[1])
    with pytest.raises(JSONParseError):
        extract_json(reply)
    assert not [s for s in seen if s.count("[") + s.count("{") > json_output.MAX_NESTING]


def test_nesting_is_counted_outside_strings_only() -> None:
    from imagent.core.text import nested_deeper_than

    assert nested_deeper_than("[" * 65, 64) and not nested_deeper_than("[" * 64 + "]" * 64, 64)
    assert not nested_deeper_than('["' + "[{" * 100 + '"]', 1)  # brackets inside a string
    assert not nested_deeper_than(r'["a \" [[[ still a string", 1]', 1)  # an escaped quote does not end it
    assert not nested_deeper_than(r'["ends in a backslash \\", [1]]', 2)
    assert not nested_deeper_than("[]" * 10_000, 1)
    assert extract_json('{"a": ' * 60 + "1" + "}" * 60) is not None  # deep, but under the limit: parsed


# --------------------------------------------------------------------------- Role.json


def _role(replies: list[str]) -> tuple[Role, ScriptedChatModel]:
    it = iter(replies)
    model = ScriptedChatModel(default=lambda _text: next(it))
    return Role("planner", model), model


MSGS = [Message.user("Describe the target as JSON.")]


def test_role_json_retries_then_succeeds() -> None:
    role, model = _role(["I think it is a cat.", '```json\n{"target": "cat", "tags": "pet"}\n```'])
    value, ok = role.json(MSGS, SCHEMA, fallback=lambda: {"target": "?"})
    assert ok is True
    assert value == {"target": "cat", "tags": ["pet"]}
    assert len(model.calls) == 2
    first, second = (p for _, p in model.calls)
    assert first.json_schema == SCHEMA and second.json_schema == SCHEMA
    assert first.seed != second.seed  # a retry must not replay the same deterministic output


def test_role_json_falls_back_and_notes_it() -> None:
    role, model = _role(["nope"] * 3)
    trace = Trace()
    with trace.step("stage1.describe") as step:
        value, ok = role.json(MSGS, SCHEMA, fallback=lambda: {"target": "fallback"}, retries=2)
    assert ok is False
    assert value == {"target": "fallback"}
    assert len(model.calls) == 3
    assert any("fell back" in n and "planner" in n for n in step.notes)
    assert step.model_calls == 3


def test_role_json_without_fallback_raises() -> None:
    role, _ = _role(["nope", "still nope"])
    with pytest.raises(JSONParseError, match="no usable JSON after 2 tries"):
        role.json(MSGS, SCHEMA, retries=1)


def test_role_json_validate_triggers_retry() -> None:
    role, model = _role(['{"target": ""}', '{"target": "cat"}'])

    def nonempty(v: dict[str, Any]) -> dict[str, Any]:
        if not v["target"]:
            raise ValueError("empty target")
        return v

    value, ok = role.json(MSGS, SCHEMA, validate=nonempty, fallback=dict)
    assert (value, ok) == ({"target": "cat"}, True)
    assert len(model.calls) == 2


def test_role_json_chat_error_is_retried() -> None:
    replies = iter(["boom", '{"target": "cat"}'])

    def reply(_text: str) -> str:
        r = next(replies)
        if r == "boom":
            raise ChatError("connection reset")
        return r

    role = Role("planner", ScriptedChatModel(default=reply))
    assert role.json(MSGS, SCHEMA) == ({"target": "cat"}, True)
