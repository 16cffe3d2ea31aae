"""``imagent search`` without ``--method``: the method is chosen for the query and the index by the same rule as
the web UI's search box (:func:`imagent.api.route_method`), said on stderr; an album-style query without the album
method is answered by content search and labelled a fallback (never silent); ``--ref`` keeps the clip baseline;
``--set key=value`` goes to the chosen method."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from imagent.cli.main import app
from imagent.methods.base import METHODS


@pytest.fixture
def run(stamps_gallery):
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, ["search", *args, "--index", str(stamps_gallery.root), "--no-server"])

    return invoke


@pytest.mark.real_model
def test_the_method_is_chosen_for_the_query(run, monkeypatch):
    monkeypatch.delitem(METHODS, "album", raising=False)
    out = run("a penguin", "--json", "-k", "3")
    assert out.exit_code == 0, out.output
    assert "method: caption (627 of 627 photos have captions: searched by caption" in out.stderr
    payload = json.loads(out.stdout)
    assert payload["trace"]["method"] == "caption" and payload["source"] == "method"
    assert "penguin" in payload["results"][0]["caption"].lower()

    album_style = run("the birds from the day I saw the penguin", "--json", "-k", "3")
    assert album_style.exit_code == 0, album_style.output
    assert "the 'album' method is not installed" in album_style.stderr
    payload = json.loads(album_style.stdout)
    assert payload["source"] == "fallback:content_search" and "not installed" in payload["source_reason"]

    # a reference: the clip baseline fuses it, as before; a bare --set key goes to the chosen method
    ref = json.loads(out.stdout)["results"][0]["id"]
    cir = run("but in red", "--ref", ref, "--json", "--set", "text_weight=0.7")
    assert cir.exit_code == 0, cir.output
    assert json.loads(cir.stdout)["trace"]["steps"][0]["outputs"]["fused_with_reference"] == ref
    bad = run("a penguin", "--set", "text_weight=0.7")
    assert bad.exit_code == 2 and "methods.caption.text_weight: unknown key" in bad.output
    named = run("a penguin", "--method", "clip", "--json", "-k", "1")
    assert named.exit_code == 0 and "method:" not in named.stderr
    assert json.loads(named.stdout)["trace"]["method"] == "clip"
