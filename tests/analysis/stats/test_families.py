"""The pipeline dispatches a criterion's analysis on its kind's families (issue 28): each
family a kind lists is registered once, with its step, and the pipeline asks the kind which
apply, never its name. Before, `analysis.stats.pipeline` switched on the kind's name
(`if kind == "likert"` ... and `NOMINAL_KINDS`), so a kind's `analysis` attribute said nothing
and a new kind meant editing the pipeline."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.stats import pipeline
from analysis.stats.pipeline import FAMILIES, analyse_criterion, families_of
from analysis.stats.votes import VOTE_COLUMNS
from evalstudy.criteria import all_kinds, kind_of


def test_every_family_a_kind_names_is_registered_and_every_registered_one_is_used():
    named = {name for kind in all_kinds() for name in kind.analysis}
    assert named <= set(FAMILIES), named - set(FAMILIES)
    assert set(FAMILIES) <= named, set(FAMILIES) - named
    for kind in all_kinds():
        steps = [FAMILIES[name].step for name in kind.analysis]
        assert steps.count("validity") <= 1, kind  # one validity entry per criterion


def test_a_family_nothing_registers_is_refused_by_name(monkeypatch):
    kind = kind_of("likert")
    monkeypatch.setattr(type(kind), "analysis", ("ordinal", "no_such_family"))
    with pytest.raises(ValueError, match="no_such_family"):
        families_of(kind, "criterion")


def _rows(values: list[str]) -> pd.DataFrame:
    return pd.DataFrame({
        "rater": [f"r{i % 3}" for i in range(len(values))], "is_human": True,
        "output": list(range(len(values))), "output_b": None, "item": [i // 2 for i in
                                                                       range(len(values))],
        "system": ["s1", "s2"] * (len(values) // 2), "criterion": "q",
        "criterion_kind": "likert", "value": values, "numeric": None, "seconds": 1.0})


def test_the_pipeline_runs_the_families_the_kind_lists_not_those_of_its_name(monkeypatch):
    """A Likert criterion whose kind said it is analysed as free text only is counted, not
    modelled: the pipeline asked the kind. Before, the name `likert` chose the models."""
    kind = kind_of("likert")
    monkeypatch.setattr(type(kind), "analysis", ("counted",))
    result = analyse_criterion(_rows(["1", "2", "3", "4"]),
                               {"key": "q", "kind": "likert", "scale_points": 5}, {}, [])
    assert result["answered"] == 4
    assert not {"clmm", "clm", "descriptives", "agreement", "ceiling"} & set(result)


def test_the_validity_step_follows_the_kinds_families(monkeypatch):
    kind = kind_of("likert")
    assert [f.name for f in families_of(kind, "validity")] == ["graded_validity"]
    monkeypatch.setattr(type(kind), "analysis", ("ordinal",))
    assert pipeline.analyse_validity(
        _rows(["1", "2"]), pd.DataFrame(columns=VOTE_COLUMNS),
        None, {"key": "q", "kind": "likert"}, {}, [], pipeline.silent) == []
