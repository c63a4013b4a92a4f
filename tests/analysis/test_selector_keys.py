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


def test_raters_sharing_a_name_stay_two_raters_in_every_statistic(db):
    """Two invitees both called "Anna": their names in the tidy table carry their ids, so a
    model's random effect, the design's rater count and the report see two raters."""
    from annotation.services import judgments_import
    from evalstudy.models import Rater, Study
    from evalstudy.spec.files import parse_judgments_csv
    from tests.factories import make_study

    study = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN)
    text = "rater,item,system,criterion,value\n" + "".join(
        f"{rater},item-00{i},sys-{s},usable,yes\n"
        for rater in ("r1", "r2") for i in range(2) for s in range(2))
    judgments_import(study=study, rows=parse_judgments_csv(text, "j.csv"), file_name="j.csv")
    Rater.objects.filter(study=study).update(display_name="Anna")
    tidy = judgments_tidy(study)
    assert tidy["rater_id"].nunique() == tidy["rater"].nunique() == 2
    assert all(name.startswith("Anna (#") for name in tidy["rater"].unique())
