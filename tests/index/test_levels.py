"""Results that stop where the matches stop (imagent/index/levels.py), and what a model that cannot see pixels reads
for a photo without a caption (imagent/index/describe.py). Each result of a cosine ranking gets a match
level from its score against the query's scores over the whole gallery, the same in the API rows, ``--json``, the
CLI table and its default cut.

Real parts: the shipped stamps, MiniLM on their captions (caption mode) and the pixel model on the same stamps as a
camera folder without captions; queries with exactly 1, 5 and 0 true matches in the gallery."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagent.core.config import ResultOptions
from imagent.core.types import MATCH_NONE, MATCH_POSSIBLE, MATCH_STRONG
from imagent.index.levels import MIN_SPREAD, match_cut

STAMPS = Path(os.environ.get("IMAGENT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "data" / "stamps"
EURO_COINS = [f"symbols__money__euro__coins__{n}" for n in ("001", "002", "005", "010", "020")]
BIRDS = ["animals__birds__duck", "animals__birds__heron_greatblue", "animals__birds__hen", "animals__birds__crow",
         "animals__birds__little-penguin"]
# Neither coins, birds, zebras, flamingos nor guitars: what the true matches stand among.
OTHERS = ["clothes__clothespin_old", "clothes__t_shirt", "food__fruit__cartoon__apple_core",
          "food__fruit__cartoon__lemon", "food__fruit__kiwi", "food__fruit__sliced_lime", "food__fruit__sliced_orange",
          "food__pizza", "household__dishes__glass", "household__dishes__utensils__pepper_grinder",
          "household__home_compost_bin", "sports__basketball", "sports__cartoon__football_helmet_front",
          "town__cartoon__gate", "town__cartoon__wishing_well", "town__flags__blue-and-yellowflag",
          "town__flags__checkeredflag", "town__flags__greenflag", "town__houses__cartoon__circus",
          "town__houses__cartoon__fairytale_castle", "town__houses__cartoon__fort", "town__houses__cartoon__fortress",
          "town__houses__cartoon__medieval_tent", "town__houses__cartoon__pinkhome", "town__houses__cartoon__stables",
          "town__monuments__cartoon__sword_in_the_stone", "town__roadsigns__dead_end_sign",
          "vehicles__construction__cartoon__cementMixer", "vehicles__construction__cartoon__terex",
          "vehicles__flight__planes__747", "vehicles__locomotive__cartoon__boxcar",
          "vehicles__locomotive__cartoon__caboose", "vehicles__locomotive__cartoon__trainSign",
          "vehicles__masstransit__cartoon__double_decker_bus"]


def levels_of(result, gallery) -> dict[str, str]:
    from imagent.api import result_rows

    return {r["id"]: r["match"] for r in result_rows(result, gallery)}


def found(levels: dict[str, str], level: str) -> set[str]:
    return {i for i, lv in levels.items() if lv == level}


# ----------------------------------------------------------------------------- the rule


def test_the_cut_reads_the_distribution_not_the_cosine():
    rng = np.random.default_rng(0)
    background = rng.normal(0.2, 0.05, 200)
    # one photo far above the rest: strong; one a little above: possible; the rest: none
    scores = np.concatenate([background, [0.2 + 8 * 0.05, 0.2 + 4 * 0.05]])
    cut = match_cut(scores)
    assert cut is not None and not cut.sampled and cut.photos == 202
    assert cut.level(scores[-2]) == MATCH_STRONG and cut.level(scores[-1]) == MATCH_POSSIBLE
    assert sum(cut.level(s) != MATCH_NONE for s in background) <= 1
    # the same shape on another scale (another space's cosines) cuts at the same photos
    shifted = match_cut(scores * 0.5 + 0.3)
    assert [shifted.level(s * 0.5 + 0.3) for s in scores[-2:]] == [MATCH_STRONG, MATCH_POSSIBLE]
    # a lone clear match above a wide gap is strong even below strong_z (the gap rule), not without the rule
    lone = np.concatenate([background, [0.2 + 4.8 * 0.05]])
    assert match_cut(lone).level(lone[-1]) == MATCH_STRONG
    assert match_cut(lone, ResultOptions(gap_z=50)).level(lone[-1]) == MATCH_POSSIBLE


def test_no_cut_on_a_tiny_gallery_and_a_floor_under_the_spread():
    assert match_cut(np.array([0.9, 0.1, 0.1])) is None  # fewer than min_photos scores
    flat = np.concatenate([np.zeros(100), [0.004, 0.3]])  # photos nothing is known about all score 0
    cut = match_cut(flat)
    assert cut.spread == MIN_SPREAD and cut.level(0.004) == MATCH_NONE and cut.level(0.3) == MATCH_STRONG
    with pytest.raises(ValueError, match="possible_z"):
        ResultOptions(strong_z=3, possible_z=4)


# ----------------------------------------------------------------------------- captions (MiniLM)


@pytest.fixture(scope="module")
def caption_workspace(tmp_path_factory, stamp_records, caption_dual, minilm):
    """40 stamps with their captions in caption mode: 5 euro coins, 1 flamingo, 34 others."""
    from imagent.api import Workspace
    from imagent.core.config import Settings
    from imagent.index.embedding import gallery_from_records

    keep = {*EURO_COINS, "animals__birds__pink_flamingo", *OTHERS}
    root = tmp_path_factory.mktemp("levels-captions")
    gallery_from_records(str(root / "index"), [r for r in stamp_records if r.id in keep], caption_dual, minilm)
    ws = Workspace(Settings(index=root / "index", cache_dir=root / "cache", cache_calls=False))
    assert len(ws.gallery()) == 40
    return ws


@pytest.mark.parametrize("method", ["clip", "caption"])
def test_captions_one_five_and_no_true_match(caption_workspace, method):
    ws, g = caption_workspace, caption_workspace.gallery()
    one = levels_of(ws.search("a pink flamingo", method=method, top_k=40), g)
    assert found(one, MATCH_STRONG) == {"animals__birds__pink_flamingo"}
    assert not found(one, MATCH_POSSIBLE)

    five = levels_of(ws.search("a euro coin", method=method, top_k=40), g)
    assert found(five, MATCH_STRONG) == set(EURO_COINS)
    assert not found(five, MATCH_POSSIBLE)

    none = levels_of(ws.search("a receipt from a supermarket", method=method, top_k=40), g)
    assert set(none.values()) == {MATCH_NONE}


def test_levels_are_in_json_and_the_api_rows_and_a_filter_keeps_the_gallerys_cut(caption_workspace):
    from imagent.api import result_json

    ws, g = caption_workspace, caption_workspace.gallery()
    result = ws.search("a euro coin", method="clip", top_k=10)
    doc = json.loads(result_json(result, g))
    assert [r["match"] for r in doc["results"][:5]] == [MATCH_STRONG] * 5 and doc["results"][5]["match"] == MATCH_NONE
    assert doc["match_cut"]["photos"] == 40 and doc["match_cut"]["strong"] > doc["match_cut"]["possible"]
    assert all(isinstance(r["score"], float) for r in doc["results"])  # raw scores stay in --json
    # inside a filter the levels are still the gallery's (a pool of two coins and the flamingo: the same cut)
    from imagent.core.trace import Trace
    from imagent.core.types import MetadataConstraints, Query, Ranking, Result

    ctx = ws.context()
    vec = ctx.encode(["a euro coin"], "image")[0]
    pool = np.sort(g.rows([EURO_COINS[0], EURO_COINS[1], "animals__birds__pink_flamingo"]))
    filtered = ctx.rank(Query("a euro coin", constraints=MetadataConstraints(rows=pool)), vec, "image", 3)
    assert filtered.cut == result.ranking.cut and len(filtered) == 3
    # a ranking that is not a cosine over the gallery (a method's own re-ranking) has no cut: no level
    plain = Result(Ranking(["symbols__money__euro__coins__001"], [3.0]), Trace())
    assert json.loads(result_json(plain, g))["results"][0]["match"] is None


# ----------------------------------------------------------------------------- pixels (the pixel model, no captions)


@pytest.fixture(scope="module")
def pixel_workspace(tmp_path_factory):
    """The same kind of gallery as a camera folder without captions (IMG_0001.jpg ...): 5 birds, 1 zebra, 34 others,
    through ``imagent index``'s default setup (the pixel model answers for every photo)."""
    from PIL import Image

    from imagent.api import Workspace

    root = tmp_path_factory.mktemp("levels-pixels")
    folder = root / "DCIM"
    folder.mkdir()
    truth = {}
    for n, name in enumerate([*BIRDS, "animals__mammals__equines__zebra", *OTHERS], 1):
        with Image.open(STAMPS / "images" / f"{name}.jpg") as im:
            im.convert("RGB").save(folder / f"IMG_{n:04d}.jpg", "JPEG", quality=92)
        truth[f"IMG_{n:04d}.jpg"] = name
    ws = Workspace.from_config(sets=[f"index={root / 'index'}", f"cache_dir={root / 'cache'}"])
    ws.index(folder)
    return ws, truth, root


def stamp_levels(ws, truth, result) -> dict[str, str]:
    g = ws.gallery()
    return {truth[Path(g.record(i).path).name]: lv for i, lv in levels_of(result, g).items()}


def test_pixels_one_five_and_no_true_match(pixel_workspace):
    ws, truth, _ = pixel_workspace
    five = stamp_levels(ws, truth, ws.search("birds", method="clip", top_k=40))
    assert found(five, MATCH_STRONG) == set(BIRDS)
    one = stamp_levels(ws, truth, ws.search("a zebra", method="clip", top_k=40))
    assert found(one, MATCH_STRONG) == {"animals__mammals__equines__zebra"} and not found(one, MATCH_POSSIBLE)
    none = stamp_levels(ws, truth, ws.search("a guitar", method="clip", top_k=40))
    assert set(none.values()) == {MATCH_NONE}


def test_more_like_this_gets_levels_from_the_visual_space(pixel_workspace):
    ws, truth, _ = pixel_workspace
    g = ws.gallery()
    duck = next(i for i in g.ids if truth[Path(g.record(i).path).name] == "animals__birds__duck")
    result = ws.search(like=duck, top_k=40)
    assert result.ranking.cut is not None and duck not in result.ranking.ids
    levels = stamp_levels(ws, truth, result)
    assert set(levels.values()) <= {MATCH_STRONG, MATCH_POSSIBLE, MATCH_NONE}
    assert found(levels, MATCH_STRONG) | found(levels, MATCH_POSSIBLE) <= set(BIRDS)  # only birds look like a duck


def test_the_cli_stops_at_the_matches_unless_a_number_is_asked_for(pixel_workspace):
    _, truth, root = pixel_workspace
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "HF_HUB_OFFLINE": "1"}
    base = [sys.executable, "-m", "imagent.cli.main", "search", "a zebra", "--index", str(root / "index"),
            "--set", f"cache_dir={root / 'cache'}", "--no-server"]

    def run(*extra: str) -> subprocess.CompletedProcess:
        out = subprocess.run([*base, *extra], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return out

    rows = json.loads(run("--json").stdout)["results"]
    assert [truth[Path(r["path"]).name] for r in rows] == ["animals__mammals__equines__zebra"]
    assert rows[0]["match"] == MATCH_STRONG
    asked = json.loads(run("--json", "--top-k", "5").stdout)["results"]
    assert len(asked) == 5 and [r["match"] for r in asked] == [MATCH_STRONG] + [MATCH_NONE] * 4
    table = run().stdout.split("trace")[0]
    assert "1 strong match" in table and "match" in table  # a level, not a raw cosine
    assert not re.search(r"\b-?[01]\.\d{4}\b", table) and "the match column reads it" in " ".join(table.split())
    empty = subprocess.run([*base[:4], "a guitar", *base[5:]], capture_output=True, text=True, env=env, timeout=300)
    assert empty.returncode == 0 and "no photo matches" in empty.stdout


# ----------------------------------------------------------------------------- the pixel description (blind roles)


def test_a_photo_without_a_caption_reads_as_what_the_pixel_model_saw(pixel_workspace, stamp_records):
    from imagent.core.config import PixelOptions
    from imagent.index.describe import PREFIX, pixel_description

    ws, truth, _ = pixel_workspace
    g = ws.gallery()
    zebra = next(g.record(i) for i in g.ids if truth[Path(g.record(i).path).name] == "animals__mammals__equines__zebra")
    assert zebra.labels[0]["name"] == "zebra" and zebra.labels[0]["p"] >= 0.5
    assert zebra.description.startswith(PREFIX) and "zebra (mammal)" in zebra.description
    assert zebra.surrogate().startswith(zebra.description) and "IMG" not in zebra.surrogate()
    assert not zebra.has_caption and "description" not in zebra.to_dict()  # never stored, never a caption
    # labels under the cards' floor are not named; people and the text in the photo join it
    weak = [{"name": "maraca", "p": 0.44, "index": 641}, {"name": "shower cap", "p": 0.47, "index": 793}]
    rec = type(zebra)(id="x", path="", labels=weak)
    said = pixel_description(rec, ["Anna"], PixelOptions())
    assert "maraca" not in said and "shower cap" not in said
    assert said == f"{PREFIX}: nothing it could name with confidence; people: Anna"
    assert pixel_description(rec, [], PixelOptions(label_show_p=0.4)).endswith(  # "cap": a word of its name
        ": maraca (percussion instrument), shower cap")
    assert pixel_description(zebra, [], PixelOptions(), labels_as_text=False) == ""
    captioned = next(r for r in stamp_records if r.id == "animals__birds__pink_flamingo")
    assert pixel_description(captioned, [], PixelOptions()) == ""
    # the cards show the same floor: no label of 0.44 on a card
    from imagent.api import card_labels

    assert card_labels(rec, g) == [] and card_labels(zebra, g)[0]["name"] == "zebra"


def test_blind_roles_get_the_pixel_description_marked_in_the_trace(pixel_workspace, scripted):
    from imagent.core.trace import Trace
    from imagent.core.types import Query
    from imagent.methods.base import MethodContext
    from imagent.methods.baselines import CIReVL
    from imagent.methods.imagescope import ImageScope
    from imagent.models.base import ImagePart, Message
    from imagent.models.roles import Roles

    ws, truth, _ = pixel_workspace
    g = ws.gallery()
    zebra = next(i for i in g.ids if truth[Path(g.record(i).path).name] == "animals__mammals__equines__zebra")
    model = scripted(rules=[(r"Seen by the pixel model", "A zebra standing in tall grass.")], default="yes")
    ctx = MethodContext(gallery=g, dual=ws.dual_encoder, text=ws.text_embedder, roles=Roles.from_models(
        {"default": model}), results=ws.settings.results)
    result = CIReVL(ctx).search(Query(text="the same animal but lying down", reference=g.record(zebra)), top_k=5,
                                trace=Trace())
    step = next(s for s in result.trace.steps if s.name == "describe_reference")
    said = step.outputs["reference_description"]
    assert said.startswith("Seen by the pixel model (not a caption): zebra") and "IMG" not in said
    assert any("pixel description" in n and "not a caption" in n for n in step.notes)
    assert result.counts["pixel_descriptions"] == 1
    assert "Seen by the pixel model (not a caption): zebra" in model.prompts()[0]
    assert CIReVL(ctx).text_readers() == ["captioner"]  # decision 11: a role reads labels as text (Open)
    # a verifier shown candidates (ImageScope's stage 2, OSCAR's verifier) reads theirs too, and the trace says so
    assert ImageScope(ctx).text_readers() == ["captioner", "verifier", "evaluator"]
    trace = Trace()
    with trace.activate(), trace.step("verify") as step:
        ctx.roles["verifier"].text([Message.user("Is there a zebra?", ImagePart(record=g.record(zebra)),
                                                 ImagePart(record=g.record(g.ids[0])))])
    assert trace.counters["pixel_descriptions"] == 2
    assert any("2 image(s) without a caption as their pixel description" in n for n in step.notes)
    assert "[Image, described in text: Seen by the pixel model (not a caption): zebra" in model.prompts()[-1]
