"""The study file reader and the opening checks ask the kind what it allows (issue 28): one
criterion of it per study, a design of one output at a time, an expected answer on practice
items. Give another kind span's answers and the same sentences name it; nothing names span.
"""

from __future__ import annotations

import pytest

from evalstudy.criteria import kind_of
from evalstudy.models import CalibrationItem, Criterion
from evalstudy.services import study_validate
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.plan import PLAN_KINDS
from evalstudy.spec.study import parse_study_spec
from tests.evalstudy.test_spec import BASE, PAIRWISE
from tests.factories import make_study

BINARY = type(kind_of("binary"))


def test_span_says_what_it_allows():
    span = kind_of("span")
    assert (span.one_per_study, span.one_output_only, span.takes_expected) == (True, True,
                                                                               False)
    binary = kind_of("binary")
    assert (binary.one_per_study, binary.one_output_only, binary.takes_expected) == (
        False, False, True)
    assert {"pairwise"} == set(PLAN_KINDS)


def test_the_file_reader_refuses_an_expected_answer_the_kind_does_not_take(monkeypatch):
    parse_study_spec(BASE, "tiny.yaml")  # binary takes expected answers
    monkeypatch.setattr(BINARY, "takes_expected", False)
    with pytest.raises(SpecInvalid, match="binary criteria take no expected answer"):
        parse_study_spec(BASE, "tiny.yaml")


def test_the_file_reader_refuses_a_second_criterion_of_a_kind_one_per_study(monkeypatch):
    two = BASE.replace("  - key: comment\n", "  - key: usable2\n    kind: binary\n"
                                              "    prompt: Usable again?\n"
                                              "  - key: comment\n")
    assert two != BASE
    parse_study_spec(two, "tiny.yaml")
    monkeypatch.setattr(BINARY, "one_per_study", True)
    with pytest.raises(SpecInvalid, match="a study takes one binary criterion"):
        parse_study_spec(two, "tiny.yaml")


def test_the_file_reader_keeps_one_output_kinds_out_of_pairwise_designs(monkeypatch):
    with_binary = PAIRWISE.replace(
        "    prompt: Which is better?\n",
        "    prompt: Which is better?\n  - key: usable\n    kind: binary\n"
        "    prompt: Usable?\n")
    assert with_binary != PAIRWISE
    parse_study_spec(with_binary, "pair.yaml")
    monkeypatch.setattr(BINARY, "one_output_only", True)
    with pytest.raises(SpecInvalid, match="binary criteria mark errors in one output"):
        parse_study_spec(with_binary, "pair.yaml")


@pytest.mark.django_db
def test_opening_asks_the_kind_too(monkeypatch):
    study = make_study(n_items=2, n_systems=2)
    assert not study_validate(study=study)
    Criterion.objects.create(study=study, key="usable2", prompt="?", kind="binary", order=5)
    CalibrationItem.objects.filter(study=study).update(expected={"usable": "yes"})
    for name in ("one_per_study", "takes_expected"):
        monkeypatch.setattr(BINARY, name, name != "takes_expected")
    problems = " ".join(study_validate(study=study))
    assert "A study takes one binary criterion" in problems
    assert "binary criteria take no expected answer" in problems
