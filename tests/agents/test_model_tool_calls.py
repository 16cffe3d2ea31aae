"""Native tool calls through the model layer: messages, request bodies, responses and the call cache."""

from __future__ import annotations

import json

import httpx

from imagent.agents import AgentRuntime, Observation, Tool, ToolArgs
from imagent.models.base import ChatParams, ChatResponse, Message
from imagent.models.chat_llamacpp import LlamaCppChatModel
from imagent.models.chat_openai import OpenAIChatModel, openai_message
from imagent.models.roles import Role

SPEC = [{"type": "function", "function": {"name": "ImageSearch", "description": "d",
                                          "parameters": {"type": "object", "properties": {}}}}]


def test_chat_params_and_response_serialise_tool_fields_only_when_used():
    assert "tools" not in ChatParams().to_dict() and "tool_choice" not in ChatParams().to_dict()
    assert ChatParams(tools=SPEC, tool_choice="auto").to_dict()["tools"] == SPEC
    plain = ChatResponse("hi")
    assert "tool_calls" not in plain.to_dict()  # cache entries made before tool calls stay identical
    resp = ChatResponse("", tool_calls=[{"id": "c1", "name": "ImageSearch", "arguments": '{"query": "x"}'}])
    assert ChatResponse.from_dict(json.loads(json.dumps(resp.to_dict()))).tool_calls == resp.tool_calls


def test_openai_messages_carry_tool_calls_and_tool_results():
    call = {"id": "c1", "name": "ImageSearch", "arguments": '{"query": "x"}'}
    assert openai_message(Message.assistant("", [call]), vision=False) == {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ImageSearch",
                                                                      "arguments": '{"query": "x"}'}}]}
    assert openai_message(Message.tool("c1", "3 photos"), vision=False) == {
        "role": "tool", "content": "3 photos", "tool_call_id": "c1"}
    assert openai_message(Message.user("hi"), vision=False) == {"role": "user", "content": "hi"}


class QueryArgs(ToolArgs):
    query: str | None = None


class Search(Tool):
    name = "ImageSearch"
    description = "Search photos."
    Args = QueryArgs

    def run(self, args, state):
        return Observation("p1 (score 0.9)", photos=["p1"], scores={"p1": 0.9})


def test_the_runtime_over_an_openai_compatible_server_uses_native_tool_calls():
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if len(bodies) == 1:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_9", "type": "function",
                 "function": {"name": "ImageSearch", "arguments": '{"query": "penguin"}'}}]}
        else:
            message = {"role": "assistant", "content": 'The final answer is: ["p1"]'}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 7, "completion_tokens": 3}})

    model = OpenAIChatModel("http://server.test/v1", "m", backoff_s=0.01)
    model._client = httpx.Client(transport=httpx.MockTransport(handler))
    run = AgentRuntime(Role("agent", model), [Search()], "sys", known_ids={"p1"}).run("find the penguin")
    assert run.answer == ["p1"] and run.paths == {"native": 1, "none": 1}
    assert run.prompt_tokens == 14 and run.completion_tokens == 6
    assert bodies[0]["tools"][0]["function"]["name"] == "ImageSearch" and bodies[0]["tool_choice"] == "auto"
    assert bodies[0]["parallel_tool_calls"] is False  # one tool per step, asked of the server
    second = bodies[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "ImageSearch", "arguments": '{"query": "penguin"}'}}]}
    assert second[-1] == {"role": "tool", "content": "p1 (score 0.9)", "tool_call_id": "call_9"}


def test_llamacpp_replays_native_tool_messages_as_the_text_protocol(tmp_path):
    model = LlamaCppChatModel(tmp_path / "unused.gguf")  # request_kwargs never loads the weights
    assert model.supports_tools is False
    call = {"id": "c1", "name": "ImageSearch", "arguments": '{"query": "x"}'}
    kw = model.request_kwargs([Message.system("s"), Message.assistant("Searching.", [call]),
                               Message.tool("c1", "p1 (score 0.9)")], ChatParams(tools=SPEC))
    assert kw["messages"][1] == {"role": "assistant", "content": 'Searching.\n<tool_call>\n{"name": "ImageSearch", '
                                                                 '"arguments": {"query": "x"}}\n</tool_call>'}
    assert kw["messages"][2] == {"role": "user", "content": "<tool_response>\np1 (score 0.9)\n</tool_response>"}
    assert kw["tools"] == SPEC  # the GGUF's template may describe them
