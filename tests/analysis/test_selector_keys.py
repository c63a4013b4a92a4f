"""`judgments_tidy` gives integer keys beside the names: `rater_id` (the rater's database id)
and output ids, on which the analysis keys raters and units."""

from __future__ import annotations

import pandas as pd

from analysis.selectors import JUDGMENT_COLUMNS, judgments_tidy


def test_tidy_judgments_carry_integer_rater_ids(wine_study):
    from evalstudy.models import Rater

    tidy = judgments_tidy(wine_study)
    assert "rater_id" in JUDGMENT_COLUMNS
    assert tidy["rater_id"].dtype == "int64" and tidy["output"].dtype.kind == "i"
    names = {r.pk: str(r) for r in Rater.objects.filter(pk__in=tidy["rater_id"].unique())}
    assert tidy["rater"].tolist() == tidy["rater_id"].map(names).tolist()
    assert tidy.groupby("rater_id")["rater"].nunique().eq(1).all()
    assert tidy["rater_id"].nunique() == tidy["rater"].nunique() == 9


def test_empty_study_still_has_the_key_column(db):
    from tests.factories import StudyFactory

    tidy = judgments_tidy(StudyFactory(slug="empty"))
    assert tidy.empty and "rater_id" in tidy.columns
    assert isinstance(tidy, pd.DataFrame)
