"""Write a held-out DISBench-layout album, built differently from the shipped mini album, to check the album
agents on photos and queries nobody tuned them on.

The shipped ``album_mini`` is hand-declared (events, places and 22 hand-written queries). This album is
*generated* from the Tux Paint stamps (``../shared/data/stamps``) with a seeded random generator: other users,
other cities and countries, other cameras, events that mix two or three kinds of subject drawn at random, photo
ids of another length, and queries written by templates from the generated events (the answer of each is
computed from the declaration, as in ``album_mini``):

- intra-event: "The <kind> I photographed on the day I saw the <anchor>." (anchor: a photo whose caption is
  unique in the user's album and whose kind differs from the target's);
- inter-event: "The <kind> from my other visit to the place where I photographed the <anchor>." (two events
  at one place; the target event is the one without the anchor);
- inter-event: "The <kind> I photographed on my first trip after the day I saw the <anchor>." (the next event
  in time, at another place).

Dates, places and devices are invented; the stamps are GPL-2 (their COPYRIGHT file is copied along).

    python benchmarks/holdout_album.py OUT_DIR [--stamps DIR] [--seed 7]

then ``imagent eval disbench --images-root OUT_DIR --method photocraft``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from datetime import datetime, timedelta
from pathlib import Path

# kind -> (stamp category prefixes, plural noun in queries)
KINDS = {
    "bird": (("animals__birds",), "birds"),
    "mammal": (("animals__mammals",), "mammals"),
    "fish": (("animals__fish",), "fish"),
    "insect": (("animals__insects",), "insects"),
    "flower": (("plants__flowers",), "flowers"),
    "fruit": (("food__fruit",), "fruits"),
    "vegetable": (("food__vegetables",), "vegetables"),
    "vehicle": (("vehicles__",), "vehicles"),
    "instrument": (("hobbies__music",), "musical instruments"),
    "tool": (("household__tools",), "tools"),
}
USERS = {
    "v2001": {"base_id": 5310000000, "start": "2018-02-03", "devices": ["Sony ILCE-6000", "Samsung SM-G960F"],
              "places": [(35.7148, 139.7967, "Asakusa, Taito City, Tokyo, Japan"),
                         (35.6764, 139.6993, "Yoyogi Park, Shibuya, Tokyo, Japan"),
                         (34.9671, 135.7727, "Fushimi Inari, Kyoto, Japan"),
                         (35.0116, 135.7681, "Nishiki Market, Kyoto, Japan"),
                         (34.6873, 135.5262, "Osaka Castle Park, Osaka, Japan")]},
    "v2002": {"base_id": 8840000000, "start": "2019-09-14", "devices": ["Fujifilm X-T3", "Apple iPhone 11"],
              "places": [(-33.9249, 18.4241, "V&A Waterfront, Cape Town, South Africa"),
                         (-33.9628, 18.4098, "Kirstenbosch Garden, Cape Town, South Africa"),
                         (-34.3568, 18.4740, "Cape Point, Western Cape, South Africa"),
                         (-26.2041, 28.0473, "Maboneng, Johannesburg, South Africa"),
                         (-25.7479, 28.2293, "Union Buildings, Pretoria, South Africa")]},
}


def noun(caption: str) -> str:
    """"An Adelaide Rosella." -> "Adelaide Rosella"."""
    words = caption.strip().rstrip(".").split()
    if words and words[0].lower() in {"a", "an", "the", "some"}:
        words = words[1:]
    return " ".join(words)


def kind_of(stamp: str) -> str | None:
    for kind, (prefixes, _) in KINDS.items():
        if stamp.startswith(prefixes):
            return kind
    return None


def build(stamps: Path, out: Path, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    rows = [json.loads(x) for x in (stamps / "captions.jsonl").read_text().splitlines() if x.strip()]
    by_kind: dict[str, list[dict]] = {}
    for r in rows:
        k = kind_of(r["id"])
        if k is not None and (stamps / r["file"]).is_file():
            by_kind.setdefault(k, []).append(r)
    for sub in ("images", "metadata", "captions"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    queries: list[dict] = []
    photos = 0
    for user, spec in USERS.items():
        pool = {k: rng.sample(v, len(v)) for k, v in by_kind.items()}
        day = datetime.strptime(spec["start"], "%Y-%m-%d")
        events = []
        place_order = [0, 1, 2, 0, 3, 1, 4, 2]  # places 0, 1 and 2 are visited twice
        for e, place in enumerate(place_order):
            day += timedelta(days=rng.randint(9, 60))
            kinds = rng.sample([k for k in KINDS if len(pool[k]) >= 3], 3 if e % 2 else 2)
            shots = []
            for k in kinds:
                for _ in range(rng.randint(2, 3)):
                    shots.append((pool[k].pop(), k))
            rng.shuffle(shots)
            t0 = day + timedelta(hours=rng.randint(8, 16), minutes=rng.randint(0, 59))
            events.append({"name": f"e{e}", "place": place, "device": spec["devices"][e % 2], "kinds": kinds,
                           "photos": [{"stamp": s, "kind": k, "time": t0 + timedelta(minutes=5 * i + rng.randint(0, 4))}
                                      for i, (s, k) in enumerate(shots)]})
        singles = []
        for _ in range(6):  # distractors: one photo on a day of its own
            k = rng.choice([k for k in KINDS if pool[k]])
            t = datetime.strptime(spec["start"], "%Y-%m-%d") + timedelta(days=rng.randint(0, 400), hours=12)
            singles.append({"stamp": pool[k].pop(), "kind": k, "time": t, "event": None,
                            "place": rng.randrange(len(spec["places"])), "device": spec["devices"][1]})
        album = [{**p, "event": ev["name"], "place": ev["place"], "device": ev["device"]}
                 for ev in events for p in ev["photos"]] + singles
        album.sort(key=lambda p: p["time"])
        for i, p in enumerate(album):
            p["photo_id"] = str(spec["base_id"] + 3 + i * 53)
        caption_count: dict[str, int] = {}
        for p in album:
            caption_count[p["stamp"]["caption"]] = caption_count.get(p["stamp"]["caption"], 0) + 1
        (out / "images" / user).mkdir()
        meta, caps = [], []
        for p in album:
            lat, lon, address = spec["places"][p["place"]]
            shutil.copyfile(stamps / p["stamp"]["file"], out / "images" / user / f"{p['photo_id']}.jpg")
            meta.append(json.dumps({"photo_id": p["photo_id"], "metadata": {
                "taken_time": p["time"].strftime("%Y-%m-%d %H:%M:%S"), "longitude": lon, "latitude": lat,
                "accuracy": 15, "address": address, "capturedevice": p["device"]}}, ensure_ascii=False))
            caps.append(json.dumps({"photo_id": p["photo_id"], "caption": p["stamp"]["caption"]}, ensure_ascii=False))
        (out / "metadata" / f"{user}.jsonl").write_text("\n".join(meta) + "\n", encoding="utf-8")
        (out / "captions" / f"{user}.jsonl").write_text("\n".join(caps) + "\n", encoding="utf-8")
        photos += len(album)

        def anchor(ev: dict, not_kind: str, album: list[dict] = album,
                   caption_count: dict[str, int] = caption_count) -> dict | None:
            options = [p for p in album if p["event"] == ev["name"] and p["kind"] != not_kind
                       and caption_count[p["stamp"]["caption"]] == 1]
            return rng.choice(options) if options else None

        def answer(ev: dict, kind: str, album: list[dict] = album) -> list[str]:
            return [p["photo_id"] for p in album if p["event"] == ev["name"] and p["kind"] == kind]

        made = 0
        for ev in rng.sample(events, len(events)):  # intra-event
            kind = rng.choice(ev["kinds"])
            a = anchor(ev, kind)
            if a is None or len(answer(ev, kind)) < 2 or made >= 4:
                continue
            made += 1
            queries.append({"user_id": user, "event_type": "intra-event", "answer": answer(ev, kind),
                            "query": f"The {KINDS[kind][1]} I photographed on the day I saw the "
                                     f"{noun(a['stamp']['caption'])}."})
        for ev in events:  # inter-event: the other visit to a place
            twin = [o for o in events if o["place"] == ev["place"] and o is not ev]
            if not twin:
                continue
            target = twin[0]
            kind = rng.choice(target["kinds"])
            a = anchor(ev, "")
            if a is None:
                continue
            queries.append({"user_id": user, "event_type": "inter-event", "answer": answer(target, kind),
                            "query": f"The {KINDS[kind][1]} from my other visit to the place where I photographed "
                                     f"the {noun(a['stamp']['caption'])}."})
            if sum(q["event_type"] == "inter-event" and q["user_id"] == user for q in queries) >= 2:
                break
        for i, ev in enumerate(events[:-1]):  # inter-event: the next trip
            nxt = events[i + 1]
            if nxt["place"] == ev["place"]:
                continue
            kind = rng.choice(nxt["kinds"])
            a = anchor(ev, "")
            if a is None or i % 3:
                continue
            queries.append({"user_id": user, "event_type": "inter-event", "answer": answer(nxt, kind),
                            "query": f"The {KINDS[kind][1]} I photographed on my first trip after the day I saw the "
                                     f"{noun(a['stamp']['caption'])}."})
    for n, q in enumerate(queries, 1):
        q["query_id"] = f"h{n:02d}"
    (out / "queries.jsonl").write_text("".join(json.dumps({k: q[k] for k in ("query_id", "user_id", "query",
                                                                             "answer", "event_type")},
                                                          ensure_ascii=False) + "\n" for q in queries))
    if (stamps / "COPYRIGHT").is_file():
        shutil.copyfile(stamps / "COPYRIGHT", out / "COPYRIGHT")
    return {"users": len(USERS), "photos": photos, "queries": len(queries)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--stamps", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "stamps")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    info = build(args.stamps, args.out, args.seed)
    print(f"holdout album: {info['users']} users, {info['photos']} photos, {info['queries']} queries -> {args.out}")


if __name__ == "__main__":
    main()
