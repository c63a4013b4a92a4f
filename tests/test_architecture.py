"""The import directions of docs/architecture.md, read from the code itself.

Every import statement of the project's packages (module-level and the lazy ones inside
functions, `importlib.import_module("...")` with a literal name too) is read with `ast`; an
import that runs up the layers, a Django import in a Django-free core, or a core that reaches
into a Django layer fails here with the file, line and the rule it breaks.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first: a package may import itself and the packages before it, never one after it.
LAYERS = ("kit", "evalstudy", "annotation", "prolific", "metrics", "proxies", "analysis",
          "config")

# Django-free cores: plain data in, plain data out, unit-testable without a database. They
# import no Django (nor DRF, nor Celery) and no module of an app outside the cores.
CORES = (
    "kit.jsonable",
    "kit.estimate",
    "kit.params",
    "evalstudy.design",
    "evalstudy.criteria",
    "evalstudy.media_probe",
    "evalstudy.media_fetch",
    "evalstudy.spec",
    "evalstudy.blindness",
    "annotation.quality",
    "annotation.preferences",
    "annotation.integrity",
    "annotation.drift",
    "annotation.answer_checks",
    "prolific.client",
    "metrics.scorers",
    "proxies.judges",
    "proxies.learned",
    "proxies.methods",
    "proxies.quality",
    "analysis.stats",
)
FRAMEWORKS = ("django", "rest_framework", "celery", "drf_spectacular")

# No module of the apps grows past this: a longer one holds more than one idea.
MAX_MODULE_LINES = 1000


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted and absolute
    path: Path
    line: int


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import in one file: statements anywhere in it, and import_module("literal")."""
    module = _module_name(path, root)
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, path, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            # `from pkg import sub` may name a submodule: keep both readings.
            found.append(Import(module, target, path, node.lineno))
            found += [Import(module, f"{target}.{alias.name}", path, node.lineno)
                      for alias in node.names if alias.name != "*"]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr",
                                                     getattr(node.func, "id", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append(Import(module, node.args[0].value, path, node.lineno))
    return found


def source_files(root: Path, packages=LAYERS) -> list[Path]:
    files = []
    for package in packages:
        if (root / package).is_dir():
            files += [p for p in sorted((root / package).rglob("*.py"))
                      if "migrations" not in p.parts]
    return files


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _core_of(name: str) -> str | None:
    return next((core for core in CORES if _within(name, core)), None)


def violations(root: Path) -> list[str]:
    """Each broken rule as 'path:line: module imports target (why)'."""
    found, seen = [], set()
    for path in source_files(root):
        for imp in imports_of(path, root):
            # `from a.b import c` is read as a.b and a.b.c: one report per statement and rule.
            if (imp.path, imp.line, imp.target.rsplit(".", 1)[0]) in seen:
                continue
            where = f"{imp.path.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target}"
            layer, target_layer = imp.module.split(".")[0], imp.target.split(".")[0]
            if target_layer in LAYERS and LAYERS.index(target_layer) > LAYERS.index(layer):
                found.append(f"{where} (upward: {layer} sits below {target_layer})")
            if _core_of(imp.module):
                if target_layer in FRAMEWORKS:
                    found.append(f"{where} (a Django-free core imports {target_layer})")
                elif target_layer in LAYERS and not (
                        _core_of(imp.target) or imp.target in {"kit", *LAYERS}):
                    found.append(f"{where} (a Django-free core reaches into a Django layer)")
            if found and found[-1].startswith(where):
                seen.add((imp.path, imp.line, imp.target))
    return sorted(set(found))


def test_no_import_runs_up_the_layers_or_out_of_a_core():
    assert violations(ROOT) == []


def test_no_module_of_the_apps_is_longer_than_the_limit():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in source_files(ROOT)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_every_layer_and_core_named_here_exists_and_is_described_in_the_docs():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name in [*LAYERS, *CORES]:
        path = ROOT / name.replace(".", "/")
        assert path.is_dir() or path.with_suffix(".py").is_file(), name
        assert f"`{name}" in doc, f"docs/architecture.md does not name {name}"


# The Django apps mypy checks as a whole (with django-stubs), beside the cores; the rest of the
# Django layer is not type-checked yet. docs/architecture.md names the same apps.
TYPED_DJANGO_LAYERS = ("kit", "evalstudy", "prolific", "annotation", "analysis",
                       "metrics", "proxies")


def test_mypy_checks_every_django_free_core_and_the_listed_django_layers():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    files = config["tool"]["mypy"]["files"]
    checked = {path.removesuffix(".py").replace("/", ".") for path in files}
    assert checked == set(TYPED_DJANGO_LAYERS) | {
        core for core in CORES
        if not any(_within(core, layer) for layer in TYPED_DJANGO_LAYERS)}
    assert all(any(_within(core, entry) for entry in checked) for core in CORES)
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    sentence = doc.split("mypy checks these Django apps as a whole:", 1)[1].split(".\n", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", sentence)) == sorted(TYPED_DJANGO_LAYERS)


# --- the checker itself catches what it is there to catch -----------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize("files, expected", [
    ({"evalstudy/admin.py": "from analysis.services import analysis_run_start\n"},
     "evalstudy/admin.py:1: evalstudy.admin imports analysis.services (upward"),
    ({"evalstudy/privacy.py": "def f():\n    from annotation.models import Judgment\n"},
     "evalstudy/privacy.py:2: evalstudy.privacy imports annotation.models (upward"),
    ({"kit/rest.py": "import importlib\nimportlib.import_module('evalstudy.models')\n"},
     "kit/rest.py:2: kit.rest imports evalstudy.models (upward"),
    ({"metrics/scorers/text.py": "from django.conf import settings\n"},
     "metrics/scorers/text.py:1: metrics.scorers.text imports django.conf (a Django-free core"),
    ({"analysis/stats/pipeline.py": "from ..selectors import judgments_tidy\n"},
     "analysis/stats/pipeline.py:1: analysis.stats.pipeline imports analysis.selectors "
     "(a Django-free core reaches"),
    ({"proxies/quality.py": "from metrics.models import MetricRun\n"},
     "proxies/quality.py:1: proxies.quality imports metrics.models (a Django-free core"),
])
def test_the_checker_names_an_upward_or_framework_import(tmp_path, files, expected):
    found = violations(_tree(tmp_path, files))
    assert any(line.startswith(expected) for line in found), found


def test_the_checker_lets_downward_and_core_to_core_imports_pass(tmp_path):
    root = _tree(tmp_path, {
        "analysis/selectors.py": "from proxies.models import ProxyRun\nfrom evalstudy import x\n",
        "analysis/stats/validity.py": "from proxies.quality import auc_with_ci\n",
        "proxies/services.py": "from . import tasks\nfrom metrics.scorers.encoder import y\n",
        "evalstudy/design/builders.py": "from ..criteria import binary_label\n",
    })
    assert violations(root) == []


# --- the audit trail: services record it, interfaces only call them ---------------------------
# A module that answers requests or runs a command (by what it imports) is an interface.
INTERFACE_IMPORTS = ("django.http", "django.shortcuts", "rest_framework.views",
                     "rest_framework.response", "django.contrib.admin",
                     "django.core.management.base")
# Writers of the trail an interface must not call itself.
TRAIL_WRITERS = ("evalstudy.audit.audit_record", "kit.audit.record")
# The audited admin base records the admin's generic row edits (no service stands behind a
# ModelAdmin form): the one place outside the services that writes the trail.
TRAIL_WRITER_EXCEPTIONS = ("kit.admin",)


def _is_interface(path: Path, root: Path) -> bool:
    if _module_name(path, root).split(".")[0] == "kit":
        return False
    return any(_within(imp.target, name) for imp in imports_of(path, root)
               for name in INTERFACE_IMPORTS)


def _is_command(path: Path) -> bool:
    return "commands" in path.parts and "management" in path.parts


def audited_services(root: Path) -> set[str]:
    """Functions outside the interfaces that take keyword-only `actor` and `source`: the
    services that record their own audit event."""
    names = set()
    for path in source_files(root):
        if _is_interface(path, root):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                keywords = {arg.arg for arg in node.args.kwonlyargs}
                if {"actor", "source"} <= keywords:
                    names.add(node.name)
    return names


def audit_violations(root: Path) -> list[str]:
    """Interfaces that write the trail themselves, or call an audited service without saying
    who acts (`actor`; a command has no user) and through which interface (`source`)."""
    services = audited_services(root)
    found = []
    for path in source_files(root):
        module = _module_name(path, root)
        if not _is_interface(path, root) or module in TRAIL_WRITER_EXCEPTIONS:
            continue
        rel = path.relative_to(root)
        for imp in imports_of(path, root):
            if imp.target in TRAIL_WRITERS:
                found.append(f"{rel}:{imp.line}: imports {imp.target} (an interface writes the "
                             "trail itself; call an audited service)")
        needed = {"source"} if _is_command(path) else {"actor", "source"}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in services:
                given = {keyword.arg for keyword in node.keywords}
                if None in given:  # **kwargs: cannot tell
                    continue
                missing = sorted(needed - given)
                if missing:
                    found.append(f"{rel}:{node.lineno}: calls {name} without "
                                 f"{', '.join(missing)}")
    return sorted(found)


def test_interfaces_leave_the_audit_trail_to_the_services():
    assert audit_violations(ROOT) == []


def test_the_services_that_start_runs_change_studies_import_and_export_are_audited():
    # A new write service without `actor` and `source` would leave interfaces nothing to pass.
    expected = {
        "study_create", "study_update", "study_open", "study_close", "study_build_assignments",
        "system_create", "criterion_create", "collaborator_set", "collaborator_remove",
        "rater_invite", "rater_data_export", "rater_data_erase", "study_import_spec",
        "study_spec_export", "items_import", "outputs_import", "design_export",
        "judgments_import", "progress_export", "metric_run_start", "metrics_export",
        "proxy_run_start", "proxy_run_resume", "proxy_threshold_choose", "learned_proxy_start",
        "analysis_run_start", "report_export", "judgments_export",
    }
    assert expected <= audited_services(ROOT), sorted(expected - audited_services(ROOT))


@pytest.mark.parametrize("files, expected", [
    ({"metrics/api.py": "from rest_framework.views import APIView\n"
                        "from evalstudy.audit import audit_record\n"},
     "metrics/api.py:2: imports evalstudy.audit.audit_record"),
    ({"metrics/services.py": "def metric_run_start(*, study, actor=None, source=''): ...\n",
      "metrics/views.py": "from django.http import HttpResponse\n"
                          "def start(request):\n"
                          "    metric_run_start(study=1, source='web')\n"},
     "metrics/views.py:3: calls metric_run_start without actor"),
    ({"metrics/services.py": "def metric_run_start(*, study, actor=None, source=''): ...\n",
      "metrics/management/commands/go.py": "from django.core.management.base import BaseCommand\n"
                                           "metric_run_start(study=1)\n"},
     "metrics/management/commands/go.py:2: calls metric_run_start without source"),
])
def test_the_audit_checker_names_an_interface_that_bypasses_the_services(tmp_path, files,
                                                                         expected):
    found = audit_violations(_tree(tmp_path, files))
    assert any(line.startswith(expected) for line in found), found
