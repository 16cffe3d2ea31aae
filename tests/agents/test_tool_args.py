"""Tool arguments as pydantic models (issue 44): the JSON Schema the model reads is generated from the model, with
the bounds the grammar-constrained JSON protocol needs, and a bad argument goes back to the model as a clear
observation (the loop goes on; the model can correct itself)."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import Field

from imagent.agents import NoArgs, Observation, Tool, ToolArgs, ToolError, args_schema, validate_args, with_fields
from imagent.agents.wire import json_turn_schema
from imagent.methods.album.tools import AlbumToolsConfig, album_tools

from .test_runtime import call, run_agent, scripted, turn_steps


class Step(ToolArgs):
    name: str
    op: Literal["UNION", "INTERSECT"]


class PlanArgs(ToolArgs):
    query: str = Field(description="keywords", min_length=1)
    k: int = Field(20, description="how many", ge=1, le=50)
    mode: Literal["fast", "exact"] | None = Field(None, description="how")
    ids: list[str] | None = Field(None, max_length=4, description="photo ids")
    steps: list[Step] | None = None


def test_the_schema_is_generated_from_the_model_with_its_bounds_and_choices():
    schema = args_schema(PlanArgs)
    assert schema == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "keywords", "minLength": 1},
            "k": {"type": "integer", "description": "how many", "default": 20, "minimum": 1, "maximum": 50},
            "mode": {"type": "string", "enum": ["fast", "exact"], "description": "how"},
            "ids": {"type": "array", "items": {"type": "string"}, "maxItems": 4, "description": "photo ids"},
            "steps": {"type": "array", "items": {
                "type": "object", "properties": {"name": {"type": "string"},
                                                 "op": {"type": "string", "enum": ["UNION", "INTERSECT"]}},
                "required": ["name", "op"], "additionalProperties": False}},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert "title" not in json.dumps(schema) and "$ref" not in json.dumps(schema)  # what a model reads, no noise
    assert args_schema(NoArgs) == {"type": "object", "properties": {}, "additionalProperties": False}
    # a bound from a tool's settings: the field redefined, in its place
    bounded = with_fields(PlanArgs, k=(int, Field(7, description="how many", ge=1, le=9)))
    assert list(args_schema(bounded)["properties"]) == list(schema["properties"])
    assert args_schema(bounded)["properties"]["k"] == {"type": "integer", "description": "how many", "default": 7,
                                                       "minimum": 1, "maximum": 9}
    with pytest.raises(ToolError, match="argument 'k' must be <= 9, not 20"):
        validate_args(bounded, {"query": "x", "k": 20}, tool="Plan")


@pytest.mark.real_model  # the album is encoded with MiniLM
def test_the_album_tools_schemas_carry_what_the_json_grammar_needs(known_album):
    """The 0.5B loops inside an unbounded string or list: every string the grammar offers has a maxLength, every
    list a maxItems, every choice (a Literal field, a photo id, a subset name) an enum, all from the models."""
    tools = {t.name: t for t in album_tools(known_album, AlbumToolsConfig(max_top_k=30, top_k=12))}
    search = tools["ImageSearch"].parameters["properties"]
    assert search["top_k"] == {"type": "integer", "description": "how many results", "default": 12, "minimum": 1,
                               "maximum": 30}  # the settings' default and most
    meta = tools["GetMetadata"].parameters
    assert meta["required"] == ["photo_ids"] and meta["additionalProperties"] is False
    assert meta["properties"]["fields"]["items"] == {"type": "string", "enum": ["time", "place", "lat", "lon",
                                                                                 "address", "device"]}
    same = tools["FilterMetadata"].parameters["properties"]["same"]
    assert (same["minItems"], same["maxItems"]) == (1, 3) and "other_day" in same["items"]["enum"]
    schema = json_turn_schema(list(tools.values()), ["penguin", "heron"], ["that_day"])

    def leaves(node):
        if isinstance(node, dict):
            yield node
            for v in node.values():
                yield from leaves(v)
        elif isinstance(node, list):
            for v in node:
                yield from leaves(v)

    strings = [n for n in leaves(schema) if n.get("type") == "string" and "pattern" not in n]
    arrays = [n for n in leaves(schema) if n.get("type") == "array"]
    assert strings and all("maxLength" in n for n in strings)
    assert arrays and all("maxItems" in n for n in arrays)
    args = {alt["properties"]["tool"]["const"]: alt["properties"]["arguments"]["properties"]
            for alt in schema["oneOf"] if "tool" in alt["properties"]}
    assert args["GetMetadata"]["fields"]["items"] == {"enum": ["time", "place", "lat", "lon", "address", "device"]}
    assert args["FilterMetadata"]["same"]["items"]["enum"][0] == "day"
    assert args["ViewPhotos"]["photo_ids"]["items"] == {"enum": ["penguin", "heron"]}
    assert args["ImageSearch"]["search_within"] == {"enum": ["that_day"]}


class Count(Tool):
    name = "Count"
    description = "Count to k."
    Args = PlanArgs

    def run(self, args, scope):
        return Observation(f"counted {args.query} to {args.k}")


def test_a_bad_argument_goes_back_to_the_model_as_a_clear_observation():
    model = scripted([call("Count", query="birds", k=500), call("Count", query="birds", k="lots"),
                      call("Count", query="birds", colour="red"), call("Count", k=3),
                      call("Count", query="birds", mode="Exact", k="5"), 'The final answer is: ["p1"]'])
    run, trace = run_agent(model, tools=[Count()], max_turns=6, stuck_after=0)
    observations = [s.outputs["observation"] for s in turn_steps(trace)[:5]]
    assert observations[0] == "Error: Count: argument 'k' must be <= 50, not 500"
    assert observations[1] == "Error: Count: bad argument k: expected a number, got 'lots'"
    assert observations[2].startswith("Error: Count: unknown argument(s) 'colour'; it takes query (string), k ("
                                      "integer), mode (string), ids (array), steps (array)")
    assert observations[3].startswith("Error: Count: missing required argument(s) 'query'")
    assert observations[4] == "counted birds to 5"  # repaired: "5" for 5, "Exact" for exact
    assert all(s.outputs["calls"][0]["error"] for s in turn_steps(trace)[:4])
    # each error reached the model as its tool result, and the loop went on to the answer
    assert "argument 'k' must be <= 50, not 500" in model.calls[1][0][-1].text
    assert run.answer == ["p1"] and run.source == "model"
