"""The issue's first "done when", through the real CLI: `imagent index DIR`, `imagent people --json`,
`imagent people name ID "Barack"`, `imagent search --where "person = 'Barack'"` return exactly his photos, on a
folder with copies, a crop, other people and photos without faces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from imagent.cli.main import app

pytestmark = pytest.mark.real_model


def _folder(dest: Path, kit) -> set[str]:
    """His three photos, a mirrored copy, a crop (in a subfolder), Biden, the astronaut, two photos without a face.
    Returns his files' names."""
    kit.people_folder(dest)
    with Image.open(dest / "obama.jpg") as im:
        im.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(dest / "obama_mirrored.jpg", quality=90)
    (dest / "more").mkdir()
    with Image.open(dest / "obama3.jpg") as im:
        im.crop((60, 0, 480, 420)).save(dest / "more" / "blue_room_crop.jpg", quality=90)
    return {*kit.OBAMA, "obama_mirrored.jpg", "blue_room_crop.jpg"}


def test_index_people_name_search_returns_exactly_his_photos(tmp_path, faces_kit):
    runner = CliRunner()
    photos, index = tmp_path / "photos", str(tmp_path / "index")
    his = _folder(photos, faces_kit)

    built = runner.invoke(app, ["index", str(photos), "--index", index, "--json"])
    assert built.exit_code == 0, built.output
    faces = json.loads(built.stdout)["faces"]
    assert faces["status"] == "done" and faces["scanned"] == 9 and faces["people"] >= 3

    listed = runner.invoke(app, ["people", "--index", index, "--json"])
    assert listed.exit_code == 0, listed.output
    groups = json.loads(listed.stdout)["people"]
    assert {"id", "name", "count", "faces", "tiny", "photos"} <= set(groups[0])
    his_groups = [g for g in groups if {Path(p["path"]).name for p in g["photos"]} & his]
    assert len(his_groups) == 1 and {Path(p["path"]).name for p in his_groups[0]["photos"]} == his
    assert groups[0] is his_groups[0] and not groups[0]["tiny"]  # the largest group first
    gid = his_groups[0]["id"]

    named = runner.invoke(app, ["people", "name", str(gid), "Barack", "--index", index])
    assert named.exit_code == 0 and "Barack" in named.stdout

    found = runner.invoke(app, ["search", "--where", "person = 'Barack'", "--index", index, "--json"])
    assert found.exit_code == 0, found.output
    rows = json.loads(found.stdout)["results"]
    assert {Path(r["path"]).name for r in rows} == his and len(rows) == len(his)
    assert all(r["people"] == [{"id": gid, "name": "Barack"}] for r in rows)
    paths = runner.invoke(app, ["search", "--where", "person = 'barack'", "--index", index, "--paths"])
    assert {Path(p).name for p in paths.stdout.split()} == his

    # the table names him too, and a name nobody has is an error that lists the names
    table = runner.invoke(app, ["people", "--index", index])
    assert table.exit_code == 0 and "Barack" in table.stdout
    wrong = runner.invoke(app, ["search", "--where", "person = 'Obama'", "--index", index])
    assert wrong.exit_code == 2 and "no one is named 'obama'" in wrong.output and "'Barack'" in wrong.output


def test_people_commands_correct_and_forget(tmp_path, faces_kit):
    runner = CliRunner()
    photos, index = tmp_path / "photos", str(tmp_path / "index")
    faces_kit.people_folder(photos)
    shutil.copy(faces_kit.FACES / "biden.jpg", photos / "biden_again.jpg")  # same bytes: skipped as a copy
    assert runner.invoke(app, ["index", str(photos), "--index", index]).exit_code == 0
    groups = json.loads(runner.invoke(app, ["people", "--index", index, "--json"]).stdout)["people"]
    obama = next(g for g in groups if any(Path(p["path"]).name == "obama.jpg" for p in g["photos"]))
    biden = next(g for g in groups if any(Path(p["path"]).name == "biden.jpg" for p in g["photos"]))

    shown = json.loads(runner.invoke(app, ["people", "--index", index, "show", str(obama["id"]), "--json"]).stdout)
    assert len(shown["faces"]) == 3 and all(len(f["box"]) == 4 for f in shown["faces"])
    face = shown["faces"][0]["id"]
    split = runner.invoke(app, ["people", "split", str(face), "--to", str(biden["id"]), "--index", index])
    assert split.exit_code == 0 and f"to group {biden['id']}" in split.stdout
    merged = runner.invoke(app, ["people", "merge", str(obama["id"]), str(biden["id"]), "--index", index])
    assert merged.exit_code == 0 and "2 faces of group" in merged.stdout
    missing = runner.invoke(app, ["people", "name", "999", "Nobody", "--index", index])
    assert missing.exit_code == 2 and "no group 999" in missing.output
    removed = runner.invoke(app, ["people", "remove", str(face), "--index", index, "--json"])
    assert json.loads(removed.stdout)["face"] == face

    refused = runner.invoke(app, ["people", "forget", "--index", index])  # not a terminal, no --yes
    assert refused.exit_code == 2 and "--yes" in refused.output
    held = json.loads(runner.invoke(app, ["people", "--index", index, "--json"]).stdout)["faces"]["faces"]
    assert held == sum(g["faces"] for g in groups) - 1  # the removed face is gone
    gone = runner.invoke(app, ["people", "forget", "--yes", "--index", index, "--json"])
    assert gone.exit_code == 0, gone.output
    done = json.loads(gone.stdout)
    assert done["faces"] == held and done["files_removed"] >= 1 and "faces.mode" in done["note"]
    after = runner.invoke(app, ["people", "--index", index])
    assert after.exit_code == 2 and "no face data" in after.output
    off = runner.invoke(app, ["index", str(photos), "--index", index, "--set", "faces.mode=off", "--json"])
    assert json.loads(off.stdout)["faces"]["status"] == "off" and not (Path(index) / "faces.sqlite").exists()


def test_ids_beyond_any_integer_are_one_line_errors(people_index, tmp_path):
    """Issue 47, finding 6: an id past SQLite's integers named nobody with an OverflowError traceback."""
    _folder, built, _report = people_index
    index = str(tmp_path / "index")
    shutil.copytree(built, index)
    big = "99999999999999999999999"
    runner = CliRunner()
    for args in (["name", big, "Anna"], ["merge", big, "1"], ["merge", "1", big], ["split", big],
                 ["split", "1", "--to", big], ["remove", big], ["show", big]):
        out = runner.invoke(app, ["people", *args, "--index", index])
        assert out.exit_code == 2, (args, out.output)
        assert "Traceback" not in out.output and "Overflow" not in out.output
        assert out.output.startswith("error: no group") or out.output.startswith("error: no face"), (args, out.output)


def test_the_search_hint_after_naming_is_shell_safe(people_index, tmp_path):
    """Issue 47, finding 11: a name with both quote kinds (and $, backticks) gives a hint a shell reads back as the
    filter for that name, and the filter finds that group's photos."""
    import shlex

    _folder, built, _report = people_index
    index = str(tmp_path / "index")
    shutil.copytree(built, index)
    runner = CliRunner()
    groups = json.loads(runner.invoke(app, ["people", "--index", index, "--json"]).stdout)["people"]
    name = """Jo "the Bear" O'Brien $HOME `id`"""
    named = runner.invoke(app, ["people", "name", str(groups[0]["id"]), name, "--index", index], env={"COLUMNS": "300"})
    assert named.exit_code == 0, named.output
    hint = named.stdout.split("search: ", 1)[1].strip()
    argv = shlex.split(hint)
    assert argv[:3] == ["imagent", "search", "--where"] and len(argv) == 4
    found = runner.invoke(app, ["search", "--where", argv[3], "--index", index, "--json"])
    assert found.exit_code == 0, found.output
    rows = json.loads(found.stdout)["results"]
    assert {r["id"] for r in rows} == {p["id"] for p in groups[0]["photos"]}
    assert all(r["people"][0]["name"] == name for r in rows)
