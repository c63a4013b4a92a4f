"""The layers import downward only: the kit knows no app, and the studies app knows none of the
apps built on it (they attach their parts from AppConfig.ready). Imports inside functions count
too: a lazy import is still a dependency."""

import ast
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from kit import audit

ROOT = Path(__file__).resolve().parents[2]
APPS_ABOVE = {
    "kit": {"evalstudy", "annotation", "metrics", "proxies", "analysis", "config"},
    "evalstudy": {"annotation", "metrics", "proxies", "analysis", "config"},
}


def _imported_packages(path: Path) -> set[tuple[int, str]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(node.lineno, alias.name.split(".")[0]) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.lineno, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("package", sorted(APPS_ABOVE))
def test_a_layer_imports_no_layer_above_it(package):
    upward = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / package).rglob("*.py")) if "migrations" not in path.parts
        for line, name in sorted(_imported_packages(path)) if name in APPS_ABOVE[package]
    ]
    assert not upward, upward


def test_the_audited_admin_refuses_to_run_without_a_recorder(monkeypatch):
    monkeypatch.setattr(audit, "_recorder", None)
    with pytest.raises(ImproperlyConfigured, match="recorder_register"):
        audit.record(actor=None, action=audit.CREATE, target=None, changes={},
                     source=audit.ADMIN)


def test_the_studies_app_registers_the_audit_trail_as_the_recorder():
    from evalstudy.audit import audit_record

    assert audit._recorder is audit_record
