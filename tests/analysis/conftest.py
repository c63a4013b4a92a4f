"""Fixtures shared by the analysis tests (Django imports stay inside the fixtures, so that the
Django-free suites under stats/ also run with `-p no:django`)."""

from __future__ import annotations

import pytest

# ordinal::wine: 9 judges x 8 bottles (row-major); bottles 1-4 cold, 5-8 warm; skin contact for
# bottles 3, 4, 7, 8. Published clmm(rating ~ temp + contact + (1|judge)): tempwarm 3.063,
# contactyes 1.835, judge variance 1.279; clm(rating ~ temp + contact): tempwarm 2.503,
# contactyes 1.528.
WINE_RATINGS = "233444551213235423325544323232532343333332322454112223232223333412323244"


def wine_rows() -> list[tuple[str, str, str, int]]:
    """(rater, item, system, rating) of the wine data as a study: the four temp x contact
    conditions are systems (with temp/contact as system metadata), the odd and the even
    bottles are two items, the judges are raters."""
    rows = []
    for judge in range(9):
        for bottle in range(1, 9):
            temp = "cold" if bottle <= 4 else "warm"
            contact = "yes" if bottle in (3, 4, 7, 8) else "no"
            item = "pair-a" if bottle % 2 else "pair-b"
            rows.append((f"judge{judge + 1}", item, f"{temp}-{contact}",
                         int(WINE_RATINGS[judge * 8 + bottle - 1])))
    return rows


@pytest.fixture
def wine_study(db):
    """The wine data as a study: a 5-point Likert criterion `bitterness` (the ratings), a
    binary `drinkable` (rating >= 3) and a free-text `note`; systems carry temp/contact
    metadata, items speaker/severity metadata."""
    from annotation.services import judgments_import
    from evalstudy.models import Output
    from evalstudy.spec.files import JudgmentRow
    from tests.factories import CriterionFactory, ItemFactory, StudyFactory, SystemFactory

    study = StudyFactory(slug="wine")
    systems = [SystemFactory(study=study, name=f"{temp}-{contact}",
                             metadata={"temp": temp, "contact": contact})
               for temp in ("cold", "warm") for contact in ("no", "yes")]
    items = [ItemFactory(study=study, external_id="pair-a",
                         metadata={"speaker": "s1", "severity": "mild"}),
             ItemFactory(study=study, external_id="pair-b",
                         metadata={"speaker": "s2", "severity": "severe"})]
    Output.objects.bulk_create(Output(item=item, system=system, text=f"{item} {system}")
                               for item in items for system in systems)
    CriterionFactory(study=study, key="bitterness", kind="likert",
                     scale_points=5, order=0)
    CriterionFactory(study=study, key="drinkable", kind="binary", order=1)
    CriterionFactory(study=study, key="note", kind="text", order=2,
                     required=False)
    rows, line = [], 1
    for rater, item, system, rating in wine_rows():
        for key, value in (("bitterness", str(rating)),
                           ("drinkable", "yes" if rating >= 3 else "no")):
            line += 1
            rows.append(JudgmentRow(line, rater, item, system, key, value))
    judgments_import(study=study, rows=rows, file_name="ordinal::wine")
    return study


@pytest.fixture
def wine_editor(wine_study):
    """A logged-in test client of a staff user who owns the wine study (an editor)."""
    from django.test import Client

    from tests.factories import UserFactory

    user = UserFactory(username="wine-editor", is_staff=True)
    wine_study.owner = user
    wine_study.save(update_fields=["owner"])
    client = Client()
    client.force_login(user)
    return client
