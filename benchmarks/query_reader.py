"""What reading a question costs at library scale (issue 46): the query reader's vocabulary, built once per index
generation, and each question read against it.

A synthetic library is written through the real index (``Gallery.upsert`` into SQLite): ``--photos`` records with
times over five years, ~2,000 street addresses in 40 cities of 12 countries, and three pixel-model labels each (real
ImageNet classes, so the label words are the real names, synonyms and parent categories). Then:

- ``vocabulary_cold_ms``: the first :func:`~imagent.tools.query_reader.vocabulary` of a freshly opened index,
  including the album's metadata columns it shares with every filter (what the first search after a start pays);
- ``vocabulary_ms``: the vocabulary alone, the metadata columns already built (what a new index generation pays when
  a filter built them already);
- ``cached_ms``: :func:`vocabulary` again (every later question);
- ``read_ms``: median and p95 of :func:`~imagent.tools.query_reader.read_query` over varied questions;
- ``filter_ms``: evaluating the reading's filter over the whole library (what the search then does with it).

Prints one line per figure and the machine's load average (read the figures with it on a shared machine).

    python benchmarks/query_reader.py [--photos 100000] [--runs 5] [--index DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import imagent  # noqa: F401, I001 - first: imagent's thread settings must reach OpenBLAS before numpy loads it (README, Speed)
import numpy as np
from imagent.core.types import ImageRecord
from imagent.index.gallery import Gallery
from imagent.models.pixels import label_data
from imagent.tools import query_reader, query_vocab
from imagent.tools.photo_search import where_rows

QUESTIONS = ["birds in City3", "photos from City7 in 2012", "last summer's beach photos", "Country4",
             "the food I photographed in City11", "dogs on Sundays in May 2013", "my second day in City2",
             "a red car at night", "pics from country 5 last year", "flamingos and goldfinches in City20 in spring",
             "show me the mountains between 2011 and 2012", "the cathedral in City30", "sunset over the sea",
             "photos of Anna in City1", "City12 2014", "a penguin", "the market we went to in City9 on a Saturday",
             "street food in City15 in the evening", "my trip to Country2 in 2013", "snow in winter 2012"]


def build(root: Path, n: int, seed: int = 0) -> Gallery:
    rng = np.random.default_rng(seed)
    cities = [(f"City{c}", f"Country{c % 12}", rng.uniform(-60, 60), rng.uniform(-170, 170)) for c in range(40)]
    classes = label_data()
    start = datetime(2010, 1, 1)
    seconds = np.sort(rng.integers(0, 5 * 365 * 86400, n))
    city_of = rng.integers(0, len(cities), n)
    street_of = rng.integers(0, 50, n)
    label_of = rng.integers(0, len(classes), (n, 3))
    g = Gallery(root, create=True)
    with g.transaction() as c:
        for i in range(n):
            name, country, lat, lon = cities[city_of[i]]
            no_gps = i % 50 == 0
            labels = [{"name": classes[k]["name"], "p": p, "index": int(k)}
                      for k, p in zip(label_of[i].tolist(), (0.6, 0.2, 0.05), strict=True)]
            rec = ImageRecord(
                id=f"{1000000000 + i}", path=f"/synthetic/{i}.jpg",
                taken_time=None if i % 97 == 0 else start + timedelta(seconds=int(seconds[i])),
                latitude=None if no_gps else float(lat), longitude=None if no_gps else float(lon),
                address=None if no_gps else f"{street_of[i]} Street, {name}, {country}", labels=labels)
            g.upsert(c, rec, f"record:{rec.id}", "synthetic", {})
    return Gallery(root)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photos", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5, help="reads of each question (and vocabulary builds)")
    ap.add_argument("--index", type=Path, default=None, help="reuse (or create) the synthetic index here")
    args = ap.parse_args()
    root = args.index or Path(tempfile.mkdtemp(prefix="imagent-reader-bench-"))
    t0 = time.perf_counter()
    if not (root / "records.sqlite").exists():
        build(root, args.photos)
        print(f"built a {args.photos:,}-photo synthetic index in {time.perf_counter() - t0:.0f} s at {root}")

    cold, warm = [], []
    for _ in range(args.runs):
        g = Gallery(root)
        g.label_min_p = 0.1
        t = time.perf_counter()
        vocab = query_reader.vocabulary(g)
        cold.append(time.perf_counter() - t)
        query_vocab._VOCABS.pop(g, None)  # the same index opened, its metadata columns built: the vocabulary alone
        t = time.perf_counter()
        vocab = query_reader.vocabulary(g)
        warm.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(100):
        query_reader.vocabulary(g)
    cached = (time.perf_counter() - t) / 100

    today = date(2014, 10, 15)
    reads, filters, readings = [], [], []
    for q in QUESTIONS:
        for _ in range(args.runs):
            t = time.perf_counter()
            r = query_reader.read_query(q, g, today=today)
            reads.append(time.perf_counter() - t)
        readings.append(r)
        if r.where and "person" not in r.where:  # the synthetic library has no face data
            t = time.perf_counter()
            where_rows(g, r.where)
            filters.append(time.perf_counter() - t)
    reads.sort()
    print(f"photos={len(g):,} places={len(set(vocab.places.values())):,} label_words={len(vocab.labels):,} "
          f"years={vocab.years}")
    print(f"vocabulary_cold_ms median={ms(statistics.median(cold))} (with the album's metadata columns)")
    print(f"vocabulary_ms median={ms(statistics.median(warm))} (the metadata columns built already)")
    print(f"cached_ms={cached * 1000:.4f}")
    print(f"read_ms median={ms(statistics.median(reads))} p95={ms(reads[int(0.95 * (len(reads) - 1))])} "
          f"questions={len(QUESTIONS)}")
    print(f"filter_ms median={ms(statistics.median(filters))} (the reading's filter over the whole library)")
    for q, r in zip(QUESTIONS[:6], readings[:6], strict=True):
        print(f"  {q!r}: {r.describe()}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
