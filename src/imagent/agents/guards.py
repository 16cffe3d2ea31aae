"""The small-model guards of the agent runtime, in one place.

Small local models loop and copy where a large model reasons; these guards keep them moving without changing
what a capable model sees (why each exists, with the measurement: ``docs/faithfulness.md``, PhotoCraft). The
runtime consults them around each tool call; what they remember is
:class:`~imagent.agents.state.GuardState` (``state.guards``)::

    guards = Guards(loop_guard=3)
    guards.start(state, request_text, worked_example if shown else None)
    refusal = guards.refuse(call, tool, state)   # None, or an error observation and why
    guards.record_use(call, tool, state); ...; guards.observed(obs, state)
    blocked = guards.blocked_tools(state)        # for the JSON protocol's next grammar

- **repeated call**: an exact repeat of an earlier call still in the history is answered with an error
  instead of the same result (a small model at temperature 0 tends to copy its last turn forever), and the tool
  is left out of the next turn's grammar (JSON protocol);
- **copied example date**: a call with one of the worked example's dates that neither the request nor any
  tool result so far holds (nor a day beside one they hold) is refused with an error that says so (small models
  copy the example's date instead of reading the anchor photo's); counted in the trace as
  ``agent.example_date_refused``;
- **loop guard**: in the JSON protocol a tool called in each of the last ``loop_guard`` turns is left out of
  the next turn's grammar (0: never);
- **stuck**: when the last ``stuck_after`` turns each only repeated an earlier call (a small model alternating
  between two refused calls, which the loop guard does not catch), the runtime stops offering tools and asks
  for the answer at once (counted ``agent.stuck``), instead of spending the rest of the turn budget; so it does
  when ``repeat_limit`` calls of the run were refused as repeats, in a row or not (a small model that alternates
  a new call with a repeat of an earlier one makes no progress either);
- **ids used**: the photos each tool was called on, so the grammar does not offer a photo again to a tool that
  tells nothing new the second time (``Tool.repeat_ids``).
"""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from imagent.agents.state import AgentState, Observation, ToolCall
from imagent.agents.tools import Tool

REPEATED = "Error: the same {tool} call as in turn {turn}; its result is above. Use that result now."
COPIED = ("Error: {values} {verb} from the worked example in the instructions, not from this album. Read the date "
          "from this album's photos (find the photo the question refers to, then read its metadata) and use that.")
# Dates as tools print and take them.
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def dates_in(text: str) -> set[date]:
    """The calendar dates (YYYY-MM-DD) written in ``text``."""
    out = set()
    for y, m, d in _DATE.findall(text):
        try:
            out.add(date(int(y), int(m), int(d)))
        except ValueError:
            continue
    return out


class Guards:
    """The guards of one runtime (see the module doc); ``loop_guard`` is the JSON protocol's loop rule."""

    def __init__(self, loop_guard: int = 3, stuck_after: int = 3, repeat_limit: int = 0) -> None:
        self.loop_guard = loop_guard
        self.stuck_after = stuck_after
        self.repeat_limit = repeat_limit

    def start(self, state: AgentState, request: str, worked_example: dict[str, Any] | None) -> None:
        """A run begins: remember the request's dates and, where the example is shown, the example's."""
        g = state.guards
        g.example_dates = dates_in(json.dumps(worked_example)) if worked_example else set()
        g.seen_dates = dates_in(request)

    def refuse(self, call: ToolCall, tool: Tool, state: AgentState) -> tuple[Observation, str] | None:
        """An error observation and its reason when a guard refuses this call (it is not run), else None."""
        if copied := self.copied_dates(call, state):
            state.trace.count("agent.example_date_refused")
            return (Observation(COPIED.format(values=" and ".join(f"'{d}'" for d in copied),
                                              verb="is" if len(copied) == 1 else "are"), error=True),
                    "date copied from the worked example")
        if (earlier := self.repeat_of(call, tool, state)) is not None:
            state.guards.blocked_tools.add(tool.name)
            state.guards.repeats_in_a_row += 1
            state.guards.repeats_total += 1
            return Observation(REPEATED.format(tool=tool.name, turn=earlier), error=True), "repeated call"
        state.guards.repeats_in_a_row = 0
        return None

    def stuck(self, state: AgentState) -> bool:
        """Whether the last ``stuck_after`` turns each only repeated an earlier call (0: never stuck), or
        ``repeat_limit`` calls of the run were refused as repeats (0: no limit), or a hook set ``answer_due`` (the
        search is done and the model repeats itself)."""
        return state.guards.answer_due or self.in_a_row(state) or self.too_often(state)

    def in_a_row(self, state: AgentState) -> bool:
        return bool(self.stuck_after) and state.guards.repeats_in_a_row >= self.stuck_after

    def too_often(self, state: AgentState) -> bool:
        return bool(self.repeat_limit) and state.guards.repeats_total >= self.repeat_limit

    @staticmethod
    def copied_dates(call: ToolCall, state: AgentState) -> list[str]:
        """The worked example's dates in this call's arguments that nothing this run read holds: not the
        request, no tool result, and no day next to one of theirs (a day's end is written as the next day)."""
        example = state.guards.example_dates
        if not example:
            return []
        seen = state.guards.seen_dates
        used = dates_in(json.dumps(call.arguments, ensure_ascii=False, default=str)) & example
        return sorted(d.isoformat() for d in used if not any(abs((d - s).days) <= 1 for s in seen))

    @staticmethod
    def repeat_of(call: ToolCall, tool: Tool, state: AgentState) -> int | None:
        """The turn of an identical earlier call still in the history (None if there is none), and remember
        this one. The history is append-only, so the earlier result is still there; a context compression
        forgets the calls (their results may be gone)."""
        made = state.guards.calls_made
        key = json.dumps([tool.name, call.arguments], sort_keys=True, ensure_ascii=False, default=str)
        if key in made:
            return made[key]
        made[key] = state.turn
        return None

    @staticmethod
    def record_use(call: ToolCall, tool: Tool, state: AgentState) -> None:
        """Remember the photo ids this call names (per tool)."""
        used = state.guards.ids_used.setdefault(tool.name, set())
        for k in tool.id_params:
            v = call.arguments.get(k)
            used.update(str(i) for i in (v if isinstance(v, list) else [v] if v else []))

    @staticmethod
    def observed(obs: Observation, state: AgentState) -> None:
        """A tool result came back: its dates count as read."""
        if not obs.error:
            state.guards.seen_dates.update(dates_in(obs.text))

    def blocked_tools(self, state: AgentState) -> set[str]:
        """The tools to leave out of the next JSON turn's grammar: one whose call was just refused as a
        repeat, and one the model called (alone) in each of the last ``loop_guard`` turns."""
        blocked = set(state.guards.blocked_tools)
        state.guards.blocked_tools.clear()
        last = [t.calls[0].call.name if len(t.calls) == 1 else None for t in state.turns[-self.loop_guard:]]
        if self.loop_guard and len(last) == self.loop_guard and last[0] and len(set(last)) == 1:
            blocked.add(last[0])
        return blocked


__all__ = ["COPIED", "REPEATED", "Guards", "dates_in"]
