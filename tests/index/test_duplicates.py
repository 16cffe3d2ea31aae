"""Duplicate groups (issue 23 item 4; issue 47 item 5): an exact copy, a re-encoded and a resized copy are grouped
with their original and a different photo is not; the image vectors confirm near-duplicates where they see pixels,
the pixel model's visual features at their own floor (a half-size quality-70 copy of a small stamp, with the real
EfficientNet-Lite0); ``imagent duplicates`` and ``--collapse-duplicates``; nothing is deleted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from imagent.core.config import IndexOptions
from imagent.index.builder import build_index
from imagent.index.duplicates import collapse, duplicate_groups
from imagent.index.gallery import Gallery
from imagent.index.parts import IndexParts


class ThumbDual:
    """A dual encoder that sees pixels: a 16-value grey thumbnail, centred and normalised (copies of one picture
    point the same way, different pictures do not)."""

    sees_pixels = True
    model_id = "thumb-16"
    dim = 16

    def __init__(self, tiny) -> None:
        self.tiny = tiny

    def encode_texts(self, texts):
        return np.zeros((len(texts), self.dim), dtype=np.float32)

    def encode_images(self, records):
        out = []
        for r in records:
            with Image.open(r.path) as im:
                v = np.asarray(im.convert("L").resize((4, 4)), dtype=np.float32).reshape(-1)
            v = v - v.mean()
            out.append(v / max(float(np.linalg.norm(v)), 1e-6))
        return np.array(out, dtype=np.float32)


def _folder(tmp_path, images):
    d = tmp_path / "photos"
    a = images.jpeg(d / "a.jpg", 5)
    shutil.copyfile(a, d / "a_copy.jpg")  # the same bytes
    with Image.open(a) as im:
        im.save(d / "a_q40.jpg", "JPEG", quality=40)  # re-encoded
        im.resize((im.width // 2, im.height // 2)).save(d / "a_half.jpg", "JPEG", quality=90)  # resized
    images.jpeg(d / "b.jpg", 40)  # a different photo
    return d


def _names(group):
    return sorted(m.path.rsplit("/", 1)[-1] for m in group.members)


def test_exact_reencoded_and_resized_copies_are_grouped_not_a_different_photo(tmp_path, images, tiny):
    folder = _folder(tmp_path, images)
    r = build_index(folder, tmp_path / "idx", IndexParts.of(None, tiny))
    assert any("identical content" in reason for _, reason in r.skipped)  # the exact copy is not indexed twice
    g = Gallery(tmp_path / "idx")
    groups = duplicate_groups(g)
    exact = [x for x in groups if x.kind == "exact"]
    near = [x for x in groups if x.kind == "near"]
    assert [_names(x) for x in exact] == [["a.jpg", "a_copy.jpg"]]
    assert [_names(x) for x in near] == [["a.jpg", "a_half.jpg", "a_q40.jpg"]]
    member = near[0].members[0]
    assert member.size and member.size > 0 and member.id in g
    assert sorted(p.name for p in folder.iterdir()) == ["a.jpg", "a_copy.jpg", "a_half.jpg", "a_q40.jpg", "b.jpg"]
    assert len(Gallery(tmp_path / "idx").phashes()) == 4  # hashed once, kept in the index
    # a hash distance of 0 allowed: only identical hashes
    assert all(x.max_distance == 0 for x in duplicate_groups(g, IndexOptions(duplicate_max_distance=0))
               if x.kind == "near")


def test_image_vectors_confirm_near_duplicates(tmp_path, images, tiny):
    folder = _folder(tmp_path, images)
    build_index(folder, tmp_path / "idx", IndexParts.of(ThumbDual(tiny), tiny))
    g = Gallery(tmp_path / "idx")
    near = [x for x in duplicate_groups(g) if x.kind == "near"]
    assert [_names(x) for x in near] == [["a.jpg", "a_half.jpg", "a_q40.jpg"]]
    # image vectors that say the files differ (a hash of their bytes): the perceptual hashes alone are not enough
    build_index(folder, tmp_path / "idx2", IndexParts.of(BytesDual(tiny), tiny))
    assert not [x for x in duplicate_groups(Gallery(tmp_path / "idx2")) if x.kind == "near"]


class BytesDual(ThumbDual):
    """'Sees pixels', but its vectors come from the file's bytes: every file points its own way."""

    model_id = "bytes-8"
    dim = 8

    def encode_texts(self, texts):
        return self.tiny.encode_texts(texts)

    def encode_images(self, records):
        return self.tiny.encode_texts([open(r.path, "rb").read().hex() for r in records])


def test_duplicates_command_and_collapse(tmp_path, images, tiny, monkeypatch):
    from imagent.cli.main import app

    folder = _folder(tmp_path, images)
    build_index(folder, tmp_path / "idx", IndexParts.of(None, tiny))
    out = CliRunner().invoke(app, ["duplicates", "--index", str(tmp_path / "idx"), "--json"])
    assert out.exit_code == 0, out.output
    groups = json.loads(out.stdout)["groups"]
    assert [g["kind"] for g in groups] == ["exact", "near"]
    assert {"id", "path", "size", "taken"} <= set(groups[1]["members"][0])
    table = CliRunner().invoke(app, ["duplicates", "--index", str(tmp_path / "idx")], env={"COLUMNS": "200"})
    assert "near-duplicates" in table.output and "a_q40.jpg" in table.output and "nothing was changed" in table.output

    g = Gallery(tmp_path / "idx")
    group = [m.id for m in duplicate_groups(g)[1].members]
    other = next(i for i in g.ids if i not in group)
    keep, dropped = collapse([group[1], group[0], other, group[2]], duplicate_groups(g))
    assert (keep, dropped) == ([0, 2], 2)  # the best ranked of the group stays


def test_a_half_size_quality_70_copy_of_a_small_photo_is_grouped_with_its_original(tmp_path, minilm):
    """Issue 47: a 194x224 stamp and its half-size copy at JPEG quality 70 (what a messaging app sends) are one
    group, confirmed by the pixel model's real visual features at their own floor (duplicate_min_visual); the
    image vectors' 0.9, which confirmed them before, would part them; a different picture stays apart."""
    from imagent.index.duplicates import _pixel_space, min_cosine
    from imagent.models.encoders import CaptionDualEncoder
    from imagent.models.pixels import EffNetLite0

    stamps = Path(__file__).resolve().parents[2] / "src" / "imagent" / "eval" / "data" / "stamps_mini" / "images"
    d = tmp_path / "photos"
    d.mkdir()
    with Image.open(stamps / "animals__mammals__giraffe.jpg") as im:
        assert im.size == (194, 224)
        im.convert("RGB").save(d / "giraffe.jpg", quality=92)
        im.convert("RGB").resize((97, 112), Image.Resampling.LANCZOS).save(d / "giraffe_half.jpg", quality=70)
    with Image.open(stamps / "animals__birds__duck.jpg") as im:
        im.convert("RGB").save(d / "duck.jpg", quality=92)
    effnet = EffNetLite0()
    build_index(d, tmp_path / "idx", IndexParts.of(CaptionDualEncoder(minilm), minilm, pixel_model=effnet))
    g = Gallery(tmp_path / "idx")
    assert _pixel_space(g) == "visual" and min_cosine("visual", IndexOptions()) == 0.6
    near = [x for x in duplicate_groups(g) if x.kind == "near"]
    assert [_names(x) for x in near] == [["giraffe.jpg", "giraffe_half.jpg"]]
    a, b = (g.vector("visual", m.id) for m in near[0].members)
    assert 0.6 <= float(a @ b) < 0.9  # the image vectors' floor would have parted them (as it did on main)
    assert not [x for x in duplicate_groups(g, IndexOptions(duplicate_min_visual=0.9)) if x.kind == "near"]
