"""No prompt of an album method knows the test (issue 38 item 4, decision 10): no prompt file, prompt constant,
worked example or tool description of the album methods shares a run of five words (lower-cased, stop words
removed) with a query of a shipped or generated evaluation album.

Prompts: every ``.txt`` under ``src/imagent/methods/album/prompts/`` (PhotoCraft's, ImageSeeker's, the scaffold's,
the ``album`` planner's), every string literal of ``src/imagent/methods/album/**/*.py`` and of the generic agent
runtime (``src/imagent/agents/*.py``: the protocol's prompts the album agents read) except docstrings. Queries: the
shipped mini album's ``queries.jsonl`` and the phrasing templates of the held-out album generator
(``benchmarks/holdout_album.py``), read from its module-level constant :data:`HOLDOUT_TEMPLATES` (a placeholder,
``{kind}`` or ``<kind>``, matches one to three words)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "imagent"
ALBUM_PROMPTS = SRC / "methods" / "album" / "prompts"
ALBUM_CODE = [*sorted((SRC / "methods" / "album").rglob("*.py")), *sorted((SRC / "agents").rglob("*.py"))]
MINI_QUERIES = Path(str(files("imagent.eval") / "data" / "album_mini" / "queries.jsonl"))
HOLDOUT = REPO / "benchmarks" / "holdout_album.py"
# The module-level constant of benchmarks/holdout_album.py holding its query phrasing templates (strings, or lists /
# dicts of them, placeholders in {} or <>). Until the generator exposes it, the templates are read from the f-strings
# it writes its queries with (the "query" entries of its dicts).
HOLDOUT_TEMPLATES = "PHRASINGS"
RUN = 5

# NLTK's English stop words (179), written out: the test needs no corpus download.
_STOP_TEXT = """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that that'll
these those am is are was were be been being have has had having do does did doing a an the and but if or because as
until while of at by for with about against between into through during before after above below to from up down in
out on off over under again further then once here there when where why how all any both each few more most other some
such no nor not only own same so than too very s t can will just don don't should should've now d ll m o re ve y ain
aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn
mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
WILD = "\0"  # a template's placeholder
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|\0")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}|<[^<>]*>")


def words(text: str) -> list[str]:
    """Lower-cased words without stop words; a template's placeholder stays as :data:`WILD`."""
    return [w for w in _WORD.findall(_PLACEHOLDER.sub(f" {WILD} ", text).lower()) if w not in STOP_WORDS]


# --------------------------------------------------------------------------- what the album methods say


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def code_strings(path: Path) -> Iterator[str]:
    """The string literals of a module (f-strings with their fields as placeholders), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    parts_of_fstrings = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip | parts_of_fstrings:
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else " {x} " for v in node.values)


def album_prompts() -> dict[str, str]:
    """Every prompt text an album method shows a model, by where it comes from."""
    out = {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in sorted(ALBUM_PROMPTS.rglob("*.txt"))}
    for path in ALBUM_CODE:
        for n, text in enumerate(code_strings(path)):
            out[f"{path.relative_to(REPO)} (string {n})"] = text
    return out


# --------------------------------------------------------------------------- the evaluation queries


def mini_queries() -> list[str]:
    return [json.loads(line)["query"] for line in MINI_QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]


def _flatten(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _flatten(v)


def holdout_templates(path: Path = HOLDOUT, name: str = HOLDOUT_TEMPLATES) -> list[str]:
    """The generator's phrasing templates: its constant ``name``, else the f-strings of its ``"query"`` entries."""
    spec = importlib.util.spec_from_file_location("holdout_album_templates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    if hasattr(module, name):
        return list(_flatten(getattr(module, name)))
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "query" and isinstance(value, ast.JoinedStr):
                    out.append("".join(v.value if isinstance(v, ast.Constant) else "{x}" for v in value.values))
    return out


# --------------------------------------------------------------------------- the overlap


def _pattern(tokens: list[str]) -> str:
    return " ".join(r"\S+(?: \S+){0,2}" if t == WILD else re.escape(t) for t in tokens)


def query_matcher(query: str) -> re.Pattern[str]:
    """A regex that fully matches a run of :data:`RUN` prompt words found in ``query``: any contiguous part of the
    query's words (a placeholder standing for one to three words) with at least three words of its own."""
    tokens = words(query)
    alts = []
    for i in range(len(tokens)):
        for j in range(i + 1, len(tokens) + 1):
            part = tokens[i:j]
            literal = sum(t != WILD for t in part)
            if literal >= 3 and literal <= RUN <= literal + 3 * (len(part) - literal):
                alts.append(_pattern(part))
    return re.compile("|".join(f"(?:{a})" for a in alts) or r"(?!)")


def overlaps(prompts: dict[str, str], queries: list[str]) -> list[str]:
    """``source: "run" ~ query`` for each prompt run of :data:`RUN` words one of ``queries`` holds."""
    matchers = [(q, query_matcher(q)) for q in queries]
    found = []
    for source, text in prompts.items():
        ws = words(text)
        for i in range(len(ws) - RUN + 1):
            window = " ".join(ws[i: i + RUN])
            found += [f"{source}: {window!r} ~ {q!r}" for q, m in matchers if m.fullmatch(window)]
    return found


def test_no_album_prompt_shares_a_five_word_run_with_an_evaluation_query():
    queries = mini_queries() + holdout_templates()
    found = overlaps(album_prompts(), queries)
    assert not found, ("album prompts that paraphrase evaluation queries (write examples with objects, places and "
                       "relations no evaluation query uses):\n" + "\n".join(found[:30]))


def test_the_check_reads_the_album_prompts_and_both_query_sources():
    prompts = album_prompts()
    assert any(k.endswith("photocraft/system.txt") for k in prompts)
    assert any(k.endswith("scaffold/split.txt") for k in prompts)
    assert any(k.endswith("imageseeker/system.txt") for k in prompts)
    texts = "\n".join(prompts.values())
    assert "Search the photo album with SHORT keywords" in texts  # a tool description
    assert "Every kite shot with the camera that took the red tractor." in texts  # the worked example
    assert "Not narrowed yet." in texts  # the scaffold's messages
    assert not (SRC / "methods" / "prompts" / "photocraft").exists()  # every album prompt lives under album/
    assert len(mini_queries()) == 22
    templates = holdout_templates()
    assert len(templates) >= 3 and all(_PLACEHOLDER.search(t) for t in templates)


def test_the_check_catches_a_paraphrase_and_passes_other_text():
    queries = mini_queries() + holdout_templates()
    templated = {"worked example": "Which kites did I take pictures of on the same day as the red tractor?"}
    assert overlaps(templated, queries)  # a generator template (PHRASINGS), other nouns: caught
    copied = {"split prompt": 'e.g. "The birds I photographed on the day I saw the pink flamingo." -> ...'}
    assert overlaps(copied, queries)  # q01 itself
    stop_words_only_differ = {"p": "birds, photographed: the day, and then saw a pink flamingo"}
    assert overlaps(stop_words_only_differ, queries)
    assert not overlaps({"p": "Every kite shot with the camera that took the red tractor."}, queries)
    assert not overlaps({"p": "photographed day saw"}, queries)  # fewer than five words
    assert holdout_templates(HOLDOUT, "NO_SUCH_CONSTANT") == holdout_templates(HOLDOUT, "NO_SUCH_CONSTANT_EITHER")
