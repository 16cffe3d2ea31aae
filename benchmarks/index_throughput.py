"""Index building against a bare batched encode of the same texts with the same model.

A manifest of N rows (the stamps' images and captions, each row its own id, captions varied so no two
texts are equal) is indexed in caption mode with the offline MiniLM by ``build_index`` (file checks, image
probes and EXIF, fingerprints, SQLite transactions, the vector snapshot); the bound is
``SentenceTransformer.encode`` of the same N captions in batches of the builder's batch size. Both run in
this process with the model already loaded; the best of ``--repeats`` runs of each is kept.

    python benchmarks/index_throughput.py                 # N = 2,000
    python benchmarks/index_throughput.py --rows 5000 --images-root ../shared/data/stamps

Last line: ``index N=<rows> build_s=<s> encode_s=<s> ratio=<x>`` (goal: ratio <= 1.15).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from imagent.api import Workspace
from imagent.core.config import Settings
from imagent.index.builder import build_index
from imagent.index.parts import IndexParts

ADJECTIVES = ["red", "blue", "green", "tiny", "huge", "old", "new", "shiny", "striped", "wooden"]


def write_manifest(path: Path, images_root: Path, rows: int) -> list[str]:
    base = [json.loads(line) for line in (images_root / "captions.jsonl").read_text().splitlines() if line.strip()]
    texts = []
    with path.open("w") as f:
        for i in range(rows):
            r = base[i % len(base)]
            text = f"{ADJECTIVES[(i // len(base)) % len(ADJECTIVES)]} {r['caption']} number {i}"
            texts.append(text)
            f.write(json.dumps({"id": f"row{i}", "file": str(images_root / r["file"]), "caption": text}) + "\n")
    return texts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--images-root", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data" / "stamps")
    args = ap.parse_args(argv)
    ws = Workspace(Settings())
    text, dual = ws.text_embedder, ws.dual_encoder
    batch = ws.settings.indexing.batch_size
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        texts = write_manifest(tmp / "m.jsonl", args.images_root, args.rows)
        text.encode_texts(texts[:batch])  # warm the model
        encode_s, build_s = [], []
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            for i in range(0, len(texts), batch):
                text.encode_texts(texts[i : i + batch])
            encode_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            report = build_index(tmp / "m.jsonl", tmp / f"index{rep}", IndexParts.of(dual, text), ws.settings.indexing)
            build_s.append(time.perf_counter() - t0)
            if report.added != args.rows:
                raise SystemExit(f"indexed {report.added} of {args.rows} rows: {report.skipped[:3]}")
    b, e = min(build_s), min(encode_s)
    print(f"{args.rows} rows, batch {batch}: build {b:.2f} s ({args.rows / b:.0f} rows/s), bare encode {e:.2f} s "
          f"({args.rows / e:.0f} rows/s)")
    print(f"index N={args.rows} build_s={b:.2f} encode_s={e:.2f} ratio={b / e:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
