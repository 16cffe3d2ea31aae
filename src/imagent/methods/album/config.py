"""The ``album`` method's settings (:class:`AlbumConfig`): every field is imagent's own (``methods/origins.py``),
the method being ours (decision 10). The planner (:mod:`imagent.methods.album.method`) and the executor
(:mod:`imagent.methods.album.execute`) read them."""

from __future__ import annotations

from pydantic import Field, field_validator

from imagent.methods.base import MethodConfig
from imagent.models.offline import OFFLINE_GGUFS, QWEN_15B

# The planner the offline default runs (measured: docs/album.md, "Measured").
PLANNER_MODEL = QWEN_15B.name


class AlbumConfig(MethodConfig):
    """The ``album`` method's settings: every field is imagent's own (``methods/origins.py``)."""

    planner_role: str = Field("planner", description="role of the model that writes the plan")
    planner_model: str = Field(PLANNER_MODEL, description="when the planner role's model is the offline default "
                               "(Qwen2.5 0.5B in-process), plan with this offline model instead: the 1.5B planned "
                               "better at about the same speed (benchmarks/album_compare.py, docs/album.md); its "
                               "parts come with imagent[offline-1.5b] (not installed: the role's model plans, and the "
                               "trace says so); 'role': always the role's own model")
    plan_max_tokens: int = Field(120, ge=32, description="reply tokens for one plan (a plan is 20-60)")
    check: bool = Field(True, description="when the plan's execution finds no photo or leaves words of the search "
                        "unused, ask the planner once more (told why) and keep the plan the scores back better; at "
                        "most 2 model calls a search")
    trip_gap_days: float = Field(1.0, ge=0, description="photo days at most this many days apart are one trip")
    place_km: float = Field(1.0, gt=0, description="same place: within this many km of the anchor's GPS")
    city_km: float = Field(25.0, gt=0, description="same city: within this many km of the anchor's GPS")
    anchor_candidates: int = Field(5, ge=1, description="anchor photos weighed by joint evidence (the best "
                                   "scoring within anchor_margin of the best)")
    anchor_margin: float = Field(0.1, ge=0, description="anchor candidates score within this of the best one")
    clue_z: float = Field(6.0, gt=0, description="how sure an anchor candidate found by a place its words name, or "
                          "by the people, places and dates the reader linked, counts (in robust deviations, like a "
                          "content match); also the most a content match or the target's support counts in the "
                          "joint evidence of a candidate path")
    target_prompt: str = Field("a photo of {}", description="how the target's words are searched ({} stands for "
                               "them; '{}' alone: the plain words)")
    target_kinds: int = Field(32, ge=0, description="answer cut: when the target's words name a category of the "
                              "pixel model's WordNet classes ('mammals', 'birds', 'tools'), a kept photo's score adds "
                              "target_kinds_weight x its best score for the category's target_kinds kinds closest "
                              "to the words (a yak is a mammal although 'mammals' and 'a yak' read apart); 0: off")
    target_kinds_weight: float = Field(0.5, ge=0, description="weight of the best kind's score in the answer cut")
    match_floor: float = Field(2.0, ge=0, description="answer cut over the album (no anchor): a photo can show the "
                               "target only when its score stands at least this many robust deviations above the "
                               "album's median score for the target (calibrated on albums of seeds >= 3000: "
                               "docs/album.md)")
    match_floor_anchored: float = Field(1.0, ge=0, description="answer cut within the photos a chain of relations "
                                        "kept (a moment or place the question names: its photos are likelier to "
                                        "show the target): the floor there")
    match_share: float = Field(0.5, ge=0, le=1, description="answer cut: ... and at least this share of the best "
                               "kept photo's standing")
    match_gap: float = Field(3.0, ge=0, description="answer cut: of those, the answer ends at the largest drop "
                             "between consecutive standings when that drop is at least this many deviations (one "
                             "clear match among near misses answers alone)")
    match_sure: float = Field(5.0, ge=0, description="answer cut: ... but never between two photos that both stand "
                              "at least this many deviations above the median (both clearly show the target: a "
                              "category's best and next best kinds; calibrated with match_floor, docs/album.md)")
    day_tolerance: int = Field(1, ge=0, description="N days after/before: the nearest photo day within this many "
                               "days when the day itself has no photo")
    week_tolerance: int = Field(3, ge=0, description="N weeks after/before: the trip of the nearest photo day within "
                               "this many days of the date")

    @field_validator("planner_model")
    @classmethod
    def _known_planner(cls, v: str) -> str:
        if v != "role" and v not in OFFLINE_GGUFS:
            raise ValueError(f"planner_model is 'role' or an offline model ({', '.join(OFFLINE_GGUFS)}), not {v!r}")
        return v


__all__ = ["PLANNER_MODEL", "AlbumConfig"]
