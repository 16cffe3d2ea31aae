"""The ``album`` method's settings (:class:`AlbumConfig`): every field is imagent's own (``methods/origins.py``),
the method being ours (decision 10). The planner (:mod:`imagent.methods.album.method`) and the executor
(:mod:`imagent.methods.album.execute`) read them."""

from __future__ import annotations

from pydantic import Field

from imagent.methods.base import MethodConfig


class AlbumConfig(MethodConfig):
    """The ``album`` method's settings: every field is imagent's own (``methods/origins.py``)."""

    planner_role: str = Field("planner", description="role of the model that writes the plan")
    plan_max_tokens: int = Field(120, ge=32, description="reply tokens for one plan (a plan is ~50)")
    check: bool = Field(True, description="when the plan's execution keeps no photo, ask the planner once more "
                        "(the failed relation left out of its grammar); at most 2 model calls a search")
    trip_gap_days: float = Field(1.0, ge=0, description="photo days at most this many days apart are one trip")
    place_km: float = Field(1.0, gt=0, description="same place: within this many km of the anchor's GPS")
    city_km: float = Field(25.0, gt=0, description="same city: within this many km of the anchor's GPS")
    anchor_candidates: int = Field(5, ge=1, description="anchor photos weighed by joint evidence (the best "
                                   "scoring within anchor_margin of the best)")
    anchor_margin: float = Field(0.1, ge=0, description="anchor candidates score within this of the best one")
    match_quantile: float = Field(0.95, gt=0, lt=1, description="answer cut: a kept photo shows the target when its "
                                  "score is at least the album's score at this quantile, or ...")
    match_share: float = Field(0.5, ge=0, le=1, description="... when its margin over the album's median is at "
                               "least this share of the best kept photo's margin")
    day_tolerance: int = Field(1, ge=0, description="N days after/before: the nearest photo day within this many "
                               "days when the day itself has no photo")
    week_tolerance: int = Field(3, ge=0, description="N weeks after/before: the trip of the nearest photo day within "
                               "this many days of the date")


__all__ = ["AlbumConfig"]
