"""Match levels and the label floor (imagent/index/levels.py, ``[results]``; ``pixels.label_show_p``): how they were
chosen, measured on the shipped stamps.

Two indexes of the 627 stamps through ``Workspace.index`` with the default (offline) setup: **captions** (each stamp's
caption given) and **pixels** (no caption: the pixel model's ConSE vectors answer). Queries with known answers: every
word of the stamps' category paths (``animals/birds/cartoon`` gives "animals" and "birds"; "cartoon" and
"00_symbols" are not words), 91 words, a photo matching a word when the word is one of its path's; no word is
chosen by hand. They split by sha1(word) into a *choose* half (even) and a *report* half (odd). Each query's scores
are its cosines with every photo in the ``image`` space (what the ``clip`` search ranks by), its text through the
text embedder as a search does.

Prints, each as a ``name key=value ...`` line:

1. ``grid``: on the choose half, per rule (``strong_z``, ``possible_z``, ``gap_z``) and index: the precision and recall
   of the strong matches, the precision of the possible ones, and how many strong and shown (strong or possible)
   photos a query with no true match gets (the query's true matches taken out of the gallery's scores);
2. ``report``: the configured rule on the report half, the same columns;
3. ``count``: the configured rule on queries with 0, 1 and 5 true matches (a word's other true matches taken out of the
   gallery's scores): how many strong, possible and none the true ones get and how many false strong photos appear;
4. ``like``: *more like this* on the pixels index (each stamp's visual feature against the others'): how many strong
   and possible results a photo gets and the share of them in its category;
5. ``labels``: the labels shown on cards by floor (the top 3 of each stamp): how many, and the share judged right
   (a word of the label's class name, WordNet synonyms or parents is a word of the stamp's caption or category,
   singular forms), with the two labels the cards must not show ("maraca" on the mushroom, "shower cap" on the red
   anemone).

``python benchmarks/match_levels.py [--work DIR]`` (``--work`` keeps the two indexes for the next run; they take a
few minutes to build on a busy 2-core machine).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import imagent  # noqa: E402,F401  (before torch: its thread settings)
from imagent.api import Workspace  # noqa: E402
from imagent.core.config import ResultOptions  # noqa: E402
from imagent.index.levels import match_cut  # noqa: E402

STAMPS = REPO / "src" / "imagent" / "eval" / "data" / "stamps_mini"
NOT_WORDS = {"cartoon", "00_symbols"}


def stamp_rows() -> list[dict]:
    return [json.loads(line) for line in (STAMPS / "captions.jsonl").read_text().splitlines() if line.strip()]


def build(ws: Workspace, work: Path) -> dict[str, Path]:
    """The two indexes (built once into ``work``)."""
    rows = stamp_rows()
    out = {}
    for mode in ("captions", "pixels"):
        manifest = work / f"{mode}.jsonl"
        manifest.write_text("".join(json.dumps({"id": r["id"], "file": str((STAMPS / r["file"]).resolve()),
                                                **({"caption": r["caption"]} if mode == "captions" else {})}) + "\n"
                                    for r in rows))
        index = work / f"index-{mode}"
        ws.index(manifest, index)
        out[mode] = index
    return out


def word_queries() -> dict[str, set[str]]:
    words: dict[str, set[str]] = defaultdict(set)
    for r in stamp_rows():
        for part in r["category"].split("/"):
            if part not in NOT_WORDS:
                words[part.replace("_", " ")].add(r["id"])
    return dict(words)


def half(word: str) -> str:
    return "choose" if int(hashlib.sha1(word.encode()).hexdigest(), 16) % 2 == 0 else "report"


def scores(ws: Workspace, index: Path, words: list[str]) -> tuple[np.ndarray, list[str]]:
    g = ws.gallery(index)
    q = ws.text_embedder.encode_texts(words)
    return np.stack([g.scores(v, "image") for v in q]), list(g.ids)


def evaluate(table: np.ndarray, ids: list[str], words: list[str], truth: dict[str, set[str]],
             rule: ResultOptions) -> dict[str, float]:
    """Strong precision / recall, possible precision, and strong and shown photos of a query with no true match."""
    tp = fp = ptp = pfp = npos = 0
    zero_strong, zero_shown = [], []
    idx = np.array(ids)
    for w, s in zip(words, table, strict=True):
        pos = np.isin(idx, list(truth[w]))
        cut = match_cut(s, rule)
        strong, possible = s >= cut.strong, (s >= cut.possible) & (s < cut.strong)
        tp += int(np.sum(strong & pos))
        fp += int(np.sum(strong & ~pos))
        ptp += int(np.sum(possible & pos))
        pfp += int(np.sum(possible & ~pos))
        npos += int(pos.sum())
        rest = s[~pos]
        cut0 = match_cut(rest, rule)
        zero_strong.append(int(np.sum(rest >= cut0.strong)))
        zero_shown.append(int(np.sum(rest >= cut0.possible)))
    return {"strong_p": tp / max(1, tp + fp), "strong_r": tp / max(1, npos), "possible_p": ptp / max(1, ptp + pfp),
            "zero_strong": float(np.mean(zero_strong)), "zero_shown": float(np.mean(zero_shown))}


def fmt(d: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.2f}" for k, v in d.items())


def grid(tables: dict, truth: dict[str, set[str]]) -> None:
    for strong, possible, gap in itertools.product((4.0, 4.5, 5.0, 5.5, 6.0), (3.0, 3.5, 4.0), (1.5, 2.0, 99.0)):
        rule = ResultOptions(strong_z=strong, possible_z=possible, gap_z=gap)
        for mode, (table, ids, words) in tables.items():
            pick = [i for i, w in enumerate(words) if half(w) == "choose"]
            res = evaluate(table[pick], ids, [words[i] for i in pick], truth, rule)
            print(f"grid strong_z={strong} possible_z={possible} gap_z={gap} index={mode} {fmt(res)}")


def report(tables: dict, truth: dict[str, set[str]], rule: ResultOptions) -> None:
    for mode, (table, ids, words) in tables.items():
        for which in ("choose", "report"):
            pick = [i for i, w in enumerate(words) if half(w) == which]
            res = evaluate(table[pick], ids, [words[i] for i in pick], truth, rule)
            print(f"report half={which} index={mode} strong_z={rule.strong_z} possible_z={rule.possible_z} "
                  f"gap_z={rule.gap_z} queries={len(pick)} {fmt(res)}")


def counts(tables: dict, truth: dict[str, set[str]], rule: ResultOptions) -> None:
    """Queries with 0, 1 and 5 true matches: a word of at least 5, its other true matches taken out of the scores
    (its first n true matches in gallery order kept)."""
    for mode, (table, ids, words) in tables.items():
        idx = np.array(ids)
        for n in (0, 1, 5):
            levels = {"strong": 0, "possible": 0, "none": 0}
            false_strong, false_shown, queries = 0, 0, 0
            for w, s in zip(words, table, strict=True):
                pos = np.flatnonzero(np.isin(idx, list(truth[w])))
                if len(pos) < 5:
                    continue
                drop = pos[n:]
                keep = np.ones(len(s), dtype=bool)
                keep[drop] = False
                sub, is_true = s[keep], np.isin(np.flatnonzero(keep), pos[:n])
                cut = match_cut(sub, rule)
                for x in sub[is_true]:
                    levels[cut.level(float(x))] += 1
                false_strong += int(np.sum((sub >= cut.strong) & ~is_true))
                false_shown += int(np.sum((sub >= cut.possible) & ~is_true))
                queries += 1
            print(f"count index={mode} true_matches={n} queries={queries} "
                  + " ".join(f"true_{k}={v}" for k, v in levels.items())
                  + f" false_strong_per_query={false_strong / max(1, queries):.2f}"
                  + f" false_shown_per_query={false_shown / max(1, queries):.2f}")


def like(ws: Workspace, index: Path, rule: ResultOptions) -> None:
    """*More like this* on the pixels index: every stamp's visual feature against the others' (itself left out, as
    the search does); a strong or possible result is right when it shares the stamp's category path."""
    g = ws.gallery(index)
    cats = {r["id"]: r["category"] for r in stamp_rows()}
    mat = g.vectors("visual")
    ids = list(g.ids)
    counts = {"strong": [0, 0], "possible": [0, 0]}
    none_queries = 0
    for n, i in enumerate(ids):
        s = np.delete(mat @ mat[n], n)
        others = [x for x in ids if x != i]
        cut = match_cut(s, rule)
        shown = 0
        for x, score in zip(others, s, strict=True):
            level = cut.level(float(score))
            if level in counts:
                counts[level][0] += cats[x] == cats[i]
                counts[level][1] += 1
                shown += 1
        none_queries += shown == 0
    for level, (right, total) in counts.items():
        print(f"like level={level} shown_per_query={total / len(ids):.2f} same_category={right / max(1, total):.2f}")
    print(f"like queries={len(ids)} with_no_match={none_queries}")


def _stem(word: str) -> str:
    w = word.lower()
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    for suffix in ("es", "s"):
        if w.endswith(suffix) and len(w) > 4:
            return w[: -len(suffix)]
    return w


def _words(text: str) -> set[str]:
    return {_stem(w) for w in re.findall(r"[a-zA-Z]+", text) if len(w) > 2}


def labels(ws: Workspace, index: Path) -> None:
    from imagent.models.pixels import label_data

    data = label_data()
    rows = {r["id"]: r for r in stamp_rows()}
    items = []
    for rec in ws.gallery(index).records():
        truth = _words(rows[rec.id]["caption"] + " " + rows[rec.id]["category"].replace("/", " ").replace("_", " "))
        for label in rec.labels[:3]:
            c = data[label["index"]]
            said = _words(c["name"]).union(*[_words(p) for p, _ in c["parents"]], *[_words(x) for x in c["wordnet"]])
            items.append((float(label["p"]), bool(said & truth), rec.id, label["name"]))
    for floor in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
        shown = [it for it in items if it[0] >= floor]
        right = sum(1 for it in shown if it[1])
        photos = len({it[2] for it in shown if it[1]})
        print(f"labels floor={floor} shown={len(shown)} right={right / max(1, len(shown)):.2f} "
              f"photos_with_a_right_label={photos}")
    for stamp, name in (("food__vegetables__mushroom", "maraca"), ("plants__flowers__anemone_red", "shower cap")):
        p = next((it[0] for it in items if it[2] == stamp and it[3] == name), None)
        print(f"labels example photo={stamp} label={name!r} p={p}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, help="keep the two indexes here (default: a temporary folder)")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: grid,report,count,like,labels")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        ws = Workspace.from_config(sets=[f"cache_dir={work / 'cache'}"])
        indexes = build(ws, work)
        truth = word_queries()
        words = sorted(truth)
        tables = {mode: (*scores(ws, index, words), words) for mode, index in indexes.items()}
        rule = ws.settings.results
        if "grid" not in skip:
            grid(tables, truth)
        if "report" not in skip:
            report(tables, truth, rule)
        if "count" not in skip:
            counts(tables, truth, rule)
        if "like" not in skip:
            like(ws, indexes["pixels"], rule)
        if "labels" not in skip:
            labels(ws, indexes["pixels"])


if __name__ == "__main__":
    main()
