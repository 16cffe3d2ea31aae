"""The FilterMetadata expression language: grammar, precedence, date prefixes and ranges, near, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from imagent.core.types import ImageRecord
from imagent.tools.base import ToolError
from imagent.tools.filter_lang import (
    AlbumMeta,
    BoolOp,
    Compare,
    FilterError,
    Near,
    Not,
    parse_filter,
    parse_time_prefix,
    wall_seconds,
)

# An album with known metadata: ids say what they are.
RECORDS = [
    ImageRecord("paris_0609_morning", "", taken_time=datetime(2013, 6, 9, 8, 30, 0, 250000), latitude=48.8566,
                longitude=2.3522, address="Rue de Rivoli, Paris, France", device="Canon EOS 5D"),
    ImageRecord("paris_0609_night", "", taken_time=datetime(2013, 6, 9, 23, 59, 59), latitude=48.8606,
                longitude=2.3376, address="Louvre, PARIS, France", device="iPhone 5"),
    ImageRecord("versailles_0610", "", taken_time=datetime(2013, 6, 10, 0, 0, 0), latitude=48.8049, longitude=2.1204,
                address="Versailles, France", device="Canon EOS 5D"),
    ImageRecord("london_0701", "", taken_time=datetime(2013, 7, 1, 12), latitude=51.5074, longitude=-0.1278,
                address="London, United Kingdom", device="iPhone 5"),
    ImageRecord("sydney_2012", "", taken_time=datetime(2012, 12, 31, 23, 0), latitude=-33.8568, longitude=151.2153,
                address="Sydney Opera House, Sydney, Australia", device=None),
    ImageRecord("no_meta", ""),
    # An aware timestamp: compared by its wall-clock time (10:00 local), not converted to UTC.
    ImageRecord("tokyo_aware", "", taken_time=datetime(2013, 6, 9, 10, 0, tzinfo=timezone(timedelta(hours=9))),
                latitude=35.6762, longitude=139.6503, address="Tokyo, Japan", device="Sony"),
]
IDS = [r.id for r in RECORDS]


@pytest.fixture(scope="module")
def meta() -> AlbumMeta:
    return AlbumMeta.from_records(RECORDS)


def ids(meta: AlbumMeta, expr: str) -> set[str]:
    return {IDS[int(r)] for r in meta.filter_rows(expr)}


# --------------------------------------------------------------------------- grammar


def test_precedence_not_binds_tighter_than_and_tighter_than_or():
    tree = parse_filter("not device ~ 'canon' and lat > 0 or lon < 0")
    assert isinstance(tree, BoolOp) and tree.op == "or"
    left, right = tree.items
    assert isinstance(left, BoolOp) and left.op == "and"
    assert isinstance(left.items[0], Not) and left.items[0].item == Compare("device", "~", "canon")
    assert right == Compare("lon", "<", 0.0)


def test_parentheses_override_precedence(meta):
    no_parens = ids(meta, "device ~ 'iphone' or device ~ 'canon' and address ~ 'versailles'")
    parens = ids(meta, "(device ~ 'iphone' or device ~ 'canon') and address ~ 'versailles'")
    assert no_parens == {"paris_0609_night", "london_0701", "versailles_0610"}
    assert parens == {"versailles_0610"}


def test_keywords_symbols_and_aliases_are_accepted(meta):
    a = ids(meta, "DATE = '2013-06-09' AND NOT camera contains 'sony'")
    b = ids(meta, "time == 2013-06-09 && !(device ~ 'sony')")
    assert a == b == {"paris_0609_morning", "paris_0609_night"}
    assert ids(meta, "place ~ 'paris' || location ~ 'london'") == {"paris_0609_morning", "paris_0609_night",
                                                                   "london_0701"}
    assert ids(meta, "latitude < 0") == ids(meta, "lat < 0") == {"sydney_2012"}
    assert ids(meta, "lng < 0") == ids(meta, "longitude < 0") == {"london_0701"}


def test_double_quoted_and_escaped_strings():
    assert parse_filter('address ~ "o\'hare"') == Compare("address", "~", "o'hare")
    assert parse_filter(r"address ~ 'o\'hare'") == Compare("address", "~", "o'hare")


# --------------------------------------------------------------------------- time


def test_date_prefixes_name_whole_periods():
    day = parse_time_prefix("2013-06-09")
    assert day == (wall_seconds(datetime(2013, 6, 9)), wall_seconds(datetime(2013, 6, 10)))
    assert parse_time_prefix("2013") == (wall_seconds(datetime(2013, 1, 1)), wall_seconds(datetime(2014, 1, 1)))
    assert parse_time_prefix("2013-12")[1] == wall_seconds(datetime(2014, 1, 1))  # December rolls the year
    assert parse_time_prefix("2013-06-09 14")[1] - parse_time_prefix("2013-06-09 14")[0] == 3600
    assert parse_time_prefix("2013-06-09T14:30")[1] - parse_time_prefix("2013-06-09T14:30")[0] == 60
    assert parse_time_prefix("2013-06-09 14:30:05")[1] - parse_time_prefix("2013-06-09 14:30:05")[0] == 1
    assert parse_time_prefix("2013/6/9") == day


def test_time_equality_is_the_whole_prefix_period(meta):
    assert ids(meta, "time = '2013-06-09'") == {"paris_0609_morning", "paris_0609_night", "tokyo_aware"}
    assert ids(meta, "time = '2013-06'") == {"paris_0609_morning", "paris_0609_night", "versailles_0610",
                                              "tokyo_aware"}
    assert ids(meta, "time = 2012") == {"sydney_2012"}
    # The paper's warning: an exact timestamp matches only that second.
    assert ids(meta, "time = '2013-06-09 08:30:00'") == {"paris_0609_morning"}
    assert ids(meta, "time = '2013-06-09 08:30:01'") == set()


def test_day_range_the_papers_way(meta):
    assert ids(meta, "time >= '2013-06-09' and time < '2013-06-10'") == {
        "paris_0609_morning", "paris_0609_night", "tokyo_aware"}


def test_comparisons_against_a_prefix(meta):
    june = {"paris_0609_morning", "paris_0609_night", "versailles_0610", "tokyo_aware"}
    assert ids(meta, "time <= '2013-06'") == june | {"sydney_2012"}  # up to the end of June
    assert ids(meta, "time < '2013-06'") == {"sydney_2012"}
    assert ids(meta, "time > '2013-06'") == {"london_0701"}  # after the whole of June
    assert ids(meta, "time >= '2013-06'") == june | {"london_0701"}
    assert ids(meta, "time between '2013-06-09' and '2013-06-10'") == {
        "paris_0609_morning", "paris_0609_night", "versailles_0610", "tokyo_aware"}


def test_missing_values_never_match_a_comparison_but_not_keeps_them(meta):
    assert "no_meta" not in ids(meta, "time != '2013'")
    assert "no_meta" in ids(meta, "not time = '2013'")
    assert "no_meta" not in ids(meta, "address != 'london, united kingdom'")
    assert "sydney_2012" not in ids(meta, "device != 'sony'")  # no device: no match


def test_columns_read_from_stored_values_equal_the_records(meta):
    d = [r.to_dict() for r in RECORDS]
    cols = AlbumMeta.from_columns([x["taken_time"] for x in d], [x["latitude"] for x in d],
                                  [x["longitude"] for x in d], [x["address"] for x in d], [x["device"] for x in d])
    for name in ("time", "lat", "lon", "chrono"):
        assert np.array_equal(getattr(cols, name), getattr(meta, name), equal_nan=True), name
    assert cols.address.uniques == meta.address.uniques and (cols.device.codes == meta.device.codes).all()


def test_results_are_in_chronological_order_undated_last(meta):
    rows = meta.filter_rows("not time = '1900'")
    assert [IDS[int(r)] for r in rows] == ["sydney_2012", "paris_0609_morning", "tokyo_aware", "paris_0609_night",
                                          "versailles_0610", "london_0701", "no_meta"]


def test_filter_within_rows(meta):
    rows = np.array([IDS.index("london_0701"), IDS.index("paris_0609_night")])
    assert [IDS[int(r)] for r in meta.filter_rows("device ~ 'iphone'", rows)] == ["paris_0609_night", "london_0701"]


# --------------------------------------------------------------------------- text and numbers


def test_address_contains_and_equality_are_case_insensitive(meta):
    assert ids(meta, "address ~ 'PARIS'") == {"paris_0609_morning", "paris_0609_night"}
    assert ids(meta, "address = 'versailles, france'") == {"versailles_0610"}
    assert ids(meta, "address = 'paris'") == set()  # equality is the whole address
    assert ids(meta, "device = 'iphone 5'") == {"paris_0609_night", "london_0701"}


def test_lat_lon_comparisons(meta):
    assert ids(meta, "lat >= 48.85 and lat <= 48.87") == {"paris_0609_morning", "paris_0609_night"}
    assert ids(meta, "lon between 2 and 3") == {"paris_0609_morning", "paris_0609_night", "versailles_0610"}
    assert ids(meta, "lat = 51.5074") == {"london_0701"}


def test_near_uses_great_circle_km(meta):
    assert parse_filter("near(48.8566, 2.3522, 5)") == Near(48.8566, 2.3522, 5.0)
    assert ids(meta, "near(48.8566, 2.3522, 5)") == {"paris_0609_morning", "paris_0609_night"}  # Louvre ~1.2 km
    assert ids(meta, "near(48.8566, 2.3522, 20)") == {"paris_0609_morning", "paris_0609_night", "versailles_0610"}
    assert ids(meta, "near(48.8566, 2.3522, 400)") >= {"london_0701"}  # Paris-London ~344 km
    assert ids(meta, "near(48.8566, 2.3522, 300)").isdisjoint({"london_0701"})


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("expr", "message"), [
    ("", "the filter expression is empty"),
    ("   ", "the filter expression is empty"),
    ("color = 'red'", "unknown field 'color'; fields are time, address, device, lat, lon"),
    ("address < 'x'", "address does not take '<'; it takes != = ~"),
    ("lat ~ 3", "lat does not take 'contains'"),
    ("time ~ '2013'", "time does not take 'contains'"),
    ("time 2013", "expected a comparison operator after 'time' but found '2013'"),
    ("time =", "at the end: expected a value for time but found the end of the expression"),
    ("time = 'June 9'", "'June 9' is not a date; write it as YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DD HH:MM[:SS]"),
    ("time = '2013-13-01'", "'2013-13-01' is not a valid date (month must be in 1..12)"),
    ("time = '2013-02-30'", "is not a valid date"),
    ("time = 20130609", "time needs a date such as '2013-06-09', not the number 20130609"),
    ("lat > 'north'", "lat needs a number, not 'north'"),
    ("address ~ 'paris", "the string starting with ' is never closed"),
    ("time $ '2013'", "unexpected character '$'"),
    ("(time = '2013'", "expected ')' to close the '(' at position 0 but found the end of the expression"),
    ("time = '2013')", "a ')' without a matching '('"),
    ("time = '2013' address ~ 'x'", "expected 'and', 'or' or the end of the expression but found 'address'"),
    ("time = '2013' and", "the expression ends where a condition was expected"),
    ("and time = '2013'", "expected a condition (a field such as time, address, device, lat, lon, or near(...))"),
    ("near(48.8, 2.3)", "expected ',' (near takes three numbers: near(lat, lon, km)) but found ')'"),
    ("near 48.8, 2.3, 5", "expected '(' (near takes three numbers: near(lat, lon, km))"),
    ("near('paris', 2.3, 5)", "expected ')' (near with a place takes its name and a distance: near('Vienna', km))"),
    ("near('Nowhereville Xyz', 5)", "near: no place called 'Nowhereville Xyz' in the offline place data"),
    ("near(95, 2.3, 5)", "near: lat must be in [-90, 90] and lon in [-180, 180], got 95, 2.3"),
    ("near(48.8, 2.3, 0)", "near: the distance must be more than 0 km, got 0"),
    ("time between '2013' '2014'", "expected 'and' after 'time between A' but found \"'2014'\""),
])
def test_every_error_says_what_was_wrong_and_what_is_allowed(expr, message):
    with pytest.raises(FilterError) as err:
        parse_filter(expr)
    text = str(err.value)
    assert message in text
    assert "Allowed: time with" in text and "near(lat, lon, km)" in text  # what the language allows
    assert isinstance(err.value, ToolError)  # the runtime hands it back to the model


def test_error_positions_point_at_the_problem():
    with pytest.raises(FilterError, match=r"at position 8 \(near \"< 'x'\"\)"):
        parse_filter("address < 'x'")


def test_between_on_text_fields_is_refused(meta):
    with pytest.raises(FilterError, match="between works on time, lat, lon, month, weekday and hour, not address"):
        meta.filter_rows("address between 'a' and 'b'")


def test_not_a_string():
    with pytest.raises(FilterError, match="must be a string"):
        parse_filter(None)  # type: ignore[arg-type]


def test_never_evaluates_python():
    # Python syntax is not the language: nothing is evaluated, the parser refuses it.
    for expr in ["__import__('os').system('true')", "lat > (1).__class__", "time = '2013' + '-06'"]:
        with pytest.raises(FilterError):
            parse_filter(expr)


@pytest.mark.parametrize("expr", ["(" * 250 + "lat > 0" + ")" * 250, "!" * 1000 + "lat > 0",
                                  "not " * 300 + "lat > 0", "(not " * 200 + "lat > 0" + ")" * 200])
def test_deep_nesting_is_a_clear_error_not_a_recursion_error(meta, expr):
    # Issue 47, hostile finding 5: these gave a RecursionError traceback in the CLI and 500 on the web.
    with pytest.raises(FilterError, match="more than 64 levels deep"):
        meta.filter_rows(expr)


def test_nesting_up_to_the_bound_works(meta):
    from imagent.tools.filter_lang import MAX_NESTING

    inside = ids(meta, "(" * MAX_NESTING + "lat > 50" + ")" * MAX_NESTING)
    assert inside == {"london_0701"}
    assert ids(meta, "not " * MAX_NESTING + "lat > 50") == {"london_0701"}  # 64 nots: an even number


@pytest.mark.parametrize("expr", ["address ~ ''", "device contains '  '", "person ~ ''", "label ~ ''", "place ~ \"\""])
def test_an_empty_contains_pattern_is_an_error_on_every_text_field(expr):
    # Issue 47, hostile finding 11: `person ~ ''` matched everyone while `label ~ ''` matched nothing.
    with pytest.raises(FilterError, match="needs something to look for, not an empty string"):
        parse_filter(expr)


def test_label_contains_matches_whole_words_and_parent_categories():
    from imagent.models.pixels import label_data

    names = [c["name"] for c in label_data()]
    index = {n: i for i, n in enumerate(names)}
    photos = {"husky": ["Siberian Husky"], "tiger": ["tiger"], "car": ["sports car"], "wheel": ["car wheel"],
              "tabby": ["a cat having a striped coat"], "flamingo": ["flamingo"], "none": []}
    meta = AlbumMeta(np.zeros(len(photos)), np.full(len(photos), np.nan), np.full(len(photos), np.nan),
                     [None] * len(photos), [None] * len(photos), [[index[n] for n in v] for v in photos.values()])
    keys = list(photos)

    def rows(expr: str) -> set[str]:
        return {keys[int(r)] for r in meta.filter_rows(expr)}

    # "carnivore" (a parent of the husky and the tiger) holds "car", but not as a word.
    assert rows("label ~ 'car'") == {"car", "wheel"}
    assert rows("label ~ 'cars'") == {"car", "wheel"}  # plural of the word
    assert rows("label ~ 'sports car'") == {"car"}
    assert rows("label ~ 'cat'") == {"tabby", "tiger"}  # the tiger's parent categories include "cat"
    assert rows("label ~ 'animal'") == {"husky", "tiger", "tabby", "flamingo"}  # parents up to the top
    assert rows("label ~ 'birds'") == {"flamingo"}
    assert rows("label ~ 'carnivore'") == {"husky", "tiger", "tabby"}
    assert rows("label ~ 'ar'") == set()  # part of a word is not a word


def test_wall_seconds_ignores_time_zones():
    aware = datetime(2013, 6, 9, 10, 0, tzinfo=UTC)
    assert wall_seconds(aware) == wall_seconds(datetime(2013, 6, 9, 10, 0))


# --------------------------------------------------------------------------- group headers as expressions


@pytest.mark.parametrize("text", ["Cape Point", "Marche d'Aligre", 'the "Blue" bar', "O'Hara's \"Pub\"", "C:\\x\\",
                                  ""])
def test_quote_string_reads_back_as_the_same_text(text):
    from imagent.tools.filter_lang import quote_string, tokenize

    token = tokenize(quote_string(text))[0]
    assert token.kind == "string" and token.value == text


def test_a_described_group_header_is_the_expression_that_selects_its_day_and_place():
    """Every header :func:`group_filter` writes parses, and selects exactly the photos of that day and place."""
    from imagent.methods.album.tools import group_filter

    records = [*RECORDS,
               ImageRecord("aligre", "", taken_time=datetime(2013, 6, 9, 9), address="Marche d'Aligre, Paris, France"),
               ImageRecord("gps_only", "", taken_time=datetime(2013, 6, 9, 9), latitude=-34.3571, longitude=18.497),
               ImageRecord("undated", "", address="Louvre, PARIS, France")]
    album_meta = AlbumMeta.from_records(records)
    names = [r.id for r in records]
    headers = {r.id: group_filter(r) for r in records}
    assert headers["paris_0609_night"] == "time = '2013-06-09' and place ~ 'Louvre, PARIS'"
    assert headers["aligre"] == "time = '2013-06-09' and place ~ \"Marche d'Aligre, Paris\""
    assert headers["gps_only"] == "time = '2013-06-09' and near(-34.357, 18.497, 1)"
    assert headers["undated"] == "place ~ 'Louvre, PARIS'"
    for r in records:
        if r.id == "no_meta":
            assert headers[r.id] == "no date and no place"
            continue
        chosen = {names[int(i)] for i in album_meta.filter_rows(headers[r.id])}
        same = {o.id for o in records if group_filter(o) == headers[r.id]}
        assert r.id in chosen and same <= chosen, (r.id, headers[r.id], chosen)
    assert {names[int(i)] for i in album_meta.filter_rows(headers["paris_0609_morning"])} == {"paris_0609_morning"}
