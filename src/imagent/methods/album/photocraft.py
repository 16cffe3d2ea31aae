"""Deep image search in a personal photo album: ``photocraft`` and its memoryless baseline ``imageseeker``.

Papers: PhotoCraft (shared/papers/photocraft.txt, Sec. 3, Tables 2 and 4, Fig. 4b, Appendix A) and its
baseline ImageSeeker (DeepImageSearch, Deng et al., 2026). Both are a tool-using agent on the shared
runtime (:mod:`imagent.agents`) with the same album tools (Table 4, :mod:`imagent.methods.album.tools`):
``ImageSearch`` (top 20 by default), ``GetMetadata``, ``FilterMetadata`` (named subsets), ``ViewPhotos`` and
``WebSearch`` when a web backend is configured (``$BRAVE_API_KEY`` or ``$GOOGLE_API_KEY`` + ``$GOOGLE_CSE_ID``).
The agent reasons from an anchor to a constraint to the targets and answers ``The final answer is: ["id", ...]``:
a *set*, returned as ``Result.answer_set`` (never empty: the runtime falls back to the best candidates seen).
``Result.ranking`` is the answer set first, then the other candidates the tools returned, best score first.

The two differ only by what the paper calls memory (:mod:`imagent.methods.album.memory`; decision 10):

- ``imageseeker``: free-form context compression when the context nears its limit; no audit, no skills.
- ``photocraft``: working memory (digest / session / working summaries + the fidelity validator, tau = 0.5, and
  the ``MemoryCondense`` tool), episodic memory (the model's own five-part audit before the answer, photos
  reloaded; a failed audit starts a new retrieval round) and semantic memory (skills: the best one injected when
  similarity > theta_retr = 0.65; distilled after an episode whose F1 > theta_conf = 0.85, or when a user marks an
  answer right (:func:`mark_answer_correct`); merged when the source queries' cosine > 0.8), each switchable for
  the ablations of Table 2 / Fig. 4b. The skill library is a JSONL file the user owns (``skills_path``, default
  ``<user data dir>/skills.jsonl``; an eval run keeps its own in the run directory unless ``skills_path`` is set);
  ``imagent skills list | show | rm`` inspects it.

Everything else is one scaffold profile applied identically to both (``scaffold``: ``none``, the papers' protocol,
or ``small``, imagent's aids for small local models; ``auto``: ``small`` for the in-process llama.cpp JSON
protocol, else ``none``; :mod:`imagent.methods.album.scaffold`). Every result says who chose its answer
(``answer_origin``, ``code_selected_share``: the share of it that equals a list computed by code).

Roles: ``agent`` (the controller), ``memory`` (compression, audit and skill distillation; the paper's
compressor was GPT-4o), both default to ``roles.default``. Model calls per query: one per turn (at most
``max_turns`` = 30, plus one last call without tools when the budget is spent), one for the small scaffold's query
split; PhotoCraft adds one call per compression, one per audit (until one passes; the small scaffold allows one),
and after a successful episode one distillation call (two when the first skill names entities). A JSON reply that
does not parse is asked once more.

Deviations: the paper does not give the context limit (``context_limit``: None uses the backend's window,
e.g. llama.cpp's ``n_ctx``, else 32768 tokens; compression at 0.8 of it), how many metadata messages the
validator keeps verbatim (``keep_verbatim`` = 3) or a cap on audits (``max_audits`` = None, as in the paper:
until one passes or the budget ends). Images reach the model as a user message with ids (OpenAI tool messages
carry text only); a blind model reads each photo's caption, date and place instead (caption mode), and its
ImageSearch and FilterMetadata results list each photo grouped by day and place (``describe_results``). With the
in-process llama.cpp backend the turns use the runtime's JSON protocol (``tool_mode="json"``: grammar-constrained
``{"thought", "tool", "arguments"}`` / ``{"thought", "final_answer"}``; photo ids limited to those the tools
returned); an exact repeat of an earlier call is refused, a tool called ``loop_guard`` (3) turns in a row is left
out of the next turn's grammar, and repeated calls end the search with a request for the answer (``stuck_after``,
``repeat_limit``): the runtime's guards, for both agents under either profile. When the memory role is the agent's
own model, compression reads the history in context and the audit's prompt is fitted to the model's window.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import Field

from imagent.agents.runtime import AgentHooks, AgentRun, AgentRuntime, ToolMode, resolve_tool_mode
from imagent.core.trace import Trace
from imagent.core.types import Query, Ranking, Result, Source
from imagent.methods.album import load_prompt
from imagent.methods.album.memory import (
    SUMMARY_KINDS,
    Audit,
    Compression,
    EpisodicMemory,
    MemoryCondense,
    SkillInjection,
    SkillUse,
    WorkingMemory,
)
from imagent.methods.album.scaffold import (
    WORKED_EXAMPLE,
    WORKED_EXAMPLE_DESCRIBED,
    Scaffold,
    ScaffoldProfile,
    ScaffoldSetting,
    answer_origin,
    code_lists,
    resolve_scaffold,
)
from imagent.methods.album.skills import Skill, SkillLibrary, distill_skill, trajectory_text
from imagent.methods.album.tools import AlbumToolsConfig, album_tools, unavailable_tools_note
from imagent.methods.base import Method, MethodConfig, register_method
from imagent.models.base import ImagePart
from imagent.tools.album import Album

# Above any cosine: the answer set ranks before every other candidate.
ANSWER_SCORE = 2.0
# Window assumed for a backend that does not say (OpenAI-compatible servers do not report it).
DEFAULT_CONTEXT = 32768


class DeepSearchConfig(MethodConfig):
    """What ImageSeeker and PhotoCraft share (A.2.2 defaults), the scaffold profile included."""

    max_turns: int = Field(30, ge=1, description="interaction turns before the agent must answer (A.2.2)")
    top_k: int = Field(20, ge=1, description="ImageSearch results per call by default (A.2.2)")
    scaffold: ScaffoldSetting = Field("auto", description="the scaffold profile, the same for both album agents: "
                                      "none (the papers' protocol: the model decides every step) or small (imagent's "
                                      "aids for small local models: the query split, unnarrowed or unsearched answers "
                                      "sent back, steering, the answer cut at the clear matches, one worked example); "
                                      "auto: small for the in-process llama.cpp JSON protocol, else none")
    max_view: int = Field(10, ge=1, description="photos one ViewPhotos call shows")
    tool_mode: ToolMode = Field("auto", description="native tool calls when the backend has them; grammar-constrained "
                                "JSON turns (json) for the in-process llama.cpp backend; else the <tool_call> text "
                                "protocol; or force one of native, text, json")
    one_tool_per_step: bool = Field(True, description="one tool call per turn, as the paper's ReAct step (Sec. 3.3): "
                                    "parallel_tool_calls=false on native calls, and a reply's further calls are "
                                    "refused with an observation saying so")
    search_first: bool = Field(True, description="send an answer given before any tool returned a photo back once "
                               "(the papers' agent always searches first)")
    loop_guard: int = Field(3, ge=0, description="JSON protocol: a tool called in each of the last N turns is left "
                            "out of the next turn's grammar (a small model's loop breaker; 0: never)")
    stuck_after: int = Field(3, ge=0, description="after this many turns in a row that each only repeated an earlier "
                             "call, the agent is asked for its answer in one turn with no tools (imagent's guard; "
                             "0: never)")
    repeat_limit: int = Field(6, ge=0, description="after this many of its calls in an episode were refused as "
                              "repeats of earlier ones, in a row or not, the agent is asked for its answer in one turn "
                              "with no tools (imagent's guard; 0: no limit)")
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
    max_audits: int | None = Field(None, ge=1, description="audits per query (None: until one passes or the budget "
                                   "ends, as in the paper; the small scaffold allows one)")
    semantic_memory: bool = Field(True, description="inject and distil skills")
    skills_path: str | None = Field(None, description="skill library file (None: <user data dir>/skills.jsonl; "
                                    "an eval run: <run dir>/skills.jsonl)")
    theta_conf: float = Field(0.85, ge=0.0, le=1.0, description="distil a skill when the episode's F1 exceeds it")
    theta_retr: float = Field(0.65, ge=-1.0, le=1.0, description="inject the best skill above this similarity")
    merge_threshold: float = Field(0.8, ge=-1.0, le=1.0, description="merge skills whose source queries' cosine "
                                   "exceeds it (Eq. 4)")


class _DeepSearch(Method):
    """The agent loop both methods share; subclasses add their memories and prompts."""

    tasks = frozenset({"tir"})
    prompt_dir = "photocraft"
    config: DeepSearchConfig

    @classmethod
    def estimate_calls(cls, config: MethodConfig, query: Query | None = None) -> int:
        assert isinstance(config, DeepSearchConfig)
        # every turn, the budget's last call, a compression every few turns of a long search, the query split
        return config.max_turns + 1 + max(1, config.max_turns // 4) + int(config.scaffold != "none")

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

    def profile(self) -> ScaffoldProfile:
        """The scaffold profile of this method's searches (``scaffold``; auto follows the agent's protocol)."""
        role = self.ctx.roles[self.config.agent_role]
        return resolve_scaffold(self.config.scaffold, resolve_tool_mode(self.config.tool_mode, role))

    def tools(self, album: Album, profile: ScaffoldProfile) -> list[Any]:
        web = None
        if self.config.web_search:
            from imagent.tools.web_text import web_text_search_from_env

            web = web_text_search_from_env()
        cfg = AlbumToolsConfig(top_k=self.config.top_k, max_view=self.config.max_view, describe=self.describe(),
                               anchor_filters=profile.anchor_filters, clear_matches=profile.clear_matches_line,
                               grammar_top_k=not profile.fixed_top_k)
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

    def memories(self, query: Query, album: Album, profile: ScaffoldProfile, tools: list[Any]) -> list[AgentHooks]:
        """The memory hooks of one search (built per query: searches may run in parallel); a memory may add its
        tool to ``tools``. ImageSeeker and PhotoCraft differ here only."""
        return []

    def worked_example(self, profile: ScaffoldProfile) -> dict[str, Any] | None:
        if not profile.worked_example:
            return None
        return WORKED_EXAMPLE_DESCRIBED if self.describe() else WORKED_EXAMPLE

    # ------------------------------------------------------------------ run
    def run(self, query: Query, top_k: int, trace: Trace) -> Result:
        album = self.album(query)
        cfg = self.config
        role = self.ctx.roles[cfg.agent_role]
        profile = self.profile()
        tools = self.tools(album, profile)
        scaffold = Scaffold(profile, role, query.text)  # first: an unnarrowed or unsearched answer is not audited
        hooks = [scaffold, *self.memories(query, album, profile, tools)]
        runtime = AgentRuntime(
            role, tools, self.system_prompt(tools), max_turns=cfg.max_turns, hooks=hooks, tool_mode=cfg.tool_mode,
            known_ids=album, fallback_k=cfg.fallback_k, max_tokens=cfg.max_tokens,
            fallback=lambda _state: list(album.search(query.text, cfg.fallback_k).ids),
            search_first=cfg.search_first, loop_guard=cfg.loop_guard, stuck_after=cfg.stuck_after,
            repeat_limit=cfg.repeat_limit, compact_prompt=profile.compact_prompt,
            worked_example=self.worked_example(profile), one_tool_per_step=cfg.one_tool_per_step,
        )
        run = runtime.run(self.task_message(query, album))
        ranking = self.ranking(run, top_k)
        origin, share = answer_origin(run.answer, code_lists(run.state, scaffold), fallback=run.source == "fallback")
        with trace.step("answer", source=run.source, scaffold=profile.name) as step:
            step.outputs = {"answer_set": list(run.answer), "answer_origin": origin,
                            "code_selected_share": round(share, 4), **run.to_dict()}
            if run.source == "fallback":
                step.note(run.reason)
        fallback = "best_candidates" if run.state.seen else "plain_search"  # nothing seen: the album search
        source = Source.fallback(fallback) if run.source == "fallback" else Source.METHOD
        return Result(ranking=ranking, trace=trace, answer_set=list(run.answer), source=source,
                      source_reason=run.reason if run.source == "fallback" else "",
                      counts=agent_counts(run, scaffold), answer_origin=origin, code_selected_share=share)

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


def agent_counts(run: AgentRun, scaffold: Scaffold) -> dict[str, int]:
    """The agent's own behaviour counts for one query (summed by an evaluation's ``behaviour``), read from the run's
    typed records: episodes, turns, tool calls by tool (the calls that ran), answer fallbacks, forced final answers
    (the answer came from the last call without tools, after the turn budget or repeated calls), audits passed /
    failed, compressions, skills injected, and the scaffold's split and directives (``scaffold.*``)."""
    state = run.state
    counts: dict[str, int] = {"episodes": 1, "turns": run.turns,
                              "answer_fallbacks": int(run.source == "fallback"),
                              "forced_final_answers": int(run.source == "model" and run.forced)}
    counts |= {f"tool_calls.{name}": n for name, n in state.tool_uses.items()}
    audits = state.records.of(Audit)
    counts["audits_passed"] = sum(1 for a in audits if a.passed)
    counts["audits_failed"] = len(audits) - counts["audits_passed"]
    counts["compressions"] = len(state.records.of(Compression))
    counts["skills_injected"] = int(state.records.last(SkillUse) is not None)
    return counts | scaffold.counts()


@register_method
class ImageSeeker(_DeepSearch):
    """ImageSeeker (DeepImageSearch): the memoryless album-search agent PhotoCraft builds on."""

    name = "imageseeker"
    Config = ImageSeekerConfig
    config: ImageSeekerConfig
    prompt_dir = "imageseeker"
    description = ("ImageSeeker (DeepImageSearch): a tool-using agent over a personal album (search, metadata, "
                   "filters, viewing) with free-form context compression; answers a set of photos")

    def memories(self, query: Query, album: Album, profile: ScaffoldProfile, tools: list[Any]) -> list[AgentHooks]:
        if not self.config.compression:
            return []
        return [WorkingMemory(self.ctx.roles[self.config.memory_role], load_prompt("imageseeker/condense.txt"),
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

    # ------------------------------------------------------------------ memories
    def memories(self, query: Query, album: Album, profile: ScaffoldProfile, tools: list[Any]) -> list[AgentHooks]:
        c = self.config
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
        if c.episodic_memory:
            def reload(ids: list[str]) -> list[tuple[str, ImagePart]]:
                return album.view(ids)[0]

            hooks.append(EpisodicMemory(self.ctx.roles[c.memory_role], load_prompt("photocraft/audit.txt"),
                                        load_prompt("photocraft/audit_feedback.txt"), reload,
                                        max_reload=c.max_view, max_audits=profile.audits(c.max_audits),
                                        context_limit=self.context_limit(), own_words=profile.audit_own_words))
        return hooks


def mark_answer_correct(method: PhotoCraft, query: str, trace: Trace | dict[str, Any]) -> Skill | None:
    """The web UI's "this answer is right" (Sec. 3.2: a user-confirmed episode is a success): distil the
    search's trajectory into the method's skill library. Returns the stored (or merged) skill, or None
    when no de-entified skill could be distilled."""
    return method.mark_answer_correct(query, trace)


__all__ = ["ImageSeeker", "ImageSeekerConfig", "PhotoCraft", "PhotoCraftConfig", "agent_counts",
           "mark_answer_correct"]
