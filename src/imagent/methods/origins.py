"""Where each method hyper-parameter comes from: the paper (with the section or table that sets its default) or
imagent itself (a knob the paper does not have: budgets, retries, protocols, fall-backs, roles).

``imagent config methods`` prints it beside every default (:func:`field_origins`). A field of a paper method that
is neither cited here nor listed as imagent's own is shown as the paper's with its source left to
``docs/faithfulness.md``, where each method's steps and defaults are checked one by one.
"""

from __future__ import annotations

from typing import Any

# Knobs every method has, or that no paper describes: imagent's own.
IMAGENT_FIELDS: frozenset[str] = frozenset({
    "concurrency", "max_calls", "allow_missing_captions", "parse_retries", "json_retries", "max_field_chars",
    "tool_mode", "tool_protocol", "loop_guard", "stuck_after", "repeat_limit", "fallback_k", "fallback_top_k",
    "context_limit", "compress_at", "agent_role", "memory_role", "skills_path", "batch_questions",
    "grammar_max_calls",
    "plan_retries", "planner_max_tokens", "max_calls_per_plan", "library", "mip_time_limit_s", "retrievers",
    "exclude_gallery_exemplars", "genecis_templates", "chat_mode", "stages", "max_tokens", "max_view",
    "search_first", "web_search", "describe_results",
    "scaffold",  # the album agents' scaffold profile (none | small; auto: small for the llama.cpp JSON protocol)
    "keep_verbatim", "max_audits",
    "include_reference_caption", "max_verified",
    "text_similarity", "visual_similarity", "text_questions", "visual_questions",
})

# Paper fields whose default a section or table of the paper sets.
PAPER_SOURCES: dict[str, dict[str, str]] = {
    "imagescope": {
        "tau": "Sec. 4.1 Implementation Details (tau = 0.15; Eq. 7)",
        "k": "Sec. 4.1 Implementation Details (k = 20 candidates verified in stage 2)",
        "alpha": "Sec. 4.1 Implementation Details (alpha = 3 images evaluated in stage 3; Eq. 12)",
    },
    "xr": {
        "lam": "Sec. 4.1 Implementation Details (lambda = 0.15)",
        "k_prime": "Sec. 4.1 Implementation Details (k' = 100 candidates for fine filtering)",
        "rrf_z": "Figure 3(a) (RRF with z = 60 strikes the best balance)",
        "fusion": "the method's RRF equation (reciprocal rank fusion of the similarity agents)",
    },
    "tacir": {
        "temperature": "Sec. 4 Implementation Details (GPT APIs at temperature 0)",
    },
    "oscar": {
        "truncations": "App. E Implementation Details (top-k discretised from 5 to 50, step 5)",
    },
    "photocraft": {
        "max_turns": "App. A.2.2 Hyperparameters (30 interaction turns, as ImageSeeker)",
        "top_k": "App. A.2.2 Hyperparameters (ImageSearch returns 20 results)",
        "tau": "working memory fidelity check (tau = 0.5 by default)",
        "merge_threshold": "skill merging (Eq. 4, cosine > 0.8)",
        "theta_conf": "Sec. 4 Implementation Details (theta_conf = 0.85)",
        "theta_retr": "Sec. 4 Implementation Details (theta_retr = 0.65)",
        "working_memory": "Table 2 ablation (on in the full model)",
        "episodic_memory": "Table 2 ablation (on in the full model)",
        "semantic_memory": "Table 2 ablation (on in the full model)",
        "summaries": "Table 2 ablation (all three summaries in the full model)",
        "fidelity": "Table 2 ablation (on in the full model)",
        "one_tool_per_step": "Sec. 3.3 (one tool call per step)",
    },
    "imageseeker": {
        "max_turns": "PhotoCraft App. A.2.2 (ImageSeeker's 30 turns)",
        "top_k": "PhotoCraft App. A.2.2 (ImageSearch returns 20 results)",
    },
}

# Methods that reproduce no paper of their own: every field is imagent's.
BASELINES: frozenset[str] = frozenset({"caption", "clip", "cirevl"})
# imagent's own methods (decision 10: the ``album`` planner is reported beside the papers', never under their
# names): every field is imagent's.
OWN_METHODS: frozenset[str] = frozenset({"album"})


def field_origins(method: str, defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{field: {"default", "origin": "paper" | "imagent", "source"}}`` for one method's defaults."""
    cited = PAPER_SOURCES.get(method, {})
    out: dict[str, dict[str, Any]] = {}
    for name, value in defaults.items():
        if name in cited:
            out[name] = {"default": value, "origin": "paper", "source": cited[name]}
        elif method in BASELINES or method in OWN_METHODS or name in IMAGENT_FIELDS:
            out[name] = {"default": value, "origin": "imagent", "source": "imagent's own (not in the paper)"}
        else:
            out[name] = {"default": value, "origin": "paper", "source": "see docs/faithfulness.md"}
    return out


__all__ = ["BASELINES", "IMAGENT_FIELDS", "OWN_METHODS", "PAPER_SOURCES", "field_origins"]
