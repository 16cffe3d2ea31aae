"""The package's layers import one way (docs/architecture.md, the README's map): core <- models, index <- tools
<- agents <- methods <- api <- library, eval <- cli, server. A module importing upwards would tie a low layer to an
interface and is refused here; nothing is allow-listed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "imagent"

# What each top-level part may import from the package (besides itself).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "models": {"core"},
    "index": {"core", "models"},
    "tools": {"core", "models", "index"},
    "agents": {"core", "models", "index", "tools"},
    "methods": {"core", "models", "index", "tools", "agents"},
    "api": {"core", "models", "index", "tools", "agents", "methods"},
    "library": {"core", "models", "index", "tools", "agents", "methods", "api"},
    "eval": {"__init__", "core", "models", "index", "tools", "agents", "methods", "api"},
    "server": {"core", "models", "index", "tools", "agents", "methods", "api", "library", "eval"},
    "cli": {"__init__", "core", "models", "index", "tools", "agents", "methods", "api", "library", "eval", "server"},
    "__init__": {"core"},
}


def imported_parts(path: Path) -> set[str]:
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            bits = name.split(".")
            if bits[0] == "imagent":
                parts.add(bits[1] if len(bits) > 1 else "__init__")
    return parts


def test_layers_import_one_way():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        part = rel.parts[0].removesuffix(".py")
        assert part in ALLOWED, f"{rel}: a new top-level part; give it a place in ALLOWED"
        for target in imported_parts(path) - {part} - ALLOWED[part]:
            wrong.append(f"{rel} imports imagent.{target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def documented_order(path: Path, after: str = "") -> list[list[str]]:
    """The layers as the first code block (after the line ``after``) of ``path`` draws them, lowest first: the
    package names that start its lines (``core      types ...``; ``cli, server (web UI): ...`` is one line, one
    level, whose parts the allow-list orders)."""
    text = path.read_text(encoding="utf-8")
    block = text[text.index(after):] if after else text
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    order: list[list[str]] = []
    for line in block.splitlines():
        m = re.match(r"([a-z_]+(?:, [a-z_]+)*)\b", line)
        parts = [p for p in m.group(1).split(", ") if p in ALLOWED] if m else []
        if parts:
            order.append(parts)
    return order


def test_the_documented_layer_order_is_the_tested_one():
    docs = documented_order(REPO / "docs" / "architecture.md")
    readme = documented_order(REPO / "README.md", after="## Architecture")
    assert docs == readme, f"docs/architecture.md draws {docs}, the README {readme}"
    level = {part: n for n, line in enumerate(docs) for part in line}
    assert set(level) == set(ALLOWED) - {"__init__"}, "every layer of the test is on the map, and only those"
    for part, allowed in ALLOWED.items():
        for target in allowed - {"__init__", part}:
            assert part == "__init__" or level[target] <= level[part], \
                f"{part} may import {target}, which the map draws above it"


# --------------------------------------------------------------------------- no import cycle, no long file

MAX_LINES = 700

# Known offenders being removed by their owners; this list only shrinks (never add to it).
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_LONG: set[str] = set()  # index/builder.py and index/gallery.py: split into sources / store / snapshots


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _import_graph(root: Path = SRC, package: str = "imagent") -> dict[str, set[str]]:
    """Module -> the modules of ``root`` it imports, counting every import statement (function-level ones and
    those under ``if TYPE_CHECKING:`` too). ``from a.b import c`` is an edge to ``a.b.c`` when that is a
    module, else to ``a.b``; relative imports are resolved. Names are relative to the package."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}

    def local(name: str) -> str | None:
        if name == package:
            return ""
        return name.removeprefix(package + ".") if name.startswith(package + ".") else None

    graph: dict[str, set[str]] = {}
    for me, path in files.items():
        here = me if path.name == "__init__.py" else me.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".") if here else []
                    mod: str | None = ".".join([*base[: len(base) - (node.level - 1)], *filter(None, [node.module])])
                else:
                    mod = local(node.module or "")
                if mod is None:
                    continue
                for alias in node.names:
                    sub = f"{mod}.{alias.name}" if mod else alias.name
                    targets.append(sub if sub in files else mod)
            elif isinstance(node, ast.Import):
                targets = [m for a in node.names if (m := local(a.name)) is not None]
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t in files and t != me:
                    edges.add(t)
        graph[me] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


def test_no_import_cycle_between_files():
    cycles = _cycles(_import_graph())
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "files importing each other (directly or through others):\n" + "\n".join(map(str, new))
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"a known cycle is gone: remove it from KNOWN_CYCLES: {gone}"


def test_the_cycle_finder_sees_function_level_and_type_checking_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    graph = _import_graph(pkg, "pkg")
    assert graph["a"] == {"sub.b"} and graph["sub.b"] == {"c"} and graph["c"] == {"a"} and graph["d"] == {"a"}
    assert _cycles(graph) == [frozenset({"a", "sub.b", "c"})]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_file_over_700_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    new = {k: v for k, v in long.items() if k not in KNOWN_LONG}
    assert not new, f"files over {MAX_LINES} lines (split them along their seams): {new}"
    gone = sorted(KNOWN_LONG - set(long))
    assert not gone, f"a known long file is short now: remove it from KNOWN_LONG: {gone}"


MAX_FUNCTION_LINES = 120
SHELLS: set[str] = set()  # none left: create_app and the eval and oscar commands were split with the library service


def functions_over(root: Path, limit: int = MAX_FUNCTION_LINES, skip: set[str] = frozenset()) -> list[str]:
    """``file:line name`` of each function under ``root`` (decorators included) longer than ``limit`` lines, files
    in the top folders ``skip`` left out."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (node.end_lineno or start) - start + 1 > limit:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


def test_no_function_over_120_lines():
    """Issue 44: no function in src/ is longer than 120 lines, the web server's and the CLI's included."""
    long = functions_over(SRC, skip=SHELLS)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {long}"


def test_the_function_length_check_counts_decorators_and_skips_the_named_folders(tmp_path):
    body = "@a\n@b\ndef f():\n    def g():\n" + "        x = 1\n" * 119 + "    return g\n"
    (tmp_path / "m.py").write_text(body)
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "c.py").write_text(body)
    assert functions_over(tmp_path, skip={"cli"}) == ["m.py:3 f"]


# --------------------------------------------------------------------------- agents/ stays generic


def imported_modules(path: Path, root: Path = SRC) -> set[str]:
    """The full names of the modules (and imported names) a file under ``root`` (the ``imagent`` package) imports,
    by any import statement; relative imports resolved."""
    out = set()
    package = ["imagent", *path.relative_to(root).parent.parts]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_agents_import_nothing_from_the_methods_nor_the_album_code():
    """``agents/`` is the generic runtime (state, tools, protocols, runtime, hooks API); the album tools, memories,
    skills, prompts and scaffold live in ``methods/album/`` (issue 38), and no agents module imports them or any
    other method code, at any level of a file."""
    assert "methods" not in ALLOWED["agents"]
    agents = sorted((SRC / "agents").rglob("*.py"))
    wrong = [f"{p.relative_to(SRC)} imports {m}" for p in agents for m in sorted(imported_modules(p))
             if m == "imagent.methods" or m.startswith("imagent.methods.")]
    assert not wrong, "agents/ must not import method code:\n" + "\n".join(wrong)
    assert (SRC / "methods" / "album" / "__init__.py").is_file()
    moved = {"album_tools.py", "memory.py", "skills.py"} & {p.name for p in agents}
    assert not moved, f"album code back in agents/: {sorted(moved)} (it belongs in methods/album/)"


def test_the_import_reader_sees_function_level_and_relative_imports(tmp_path):
    (tmp_path / "agents").mkdir()
    f = tmp_path / "agents" / "x.py"
    f.write_text("def g():\n    from imagent.methods.album import tools\nfrom ..methods import base\nimport json\n")
    names = imported_modules(f, tmp_path)
    assert {"imagent.methods.album.tools", "imagent.methods.base", "json"} <= names


# --------------------------------------------------------------------------- one index composition

# What only the composition (index/parts.py) makes: the encoders wrapped for a build, the per-photo stages with
# their models' loaders, the face model, the parts themselves and the Ray runner.
# (The embedding stage is also made by embedding.add_records, the records path of tests and benchmarks.)
COMPOSED = {"LazyEncoder", "PixelStage", "FaceStage", "FaceModel", "IndexParts", "StageContext", "RayRunner"}


def calls_of(path: Path, names: set[str], root: Path = SRC) -> list[tuple[str, int, str]]:
    """``(file, line, called name)`` of every call in ``path`` of a function or class named in ``names`` (a bare
    name or the last part of an attribute: ``faces.FaceModel(...)``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in names:
                out.append((str(path.relative_to(root)), node.lineno, name))
    return out


def test_only_the_composition_builds_index_parts_and_every_build_goes_through_it():
    """Issue 44: the parts of an index build are made in one place (index/parts.py: compose_index and
    IndexParts.of) and passed as one object; every interface indexes through Workspace.index, the one caller of
    build_index outside the index package; eval indexing (ensure_index) calls Workspace.index, never the builder."""
    made = [c for p in sorted(SRC.rglob("*.py")) for c in calls_of(p, COMPOSED)
            if p.relative_to(SRC).as_posix() != "index/parts.py"]
    assert not made, "index parts made outside index/parts.py:\n" + "\n".join(map(str, made))
    builds = [c for p in sorted(SRC.rglob("*.py")) if p.relative_to(SRC).parts[0] != "index"
              for c in calls_of(p, {"build_index"})]
    assert [(f, name) for f, _, name in builds] == [("api.py", "build_index")], builds
    api = ast.parse((SRC / "api.py").read_text(encoding="utf-8"))
    index_fn = next(n for n in ast.walk(api) if isinstance(n, ast.FunctionDef) and n.name == "index")
    assert calls_of_node(index_fn, {"build_index", "compose_index"}) == {"build_index", "compose_index"}
    indexing = SRC / "eval" / "indexing.py"
    assert not calls_of(indexing, {"build_index", "compose_index"})
    assert "imagent.index.builder" not in imported_modules(indexing)
    ensure = next(n for n in ast.walk(ast.parse(indexing.read_text(encoding="utf-8")))
                  if isinstance(n, ast.FunctionDef) and n.name == "ensure_index")
    assert "index" in calls_of_node(ensure, {"index"}), "ensure_index indexes through Workspace.index"


def calls_of_node(node: ast.AST, names: set[str]) -> set[str]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in names:
                found.add(name)
    return found


def test_the_composition_check_sees_a_part_made_elsewhere(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from imagent.models import faces\nm = faces.FaceModel(opts)\ne = LazyEncoder(load)\n")
    assert sorted(name for _, _, name in calls_of(f, COMPOSED, tmp_path)) == ["FaceModel", "LazyEncoder"]


def test_no_writes_into_an_objects_dict():
    """Lazy parts live in typed holders (Workspace.parts), never in ``obj.__dict__[...]`` or ``__dict__.setdefault``."""
    hits = [f"{p.relative_to(SRC)}:{n}" for p in sorted(SRC.rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"__dict__\s*(\[|\.setdefault|\.update|\.pop)", line)]
    assert not hits, hits


def test_the_agent_state_holds_no_method_type():
    """The run's state is generic (issue 44): every type its fields name is the runtime's own (defined in
    ``agents/state.py``), a builtin or typing name, or one imported from the layers below; a method's records
    (PhotoCraft's compressions, audits, skill) are the method's types, kept in ``state.records`` by type."""
    tree = ast.parse((SRC / "agents" / "state.py").read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                and (n.module or "").split(".")[0] in {"imagent", "typing", "collections", "datetime", "dataclasses"}
                and (n.module or "").split(".")[:2] != ["imagent", "methods"] for a in n.names}
    aliases = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    builtins_ = {"str", "int", "float", "bool", "dict", "list", "set", "tuple", "None", "type", "object"}
    state = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AgentState")
    named = {x.id for f in state.body if isinstance(f, ast.AnnAssign) for x in ast.walk(f.annotation)
             if isinstance(x, ast.Name)}
    foreign = named - defined - imported - aliases - builtins_
    assert not foreign, f"AgentState names types that are not the runtime's: {sorted(foreign)}"
    assert not {"Compression", "Audit", "SkillUse"} & defined, "the album memories' records belong to methods/album"
    assert "records" in {f.target.id for f in state.body if isinstance(f, ast.AnnAssign)
                         and isinstance(f.target, ast.Name)}
