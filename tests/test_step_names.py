"""The trace is the explanation, not an interface: no source outside the trace module (``core/trace.py``)
compares or parses a trace step's name. Code that needs something from a run reads typed records
(``Result.counts``, ``Result.warnings``, typed agent events) instead.

The check reads every module of ``src/imagent`` (the AST, not the text): a *step name* is ``x.name``, ``x["name"]``
or ``x.get("name")`` where ``x`` is a step (a loop or comprehension variable over something's ``steps``, or an
item of it: ``trace.steps[-1]``), and any variable assigned from one, within one function. OSCAR's plan steps
(``plan.steps``: the set operations its planner wrote, named by the model) are the plan's data, not trace steps.
A step name may be shown (formatted,
escaped, printed) and passed to functions of the trace module; it may not be compared (``==``, ``in``...), have a
method called on it (``startswith``, ``split``...), be sliced, or go to ``re``."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "imagent"
TRACE_MODULE = "core/trace.py"
# The web page's scripts render the same trace: a step's name compared, matched or split there.
JS_STEP_NAME = re.compile(r"\b(?:step|s|p)\.name\s*(?:===?|!==?|\.(?:startsWith|endsWith|match|split|slice|includes)\b)"
                          r"|\.test\(\s*(?:step|s|p)\.name\b")

# TEMPORARY: removed by the album-agents branch (issue 38 restructures these files and removes their step-name
# reads); the lead empties this set when merging. Never add to it.
NOT_YET: set[str] = set()  # every file reads typed records now; this list only shrinks

REGEX_FUNCTIONS = {"match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer"}


def _is_steps(node: ast.AST) -> bool:
    """``<x>.steps``, ``<x>["steps"]``, ``<x>.get("steps", ...)`` (maybe inside ``list()``/``or []``), or a bare
    variable named ``steps``."""
    if isinstance(node, ast.Name):
        return node.id == "steps"
    if isinstance(node, ast.Attribute):
        return node.attr == "steps" and "plan" not in ast.unparse(node.value).lower()
    if isinstance(node, ast.Subscript):
        return (isinstance(node.slice, ast.Constant) and node.slice.value == "steps") or _is_steps(node.value)
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and node.args and isinstance(node.args[0], ast.Constant):
            return node.args[0].value == "steps"
        if isinstance(f, ast.Name) and f.id in {"list", "reversed", "enumerate", "sorted", "iter"} and node.args:
            return _is_steps(node.args[0])
    if isinstance(node, ast.BoolOp):
        return any(_is_steps(v) for v in node.values)
    return False


class _Reads(ast.NodeVisitor):
    """Finds the step-name reads of one module that are compared or parsed."""

    def __init__(self) -> None:
        self.steps: set[str] = set()  # variables holding a step
        self.names: set[str] = set()  # variables holding a step's name
        self.found: list[tuple[int, str]] = []

    # -- what is a step, what is a step's name
    def _bind_steps(self, target: ast.AST, iterable: ast.AST) -> None:
        if not _is_steps(iterable):
            return
        if isinstance(target, ast.Name):
            self.steps.add(target.id)
        elif isinstance(target, ast.Tuple):  # enumerate(steps): the step is the last name
            last = target.elts[-1]
            if isinstance(last, ast.Name):
                self.steps.add(last.id)

    def _is_step(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.steps
        return isinstance(node, ast.Subscript) and _is_steps(node.value) and not (
            isinstance(node.slice, ast.Constant) and node.slice.value == "steps")

    def is_name(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute) and node.attr == "name":
            return self._is_step(node.value)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "name":
            return self._is_step(node.value)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and node.args and \
                    isinstance(node.args[0], ast.Constant) and node.args[0].value == "name":
                return self._is_step(f.value)
            if isinstance(f, ast.Name) and f.id == "str" and node.args:  # str(step["name"]) is the name still
                return self.is_name(node.args[0])
        if isinstance(node, ast.BoolOp):
            return any(self.is_name(v) for v in node.values)
        return False

    # -- bindings (per function: a name bound to a step in one function is not one in another)
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = self.steps, self.names
        self.steps, self.names = set(), {a.arg for a in node.args.args if a.arg == "step_name"}
        self.generic_visit(node)
        self.steps, self.names = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_For(self, node: ast.For) -> None:
        self._bind_steps(node.target, node.iter)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._bind_steps(node.target, node.iter)
        self.generic_visit(node)

    def _comprehension(self, node: ast.AST) -> None:
        for gen in node.generators:  # type: ignore[attr-defined]
            self._bind_steps(gen.target, gen.iter)
        self.generic_visit(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                if self.is_name(node.value):
                    self.names.add(target.id)
                elif self._is_step(node.value):
                    self.steps.add(target.id)
        self.generic_visit(node)

    # -- uses
    def _flag(self, node: ast.AST, how: str) -> None:
        self.found.append((node.lineno, f"{how}: {ast.unparse(node)[:120]}"))

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(self.is_name(x) for x in [node.left, *node.comparators]):
            self._flag(node, "compares a step name")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and self.is_name(f.value):
            self._flag(node, f"parses a step name (.{f.attr})")
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "re" \
                and f.attr in REGEX_FUNCTIONS and any(self.is_name(a) for a in node.args):
            self._flag(node, "parses a step name (re)")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.is_name(node.value):
            self._flag(node, "slices a step name")
        self.generic_visit(node)

    def visit_Match(self, node: ast.Match) -> None:
        if self.is_name(node.subject):
            self._flag(node, "matches on a step name")
        self.generic_visit(node)


def step_name_reads(source: str) -> list[tuple[int, str]]:
    reads = _Reads()
    reads.visit(ast.parse(source))
    return sorted(reads.found)


def test_no_source_outside_the_trace_module_compares_or_parses_step_names():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == TRACE_MODULE or any(fnmatch(rel, pattern) for pattern in NOT_YET):
            continue
        found += [f"{rel}:{line}: {what}" for line, what in step_name_reads(path.read_text(encoding="utf-8"))]
    assert not found, ("trace step names read as data (read a typed field instead: Result.counts, Result.warnings, "
                       "typed agent events; or a function of core/trace.py):\n" + "\n".join(found))


def test_the_check_sees_each_way_of_reading_a_step_name():
    flagged = [
        "for step in trace.steps:\n    if step.name.startswith('turn.'):\n        pass",
        "n = sum(1 for s in rec.steps if str(s.get('name', '')).startswith('turn'))",
        "w = {n for s in r.steps if s.get('name') == 'checks' for n in s['notes']}",
        "for i, s in enumerate(t.get('steps', [])):\n    name = s['name']\n    head, _, rest = name.partition('.')",
        "last = trace.steps[-1]\nok = last.name in ('memory.audit', 'memory.skill')",
        "import re\nfor st in result.trace.steps:\n    m = re.match(r'turn\\.(\\d+)', st.name)",
        "steps = trace['steps']\nfirst = steps[0]['name'][:4]",
        "def stage_of(step_name):\n    return re.sub(r'\\.\\d+', '', step_name)",
    ]
    for code in flagged:
        assert step_name_reads(code), code
    shown = [
        "for step in t.steps:\n    label = f'[cyan]{escape(step.name)}[/] {step.seconds:.2f} s'",
        "rows = [{'step': s['name'], 'seconds': s['seconds']} for s in rec.steps]",
        "for step in rec.steps:\n    acc.setdefault(stage_of(step['name']), []).append(step['seconds'])",
        "if tool.name == 'ImageSearch':\n    pass",  # a tool's name is not a step's
        "final = next(s for s in plan.steps if s.name == 'final')",  # OSCAR's plan steps are the plan's data
        "def f(t):\n    for s in t.steps:\n        pass\ndef g(raw):\n    for s in raw:\n        s.get('name').strip()",
        "turns = result.counts.get('turns', 0)",
    ]
    for code in shown:
        assert not step_name_reads(code), code


def test_the_web_pages_scripts_tell_steps_apart_by_their_outputs():
    found = [f"{js.relative_to(SRC)}:{n}: {line.strip()}" for js in sorted(SRC.rglob("*.js"))
             for n, line in enumerate(js.read_text(encoding="utf-8").splitlines(), 1) if JS_STEP_NAME.search(line)]
    assert not found, "step names read as data in the page's scripts:\n" + "\n".join(found)
    assert JS_STEP_NAME.search("if (/^turn\\.\\d+$/.test(step.name)) {")
    assert JS_STEP_NAME.search('if (step.name.startsWith("turn.")) {')
    assert not JS_STEP_NAME.search('el("span", { text: step.name })')
