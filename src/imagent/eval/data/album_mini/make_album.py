"""Rebuild the album_mini DISBench-layout benchmark from the Tux Paint stamps (shipped in ../stamps_mini).

Run from the repository root: ``python src/imagent/eval/data/album_mini/make_album.py [STAMPS_DIR]``.
The album is declared below as events (a day, a place, a device, and the stamps photographed there)
plus distractor photos on other days. Every query's answer is *computed* from the declaration: the
photos of the named event whose kind is in the query's target kinds (see README.md), so the answers
can be checked by reading this file. The output is deterministic; the committed files are its output.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Places: name -> (latitude, longitude, accuracy (Flickr's 1-16 scale), address)
PLACES = {
    "zoo": (-37.7841, 144.9515, 16, "Melbourne Zoo, Elliott Avenue, Parkville, Victoria, Australia"),
    "home_a": (-37.7670, 144.9610, 15, "Sydney Road, Brunswick, Victoria, Australia"),
    "farm": (-37.6551, 145.4488, 13, "Yarra Valley farm, Healesville, Victoria, Australia"),
    "aquarium": (-33.8696, 151.2020, 16, "SEA LIFE Sydney Aquarium, Darling Harbour, Sydney, Australia"),
    "geelong": (-38.1499, 144.3617, 14, "Pakington Street, Geelong West, Victoria, Australia"),
    "park_a": (-37.8136, 144.9631, 14, "Flagstaff Gardens, Melbourne, Victoria, Australia"),
    "market_a": (-37.8076, 144.9568, 16, "Queen Victoria Market, Melbourne, Victoria, Australia"),
    "paris_champ": (48.8584, 2.2945, 16, "Champ de Mars, Paris, France"),
    "paris_market": (48.8490, 2.3781, 16, "Marche d'Aligre, Paris, France"),
    "paris_louvre": (48.8606, 2.3376, 16, "Musee du Louvre, Paris, France"),
    "nice": (43.6950, 7.2650, 15, "Promenade des Anglais, Nice, France"),
    "berlin_fest": (52.5125, 13.3960, 15, "Gendarmenmarkt, Berlin, Germany"),
    "berlin_gate": (52.5163, 13.3777, 16, "Brandenburger Tor, Berlin, Germany"),
    "lyon_home": (45.7640, 4.8357, 15, "Rue de la Republique, Lyon, France"),
    "lyon_stadium": (45.7653, 4.9820, 16, "Parc Olympique Lyonnais, Decines-Charpieu, France"),
}

CANON, IPHONE = "Canon EOS 550D", "Apple iPhone 6"
NIKON, PIXEL = "NIKON D5300", "Google Pixel 2"

# (stamp id, kind). Kinds are what the queries' targets select; they are not in the data files.
USERS = {
    "u1001": {
        "base_id": 13942060000,
        "events": [
            ("zoo1", "2014-04-20 10:05", "zoo", CANON, [
                ("animals__birds__penguin", "bird"), ("animals__birds__little-penguin", "bird"),
                ("animals__birds__pelican", "bird"), ("animals__birds__pink_flamingo", "bird"),
                ("animals__mammals__giraffe", "mammal"), ("animals__mammals__elephant", "mammal"),
                ("animals__marsupials__koala", "mammal"), ("animals__marsupials__kangaroo", "mammal")]),
            ("easter1", "2014-04-20 17:30", "home_a", IPHONE, [
                ("seasonal__easter__bunny-egg", "easter_egg"),
                ("seasonal__easter__wrapped_chocolate_easter_egg", "easter_egg"),
                ("seasonal__easter__daffodil", "flower")]),
            ("farm", "2014-06-14 09:40", "farm", CANON, [
                ("animals__mammals__bovines__cow", "mammal"), ("animals__mammals__bovines__sheep", "mammal"),
                ("animals__mammals__bovines__sheep_lamb", "mammal"), ("animals__birds__rooster", "bird"),
                ("animals__birds__hen", "bird"), ("animals__birds__duck", "bird"),
                ("animals__mammals__bovines__goat", "mammal"), ("animals__mammals__pig", "mammal")]),
            ("farm_phone", "2014-06-14 12:15", "farm", IPHONE, [
                ("food__vegetables__carrot", "vegetable"), ("food__vegetables__pumpkin_small", "vegetable"),
                ("town__houses__cartoon__windmill", "building")]),
            ("aquarium", "2014-09-06 11:20", "aquarium", CANON, [
                ("animals__fish__clownfish", "fish"), ("animals__fish__seahorse", "fish"),
                ("animals__fish__lionfish", "fish"), ("animals__fish__butterflyfish", "fish"),
                ("animals__mammals__aquatic__sea_lion", "mammal"), ("animals__birds__silver-gull", "bird")]),
            ("halloween", "2014-10-31 19:10", "home_a", IPHONE, [
                ("seasonal__halloween__jackolantern_mean", "halloween"), ("seasonal__halloween__ghost", "halloween"),
                ("seasonal__halloween__blackcat", "halloween"), ("seasonal__halloween__bat_left", "halloween")]),
            ("christmas", "2014-12-25 12:00", "home_a", IPHONE, [
                ("seasonal__christmas__Christmas_Tree_photo", "decoration"), ("seasonal__christmas__Santa", "person"),
                ("seasonal__christmas__Roast_turkey", "food"), ("seasonal__christmas__Christmas_pudding", "food"),
                ("seasonal__christmas__Mince_Pie", "food"), ("seasonal__christmas__stocking", "decoration")]),
            ("easter2", "2015-04-05 11:00", "geelong", IPHONE, [
                ("seasonal__easter__wrapped_chocolate_easter_egg_2", "easter_egg"),
                ("seasonal__easter__chick-in-egg", "easter_egg"), ("seasonal__easter__bunny-head", "mammal"),
                ("seasonal__easter__chick", "bird")]),
            ("zoo2", "2015-05-02 10:30", "zoo", CANON, [
                ("animals__birds__magellanic_penguin", "bird"), ("animals__birds__peacock", "bird"),
                ("animals__mammals__cats__tiger", "mammal"), ("animals__mammals__cats__lion", "mammal"),
                ("animals__birds__owl", "bird")]),
        ],
        "distractors": [
            ("2014-05-10 15:20", "park_a", IPHONE, "animals__birds__crow"),
            ("2014-07-19 08:45", "home_a", IPHONE, "animals__birds__magpie"),
            ("2014-08-02 13:10", "market_a", CANON, "food__fruit__apple_red"),
            ("2014-08-02 13:14", "market_a", CANON, "food__fruit__banana"),
            ("2014-11-15 16:00", "park_a", CANON, "animals__birds__pigeon"),
            ("2015-01-17 10:00", "market_a", IPHONE, "food__vegetables__tomato"),
            ("2015-02-21 18:30", "home_a", IPHONE, "animals__mammals__dogs__dog"),
            ("2015-03-14 09:00", "park_a", CANON, "plants__flowers__rose"),
        ],
    },
    "u1002": {
        "base_id": 27815530000,
        "events": [
            ("paris1", "2016-07-03 10:15", "paris_champ", NIKON, [
                ("town__monuments__cartoon__eiffel_tower", "landmark"),
                ("town__monuments__cartoon__obelisk", "landmark"), ("town__monuments__cartoon__statue", "landmark"),
                ("animals__birds__pigeon", "bird")]),
            ("paris_market", "2016-07-05 09:30", "paris_market", PIXEL, [
                ("food__fruit__apple_green", "fruit"), ("food__fruit__pear", "fruit"),
                ("food__fruit__Cherry_Stella", "fruit"), ("food__fruit__strawberry", "fruit"),
                ("food__vegetables__onion", "vegetable"), ("food__vegetables__eggplant", "vegetable")]),
            ("nice", "2016-08-14 16:00", "nice", NIKON, [
                ("animals__birds__seagull", "bird"), ("vehicles__ship__walnutBoat", "boat"),
                ("animals__mammals__aquatic__dolphin", "mammal"), ("animals__shellfish__abalone", "seafood"),
                ("space__planets__0_sun", "sky")]),
            ("festival", "2016-09-10 20:00", "berlin_fest", PIXEL, [
                ("hobbies__music__string__guitar_electric", "instrument"),
                ("hobbies__music__string__violin", "instrument"), ("hobbies__music__string__cello", "instrument"),
                ("hobbies__music__percussion__drumkit", "instrument"), ("hobbies__music__brass__trumpet", "instrument"),
                ("seasonal__newyears__fireworks2", "fireworks")]),
            ("stadium", "2016-10-22 14:00", "lyon_stadium", NIKON, [
                ("sports__soccer", "sport"), ("sports__trophy_cup", "sport"), ("town__flags__redflag", "flag"),
                ("town__flags__blue-and-yellowflag", "flag")]),
            ("newyear", "2016-12-31 23:40", "berlin_gate", PIXEL, [
                ("seasonal__newyears__fireworks", "fireworks"), ("seasonal__newyears__confetti", "party"),
                ("seasonal__newyears__party-hat", "party"), ("seasonal__newyears__party-horn-in", "party")]),
            ("garden", "2017-03-18 11:00", "lyon_home", PIXEL, [
                ("plants__flowers__daffodil", "flower"), ("plants__flowers__iris", "flower"),
                ("plants__flowers__anemone_red", "flower"), ("animals__insects__bee", "insect"),
                ("seasonal__easter__butterfly", "insect"), ("animals__insects__hoverfly", "insect")]),
            ("paris2", "2017-07-03 15:00", "paris_louvre", NIKON, [
                ("town__monuments__cartoon__pyramid", "landmark"), ("vehicles__auto__sportscar2", "car"),
                ("vehicles__auto__beetle", "car"), ("animals__birds__crow", "bird")]),
        ],
        "distractors": [
            ("2016-05-21 18:00", "lyon_home", PIXEL, "hobbies__music__string__guitar_classical"),
            ("2016-06-11 12:30", "lyon_home", PIXEL, "food__fruit__orange"),
            ("2016-07-20 09:00", "lyon_home", PIXEL, "plants__flowers__rose"),
            ("2016-11-05 16:40", "lyon_stadium", NIKON, "sports__basketball"),
            ("2017-01-14 10:20", "lyon_home", PIXEL, "animals__insects__grasshopper"),
            ("2017-04-29 17:00", "lyon_home", NIKON, "food__fruit__grapes"),
            ("2017-05-13 08:30", "nice", NIKON, "animals__birds__pelican"),
            ("2017-08-19 21:00", "lyon_home", PIXEL, "seasonal__newyears__fireworks"),
        ],
    },
}

# (query id, user, event type, query text, events, kinds or None for every photo of the events[, device])
QUERIES = [
    ("q01", "u1001", "intra-event", "The birds I photographed on the day I saw the pink flamingo.",
     ["zoo1"], {"bird"}),
    ("q02", "u1001", "intra-event", "The fish I photographed during the visit where I also saw a seahorse.",
     ["aquarium"], {"fish"}),
    ("q03", "u1001", "intra-event", "The farm mammals I photographed on the day I saw the rooster.",
     ["farm"], {"mammal"}),
    ("q04", "u1001", "intra-event", "The Christmas food from the day I photographed Santa Claus.",
     ["christmas"], {"food"}),
    ("q05", "u1001", "intra-event", "The phone photos taken on the day I photographed the pig.",
     ["farm", "farm_phone"], None, IPHONE),
    ("q06", "u1001", "intra-event", "The Halloween photos from the night I photographed the ghost.",
     ["halloween"], {"halloween"}),
    ("q07", "u1001", "inter-event", "The birds from my second visit to the place where I photographed the koala.",
     ["zoo2"], {"bird"}),
    ("q08", "u1001", "inter-event",
     "The Easter eggs photographed at the same place where I photographed the jack-o'-lantern.",
     ["easter1"], {"easter_egg"}),
    ("q09", "u1001", "inter-event",
     "The Easter eggs from the Easter after the day I photographed the little penguin.", ["easter2"], {"easter_egg"}),
    ("q10", "u1001", "inter-event",
     "The animals I photographed at the zoo on my first visit, before the visit where I saw the tiger.",
     ["zoo1"], {"bird", "mammal"}),
    ("q11", "u1001", "inter-event",
     "The mammals from the trip to the city where I photographed the clownfish.", ["aquarium"], {"mammal"}),
    ("q12", "u1002", "intra-event", "The fruit I photographed at the market two days after I saw the Eiffel tower.",
     ["paris_market"], {"fruit"}),
    ("q13", "u1002", "intra-event", "The insects from the day I photographed the iris in my garden.",
     ["garden"], {"insect"}),
    ("q14", "u1002", "intra-event", "The musical instruments at the concert where I saw the fireworks in September.",
     ["festival"], {"instrument"}),
    ("q15", "u1002", "intra-event", "The flags I photographed on the day I saw the trophy cup.",
     ["stadium"], {"flag"}),
    ("q16", "u1002", "intra-event", "The landmarks I photographed on the day I saw the pigeon in Paris.",
     ["paris1"], {"landmark"}),
    ("q17", "u1002", "inter-event",
     "The photos from my second trip to the city where I photographed the Eiffel tower.", ["paris2"], None),
    ("q18", "u1002", "inter-event",
     "The photos from New Year's Eve in the city where I photographed the violin.", ["newyear"], None),
    ("q19", "u1002", "inter-event",
     "The flowers I photographed in my garden the spring after I saw the dolphin at the seaside.",
     ["garden"], {"flower"}),
    ("q20", "u1002", "inter-event",
     "The cars from my trip exactly one year after I photographed the obelisk.", ["paris2"], {"car"}),
    ("q21", "u1002", "inter-event",
     "The sea creatures living in the water from the seaside holiday in the month after I photographed "
     "the strawberry.",
     ["nice"], {"mammal", "seafood"}),
    ("q22", "u1002", "intra-event", "The vegetables from the market where I photographed the cherries.",
     ["paris_market"], {"vegetable"}),
]


def photo_rows(user: str, spec: dict, captions: dict[str, str]) -> list[dict]:
    """Every photo of a user, in time order, with its id, metadata, stamp, event and kind."""
    rows = []
    for name, start, place, device, shots in spec["events"]:
        t0 = datetime.strptime(start, "%Y-%m-%d %H:%M")
        for i, (stamp, kind) in enumerate(shots):
            rows.append({"time": t0 + timedelta(minutes=7 * i, seconds=13 * i), "place": place, "device": device,
                         "stamp": stamp, "event": name, "kind": kind})
    for start, place, device, stamp in spec["distractors"]:
        rows.append({"time": datetime.strptime(start, "%Y-%m-%d %H:%M"), "place": place, "device": device,
                     "stamp": stamp, "event": None, "kind": None})
    rows.sort(key=lambda r: r["time"])
    for i, r in enumerate(rows):
        r["photo_id"] = str(spec["base_id"] + 1 + i * 37)
        if r["stamp"] not in captions:
            raise SystemExit(f"{user}: unknown stamp {r['stamp']}")
    return rows


def main(stamps: Path) -> None:
    captions = {}
    for line in (stamps / "captions.jsonl").read_text().splitlines():
        row = json.loads(line)
        captions[row["id"]] = row["caption"]
    for sub in ("images", "metadata", "captions"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
        (HERE / sub).mkdir()
    by_user: dict[str, list[dict]] = {}
    for user, spec in USERS.items():
        rows = by_user[user] = photo_rows(user, spec, captions)
        (HERE / "images" / user).mkdir()
        meta_lines, cap_lines = [], []
        for r in rows:
            lat, lon, acc, address = PLACES[r["place"]]
            shutil.copyfile(stamps / "images" / f"{r['stamp']}.jpg", HERE / "images" / user / f"{r['photo_id']}.jpg")
            meta_lines.append(json.dumps({"photo_id": r["photo_id"], "metadata": {
                "taken_time": r["time"].strftime("%Y-%m-%d %H:%M:%S"), "longitude": lon, "latitude": lat,
                "accuracy": acc, "address": address, "capturedevice": r["device"]}}, ensure_ascii=False))
            cap_lines.append(json.dumps({"photo_id": r["photo_id"], "caption": captions[r["stamp"]]},
                                        ensure_ascii=False))
        (HERE / "metadata" / f"{user}.jsonl").write_text("\n".join(meta_lines) + "\n", encoding="utf-8")
        (HERE / "captions" / f"{user}.jsonl").write_text("\n".join(cap_lines) + "\n", encoding="utf-8")
    out = []
    for qid, user, etype, text, events, kinds, *device in QUERIES:
        answer = [r["photo_id"] for r in by_user[user] if r["event"] in events
                  and (kinds is None or r["kind"] in kinds) and (not device or r["device"] == device[0])]
        if not answer:
            raise SystemExit(f"{qid}: empty answer")
        out.append(json.dumps({"query_id": qid, "user_id": user, "query": text, "answer": answer,
                               "event_type": etype}, ensure_ascii=False))
    (HERE / "queries.jsonl").write_text("\n".join(out) + "\n", encoding="utf-8")
    shutil.copyfile(stamps / "COPYRIGHT", HERE / "COPYRIGHT")
    n = sum(len(v) for v in by_user.values())
    print(f"album_mini: {len(by_user)} users, {n} photos, {len(out)} queries -> {HERE}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "stamps_mini")
