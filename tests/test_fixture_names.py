"""Each fixture name is defined once under tests/, and none shadows a fixture of pytest or
pytest-django: a reader who meets `study` in a test finds one definition, the conftest.py of
the narrowest folder its users share. A test's own variant takes a name that says what
differs (`crossed`, `coded_study`, `boss_client`...)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if ast.unparse(target) not in ("pytest.fixture", "fixture"):
            continue
        for keyword in call.keywords if call else ():
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
        return node.name
    return None


def fixture_definitions(root: Path = TESTS) -> dict[str, list[str]]:
    """Fixture name -> the places ("path:line") that define it, over every module in root."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if "vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = _fixture_name(node)
                if name is not None:
                    found[name].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def _plugin_fixtures() -> set[str]:
    import _pytest.fixtures
    import pytest_django.fixtures

    return {name for name, value in vars(pytest_django.fixtures).items()
            if isinstance(value, _pytest.fixtures.FixtureFunctionDefinition)}


def test_no_fixture_name_is_defined_twice():
    twice = {name: places for name, places in fixture_definitions().items() if len(places) > 1}
    assert not twice, "defined more than once (share it in a conftest.py or rename the " \
        f"variant after what differs): {twice}"


def test_no_fixture_shadows_one_of_pytest_django():
    shadowing = {name: places for name, places in fixture_definitions().items()
                 if name in _plugin_fixtures()}
    assert not shadowing, f"shadows pytest-django's fixture of that name: {shadowing}"


def test_the_check_sees_a_second_definition(tmp_path):
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef study():\n    pass\n")
    (tmp_path / "test_b.py").write_text(
        "import pytest\n\n@pytest.fixture(name='study')\ndef other():\n    pass\n"
        "\n@pytest.fixture(scope='module')\ndef alone():\n    pass\n")
    found = fixture_definitions(tmp_path)
    assert len(found["study"]) == 2 and len(found["alone"]) == 1
    assert "admin_client" in _plugin_fixtures() and "live_server" in _plugin_fixtures()
