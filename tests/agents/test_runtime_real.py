"""The runtime with the real offline Qwen 0.5B (in-process llama.cpp): the JSON protocol end to end."""

from __future__ import annotations

import pytest

from imagent.agents import AgentRuntime
from imagent.core.trace import Trace
from imagent.methods.album.tools import album_tools, unavailable_tools_note
from imagent.models.roles import Role

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

SYSTEM = ("You find photos in the user's photo album by calling tools. First call ImageSearch with short keywords. "
          "Then answer with the ids it returned, exactly as: The final answer is: [\"<photo id>\"]. Never invent ids.")


def test_qwen_runs_the_loop_over_a_real_album(qwen_local, known_album):
    tools = album_tools(known_album)
    runtime = AgentRuntime(Role("agent", qwen_local), tools, SYSTEM + "\n" + unavailable_tools_note(tools),
                           max_turns=1, max_tokens=96, known_ids=known_album,
                           fallback=lambda state: list(known_album.search(state.query, 3).ids))
    trace = Trace()
    with trace.activate():
        run = runtime.run("Find the photo of a penguin.")
    # The JSON protocol was offered (the in-process backend's default: llama.cpp grammars), and the model
    # called a tool through it on its first turn (no answer can come before a photo was seen).
    turn1 = trace.steps[0]
    assert turn1.name == "turn.1" and turn1.outputs["protocol"] == "json" and turn1.outputs["path"] == "json"
    assert turn1.outputs["calls"][0]["tool"] in {t.name for t in tools} and run.tool_calls >= 1
    chat = [c for c in turn1.calls if c.kind == "chat"]
    assert len(chat) == 1 and chat[0].prompt_tokens > 300 and chat[0].completion_tokens > 0 and chat[0].error is None
    # Whatever the small model did, the loop settled an answer from the album, with its reason.
    assert run.answer and set(run.answer) <= set(known_album.ids)
    assert run.reason and run.turns >= 1 and run.prompt_tokens >= chat[0].prompt_tokens
    for c, obs in (pair for t in run.state.turns for pair in t.calls):
        assert obs.error or c.name in {t.name for t in tools}  # a call ran a real tool or was answered with an error
