"""Deep image search in a personal photo album: ``photocraft`` and its memoryless baseline ``imageseeker``.

Papers: PhotoCraft (shared/papers/photocraft.txt, Sec. 3, Tables 2 and 4, Fig. 4b, Appendix A) and its
baseline ImageSeeker (DeepImageSearch, Deng et al., 2026). Both are a tool-using agent on the shared
runtime (:mod:`imagent.agents`) with the same album tools (Table 4): ``ImageSearch`` (top 20 by default),
``GetMetadata``, ``FilterMetadata`` (named subsets), ``ViewPhotos`` and ``WebSearch`` when a web backend
is configured (``$BRAVE_API_KEY`` or ``$GOOGLE_API_KEY`` + ``$GOOGLE_CSE_ID``). The agent reasons from an
anchor to a constraint to the targets and answers ``The final answer is: ["id", ...]``: a *set*,
returned as ``Result.answer_set`` (never empty: the runtime falls back to the best candidates seen).
``Result.ranking`` is the answer set first, then the other candidates the tools returned, best score
first, for callers that want a ranking.

- ``imageseeker``: free-form context compression when the context nears its limit; no audit, no skills.
- ``photocraft``: the three memories of :mod:`imagent.agents.memory`, each switchable for the ablations
  of Table 2 / Fig. 4b: working memory (digest / session / working summaries + the fidelity validator,
  tau = 0.5, and the ``MemoryCondense`` tool), episodic memory (the five-part audit before the answer,
  photos reloaded; a failed audit starts a new retrieval round) and semantic memory (skills: the best one
  injected when similarity > theta_retr = 0.65; distilled after an episode whose F1 > theta_conf = 0.85, or
  when a user marks an answer right (:func:`mark_answer_correct`); merged when the source queries' cosine
  > 0.8). The skill library is a JSONL file the user owns (``skills_path``, default
  ``<user data dir>/skills.jsonl``; an eval run keeps its own in the run directory unless ``skills_path``
  is set); ``imagent skills list | show | rm`` inspects it.

Roles: ``agent`` (the controller), ``memory`` (compression, audit and skill distillation; the paper's
compressor was GPT-4o) — both default to ``roles.default``. Model calls per query: one per turn (at most
``max_turns`` = 30, plus one last call without tools when the budget is spent); PhotoCraft adds one call
per compression, one per audit (until one passes), and after a successful episode one distillation call
(two when the first skill names entities). A JSON reply that does not parse is asked once more.

Deviations: the paper does not give the context limit (``context_limit``: None uses the backend's window,
e.g. llama.cpp's ``n_ctx``, else 32768 tokens; compression at 0.8 of it), how many metadata messages the
validator keeps verbatim (``keep_verbatim`` = 3) or a cap on audits (``max_audits`` = None, as in the paper:
until one passes or the budget ends). Images reach the model as a user message with ids (OpenAI tool
messages carry text only); a blind model reads each photo's caption, date and place instead (caption mode).

Deviations for small local models (the paper's agents are GPT-4o / Qwen3-VL-32B class): with the in-process
llama.cpp backend the turns use the runtime's JSON protocol (``tool_mode="json"``: grammar-constrained ``{"thought",
"tool", "arguments"}`` / ``{"thought", "final_answer"}``; photo ids limited to those the tools returned; no answer
before a search), the tools are listed compactly with one worked example (:data:`WORKED_EXAMPLE`, invented ids)
instead of full JSON Schemas, an exact repeat of an earlier call is refused, as is a call with one of the example's
dates that nothing the agent read holds (the runtime's guard), a tool called ``loop_guard`` (3) turns in a row
is left out of the next turn's grammar, and three refused repeats in a row end the search with a request for the
answer (the runtime's stuck guard). On the JSON protocol more guards are on by default (both methods): the agent's
model first splits the query into anchor, what to keep the same and target (``chain_plan``, :class:`ChainPlan`:
one grammar-constrained call, the split added to the task); an answer given before anything narrowed the album (no
FilterMetadata, no ``search_within``) is sent back once (``scope_first``, :class:`ScopeFirst`), as is one given
after the narrowing but before any ImageSearch within the saved subset (``target_first``, :class:`TargetFirst`),
each naming the next call, which that turn's grammar then fixes (FilterMetadata with the split's ``same``;
ImageSearch for the split's target within the subset), and a turn that only repeated an earlier call is followed
by that next call too (:class:`ChainSteer`); ImageSearch's grammar has no ``top_k`` (the paper's 20);
FilterMetadata is offered in its photo form only (``anchor_filters``: ``same_as_photo`` and ``same`` day / place /
city / device), because the offline 0.5B names its anchor photo right and writes that photo's date wrong; and a
described ImageSearch result ends with its clear matches, the photos above the largest score drop
(``clear_matches``); PhotoCraft's audit counts a failed check only when its note has two words of its own, not only
the audit prompt's (``audit_own_words``), and its completeness check starts from a fact: an answer that leaves out
clear matches of the split's last search is sent back once, naming them, for the answer again (``audit_matches``,
:class:`CoverMatches`). A blind agent (caption mode) reads ImageSearch and FilterMetadata results
grouped by day and place, one line per photo, ``id | score | time | caption`` under a header that is the group's
filter expression, ``time = 'YYYY-MM-DD' and place ~ '...'`` (``describe_results``; the worked example then shows
the three-call chain :data:`WORKED_EXAMPLE_DESCRIBED`: find the anchor, keep the photos of its day, search the
target within them), so the anchor's day and place come with the search that finds it. An answer before any search
is sent back once on every path (``search_first``: the paper's agent always searches first). When the memory role is
the agent's own model, compression reads the history in context (same content; llama.cpp's prefix cache then
evaluates only the request), and the audit's prompt is fitted to the model's window (fewer reloaded photos, then
the history as text; noted in the trace).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import Field

from imagent.agents.album_tools import AlbumToolsConfig, album_tools, unavailable_tools_note
from imagent.agents.memory import SUMMARY_KINDS, EpisodicMemory, MemoryCondense, SkillInjection, WorkingMemory
from imagent.agents.runtime import AgentHooks, AgentRun, AgentRuntime, ToolMode, resolve_tool_mode
from imagent.agents.skills import Skill, SkillLibrary, distill_skill, trajectory_text
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking, Result, Source
from imagent.methods.base import Method, MethodConfig, load_prompt, register_method
from imagent.methods.chain_guards import ChainPlan, ChainSteer, CoverMatches, ScopeFirst, TargetFirst
from imagent.models.base import ImagePart
from imagent.tools.album import Album

# Above any cosine: the answer set ranks before every other candidate.
ANSWER_SCORE = 2.0
# Window assumed for a backend that does not say (OpenAI-compatible servers do not report it).
DEFAULT_CONTEXT = 32768
# The one worked example a small model's compact prompt shows (written in the protocol's own turns by the
# runtime). Invented ids and dates on purpose: nothing here is from any album.
WORKED_EXAMPLE: dict[str, Any] = {
    "query": "The dogs I photographed on the day I saw the lighthouse.",
    "steps": [
        {"thought": "Anchor: the lighthouse. Constraint: the day of that photo. Target: dogs. First find the anchor.",
         "tool": "ImageSearch", "arguments": {"query": "lighthouse"},
         "result": "Top 3 photos for 'lighthouse', best first:\n1. a17 (score 0.612)\n2. b03 (score 0.305)\n"
                   "3. c40 (score 0.281)"},
        {"thought": "a17 is the lighthouse. Read its date.", "tool": "GetMetadata", "arguments": {"photo_ids": ["a17"]},
         "result": "a17: time 2019-05-04 15:20:11; lat -34.35710, lon 18.49700; address Cape Point; device iPhone 8"},
        {"thought": "Keep the photos of 2019-05-04.", "tool": "FilterMetadata",
         "arguments": {"expression": "time >= '2019-05-04' and time < '2019-05-05'", "save_as": "that_day"},
         "result": "12 photo(s) match. Saved as subset 'that_day'."},
        {"thought": "Search for dogs on that day only.", "tool": "ImageSearch",
         "arguments": {"query": "dog", "search_within": "that_day"},
         "result": "Top 3 photos for 'dog' within subset 'that_day' (12 photos), best first:\n1. a21 (score 0.583)\n"
                   "2. a24 (score 0.551)\n3. a19 (score 0.122)"},
    ],
    "answer": {"thought": "a21 and a24 show dogs on the lighthouse day; a19 scores too low.", "ids": ["a21", "a24"]},
}
# The same worked example when the tools describe each photo (``describe_results``): the anchor's date is read
# from the search result, the day's photos are listed with their captions and saved, and the target is searched
# within them (the clear matches line of a small model's results, ``clear_matches``).
WORKED_EXAMPLE_DESCRIBED: dict[str, Any] = {
    "query": "The dogs I photographed on the day I saw the lighthouse.",
    "steps": [
        {"thought": "Anchor: the lighthouse. Constraint: the day of that photo. Target: dogs. First find the anchor.",
         "tool": "ImageSearch", "arguments": {"query": "lighthouse"},
         "result": "Top 3 photos for 'lighthouse', grouped by day and place, best group first "
                   "(id | score | time | caption):\n"
                   "time = '2019-05-04' and place ~ 'Cape Point, Cape Peninsula':\n"
                   "a17 | 0.61 | 15:20 | A lighthouse on a cliff.\n"
                   "c40 | 0.28 | 16:01 | A dog on the beach.\n"
                   "time = '2018-11-30' and place ~ 'Harbour Road, Kalk Bay':\n"
                   "b03 | 0.31 | 09:02 | Fishing boats in a harbour.\n"
                   "Clear matches (above the largest score drop, 0.61 -> 0.31): a17"},
        {"thought": "a17 is the lighthouse. Constraint: its day. Keep the photos of the same day as a17.",
         "tool": "FilterMetadata",
         "arguments": {"same_as_photo": "a17", "same": ["day"], "save_as": "that_day"},
         "result": "4 photo(s) match \"time = '2019-05-04'\" (the same day as a17), taken 2019-05-04 15:20:11 to "
                   "2019-05-04 16:01:40.\nSaved as subset 'that_day'.\nPhotos (oldest first, grouped by day and "
                   "place; id | time | caption):\ntime = '2019-05-04' and place ~ 'Cape Point, Cape Peninsula':\n"
                   "a17 | 15:20 | A lighthouse on a cliff.\n"
                   "a19 | 15:31 | A seagull on a rock.\n"
                   "a21 | 15:44 | A black dog running.\n"
                   "c40 | 16:01 | A dog on the beach."},
        {"thought": "Target: dogs. Search for dogs within that_day.", "tool": "ImageSearch",
         "arguments": {"query": "dog", "search_within": "that_day"},
         "result": "Top 4 photos for 'dog' within subset 'that_day' (4 photos), grouped by day and place, best "
                   "group first (id | score | time | caption):\n"
                   "time = '2019-05-04' and place ~ 'Cape Point, Cape Peninsula':\n"
                   "a21 | 0.58 | 15:44 | A black dog running.\n"
                   "c40 | 0.55 | 16:01 | A dog on the beach.\n"
                   "a19 | 0.21 | 15:31 | A seagull on a rock.\n"
                   "a17 | 0.12 | 15:20 | A lighthouse on a cliff.\n"
                   "Clear matches (above the largest score drop, 0.55 -> 0.21): a21, c40"},
    ],
    "answer": {"thought": "a21 and c40 show dogs on the lighthouse day; a19 and a17 do not.", "ids": ["a21", "c40"]},
}

# Audits per query on the JSON protocol when ``max_audits`` is None: the offline 0.5B's audits failed nearly every
# answer, and unbounded rounds spent the whole turn budget on audit loops (q12: 4 audits, 30 turns, F1 0).
SMALL_MODEL_AUDITS = 1
# Words of its own a failed audit check's note needs on the JSON protocol when ``audit_own_words`` is None: the
# 0.5B's parroted notes added one at most ("No photos of the constrained day ... included", q02).
SMALL_MODEL_OWN_WORDS = 2
class DeepSearchConfig(MethodConfig):
    """What ImageSeeker and PhotoCraft share (A.2.2 defaults)."""

    max_turns: int = Field(30, ge=1, description="interaction turns before the agent must answer (A.2.2)")
    top_k: int = Field(20, ge=1, description="ImageSearch results per call by default (A.2.2)")
    max_view: int = Field(10, ge=1, description="photos one ViewPhotos call shows")
    tool_mode: ToolMode = Field("auto", description="native tool calls when the backend has them; grammar-constrained "
                                "JSON turns (json) for the in-process llama.cpp backend; else the <tool_call> text "
                                "protocol; or force one of native, text, json")
    one_tool_per_step: bool = Field(True, description="one tool call per turn, as the paper's ReAct step (Sec. 3.3): "
                                    "parallel_tool_calls=false on native calls, and a reply's further calls are "
                                    "refused with an observation saying so")
    search_first: bool = Field(True, description="send an answer given before any tool returned a photo back once "
                               "(the papers' agent always searches first)")
    scope_first: bool | None = Field(None, description="send an answer back once when no FilterMetadata call or "
                                     "search_within has narrowed the album to the anchor's day, place or trip yet "
                                     "(imagent's small-model guard; None: on for the JSON protocol, where the next "
                                     "turn must then call a tool)")
    chain_plan: bool | None = Field(None, description="before the first turn the agent's model splits the query into "
                                    "anchor, what to keep the same and target (one grammar-constrained call; the "
                                    "split joins the task and names the next call in scope_first / target_first "
                                    "messages, and a turn that only repeated an earlier call is followed by the "
                                    "chain's next call; imagent's small-model guard; None: on for the JSON protocol)")
    target_first: bool | None = Field(None, description="send an answer back once when the album was narrowed to a "
                                      "saved subset but no ImageSearch searched for the target within it yet "
                                      "(imagent's small-model guard; None: on for the JSON protocol)")
    clear_matches: bool | None = Field(None, description="a described ImageSearch result ends with the photos above "
                                       "its largest score drop (imagent's small-model aid; None: on for the JSON "
                                       "protocol)")
    anchor_filters: bool = Field(True, description="JSON protocol only: FilterMetadata is offered in its photo form "
                                 "(the photos of the same day, place, city or device as a photo the tools returned) "
                                 "instead of a written expression (imagent's small-model guard: the offline 0.5B "
                                 "named the anchor photo right but wrote other days' dates)")
    loop_guard: int = Field(3, ge=0, description="JSON protocol: a tool called in each of the last N turns is left "
                            "out of the next turn's grammar (a small model's loop breaker; 0: never)")
    stuck_after: int = Field(3, ge=0, description="after this many turns in a row that each only repeated an earlier "
                             "call, the agent is asked for its answer in one turn with no tools (imagent's guard; "
                             "0: never)")
    repeat_limit: int = Field(6, ge=0, description="after this many of its calls in an episode were refused as "
                              "repeats of earlier ones, in a row or not, the agent is asked for its answer in one turn "
                              "with no tools (imagent's guard; 0: no limit)")
    compact_prompt: bool | None = Field(None, description="short tool list with one worked example instead of full "
                                        "JSON Schemas (None: for the JSON protocol and in-process llama.cpp models)")
    fallback_k: int = Field(5, ge=1, description="best candidates that stand in when the model gives no answer")
    max_tokens: int = Field(1024, ge=16, description="reply tokens per agent turn")
    context_limit: int | None = Field(None, ge=256, description="context window in tokens (None: the backend's "
                                      f"n_ctx, else {DEFAULT_CONTEXT})")
    compress_at: float = Field(0.8, gt=0.0, le=1.0, description="compress when the prompt exceeds this share "
                               "of context_limit")
    web_search: bool = Field(True, description="offer WebSearch when a web backend is configured")
    describe_results: bool | None = Field(None, description="ImageSearch and FilterMetadata list each photo with "
                                          "its date, place and caption (imagent's; the paper's ImageSearch returns "
                                          "ids and scores). None: when the agent's model cannot see pixels (caption "
                                          "mode), where these lines are what ViewPhotos and GetMetadata would show")
    agent_role: str = Field("agent", description="role of the controller model")
    memory_role: str = Field("memory", description="role that compresses, audits and distils skills")
    trip_gap_days: float = Field(1.0, ge=0, description="a time relation of the query split (after, before) names "
                                 "one trip: matches whose days are at most this many days apart belong to one "
                                 "(imagent's; the papers give no trip boundary)")


class ImageSeekerConfig(DeepSearchConfig):
    compression: bool = Field(True, description="free-form context compression near the limit (the baseline's)")


class PhotoCraftConfig(DeepSearchConfig):
    working_memory: bool = Field(True, description="fidelity-guarded compression and the MemoryCondense tool")
    summaries: list[Literal["digest", "session", "working"]] = Field(
        default_factory=lambda: list(SUMMARY_KINDS), description="which summaries compression writes (Fig. 4b)")
    fidelity: bool = Field(True, description="check the summary keeps ids, dates and places (Eq. 2)")
    tau: float = Field(0.5, ge=0.0, le=1.0, description="loss rate above which metadata messages stay verbatim")
    keep_verbatim: int = Field(3, ge=0, description="most recent unpreserved metadata messages kept verbatim")
    episodic_memory: bool = Field(True, description="five-part audit before the final answer")
    max_audits: int | None = Field(None, ge=1, description="audits per query (None: until one passes or the "
                                   "budget ends, as in the paper; on the JSON protocol of small local models "
                                   f"{SMALL_MODEL_AUDITS})")
    audit_own_words: int | None = Field(None, ge=0, description="a failed audit check counts only when its note has "
                                        "at least this many words the audit prompt does not hold (imagent's "
                                        "small-model guard: the offline 0.5B failed answers with notes copied from "
                                        "the prompt, adding a 'no' or a stray token; 0: every failed check counts; "
                                        f"None: {SMALL_MODEL_OWN_WORDS} for the JSON protocol, else 0)")
    audit_matches: bool | None = Field(None, description="the audit's completeness check as a fact: an answer that "
                                       "leaves out clear matches of the query split's last search is sent back once, "
                                       "naming them, for the answer again (imagent's small-model aid, with "
                                       "episodic_memory; None: on for the JSON protocol); with a time relation "
                                       "in the split (the first trip after / the last before the anchor's day) "
                                       "also an answer holding clear matches of another trip")
    semantic_memory: bool = Field(True, description="inject and distil skills")
    skills_path: str | None = Field(None, description="skill library file (None: <user data dir>/skills.jsonl; "
                                    "an eval run: <run dir>/skills.jsonl)")
    theta_conf: float = Field(0.85, ge=0.0, le=1.0, description="distil a skill when the episode's F1 exceeds it")
    theta_retr: float = Field(0.65, ge=-1.0, le=1.0, description="inject the best skill above this similarity")
    merge_threshold: float = Field(0.8, ge=-1.0, le=1.0, description="merge skills whose source queries' cosine "
                                   "exceeds it (Eq. 4)")


def small_default(flag: bool | None, small: bool) -> bool:
    """A small-model knob's value: as set, or, when None, on exactly for the JSON protocol of small local models."""
    return small if flag is None else bool(flag)


class _DeepSearch(Method):
    """The agent loop both methods share; subclasses add their hooks and prompts."""

    tasks = frozenset({"tir"})
    prompt_dir = "photocraft"
    config: DeepSearchConfig

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        assert isinstance(config, DeepSearchConfig)
        # every turn, the budget's last call, a compression every few turns of a long search, the query split
        return config.max_turns + 1 + max(1, config.max_turns // 4) + int(config.chain_plan is not False)

    def preflight(self, query: Query | None = None) -> list[str]:
        """A blind agent on an album without captions still runs (file names, dates and places are real
        evidence), but the user must know that it never sees what the photos show."""
        if not self.ctx.roles[self.config.agent_role].caption_mode:
            return []
        from imagent.methods.captions import caption_coverage

        have, total = caption_coverage(self.ctx.gallery, query.candidates if query is not None else None)
        if total and not have:
            return [f"the {self.config.agent_role} model cannot see pixels and no photo of the album has a caption: "
                    "the agent sees only file names, dates, places and devices (caption the photos, or configure "
                    "a vision model for the role)"]
        return []

    def search_spaces(self) -> list[str]:
        """The spaces ImageSearch scores (the album's default: the first of image, caption_dual, caption_text)."""
        return [space for space, _ in Album(self.ctx.gallery, self.ctx.dual, self.ctx.text).spaces]

    def text_readers(self) -> list[str]:
        """The agent, and the memory role where it is shown photos (PhotoCraft's audit reloads them), when
        their model reads photos as text."""
        roles = [self.config.agent_role, *self.photo_viewers()]
        return [r for r in dict.fromkeys(roles) if self.ctx.roles[r].caption_mode]

    def photo_viewers(self) -> list[str]:
        """Roles besides the agent that are shown photos."""
        return []

    # ------------------------------------------------------------------ parts
    def album(self, query: Query) -> Album:
        album = Album(self.ctx.gallery, self.ctx.dual, self.ctx.text)
        return album if query.candidates is None else album.scoped(query.candidates)

    def context_limit(self) -> int:
        if self.config.context_limit:
            return self.config.context_limit
        return int(getattr(self.ctx.roles[self.config.agent_role].model, "n_ctx", 0) or DEFAULT_CONTEXT)

    def shared_model(self) -> bool:
        """Whether the memory role is the agent's own model (then compression reads the history in context)."""
        roles = self.ctx.roles
        return roles[self.config.memory_role].model is roles[self.config.agent_role].model

    def tools(self, album: Album, small: bool = False) -> list[Any]:
        web = None
        if self.config.web_search:
            from imagent.tools.web_text import web_text_search_from_env

            web = web_text_search_from_env()
        cfg = AlbumToolsConfig(top_k=self.config.top_k, max_view=self.config.max_view, describe=self.describe(),
                               anchor_filters=self.config.anchor_filters,
                               clear_matches=small_default(self.config.clear_matches, small), grammar_top_k=not small)
        return album_tools(album, cfg, web=web)

    def describe(self) -> bool:
        """Whether the album tools describe each listed photo (``describe_results``; None: in caption mode)."""
        if self.config.describe_results is not None:
            return self.config.describe_results
        return bool(self.ctx.roles[self.config.agent_role].caption_mode)

    def system_prompt(self, tools: Sequence[Any]) -> str:
        note = unavailable_tools_note(tools)
        return load_prompt(f"{self.prompt_dir}/system.txt") + (f"\n\n{note}" if note else "")

    def task_message(self, query: Query, album: Album) -> str:
        ends = album.time_span()  # vectorised over any album size (columns cached per gallery)
        span = ""
        if ends is not None and ends[0].taken_time is not None and ends[1].taken_time is not None:
            span = f", taken {ends[0].taken_time:%Y-%m-%d} to {ends[1].taken_time:%Y-%m-%d}"
        return Template(load_prompt("photocraft/task.txt")).safe_substitute(query=query.text, size=len(album),
                                                                             span=span)

    def agent_parts(self, query: Query, album: Album, small: bool) -> tuple[list[Any], list[AgentHooks]]:
        """The tools and memory hooks of one search (built per query: searches may run in parallel); ``small``:
        the runtime will speak the JSON protocol of small local models."""
        return self.tools(album, small), []

    def guard_hooks(self, query: Query, small: bool) -> list[AgentHooks]:
        """The small-model hooks that go before the method's own (an unnarrowed or unsearched answer is not worth
        an audit)."""
        cfg = self.config
        hooks: list[AgentHooks] = []
        if small_default(cfg.chain_plan, small):
            hooks += [ChainPlan(self.ctx.roles[cfg.agent_role], query.text), ChainSteer(cfg.trip_gap_days)]
        if small_default(cfg.scope_first, small):
            hooks.append(ScopeFirst())
        if small_default(cfg.target_first, small):
            hooks.append(TargetFirst())
        return hooks

    # ------------------------------------------------------------------ run
    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        album = self.album(query)
        cfg = self.config
        role = self.ctx.roles[cfg.agent_role]
        small = resolve_tool_mode(cfg.tool_mode, role) == "json"  # the small-model protocol
        tools, hooks = self.agent_parts(query, album, small)
        runtime = AgentRuntime(
            role, tools, self.system_prompt(tools), max_turns=cfg.max_turns,
            hooks=[*self.guard_hooks(query, small), *hooks], tool_mode=cfg.tool_mode, known_ids=album,
            fallback_k=cfg.fallback_k, max_tokens=cfg.max_tokens,
            fallback=lambda _state: list(album.search(query.text, cfg.fallback_k).ids),
            search_first=cfg.search_first, loop_guard=cfg.loop_guard, stuck_after=cfg.stuck_after,
            repeat_limit=cfg.repeat_limit,
            compact_prompt=cfg.compact_prompt,
            worked_example=WORKED_EXAMPLE_DESCRIBED if self.describe() else WORKED_EXAMPLE,
            one_tool_per_step=cfg.one_tool_per_step,
        )
        run = runtime.run(self.task_message(query, album))
        ranking = self.ranking(run, top_k)
        with trace.step("answer", source=run.source) as step:
            step.outputs = {"answer_set": list(run.answer), **run.to_dict()}
            if run.source == "fallback":
                step.note(run.reason)
        fallback = "best_candidates" if run.state.seen else "plain_search"  # nothing seen: the album search
        source = Source.fallback(fallback) if run.source == "fallback" else Source.METHOD
        return Result(ranking=ranking, trace=trace, answer_set=list(run.answer), source=source,
                      source_reason=run.reason if run.source == "fallback" else "",
                      counts=agent_counts(run, trace))

    @staticmethod
    def ranking(run: AgentRun, top_k: int) -> Ranking:
        """The answer set first, then the best other candidates the tools returned (scores non-increasing)."""
        ids = list(run.answer)
        scores = [ANSWER_SCORE] * len(ids)
        state = run.state
        for i in state.best_candidates(len(state.seen)):
            if i not in ids:
                s = state.candidates[i]
                ids.append(i)
                scores.append(float(s) if s != float("-inf") else -1.0)
        return Ranking(ids[: max(top_k, len(run.answer))], scores[: max(top_k, len(run.answer))])


def agent_counts(run: AgentRun, trace: Trace) -> dict[str, int]:
    """The agent's own behaviour counts for one query (summed by an evaluation's ``behaviour``): episodes, turns,
    tool calls by tool (the calls that ran), answer fallbacks, forced final answers (the answer came from the
    last call without tools, after the turn budget), audits passed / failed, compressions, skills injected."""
    state = run.state
    counts: dict[str, int] = {"episodes": 1, "turns": run.turns,
                              "answer_fallbacks": int(run.source == "fallback"),
                              "forced_final_answers": int(run.source == "model" and run.forced)}
    for step in trace.steps:
        for call in step.calls:
            if call.kind == "tool":
                key = f"tool_calls.{call.role}"
                counts[key] = counts.get(key, 0) + 1
    counts["audits_passed"] = sum(1 for a in state.audits if a.passed)
    counts["audits_failed"] = len(state.audits) - counts["audits_passed"]
    counts["compressions"] = len(state.compressions)
    counts["scope_first_sent_back"] = sum(1 for t in state.turns if t.rejected_by == ScopeFirst.__name__)
    counts["query_split"] = int(state.plan is not None)
    counts["chain_steered"] = int(trace.counters.get("agent.chain_steered", 0))
    counts["target_first_sent_back"] = sum(1 for t in state.turns if t.rejected_by == TargetFirst.__name__)
    counts["matches_sent_back"] = sum(1 for t in state.turns if t.rejected_by == CoverMatches.__name__)
    counts["skills_injected"] = int(state.skill is not None)
    return counts


@register_method
class ImageSeeker(_DeepSearch):
    """ImageSeeker (DeepImageSearch): the memoryless album-search agent PhotoCraft builds on."""

    name = "imageseeker"
    Config = ImageSeekerConfig
    config: ImageSeekerConfig
    prompt_dir = "imageseeker"
    description = ("ImageSeeker (DeepImageSearch): a tool-using agent over a personal album (search, metadata, "
                   "filters, viewing) with free-form context compression; answers a set of photos")

    def agent_parts(self, query: Query, album: Album, small: bool) -> tuple[list[Any], list[AgentHooks]]:
        tools = self.tools(album, small)
        if not self.config.compression:
            return tools, []
        return tools, [WorkingMemory(self.ctx.roles[self.config.memory_role], load_prompt("imageseeker/condense.txt"),
                                     context_limit=self.context_limit(), compress_at=self.config.compress_at,
                                     structured=False, in_context=self.shared_model())]


@register_method
class PhotoCraft(_DeepSearch):
    """PhotoCraft: the album-search agent with working, episodic and semantic memory."""

    name = "photocraft"
    Config = PhotoCraftConfig
    config: PhotoCraftConfig
    description = ("PhotoCraft: an album-search agent with working memory (fidelity-guarded compression), "
                   "episodic memory (answer audit) and semantic memory (a skill library); answers a set")

    def __init__(self, ctx: Any, config: Any = None) -> None:
        super().__init__(ctx, config)
        self.run_dir: Path | None = None

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        assert isinstance(config, PhotoCraftConfig)
        audits = (config.max_audits or 2) if config.episodic_memory else 0
        return super().estimate_calls(config, query) + audits + (1 if config.semantic_memory else 0)

    def photo_viewers(self) -> list[str]:
        return [self.config.memory_role] if self.config.episodic_memory else []

    # ------------------------------------------------------------------ semantic memory
    def start_run(self, run_dir: Path) -> None:
        """An eval run keeps its own skill library (``<run dir>/skills.jsonl``) unless ``skills_path`` is set,
        so a benchmark run neither reads nor changes the user's library and can be repeated."""
        self.run_dir = Path(run_dir)

    def library(self) -> SkillLibrary:
        path = self.config.skills_path
        if path is None and self.run_dir is not None:
            path = str(self.run_dir / "skills.jsonl")
        return SkillLibrary(path, self.ctx.text)

    def learn_from_outcome(self, query: Query, result: Result, score: float) -> Skill | None:
        """After an episode is scored (F1 in [0, 1]): distil a skill when ``score > theta_conf`` (Sec. 3.2)
        and consolidate it into the library. The step ``memory.distill`` is added to the result's trace."""
        if not self.config.semantic_memory:
            return None
        with result.trace.activate(), result.trace.step("memory.distill", f1=round(score, 4),
                                                          theta_conf=self.config.theta_conf) as step:
            if score <= self.config.theta_conf:
                step.outputs = {"distilled": False, "why": f"F1 {score:.2f} <= theta_conf {self.config.theta_conf}"}
                return None
            if result.source != Source.METHOD:
                # The agent did not solve it (a fallback answered, or its model calls failed): no successful trajectory.
                step.outputs = {"distilled": False, "why": f"the answer was not the agent's own ({result.source})"}
                return None
            return self._distil(query.text, result.trace.to_dict(), score, "evaluation", query.candidates, step,
                                result)

    def mark_answer_correct(self, query: str, trace: Trace | dict[str, Any],
                            album_ids: Sequence[str] | None = None) -> Skill | None:
        """A user marked this search's answer right: distil its trajectory into a skill (confidence 1.0)."""
        data = trace.to_dict() if isinstance(trace, Trace) else trace
        t = Trace(method=self.name)
        with t.activate(), t.step("memory.distill", origin="user") as step:
            return self._distil(query, data, 1.0, "user", album_ids, step)

    def _distil(self, query: str, trace: dict[str, Any], score: float, origin: str,
                album_ids: Sequence[str] | None, step: Any, result: Result | None = None) -> Skill | None:
        forbidden = list(album_ids) if album_ids is not None else list(self.ctx.gallery.ids)
        skill = distill_skill(self.ctx.roles[self.config.memory_role], load_prompt("photocraft/skill_extraction.txt"),
                              query, trajectory_text(trace), score, forbidden_ids=forbidden, origin=origin)
        if skill is None:
            step.outputs = {"distilled": False, "why": "the distilled skill kept naming entities"}
            return None
        lib = self.library()
        stored, merged, sim = lib.add(skill, self.config.merge_threshold)
        if result is not None:
            result.count("skills_distilled")
        step.outputs = {"distilled": True, "skill": stored.id, "merged": merged, "similarity": round(sim, 4),
                        "library": str(lib.path), "task_pattern": stored.task_pattern}
        return stored

    # ------------------------------------------------------------------ hooks
    def agent_parts(self, query: Query, album: Album, small: bool) -> tuple[list[Any], list[AgentHooks]]:
        c = self.config
        tools = self.tools(album, small)
        hooks: list[AgentHooks] = []
        if c.semantic_memory:
            hooks.append(SkillInjection(self.library(), c.theta_retr, query=query.text))
        if c.working_memory:
            working = WorkingMemory(self.ctx.roles[c.memory_role], load_prompt("photocraft/condense.txt"),
                                    context_limit=self.context_limit(), compress_at=c.compress_at, structured=True,
                                    summaries=c.summaries, fidelity_check=c.fidelity, tau=c.tau,
                                    keep_verbatim=c.keep_verbatim, known_ids=album, in_context=self.shared_model())
            tools.append(MemoryCondense(working))
            hooks.append(working)
        if c.episodic_memory and small_default(c.audit_matches, small):
            hooks.append(CoverMatches(c.trip_gap_days))  # a fact checked before the model's audit: no call spent on it
        if c.episodic_memory:
            def reload(ids: list[str]) -> list[tuple[str, ImagePart]]:
                return album.view(ids)[0]

            hooks.append(EpisodicMemory(self.ctx.roles[c.memory_role], load_prompt("photocraft/audit.txt"),
                                        load_prompt("photocraft/audit_feedback.txt"), reload,
                                        max_reload=c.max_view,
                                        max_audits=SMALL_MODEL_AUDITS if small and c.max_audits is None
                                        else c.max_audits,
                                        context_limit=self.context_limit(),
                                        own_words=(SMALL_MODEL_OWN_WORDS if small else 0) if c.audit_own_words is None
                                        else c.audit_own_words))
        return tools, hooks


def mark_answer_correct(method: PhotoCraft, query: str, trace: Trace | dict[str, Any]) -> Skill | None:
    """The web UI's "this answer is right" (Sec. 3.2: a user-confirmed episode is a success): distil the
    search's trajectory into the method's skill library. Returns the stored (or merged) skill, or None
    when no de-entified skill could be distilled."""
    return method.mark_answer_correct(query, trace)


__all__ = ["ImageSeeker", "ImageSeekerConfig", "PhotoCraft", "PhotoCraftConfig", "mark_answer_correct"]
