"""Ranking and best-worst scaling, end to end through the rater's pages: the design shows
several outputs of an item at once (positions balanced, systems hidden), the answers arrive
as one rank per output (or best and worst) and are stored canonically, bad answers are
refused with nothing stored."""

from __future__ import annotations

import re
from collections import Counter
from itertools import combinations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from annotation.models import Judgment
from evalstudy import criteria as rules
from evalstudy.design import DesignError, tuples
from evalstudy.models import AssignmentSlot, CalibrationItem, Criterion, Output, Study
from evalstudy.services import study_open
from tests.factories import invite, make_study

HX = {"HTTP_HX_REQUEST": "true"}


def _tuple_study(design: str, *, n_systems: int, kind: str, **settings) -> Study:
    study = make_study(n_items=4, n_systems=n_systems, design=design, **settings)
    study.criteria.all().delete()
    CalibrationItem.objects.filter(study=study).delete()
    Criterion.objects.create(study=study, key="order", kind=kind, prompt="Which is best?")
    study_open(study=study)
    study.refresh_from_db()
    return study


def _enter(client: Client, study: Study) -> tuple[str, str, int]:
    rater = invite(study)
    assert client.get(reverse("annotation:enter", args=[rater.access_token])).status_code == 302
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    found = re.search(r'<form[^>]*action="(/s/[^"]+/slots/(\d+)/)"', page)
    assert found, page[:400]
    return page, found.group(1), int(found.group(2))


def test_tuples_balance_positions_and_pairs():
    lists = tuples([f"i{n}" for n in range(5)], ["a", "b", "c", "d", "e"], 4)
    assert len(lists) == 5 * 4  # C(5, 4) sets x 4 rotations
    assert all(len(cells) == 5 and len({c.item for c in cells}) == 5 for cells in lists)
    positions = Counter((c.item, system, p) for cells in lists for c in cells
                        for p, system in enumerate(c.shown))
    assert set(positions.values()) == {4}  # every system in every position, for every item
    pairs = Counter(frozenset(pair) for cells in lists for c in cells
                    for pair in combinations(c.shown, 2))
    assert len(set(pairs.values())) == 1  # every pair of systems together equally often
    assert all(c.shown[:2] == (c.system, c.system_b) for cells in lists for c in cells)
    with pytest.raises(DesignError, match="at least 4 systems"):
        tuples(["i"], ["a", "b", "c"], 4)


def test_a_ranking_seat_shows_every_output_and_stores_the_order(db):
    study = _tuple_study("ranking", n_systems=3, kind="ranking")
    assert study.assignments.count() == 3  # one list per rotation of the three systems
    client = Client()
    page, action, slot_id = _enter(client, study)
    slot = AssignmentSlot.objects.get(pk=slot_id)
    texts = list(Output.objects.filter(pk__in=slot.shown_outputs).values_list("id", "text"))
    assert len(slot.shown_outputs) == 3
    for _, text in texts:
        assert text in page
    assert "sys-" not in page  # blinded
    assert 'name="order__C" value="3"' in page
    bad = client.post(action, {"order__A": "1", "order__B": "1", "order__C": "2"}, **HX)
    assert bad.status_code == 400 and "different rank" in bad.content.decode()
    assert 'name="order__A" value="1" checked' in bad.content.decode()  # kept as posted
    assert not Judgment.objects.exists()
    response = client.post(action, {"order__A": "2", "order__B": "3", "order__C": "1"}, **HX)
    assert response.status_code == 200
    assert Judgment.objects.get(slot_id=slot_id).value == "C>A>B"


def test_a_best_worst_seat_takes_two_different_outputs(db):
    study = _tuple_study("best_worst", n_systems=5, kind="best_worst")
    client = Client()
    page, action, slot_id = _enter(client, study)
    assert len(AssignmentSlot.objects.get(pk=slot_id).shown_outputs) == 4
    assert 'name="order__worst" value="D"' in page
    same = client.post(action, {"order__best": "B", "order__worst": "B"}, **HX)
    assert same.status_code == 400 and "different worst" in same.content.decode()
    missing = client.post(action, {"order__best": "B"}, **HX)
    assert missing.status_code == 400
    assert not Judgment.objects.exists()
    client.post(action, {"order__best": "B", "order__worst": "D"}, **HX)
    assert Judgment.objects.get(slot_id=slot_id).value == "best=B;worst=D"


def test_the_rules_of_the_tuple_kinds():
    rule = rules.CriterionRule(kind="ranking")
    three = rules.ShownText("x", n_outputs=3)
    assert rule.normalise("b>a>c", three) == "B>A>C"
    assert rule.normalise(["C", "B", "A"], three) == "C>B>A"
    assert rule.normalise("A=3;B=1;C=2", three) == "B>C>A"
    for bad in ("A>B", "A>B>C>D", "A>A>B", "A=1;B=1;C=2", "A=1;B=2;C=9"):
        with pytest.raises(ValueError):
            rule.normalise(bad, three)
    with pytest.raises(ValueError, match="not known here"):
        rule.normalise("A>B")
    best_worst = rules.CriterionRule(kind="best_worst")
    four = rules.ShownText("x", n_outputs=4)
    assert best_worst.normalise({"best": "d", "worst": "a"}, four) == "best=D;worst=A"
    for bad in ("best=A;worst=A", "best=E;worst=A", "best=A", "best=;worst=",
                "best=AB;worst=C", "best=A;worst=CD"):  # one letter each, not a substring
        with pytest.raises(ValueError):
            best_worst.normalise(bad, four)


def test_the_designs_and_their_criteria_go_together(db):
    wrong_kind = make_study(n_items=2, n_systems=3, design="ranking")
    with pytest.raises(ValidationError) as error:
        study_open(study=wrong_kind)
    text = str(error.value)
    assert "needs a ranking criterion" in text and "Practice items" in text
    too_few = make_study(n_items=2, n_systems=3, design="best_worst")
    too_few.criteria.all().delete()
    CalibrationItem.objects.filter(study=too_few).delete()
    Criterion.objects.create(study=too_few, key="bw", kind="best_worst", prompt="?")
    with pytest.raises(ValidationError, match="shows 4 outputs at once and needs at least"):
        study_open(study=too_few)
    # Any other question would judge one output while the rater sees several (and be stored
    # as output A's): refused, as are outputs' own media.
    mixed = make_study(n_items=2, n_systems=3, design="ranking")
    mixed.criteria.exclude(key="note").delete()
    CalibrationItem.objects.filter(study=mixed).delete()
    Criterion.objects.create(study=mixed, key="rank", kind="ranking", prompt="?", order=9)
    Criterion.objects.create(study=mixed, key="fluency", kind="slider", prompt="?", order=10)
    with pytest.raises(ValidationError, match="'fluency' would judge one output"):
        study_open(study=mixed)
    elsewhere = make_study(n_items=2, n_systems=3)
    Criterion.objects.create(study=elsewhere, key="rank", kind="ranking", prompt="?", order=9)
    with pytest.raises(ValidationError, match="Ranking criteria need the ranking design"):
        study_open(study=elsewhere)


def test_the_rater_api_shows_every_output_of_a_ranking_slot_and_takes_its_ranking(db):
    from tests.factories import UserFactory

    study = _tuple_study("ranking", n_systems=3, kind="ranking")
    user = UserFactory()
    invite(study, user=user)
    client = Client()
    client.force_login(user)
    from django.utils import timezone

    from evalstudy.models import Enrollment

    Enrollment.objects.filter(study=study).update(consented_at=timezone.now(),
                                                  instructions_seen_at=timezone.now())
    step = client.post(f"/api/v1/rater/studies/{study.slug}/next/").json()
    assert step["step"] == "rate", step
    row = step["slot"]
    assert [o["letter"] for o in row["outputs"]] == ["A", "B", "C"]
    assert all(o["text"] and "sys-" not in o["label"] for o in row["outputs"])
    answered = client.post(f"/api/v1/rater/slots/{row['id']}/judgments/",
                           {"answers": {"order": "c>a>b"}}, content_type="application/json")
    assert answered.status_code in (200, 201), answered.content
    assert Judgment.objects.get(slot_id=row["id"]).value == "C>A>B"
