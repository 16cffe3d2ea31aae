"""``imagent eval BENCH --check``: is a benchmark set up, before any model loads?

:func:`check_setup` reads the annotation files and the image folder exactly as a run would, without loading a
model or writing an index, and returns what it found: the queries per split, the gallery images present and
missing (counts and the first names), the query images missing, the layout imagent expects, the protocol
options in force with the flags that change them, and known gaps of the benchmark's public files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from imagent.eval.datasets import BenchmarkError, MissingImagesError, load_benchmark

SHOW = 5  # missing names listed


def check_setup(benchmark: str, split: str | None = None, annotations: Path | None = None,
                images_root: Path | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What is present and missing for ``benchmark`` (one split); ``ok`` when a run could start."""
    bench = load_benchmark(benchmark, annotations, images_root, **(options or {}))
    split = bench.check_split(split)
    out: dict[str, Any] = {"benchmark": bench.name, "split": split, "layout": bench.layout, "problems": []}
    opts = bench.options.model_dump(mode="json")
    fields = type(bench.options).model_fields
    out["options"] = [{"name": k, "value": v, "flag": f"--set {bench.name}.{k}=...",
                       "about": (fields[k].description or "") if k in fields else ""} for k, v in opts.items()]
    out["notes"] = getattr(bench, "setup_notes", "")
    try:
        items = bench.queries(split)
        out["queries"] = len(items)
        out["labelled"] = sum(1 for it in items if it.has_truth)
    except (BenchmarkError, OSError, ValueError) as exc:
        out["queries"] = None
        out["problems"].append(f"annotations: {exc}")
    root = Path(images_root).expanduser() if images_root else bench.images_root
    out["images_root"] = str(root) if root else None
    if root is None:
        out["problems"].append(f"images: no --images-root given; expected layout: {bench.layout}")
    elif not root.exists():
        out["problems"].append(f"images: {root} does not exist; expected layout: {bench.layout}")
    elif not root.is_dir() or next(root.iterdir(), None) is None:
        out["problems"].append(f"images: {root} is {'empty' if root.is_dir() else 'not a folder'}; "
                               f"expected layout: {bench.layout}")
    elif out["queries"] is not None:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                bench.gallery_manifest(split, root, Path(tmp), allow_missing=True)
            except (MissingImagesError, BenchmarkError, OSError, ValueError, KeyError) as exc:
                out["problems"].append(f"images: {exc}")
        found = getattr(bench, "file_check", None)
        if found:
            missing, qmissing = found["gallery_missing"], found["query_images_missing"]
            out["gallery"] = {"needed": found["gallery"], "present": found["gallery_present"],
                              "missing": len(missing), "first_missing": [_short(p, root) for p in missing[:SHOW]]}
            out["query_images"] = {"missing": len(qmissing),
                                   "first_missing": [_short(p, root) for p in qmissing[:SHOW]]}
            if missing or qmissing:
                out["problems"].append(
                    f"images: {len(missing)} of {found['gallery']} gallery images missing"
                    + (f" and {len(qmissing)} query images" if qmissing else "")
                    + f" (e.g. {', '.join(_short(p, root) for p in (missing or qmissing)[:SHOW])}); "
                    "--allow-missing runs on the images found")
    out["ok"] = not out["problems"]
    return out


def _short(path: str, root: Path) -> str:
    p = Path(path)
    try:
        return str(p.relative_to(root))
    except ValueError:
        try:
            return str(p.resolve().relative_to(root.resolve()))
        except ValueError:
            return str(p)


def render_check(result: dict[str, Any]) -> str:
    """The check as text for a terminal."""
    lines = [f"{result['benchmark']} {result['split']}: " + ("ready" if result["ok"] else "not ready")]
    if result.get("queries") is not None:
        lines.append(f"  queries: {result['queries']} ({result.get('labelled', 0)} with labels)")
    g = result.get("gallery")
    if g:
        lines.append(f"  gallery images: {g['present']} of {g['needed']} present under {result['images_root']}"
                     + (f", {g['missing']} missing, first: {', '.join(g['first_missing'])}" if g["missing"] else ""))
    q = result.get("query_images")
    if q and q["missing"]:
        lines.append(f"  query images missing: {q['missing']}, first: {', '.join(q['first_missing'])}")
    for p in result["problems"]:
        lines.append(f"  missing - {p}")
    lines.append(f"  layout: {result['layout']}")
    if result["options"]:
        lines.append("  protocol options:")
        for o in result["options"]:
            about = f"  ({o['about']})" if o["about"] else ""
            lines.append(f"    {o['name']} = {o['value']!r}   {o['flag']}{about}")
    if result.get("notes"):
        lines.append(f"  note: {result['notes']}")
    return "\n".join(lines)


__all__ = ["check_setup", "render_check"]
