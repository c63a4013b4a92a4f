"""Proxy methods are declared once: one module of proxies/methods/ per method, found by the
registry, and nothing else in the product names one (it asks the spec)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from evalstudy.criteria import all_kinds
from kit.params import Param
from proxies.methods import (
    LEARNED_KINDS,
    METHOD_CHOICES,
    METHODS,
    VERSIONED_METHOD_CHOICES,
    ProxyMethod,
    all_methods,
    learned_kind,
    learned_method,
    method_of,
)
from proxies.methods.base import CPU_QUEUE, GPU_QUEUE, LLM_QUEUE, LLM_RATER, METRIC_RATER
from tests.test_architecture import ROOT, source_files

METHODS_PACKAGE = Path("proxies/methods")


def method_literal_violations(root: Path, names: frozenset[str] = frozenset(METHODS)
                              ) -> list[str]:
    """Each string spelling a method's name outside that method's own module, as 'path:line:
    why' (product code: tests and migrations aside), and each quoted name in a template or
    script."""
    found = []
    for path in source_files(root):
        rel = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Constant) and node.value in names
                    and rel != METHODS_PACKAGE / f"{node.value}.py"):
                found.append(f"{rel}:{node.lineno}: names the proxy method {node.value!r}: "
                             "ask proxies.methods instead")
    for folder, suffix in (("templates", "*.html"), ("static", "*.js")):
        for path in sorted((root / folder).rglob(suffix)) if (root / folder).is_dir() else []:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for name in sorted(names):
                    if f'"{name}"' in line or f"'{name}'" in line:
                        found.append(f"{path.relative_to(root)}:{number}: names the proxy "
                                     f"method {name!r}: ask proxies.methods instead")
    return sorted(found)


def test_no_method_is_named_outside_its_own_module():
    assert method_literal_violations(ROOT) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_method_checker_finds_a_method_named_elsewhere(tmp_path):
    root = _tree(tmp_path, {
        "analysis/selectors.py": "if method == 'rubric':\n    pass\n",
        "proxies/services.py": "METHODS = ('latte', 'drpe')\n",
        "proxies/methods/rubric.py": "NAME = 'rubric'\n",
        "proxies/methods/latte.py": "OTHER = 'drpe'\n",
        "templates/proxies/run.html": '{% if run.method == "latte" %}x{% endif %}\n',
    })
    assert [line.split(": names")[0] for line in method_literal_violations(root)] == [
        "analysis/selectors.py:1", "proxies/methods/latte.py:1", "proxies/services.py:1",
        "proxies/services.py:1", "templates/proxies/run.html:1"]


def test_the_method_checker_lets_longer_names_pass(tmp_path):
    root = _tree(tmp_path, {"proxies/api.py": "URL = 'latte-scores'\nKIND = 'latte_soft_prompt'\n"
                                              "DOC = 'a rubric judge'\n"})
    assert method_literal_violations(root) == []


# --- each spec is complete ----------------------------------------------------------------------

@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
def test_each_method_spec_is_complete(method: ProxyMethod):
    module = inspect.getmodule(method.answer)
    assert module is not None and module.__name__ == f"proxies.methods.{method.name}", (
        "a method judges its batches in its own module")
    assert method_of(method.name) is method
    assert method.label and method.score
    assert method.rater in (LLM_RATER, METRIC_RATER)
    assert callable(method.answer) and inspect.isgeneratorfunction(method.answer)
    assert all(isinstance(param, Param) for param in method.params)
    answered = [kind.name for kind in all_kinds() if method.answers(kind)]
    assert answered, f"{method.name} answers no criterion kind"
    assert method.queue({}) in (LLM_QUEUE, CPU_QUEUE)
    assert method.queue({"backend": "hf"}, gpu=True) == GPU_QUEUE
    if method.versioned:
        assert method.fewshot is not None, "a versioned prompt needs its few-shot block"
        assert not method.learned
    if method.default_template:
        method.check_template(method.default_template)
    else:
        method.check_template("")
        with pytest.raises(ValueError):
            method.check_template("{output}")
    if method.thresholded:
        assert "threshold" in method.param_names
    for kind in all_kinds():
        if method.answers_level(kind):
            assert method.answers(kind) and not method.decides_at_threshold(kind)


def test_the_registry_lists_every_method_once_in_menu_order():
    assert METHODS == ("latte", "rubric", "drpe", "learned")
    assert [name for name, _label in METHOD_CHOICES] == list(METHODS)
    assert [name for name, _label in VERSIONED_METHOD_CHOICES] == ["latte", "rubric", "drpe"]
    assert learned_method().name == "learned"
    assert learned_method().rater == METRIC_RATER
    with pytest.raises(ValueError, match="is not one of latte, rubric, drpe, learned"):
        method_of("geval")


def test_the_kinds_each_method_answers_are_those_it_answered_before():
    answered = {m.name: sorted(k.name for k in all_kinds() if m.answers(k))
                for m in all_methods()}
    assert answered == {
        "latte": ["binary", "severity"],
        "rubric": ["binary", "categorical", "likert", "severity"],
        "drpe": ["pairwise"],
        "learned": ["binary", "pairwise", "severity"],
    }
    rubric = method_of("rubric")
    assert [k.name for k in all_kinds() if rubric.answers_level(k)] == ["severity"]


# --- the kinds of learned proxy, declared once -------------------------------------------------

LEARNED_KIND_HOMES = (Path("proxies/methods/learned_kinds.py"), Path("proxies/learned"))


def learned_kind_violations(root: Path) -> list[str]:
    """Each string spelling a learned proxy kind's name outside its declaration
    (proxies/methods/learned_kinds.py) and the Django-free package whose classes train the
    kinds (proxies/learned), as 'path:line: why' (tests and migrations aside)."""
    found = []
    for path in source_files(root):
        rel = path.relative_to(root)
        if any(rel == home or home in rel.parents for home in LEARNED_KIND_HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in LEARNED_KINDS:
                found.append(f"{rel}:{node.lineno}: names the learned proxy kind "
                             f"{node.value!r}: ask proxies.methods.learned_kind instead")
    return sorted(found)


def test_no_learned_kind_is_named_outside_its_declaration():
    assert learned_kind_violations(ROOT) == []


def test_the_learned_kind_checker_finds_a_kind_named_elsewhere(tmp_path):
    root = _tree(tmp_path, {
        "proxies/training/services.py": "if kind == 'cross_encoder':\n    pass\n",
        "proxies/methods/learned_kinds.py": "NAME = 'cross_encoder'\n",
        "proxies/learned/regression.py": "kind = 'wer_bertscore'\n",
    })
    assert learned_kind_violations(root) == [
        "proxies/training/services.py:1: names the learned proxy kind 'cross_encoder': ask "
        "proxies.methods.learned_kind instead"]


def test_each_learned_kind_has_its_trainer_and_the_same_reading():
    # The Django-free trainers and the declaration name the same kinds, and agree on which
    # are trained on pairs (the artefact manifests store these names).
    from proxies.learned import PAIRWISE_KINDS, PROXY_KINDS

    assert set(PROXY_KINDS) == set(LEARNED_KINDS)
    pairwise = {name for name, kind in LEARNED_KINDS.items() if kind.pairwise}
    assert pairwise == PAIRWISE_KINDS
    assert [name for name, kind in LEARNED_KINDS.items() if kind.fine_tuned] == [
        "cross_encoder"]
    with pytest.raises(ValueError, match="is not one of"):
        learned_kind("bert_large")
