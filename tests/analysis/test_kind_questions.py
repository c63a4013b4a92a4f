"""What the analysis asks of a kind, asked of every kind (issue 28): the adjudication queue
reads an ordered scale's bounds, the agreement statistics its declared categories, the report
its families. Before, these were switches on the kind's name in analysis/, so a new kind of
ordered points got no spread (and no queue) until someone added its name there."""

from __future__ import annotations

from analysis.stats.disagreement import ADJUDICABLE, NOMINAL, ORDINAL
from analysis.stats.pipeline import declared_categories
from evalstudy.criteria import all_kinds, rule_of


def test_every_kind_of_points_on_a_scale_has_bounds_for_the_adjudication_spread():
    for kind in all_kinds():
        bounds = kind.value_range(rule_of({"kind": kind.name, "scale_points": 7}))
        if kind.name in ORDINAL:
            assert bounds is not None and bounds[0] < bounds[1], kind
        else:
            assert bounds is None, kind


def test_the_queue_takes_every_kind_of_categories_or_points_and_nothing_else():
    assert set(ADJUDICABLE) == set(NOMINAL) | set(ORDINAL)
    for kind in all_kinds():
        assert (kind.name in ADJUDICABLE) == (kind.level is not None), kind


def test_declared_categories_are_the_kinds_own():
    assert declared_categories({"kind": "binary"}) == ["yes", "no"]
    assert declared_categories({"kind": "severity"}) == [0, 1, 2]
    assert declared_categories({"kind": "likert", "scale_points": 4}) == [1, 2, 3, 4]
    assert declared_categories({"kind": "categorical", "options": ["a", "b"]}) == ["a", "b"]
    assert declared_categories({"kind": "no_such_kind", "options": ["x"]}) == ["x"]
    assert declared_categories({"kind": "text"}) is None
