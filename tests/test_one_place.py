"""One place per concept, read from the code itself (beside tests/test_architecture.py).

- An answer kind is named only in its own module (evalstudy/criteria/kinds/): everywhere else
  the code asks the kind what it is, so a new kind is one new module.
- No module cycle other than an app's services and its tasks (a task imports its service
  lazily, and the service enqueues the task).
- No `_private` name crosses a module boundary: what another module needs is public, under a
  name that says what it is.
- The packages that stand for one concept (a facade) are imported through their `__init__`,
  which re-exports their public names.
- docs/dev/extending.md walks through real files: every path it names exists.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from pathlib import Path

import pytest

from evalstudy.criteria import KINDS
from tests.test_architecture import ROOT, _module_name, source_files
from tests.test_architecture import imports_of as _imports_of_uncached

# Each check reads every product file; parse each once per session (the tree does not change
# while the tests run).
imports_of = functools.cache(_imports_of_uncached)


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_parsed(path)))

KINDS_PACKAGE = Path("evalstudy/criteria/kinds")

# --- the debt ledger --------------------------------------------------------------------------
# While the tree moved to one place per concept, what was left was written down, one file per
# top-level folder (tests/one_place_debt/<folder>.txt), one line per finding without its line
# number: a finding not written down failed, and a line whose finding was gone failed too. The
# lists reached nothing and the folder is gone, so every finding now fails; a large move may
# bring the folder back for its duration, never to add a finding.
DEBT = Path(__file__).parent / "one_place_debt"


def _debt_key(check: str, finding: str) -> tuple[str, str]:
    path, _line, why = finding.split(":", 2)
    return path.split("/", 1)[0], f"{check} {path}:{why}"


def recorded_debt(check: str, debt: Path = DEBT) -> Counter[tuple[str, str]]:
    recorded: Counter[tuple[str, str]] = Counter()
    for file in sorted(debt.glob("*.txt")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.startswith(check + " "):
                recorded[(file.stem, line)] += 1
    return recorded


def debt_problems(check: str, findings: list[str], debt: Path = DEBT) -> list[str]:
    found = Counter(_debt_key(check, finding) for finding in findings)
    recorded = recorded_debt(check, debt)
    lines = {key: finding for finding in findings for key in [_debt_key(check, finding)]}
    new = [f"new: {lines[key]}" for key in sorted(found - recorded)]
    paid = [f"paid, delete from tests/one_place_debt/{folder}.txt: {line}"
            for folder, line in sorted(recorded - found)]
    return new + paid


def assert_no_new_debt(check: str, findings: list[str]) -> None:
    problems = debt_problems(check, findings)
    assert not problems, "\n".join(problems)


def _product_files(root: Path) -> list[Path]:
    return [path for path in source_files(root)
            if not path.relative_to(root).is_relative_to(KINDS_PACKAGE)]


# --- kind names ------------------------------------------------------------------------------

def _kind_constants(node: ast.AST, kinds: frozenset[str]) -> list[str]:
    """The kind names a literal spells: a string, or a tuple/list/set of strings all of which
    are kind names (a collection of design names that holds some kind names is another
    concept)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in kinds else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts:
        values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        if len(values) == len(node.elts) and all(v in kinds for v in values):
            return [str(v) for v in values]
    if isinstance(node, ast.IfExp):
        return _kind_constants(node.body, kinds) + _kind_constants(node.orelse, kinds)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("frozenset", "set",
                                                                          "tuple", "list"):
        return [name for arg in node.args for name in _kind_constants(arg, kinds)]
    return []


def _mentions_kind(source: str, node: ast.AST) -> bool:
    return "kind" in (ast.get_source_segment(source, node) or "").lower()


def kind_literal_violations(root: Path, kinds: frozenset[str] = frozenset(KINDS)) -> list[str]:
    """Each place outside the kinds package that names a kind, as 'path:line: why'."""
    found: list[str] = []
    for path in _product_files(root):
        source = path.read_text(encoding="utf-8")
        rel = path.relative_to(root)
        for node in _nodes(path):
            named: list[str] = []
            why = ""
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                for index, side in enumerate(sides):
                    others = sides[:index] + sides[index + 1:]
                    names = _kind_constants(side, kinds)
                    if names and any(_mentions_kind(source, other) for other in others):
                        named, why = names, "compared with a kind"
            elif isinstance(node, ast.keyword) and node.arg and (
                    node.arg == "kind" or node.arg.endswith(("__kind", "kind__in"))):
                named, why = _kind_constants(node.value, kinds), f"as {node.arg}="
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is not None and any("KIND" in (getattr(t, "id", "") or "")
                                                  for t in targets):
                    named = [n for sub in ast.walk(node.value)
                             for n in _kind_constants(sub, kinds)]
                    why = "in a list of kinds"
            elif isinstance(node, ast.Dict):
                keys = [n for key in node.keys if key is not None
                        for n in _kind_constants(key, kinds)]
                if len(keys) >= 2:
                    named, why = keys, "as keys of a table by kind"
            elif isinstance(node, ast.Tuple | ast.List | ast.Set):
                names = _kind_constants(node, kinds)
                if len(set(names)) >= 2:
                    named, why = names, "in a list of kinds"
            if named:
                found.append(f"{rel}:{node.lineno}: names the kind(s) "
                             f"{', '.join(sorted(set(named)))} ({why}): ask the kind instead")
    names = "|".join(re.escape(kind) for kind in sorted(kinds))
    pattern = re.compile(rf"""kind\S*\s*(?:==|!=|\bin\b)\s*["']({names})["']"""
                         rf"""|["']({names})["']\s*(?:==|!=)\s*\S*kind""")
    for folder, suffix in (("templates", "*.html"), ("static", "*.js")):
        for path in sorted((root / folder).rglob(suffix)) if (root / folder).is_dir() else []:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for match in pattern.finditer(line):
                    found.append(f"{path.relative_to(root)}:{number}: names the kind "
                                 f"{match.group(1) or match.group(2)}: ask the kind instead")
    return sorted(set(found))


def test_no_kind_is_named_outside_its_own_module():
    assert_no_new_debt("kind", kind_literal_violations(ROOT))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize("code", [
    "if criterion.kind == 'slider':\n    pass\n",
    "x = c['kind'] in ('binary', 'severity')\n",
    "x = frame['criterion_kind'] != 'span'\n",
    "qs = Criterion.objects.filter(kind__in=['binary', 'severity'])\n",
    "qs = Judgment.objects.filter(criterion__kind='pairwise')\n",
    "NOMINAL_KINDS = frozenset({'binary', 'categorical'})\n",
    "DEFAULTS = {'likert': 1, 'binary': 2}\n",
    "x = frame.isin(['ranking', 'best_worst'])\n",
])
def test_the_kind_checker_names_a_kind_switch(tmp_path, code):
    root = _tree(tmp_path, {"analysis/stats/x.py": code})
    assert kind_literal_violations(root, frozenset(KINDS)), code


@pytest.mark.parametrize("code", [
    "DESIGNS = ('latin_square', 'crossed', 'pairwise', 'ranking')\n",
    "if study.design == 'pairwise':\n    pass\n",
    "label = 'text'\nrow = {'text': 1, 'value': 2}\n",
    "if spec.shows == PAIR:\n    pass\n",
])
def test_the_kind_checker_lets_other_concepts_pass(tmp_path, code):
    root = _tree(tmp_path, {"analysis/stats/x.py": code})
    assert kind_literal_violations(root, frozenset(KINDS)) == [], code


def test_the_kind_checker_reads_templates_and_scripts(tmp_path):
    root = _tree(tmp_path, {
        "templates/a.html": '{% if q.criterion.kind == "slider" %}x{% endif %}\n',
        "static/js/a.js": 'if (kind === "x" || criterion.kind == "span") {}\n',
        "evalstudy/criteria/kinds/slider.py": "name = 'slider'\nif kind == 'slider':\n    pass\n",
    })
    assert [line.split(":")[0] for line in kind_literal_violations(root, frozenset(KINDS))] == [
        "static/js/a.js", "templates/a.html"]


# --- module cycles ---------------------------------------------------------------------------

def _type_only_lines(path: Path) -> set[int]:
    """The lines of `if TYPE_CHECKING:` blocks: imports there are for annotations only and run
    at no import, so a back-reference for a type (a kind's module naming the rule it reads)
    makes no cycle."""
    lines: set[int] = set()
    for node in _nodes(path):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def module_graph(root: Path) -> dict[str, set[str]]:
    files = source_files(root)
    names = {_module_name(path, root) for path in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        module = _module_name(path, root)
        type_only = _type_only_lines(path)
        for imp in imports_of(path, root):
            if imp.line in type_only:
                continue
            if imp.target in names and imp.target != module:
                graph.setdefault(module, set()).add(imp.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _services_and_tasks(component: list[str]) -> bool:
    """An app's services and its tasks: the one cycle allowed (tasks import their service
    lazily, the service enqueues its task)."""
    if len(component) != 2:
        return False
    _first, _second = component
    parent = {name.rsplit(".", 1)[0] for name in component}
    leaves = {name.rsplit(".", 1)[-1] for name in component}
    return len(parent) == 1 and leaves == {"services", "tasks"}


def cycle_violations(root: Path) -> list[str]:
    return [f"{component[0].replace('.', '/')}.py:0: is in a cycle: {' '.join(component)}"
            for component in cycles(module_graph(root)) if not _services_and_tasks(component)]


def test_no_module_cycle_other_than_services_and_tasks():
    assert_no_new_debt("cycle", cycle_violations(ROOT))


def test_the_cycle_checker_finds_a_cycle_through_a_lazy_import(tmp_path):
    root = _tree(tmp_path, {
        "proxies/a.py": "from .b import x\n",
        "proxies/b.py": "def f():\n    from .c import y\n",
        "proxies/c.py": "import proxies.a\n",
        "proxies/d.py": ("from typing import TYPE_CHECKING\n"
                         "if TYPE_CHECKING:\n    from .e import E\n"),
        "proxies/e.py": "from .d import x\n",
        "proxies/services.py": "from .tasks import t\n",
        "proxies/tasks.py": "def t():\n    from .services import s\n",
    })
    found = cycles(module_graph(root))
    assert found == [["proxies.a", "proxies.b", "proxies.c"], ["proxies.services",
                                                              "proxies.tasks"]]
    assert [c for c in found if not _services_and_tasks(c)] == [["proxies.a", "proxies.b",
                                                                 "proxies.c"]]


# --- private names ---------------------------------------------------------------------------

def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_import_violations(root: Path) -> list[str]:
    """Imports of another module's `_private` names, and `module._name` on an imported
    module."""
    files = source_files(root)
    names = {_module_name(path, root) for path in files}
    found = []
    for path in files:
        module = _module_name(path, root)
        rel = path.relative_to(root)
        aliases: set[str] = set()
        imports = imports_of(path, root)
        for imp in imports:
            base, _, leaf = imp.target.rpartition(".")
            if _private(leaf) and base in names and base != module:
                found.append(f"{rel}:{imp.line}: imports {imp.target}")
        for node in _nodes(path):
            if isinstance(node, ast.Import):
                aliases |= {a.asname or a.name.split(".")[0] for a in node.names
                            if a.name in names}
            elif isinstance(node, ast.ImportFrom):
                targets = {imp.target for imp in imports if imp.line == node.lineno}
                aliases |= {a.asname or a.name for a in node.names
                            if any(t.endswith("." + a.name) and t in names for t in targets)}
        for node in _nodes(path):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                found.append(f"{rel}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return sorted(set(found))


def test_no_private_name_crosses_a_module_boundary():
    assert_no_new_debt("private", private_import_violations(ROOT))


def test_the_private_name_checker_finds_imports_and_attributes(tmp_path):
    root = _tree(tmp_path, {
        "analysis/a.py": "def _helper():\n    pass\n",
        "analysis/b.py": "from .a import _helper\n",
        "analysis/c.py": "from analysis import a\nx = a._helper\n",
        "analysis/d.py": "from .a import __doc__\nimport analysis.a\n",
    })
    assert private_import_violations(root) == [
        "analysis/b.py:1: imports analysis.a._helper", "analysis/c.py:2: uses a._helper"]


def test_the_debt_list_refuses_a_new_finding_and_a_paid_one(tmp_path):
    (tmp_path / "analysis.txt").write_text(
        "kind analysis/a.py: names the kind(s) slider\n"
        "kind analysis/b.py: names the kind(s) slider\n", encoding="utf-8")
    findings = ["analysis/a.py:3: names the kind(s) slider",
                "annotation/c.py:9: names the kind(s) slider"]
    assert debt_problems("kind", findings, tmp_path) == [
        "new: annotation/c.py:9: names the kind(s) slider",
        "paid, delete from tests/one_place_debt/analysis.txt: kind analysis/b.py: names the "
        "kind(s) slider"]
    assert debt_problems("kind", findings[:1], tmp_path) == [
        "paid, delete from tests/one_place_debt/analysis.txt: kind analysis/b.py: names the "
        "kind(s) slider"]


# --- facades -----------------------------------------------------------------------------------
# A package that stands for one concept is imported through its __init__, which re-exports
# its public names (`__all__`): what lies in its modules can move without its users knowing.
FACADES = ("evalstudy.criteria", "evalstudy.criteria.kinds", "evalstudy.models",
           "analysis.stats.power", "proxies.methods", "proxies.runs", "proxies.training",
           "proxies.versions", "evalstudy.services", "analysis.stats.pipeline")


def _is_module(root: Path, dotted: str) -> bool:
    """Whether `dotted` is a module or package of the tree (not a name defined in one)."""
    path = root / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def facade_violations(root: Path, facades: tuple[str, ...] = FACADES) -> list[str]:
    found = []
    for facade in facades:
        init = root / facade.replace(".", "/") / "__init__.py"
        if not init.is_file():
            found.append(f"{facade}: no such package")
            continue
        tree = ast.parse(init.read_text(encoding="utf-8"))
        exported = [node for node in tree.body if isinstance(node, ast.Assign)
                    and any(getattr(t, "id", "") == "__all__" for t in node.targets)]
        if not exported:
            found.append(f"{facade}: its __init__ declares no __all__")
    for path in source_files(root):
        module = _module_name(path, root)
        for imp in imports_of(path, root):
            for facade in facades:
                inside = module == facade or module.startswith(facade + ".")
                # An app's tasks modules are imported by name for the workers' discovery.
                deeper = (imp.target.startswith(facade + ".") and _is_module(root, imp.target)
                          and not imp.target.endswith(".tasks"))
                nested = any(imp.target.startswith(other + ".") or imp.target == other
                             for other in facades if other.startswith(facade + "."))
                if deeper and not inside and not nested:
                    found.append(f"{path.relative_to(root)}:{imp.line}: imports {imp.target} "
                                 f"past the facade {facade}")
    return sorted(set(found))


def test_facades_are_imported_through_their_init_and_export_their_names():
    import importlib

    assert_no_new_debt("facade", facade_violations(ROOT))
    for facade in FACADES:
        package = importlib.import_module(facade)
        missing = [name for name in package.__all__ if not hasattr(package, name)]
        assert not missing, f"{facade}.__all__ names what it does not define: {missing}"


def test_the_facade_checker_finds_an_import_past_the_init(tmp_path):
    root = _tree(tmp_path, {
        "analysis/pipe/__init__.py": "from .steps import run\n__all__ = ['run']\n",
        "analysis/pipe/steps.py": "def run():\n    pass\n",
        "analysis/a.py": "from analysis.pipe import run\n",
        "analysis/b.py": "from analysis.pipe.steps import run\n",
        "annotation/c.py": "import annotation\n",
    })
    assert facade_violations(root, ("analysis.pipe",)) == [
        "analysis/b.py:1: imports analysis.pipe.steps past the facade analysis.pipe"]


# --- the extension guide -------------------------------------------------------------------
GUIDE = Path("docs/dev/extending.md")


def guide_paths(text: str) -> list[str]:
    """The repository paths the guide names in backticks (a slash, no spaces or commands)."""
    names = re.findall(r"`([^`\s]+)`", text)
    return sorted({name.rstrip("/") for name in names
                   if "/" in name and not name.startswith((".venv", "-", "http"))
                   and re.fullmatch(r"[\w./-]+", name)})


def test_the_extension_guide_names_only_files_that_exist():
    text = (ROOT / GUIDE).read_text(encoding="utf-8")
    paths = guide_paths(text)
    assert "evalstudy/criteria/kinds/base.py" in paths  # the reader works
    assert [path for path in paths if not (ROOT / path).exists()] == []
    for section in ("An answer kind", "A metric", "A proxy method", "An analysis section",
                    "A report block"):
        assert f"## {section}" in text


def test_the_guide_reader_finds_paths_and_skips_commands():
    text = ("Edit `analysis/extras/stopping.py` and `templates/x.html`, run `make test` and "
            "`.venv/bin/python manage.py check`; see `tests/`.")
    assert guide_paths(text) == ["analysis/extras/stopping.py", "templates/x.html", "tests"]
