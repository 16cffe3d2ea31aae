"""Text that is not valid UTF-8 (lone surrogates) and unusable cache folders: handled, never a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagent.core.cache import CacheError, DiskCache, stable_key
from imagent.core.text import clean_text, display_path

LONE = "caption with a lone \ud800 surrogate"
ESCAPED_NAME = os.fsdecode(b"caf\xe9.jpg")  # what os.listdir gives for a Latin-1 file name


def test_clean_text_replaces_lone_surrogates_and_keeps_everything_else():
    assert clean_text(LONE) == "caption with a lone \ufffd surrogate"
    assert clean_text(ESCAPED_NAME) == "caf\ufffd.jpg"
    assert clean_text("\ud83d\ude00 pair") == "\U0001f600 pair"  # a pair held as two halves is joined
    plain = "déjà vu ✓ 😀"
    assert clean_text(plain) is plain
    clean_text(LONE).encode("utf-8")  # the point: it always encodes


def test_display_path_escapes_undecodable_bytes_and_control_characters():
    assert display_path(ESCAPED_NAME) == "caf\\xe9.jpg"
    assert display_path(b"/p/a\nb.jpg") == "/p/a\\nb.jpg"
    assert display_path(Path("/p/ok.jpg")) == "/p/ok.jpg"


def test_stable_key_accepts_surrogates_and_keeps_old_keys():
    # The pre-existing key of valid text must not change (call caches on disk stay valid).
    assert stable_key("é", [1]) == hashlib.sha256(json.dumps(["é", [1]], separators=(",", ":"),
                                                             ensure_ascii=False).encode()).hexdigest()
    k1, k2 = stable_key(LONE), stable_key(ESCAPED_NAME)
    assert k1 != k2 and len(k1) == 64
    assert stable_key("\ud800") != stable_key("\ud801")  # distinct inputs, distinct keys


def test_disk_cache_stores_and_returns_text_with_surrogates(tmp_path):
    cache = DiskCache(tmp_path / "calls.sqlite")
    key = stable_key("chat", LONE)
    cache.put(key, {"text": LONE})
    assert cache.get(key) == {"text": LONE}  # round-trips exactly, escaped in storage
    value, cached = cache.get_or_compute(stable_key("x", ESCAPED_NAME), lambda: [ESCAPED_NAME])
    assert value == [ESCAPED_NAME] and not cached


# "read_only" (a folder without write permission) is not here: root, who runs CI, ignores folder permissions, and
# a skipped test fails CI; the three cases above reach the same error path.
@pytest.mark.parametrize("kind", ["file_as_folder", "file_as_db", "db_is_folder"])
def test_unusable_cache_dir_is_one_clear_error(tmp_path, kind):
    base = tmp_path / "cache"
    if kind == "file_as_folder":
        base.write_text("a file where the cache folder should be")
        target = base / "calls.sqlite"
    elif kind == "file_as_db":
        base.mkdir()
        (base / "sub").write_text("x")
        target = base / "sub" / "calls.sqlite"
    elif kind == "db_is_folder":
        (base / "calls.sqlite").mkdir(parents=True)
        target = base / "calls.sqlite"
    else:
        if os.geteuid() == 0:
            pytest.skip("root ignores folder permissions")
        base.mkdir()
        base.chmod(0o500)
        target = base / "calls.sqlite"
    try:
        with pytest.raises(CacheError, match=r"cannot use the cache at .*cache_dir"):
            DiskCache(target)
    finally:
        if base.is_dir():
            base.chmod(0o700)


@pytest.mark.real_model
def test_cli_with_unusable_cache_dir_prints_one_line_not_a_traceback(tmp_path):
    from imagent.index.gallery import Gallery

    Gallery(tmp_path / "idx", create=True)  # an (empty) index, so the search gets as far as the call cache
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGENT")}
    env.update(IMAGENT_CACHE_DIR=str(blocker / "cache"), IMAGENT_DATA_DIR=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    code = ("import sys; from imagent.cli.main import app; "
            "sys.argv=['imagent','search','x','--method','caption','--index',sys.argv[1]]; app()")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "idx")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cannot use the cache at" in proc.stderr and "cache_dir" in proc.stderr
