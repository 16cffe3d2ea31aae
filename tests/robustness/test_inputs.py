"""Input files that used to hang or crash (issue 25, items 5, 7, 10), each now one clear error:

- predictions files (``imagent score``): a directory, a FIFO, a symlink to ``/dev/zero``, 100,000-deep JSON,
  duplicate query ids, a file over the size cap;
- config files: the same kinds, a deeply nested TOML array (``config show``), duplicate YAML keys, a YAML
  alias bomb;
- images: a JPEG whose size header was rewritten to 9000x9000 and a PNG whose header claims more pixels
  than its data holds are skipped by ``imagent index`` with a reason, in well under a second.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagent.core.config import ConfigError, load_settings
from imagent.eval.datasets import BenchmarkError
from imagent.eval.scoring import score_file

ANN = Path(__file__).resolve().parents[2] / "src/imagent/eval/data/stamps_mini/queries.json"


def hostile_files(tmp_path: Path, suffix: str) -> dict[str, tuple[Path, str]]:
    """name -> (path, words the error must contain)."""
    (tmp_path / f"dir{suffix}").mkdir()
    fifo = tmp_path / f"fifo{suffix}"
    os.mkfifo(fifo)
    zero = tmp_path / f"zero{suffix}"
    zero.symlink_to("/dev/zero")
    return {"directory": (tmp_path / f"dir{suffix}", "is a directory"), "fifo": (fifo, "is a FIFO"),
            "/dev/zero": (zero, "is a device"), "missing": (tmp_path / f"none{suffix}", "not found")}


def timed(fn, *args, **kw):
    t0 = time.monotonic()
    try:
        return fn(*args, **kw), time.monotonic() - t0
    except Exception as exc:
        return exc, time.monotonic() - t0


@pytest.mark.skipif(not ANN.is_file(), reason="the stamps mini queries are not shipped in this checkout")
def test_predictions_files_that_hung_or_crashed_are_clear_errors(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cases = hostile_files(tmp_path, ".json")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases["100k deep"] = (deep, "nested deeper than 16 levels")
    dup = tmp_path / "dup.json"
    dup.write_text('{"0": ["a"], "1": ["b"], "0": ["c"]}')
    cases["duplicate ids"] = (dup, "has the key '0' twice")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"0": ["x"] * 1000}))
    for name, (path, words) in cases.items():
        out, seconds = timed(score_file, "stamps", ANN, path)
        assert isinstance(out, BenchmarkError), (name, out)
        assert words in str(out) and "predictions file" in str(out), (name, str(out))
        assert seconds < 30, (name, seconds)  # no hang (each takes well under a second alone)
    monkeypatch.setattr("imagent.eval.scoring.MAX_PREDICTIONS_BYTES", 1000)
    with pytest.raises(BenchmarkError, match="larger than 1,000 bytes"):
        score_file("stamps", ANN, big)


def test_config_files_that_hung_or_crashed_are_clear_errors(tmp_path: Path) -> None:
    cases = hostile_files(tmp_path, ".toml")
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    cases["deep TOML array"] = (deep, "nested deeper than 64 levels")
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("x: " + "[" * 5000 + "]" * 5000 + "\n")
    cases["deep YAML"] = (deep_yaml, "nested deeper than 64 levels")
    dup_yaml = tmp_path / "dup.yaml"
    dup_yaml.write_text("log_level: info\nroles:\n  default: offline\nlog_level: debug\n")
    cases["duplicate YAML keys"] = (dup_yaml, "has the key 'log_level' twice")
    dup_toml = tmp_path / "dup.toml"
    dup_toml.write_text('log_level = "info"\nlog_level = "debug"\n')
    cases["duplicate TOML keys"] = (dup_toml, "not valid TOML")
    bomb = tmp_path / "bomb.yaml"
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    bomb.write_text("\n".join(levels) + "\n")  # 10^9 values by reference
    cases["YAML alias bomb"] = (bomb, "more than 5,000,000 values")
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1024 * 1024 + 10) + "\n")
    cases["over 1 MB"] = (big, "larger than 1,048,576 bytes")
    for name, (path, words) in cases.items():
        out, seconds = timed(load_settings, path)
        assert isinstance(out, ConfigError), (name, out)
        assert words in str(out), (name, str(out))
        assert seconds < 30, (name, seconds)  # no hang (each takes well under a second alone; CI is shared)


def test_config_show_on_a_deep_toml_is_one_error_line(tmp_path: Path) -> None:
    from imagent.cli.main import app

    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    res = CliRunner().invoke(app, ["config", "show", "--config", str(deep)])
    assert res.exit_code == 2, res.output
    assert "nested deeper than 64 levels" in res.output and "Traceback" not in res.output, res.output


def _jpeg(size: tuple[int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (200, 120, 10)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_images_whose_header_lies_are_skipped_with_a_reason(tmp_path: Path, caption_dual, minilm) -> None:
    import struct
    import zlib

    from PIL import Image

    from imagent.core.imageio import ImageLoadError, open_image, probe_image
    from imagent.index.builder import build_index
    from imagent.index.parts import IndexParts

    photos = tmp_path / "photos"
    photos.mkdir()
    jpeg = bytearray(_jpeg((64, 64)))
    i = jpeg.index(b"\xff\xc0")
    jpeg[i + 5:i + 9] = (9000).to_bytes(2, "big") * 2  # height, width
    (photos / "rewritten.jpg").write_bytes(bytes(jpeg))
    png = io.BytesIO()
    Image.new("RGB", (32, 32), (1, 2, 3)).save(png, "PNG")
    data = bytearray(png.getvalue())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4:ihdr + 12] = struct.pack(">II", 4000, 4000)
    data[ihdr + 17:ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(data[ihdr:ihdr + 17])))  # a valid CRC
    (photos / "rewritten.png").write_bytes(bytes(data))
    Image.new("RGB", (40, 30), (10, 200, 30)).save(photos / "good.png")
    for name, words in (("rewritten.jpg", "size field was likely rewritten"), ("rewritten.png", "truncated")):
        t0 = time.monotonic()
        for fn in (probe_image, open_image):
            with pytest.raises(ImageLoadError, match=words):
                fn(photos / name)
        assert time.monotonic() - t0 < 1.0, name
    report = build_index(photos, tmp_path / "index", IndexParts.of(caption_dual, minilm))
    skipped = dict(report.skipped)
    assert report.added == 1 and len(skipped) == 2, report.to_dict()
    assert "size field was likely rewritten" in next(r for p, r in skipped.items() if p.endswith("rewritten.jpg"))
    # a real large JPEG is not mistaken for one: the data backs every block
    (photos / "big.jpg").write_bytes(_jpeg((3000, 2000)))
    assert probe_image(photos / "big.jpg").width == 3000
