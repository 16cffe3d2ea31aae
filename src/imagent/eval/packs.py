"""Reproduction packs: one file with everything needed to check an eval run elsewhere, and its replay.

``imagent pack RUN_DIR -o FILE`` (:func:`write_pack`) writes a zip archive holding

    pack.json       format, run id, when and by what code it was made (commit, package versions), the run's
                    resolved configuration (secrets removed) and its fingerprints (:func:`fingerprints`):
                    the benchmark's queries and gallery, the encoders, the captioner and the prompts
    calls.jsonl     every model and tool call the run made or read from the call cache: namespace, request
                    key, reply (the run folder's ``call_keys.txt`` and the index's list of captioner calls)
    captions.jsonl  the gallery captions the run searched, with their provenance (given, or which captioner)
    config.json, results.jsonl, metrics.json, report.md   the run folder's records

``imagent replay FILE [--images-root DIR]`` (:func:`replay`) compares the fingerprints of the setup at hand
with the pack's and names every one that differs before anything runs (refused unless ``force``), then runs
the evaluation again with the pack's calls as a read-only call cache (:class:`PackCache`): with the same
encoders it makes no model call and writes the same metrics; a call the pack lacks is an error, never a
new call. No secret reaches a pack: the configuration's credential-like fields are removed, and every file
is redacted (:func:`imagent.core.redact.redact`) with those values registered as secrets.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from imagent.api import Workspace
from imagent.core.cache import DiskCache
from imagent.core.redact import redact, register_secret
from imagent.eval.datasets import Benchmark, load_benchmark
from imagent.eval.identity import run_id as identity_id
from imagent.eval.identity import select_items
from imagent.eval.records import CALL_KEYS, CONFIG, METRICS, REPORT_MD, RESULTS, RunError, RunFolder, read_call_keys

FORMAT = "imagent-pack/1"
PACK_JSON = "pack.json"
CALLS = "calls.jsonl"
CAPTIONS = "captions.jsonl"
PACKAGES = ("imagent", "numpy", "torch", "transformers", "sentence-transformers", "open-clip-torch",
            "llama-cpp-python", "pydantic", "faiss-cpu")
# Configuration keys whose values are credentials (``api_key_env`` names a variable and is kept).
_SECRET_KEY = re.compile(r"^(?:.*[-_])?(api[-_]?key|apikey|access[-_]?token|auth[-_]?token|token|secret|"
                         r"client[-_]?secret|password|passwd|authorization|credentials?)$", re.I)
_SECRET_KEEP = {"api_key_env"}
_PROMPTS = Path(__file__).resolve().parents[1]


class PackError(RunError):
    """A pack cannot be written or replayed as asked (missing calls, a differing setup, a bad file)."""


# --------------------------------------------------------------------------- secrets


def scrub(value: Any, found: list[str] | None = None, key: str = "") -> Any:
    """``value`` with every credential-like field's value replaced by ``***`` (the values removed are appended
    to ``found``, to be masked wherever else they appear), and every string redacted."""
    if isinstance(value, dict):
        return {k: scrub(v, found, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, found, key) for v in value]
    if key and key not in _SECRET_KEEP and _SECRET_KEY.search(key) and isinstance(value, str) and value:
        if found is not None:
            found.append(value)
        return "***"
    if isinstance(value, str):
        return redact(value)
    return value


# --------------------------------------------------------------------------- fingerprints


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def prompts_digest(method: str, caption_prompt: str = "default") -> str:
    """SHA-256 of the prompt files a run's answers depend on: the method's, the common ones and the caption
    prompt (paths and contents)."""
    h = hashlib.sha256()
    roots = [_PROMPTS / "methods" / "prompts" / method, _PROMPTS / "methods" / "prompts" / "common"]
    files = sorted(p for r in roots if r.is_dir() for p in r.rglob("*") if p.is_file())
    cap = _PROMPTS / "index" / "prompts" / "caption" / f"{caption_prompt}.txt"
    files += [cap] if cap.is_file() else [Path(caption_prompt)] if Path(caption_prompt).is_file() else []
    for p in files:
        h.update(str(p.relative_to(_PROMPTS) if p.is_relative_to(_PROMPTS) else p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def gallery_digest(bench: Benchmark, split: str, images_root: Path | None, allow_missing: bool = False) -> str:
    """SHA-256 of the benchmark gallery as the index builder reads it: ids, file names and sizes, and the
    captions given with them (not the folder it lies in, so the same images elsewhere match)."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench.gallery_manifest(split, images_root, Path(tmp), allow_missing)
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: str(r["id"])):
        path = Path(r["file"])
        size = path.stat().st_size if path.is_file() else -1
        caption = r.get("caption") or r.get("captions") or ""
        h.update(json.dumps([str(r["id"]), path.name, size, caption], sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def fingerprints(config: dict[str, Any], bench: Benchmark, split: str, images_root: Path | None) -> dict[str, Any]:
    """What must match for a replay to mean the same thing: the queries, the gallery, the encoders, the
    captioner with its prompt, the method's prompts and parameters, and the ranking depth."""
    settings = config.get("settings") or {}
    items = select_items(bench.queries(split), (config.get("selection") or {}).get("limit"),
                         (config.get("selection") or {}).get("sample", "first"),
                         (config.get("selection") or {}).get("seed", 0), bench.stratum)
    from imagent.eval.identity import queries_digest

    indexing = settings.get("indexing") or {}
    roles = settings.get("roles") or {}
    captioner = roles.get("captioner") or roles.get("default")
    encoders = {"dual_encoder": settings.get("dual_encoder"), "text_embedder": settings.get("text_embedder")}
    if settings.get("encoders"):
        encoders["encoders"] = settings["encoders"]
    return {
        "benchmark": {"name": bench.name, "split": split, "options": config.get("bench_options")},
        "queries": {"count": len(items), "digest": queries_digest(items)},
        "gallery": gallery_digest(bench, split, images_root),
        "encoders": encoders,
        "captioner": {"model": (settings.get("models") or {}).get(captioner) if captioner else None,
                      "caption_missing": indexing.get("caption_missing"),
                      "prompt": indexing.get("caption_prompt")},
        "method": config.get("method"),
        "prompts": prompts_digest((config.get("method") or {}).get("name", ""), indexing.get("caption_prompt")
                                  or "default"),
        "top_k": config.get("top_k"),
    }


def fingerprint_differences(old: dict[str, Any], new: dict[str, Any], limit: int = 12) -> list[str]:
    """One line per fingerprint field that differs (``encoders.text_embedder.model: pack A != here B``)."""
    from imagent.eval.identity import flatten

    a, b = flatten(json.loads(json.dumps(old, default=str))), flatten(json.loads(json.dumps(new, default=str)))

    def show(v: Any) -> str:
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        return text if len(text) <= 80 else text[:77] + "..."

    out = [f"{k}: pack {show(a.get(k, '(none)'))} != here {show(b.get(k, '(none)'))}"
           for k in sorted(set(a) | set(b)) if a.get(k, "\0") != b.get(k, "\0")]
    return out[:limit] + ([f"and {len(out) - limit} more"] if len(out) > limit else [])


def provenance() -> dict[str, Any]:
    """The code that made the pack: imagent's version and git commit, Python and the main packages."""
    from imagent.eval.report import provenance as code

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {**code(), "python": platform.python_version(), "packages": versions}


# --------------------------------------------------------------------------- writing a pack


def _cache_for(config: dict[str, Any], cache_dir: Path | None) -> DiskCache:
    candidates = [Path(cache_dir)] if cache_dir else []
    recorded = (config.get("settings") or {}).get("cache_dir")
    if recorded:
        candidates.append(Path(recorded))
    for d in candidates:
        if (d / "calls.sqlite").is_file():
            return DiskCache(d / "calls.sqlite")
    raise PackError(f"no call cache found (looked in {', '.join(str(d) for d in candidates) or 'nothing'}): "
                    "a pack copies the run's calls from the cache it ran with; set IMAGENT_CACHE_DIR to it")


def _bench_for(config: dict[str, Any], images_root: Path | None = None,
               annotations: Path | None = None) -> tuple[Benchmark, str, Path | None]:
    root = images_root or (Path(config["images_root"]) if config.get("images_root") else None)
    ann = annotations or (Path(config["annotations"]) if config.get("annotations") else None)
    if ann is not None and not ann.exists():
        raise PackError(f"the run's annotations {ann} are not here; pass --annotations FILE")
    if root is not None and not Path(root).exists():
        raise PackError(f"the run's images {root} are not here; pass --images-root DIR")
    bench = load_benchmark(config["benchmark"], ann, root, **(config.get("bench_options") or {}))
    return bench, bench.check_split(config["split"]), root


def write_pack(run_dir: Path, out: Path, cache_dir: Path | None = None) -> dict[str, Any]:
    """Write ``run_dir``'s reproduction pack to ``out``; return its summary (calls, captions, fingerprints)."""
    folder = RunFolder(run_dir)
    if not folder.exists():
        raise PackError(f"{run_dir} is not an eval run folder (no {CONFIG})")
    metrics = folder.metrics()
    config = folder.config()
    secrets: list[str] = []
    clean_config = scrub(config, secrets)
    for s in secrets:
        register_secret(s)
    if (config.get("settings") or {}).get("cache_calls") is False:
        raise PackError("the run made its calls without the call cache (cache_calls=false): nothing to pack")
    keys = folder.call_keys()
    index = folder.index_info()
    if index.get("dir"):
        keys += [k for k in read_call_keys(Path(index["dir"]) / CALL_KEYS) if k not in keys]
    cache = _cache_for(config, cache_dir)
    calls, missing = [], []
    for ns, key in keys:
        value = cache.get(key)
        if value is None:
            missing.append(f"{ns} {key[:12]}")
        else:
            calls.append({"namespace": ns, "key": key, "value": value})
    if missing:
        raise PackError(f"{len(missing)} of the run's {len(keys)} calls are no longer in the call cache "
                        f"{cache.path} (e.g. {', '.join(missing[:3])}); run the eval again to restore them")
    bench, split, root = _bench_for(config)
    prints = fingerprints(clean_config, bench, split, root)
    captions = _captions(index)
    manifest = {
        "format": FORMAT,
        "run_id": config.get("run_id") or identity_id(config),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "provenance": provenance(),
        "config": clean_config,
        "fingerprints": prints,
        "metrics": {"metrics": metrics.get("metrics"), "stages": metrics.get("stages")},
        "counts": {"calls": len(calls), "captions": len(captions), "queries": metrics.get("queries")},
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        def put(name: str, text: str) -> None:
            z.writestr(name, redact(text))

        put(PACK_JSON, json.dumps(manifest, indent=2, default=str, ensure_ascii=False))
        put(CONFIG, json.dumps(clean_config, indent=2, default=str, ensure_ascii=False))
        put(CALLS, "".join(json.dumps(c, ensure_ascii=False, default=str) + "\n" for c in calls))
        put(CAPTIONS, "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in captions))
        for name in (RESULTS, METRICS, REPORT_MD):
            path = folder.path / name
            if path.is_file():
                put(name, path.read_text(encoding="utf-8"))
    tmp.replace(out)
    return {"pack": str(out), "run_id": manifest["run_id"], **manifest["counts"], "fingerprints": prints}


def _captions(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The index's captions with their provenance (``given`` by the benchmark, or ``captioner:<model>``)."""
    if not index.get("dir") or not Path(index["dir"]).is_dir():
        return []
    from imagent.index.gallery import Gallery

    try:
        gallery = Gallery(Path(index["dir"]))
        return [{"id": r.id, "captions": list(r.captions), "source": r.caption_source}
                for r in gallery.records() if r.captions]
    except Exception:  # an index moved or rebuilt since: the pack simply has no captions
        return []


# --------------------------------------------------------------------------- reading and replaying


@dataclass
class Pack:
    manifest: dict[str, Any]
    calls: dict[str, Any]
    metrics: dict[str, Any]
    path: Path

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest["config"]


def read_pack(path: Path) -> Pack:
    path = Path(path)
    if not path.is_file():
        raise PackError(f"{path}: no such pack")
    try:
        with zipfile.ZipFile(path) as z:
            manifest = json.loads(z.read(PACK_JSON))
            calls = {}
            for line in z.read(CALLS).decode("utf-8").splitlines():
                if line.strip():
                    c = json.loads(line)
                    calls[c["key"]] = c["value"]
            metrics = json.loads(z.read(METRICS)) if METRICS in z.namelist() else {}
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise PackError(f"{path} is not an imagent reproduction pack ({exc})") from exc
    if manifest.get("format") != FORMAT:
        raise PackError(f"{path}: pack format {manifest.get('format')!r}, this imagent reads {FORMAT}")
    return Pack(manifest, calls, metrics, path)


class MissingCallError(RuntimeError):
    """A replay asked for a call its pack does not hold."""


class PackCache(DiskCache):
    """A read-only call cache holding a pack's calls: every key it serves is the pack's reply; a key it lacks
    raises :class:`MissingCallError` (recorded in ``missing``) instead of calling a model."""

    def __init__(self, calls: dict[str, Any]) -> None:
        super().__init__(None)
        self._memory.update(calls)
        self.missing: list[str] = []

    def put(self, key: str, value: Any, namespace: str = "") -> None:
        return None  # read-only: a replay adds nothing

    def get_or_compute(self, key: str, compute: Callable[[], Any], namespace: str = "") -> tuple[Any, bool]:
        for listener in list(self._listeners):
            listener(key, namespace)
        value = self._memory.get(key)
        if value is None:
            self.misses += 1
            self.missing.append(f"{namespace or 'call'} {key[:12]}")
            raise MissingCallError(f"{namespace or 'a'} call {key[:12]} is not in the pack: a replay makes no "
                                   "new model or tool call")
        self.hits += 1
        return value, True


@dataclass
class ReplayResult:
    run_dir: Path
    run_id: str
    pack_run_id: str
    identical: bool
    differences: list[str]
    model_calls: int
    calls_served: int
    metrics: dict[str, Any]
    fingerprint_differences: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "run_id": self.run_id, "pack_run_id": self.pack_run_id,
                "identical": self.identical, "differences": self.differences, "model_calls": self.model_calls,
                "calls_served": self.calls_served, "metrics": self.metrics,
                "fingerprint_differences": self.fingerprint_differences}


def check_fingerprints(pack: Pack, ws: Workspace, images_root: Path | None = None,
                       annotations: Path | None = None) -> list[str]:
    """The fingerprints of the setup at hand (the pack's configuration with ``ws``'s settings and method
    parameters, these images and annotations) that differ from the pack's, one line each."""
    from imagent.methods.base import get_method

    params = ws.method_config(get_method(pack.config["method"]["name"]))
    config = {**pack.config, "settings": ws.settings.model_dump(mode="json"),
              "method": {**pack.config["method"], "params": params.model_dump(mode="json")}}
    bench, split, root = _bench_for(config, images_root, annotations)
    return fingerprint_differences(pack.manifest.get("fingerprints") or {}, fingerprints(config, bench, split, root))


def replay(pack: Pack, make_workspace: Callable[[dict[str, Any]], Workspace], images_root: Path | None = None,
           annotations: Path | None = None, run_dir: Path | None = None, force: bool = False,
           log: Callable[[str], None] | None = None) -> ReplayResult:
    """Run ``pack``'s evaluation again with its calls as the only call cache. ``make_workspace(overrides)``
    builds the workspace from the pack's settings (``overrides``: every setting but where files live)."""
    from imagent.eval.runner import RunSpec, run_eval

    say = log or (lambda _m: None)
    cfg = pack.config
    overrides = {k: v for k, v in (cfg.get("settings") or {}).items() if k not in ("cache_dir", "index")}
    ws = make_workspace(overrides)
    diffs = check_fingerprints(pack, ws, images_root, annotations)
    if diffs and not force:
        raise PackError("this setup differs from the pack's, so a replay would not reproduce it:\n  "
                        + "\n  ".join(diffs) + "\n(--force replays anyway)")
    for d in diffs:
        say(f"warning: differs from the pack: {d}")
    cache = PackCache(pack.calls)
    ws.use_call_cache(cache)  # before any role or tool is built: the pack is the only cache
    sel = cfg.get("selection") or {}
    spec = RunSpec(
        benchmark=cfg["benchmark"], method=cfg["method"]["name"], split=cfg["split"],
        annotations=annotations or (Path(cfg["annotations"]) if cfg.get("annotations") else None),
        images_root=images_root or (Path(cfg["images_root"]) if cfg.get("images_root") else None),
        bench_options=cfg.get("bench_options") or {}, top_k=int(cfg.get("top_k") or 50), limit=sel.get("limit"),
        sample=sel.get("sample", "first"), seed=int(sel.get("seed", 0)),
        run_dir=run_dir or Path("runs") / f"replay-{pack.manifest['run_id']}",
    )
    summary = run_eval(ws, spec, log=say)
    if cache.missing:
        raise PackError(f"{len(cache.missing)} calls the replay needed are not in the pack (e.g. "
                        f"{', '.join(cache.missing[:3])}); the setup differs from the pack's or the pack is "
                        "incomplete. No new call was made.")
    want = {"metrics": pack.metrics.get("metrics"), "stages": pack.metrics.get("stages")}
    got = {"metrics": summary.metrics.get("metrics"), "stages": summary.metrics.get("stages")}
    differences = _metric_differences(want, got)
    return ReplayResult(summary.run_dir, summary.run_id, pack.manifest["run_id"], not differences, differences,
                        int(summary.metrics.get("run", {}).get("model_calls", 0)), cache.hits, got, diffs)


def _metric_differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    out = []
    for part in ("metrics", "stages"):
        a, b = _flat(want.get(part) or {}), _flat(got.get(part) or {})
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                out.append(f"{part}/{k}: pack {a.get(k)} != replay {b.get(k)}")
    return out


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "/"))
        else:
            out[key] = v
    return out


__all__ = ["MissingCallError", "Pack", "PackCache", "PackError", "ReplayResult", "fingerprints", "read_pack",
           "replay", "scrub", "write_pack"]
