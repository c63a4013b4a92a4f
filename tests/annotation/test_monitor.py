"""The researcher's study monitor: figures, live fragment, CSV, and who may see it."""

import csv
import io

import pytest
from django.test import Client
from django.urls import reverse

from annotation.monitor_selectors import study_monitor
from annotation.services import judgment_submit
from evalstudy.models import AssignmentSlot, Study
from evalstudy.services import assignment_next
from tests.factories import invite, make_study


@pytest.fixture
def busy_study(db):
    """2 systems x 4 items, 2 ratings per output, attention check every 2 items; one rater
    finished (one failed check, calibration right), one rater half-way."""
    study = make_study(n_items=4, n_systems=2, ratings_per_output=2, status=Study.Status.OPEN,
                       attention_check_every=2)
    finished = invite(study, external_id="R-finished")
    halfway = invite(study, external_id="R-half")
    failed_once = False
    while (slot := assignment_next(study=study, rater=finished)) is not None:
        answers = {"severity": "0", "usable": "yes"}
        if slot.kind == "attention" and not failed_once:
            failed_once = True  # expected severity 2: this one fails
        elif slot.kind == "attention":
            answers = {"severity": "2", "usable": "no"}
        judgment_submit(rater=finished, slot_id=slot.pk, answers=answers)
    for _ in range(3):
        slot = assignment_next(study=study, rater=halfway)
        judgment_submit(rater=halfway, slot_id=slot.pk, answers={"severity": "1", "usable": "no"})
    return study


def test_monitor_figures(busy_study):
    monitor = study_monitor(busy_study)
    assert (monitor.seats_filled, monitor.seats_total) == (2, 4)
    assert monitor.target == 2
    assert monitor.outputs_total == 8
    # the finished rater covered the 4 outputs of list 0; the other rater (same list, replica
    # 1) has done some of them (1 or 2: an attention check may come second in its order)
    half_targets = AssignmentSlot.objects.filter(
        assignment__rater__external_id="R-half", kind="target", completed_at__isnull=False
    ).count()
    assert half_targets in (1, 2)
    assert monitor.coverage == {0: 4, 1: 4 - half_targets, 2: half_targets}
    assert monitor.outputs_complete == half_targets
    rows = {row.rater: row for row in monitor.raters}
    done = rows["R-finished"]
    assert (done.state, done.done, done.total) == ("done", done.total, 1 + 4 + 2)
    assert (done.attention_failed, done.attention_answered) == (1, 2)
    assert (done.calibration_correct, done.calibration_answered) == (1, 1)
    assert done.median_seconds is not None and done.median_seconds >= 0
    half = rows["R-half"]
    assert (half.done, half.calibration_correct, half.calibration_answered) == (3, 0, 1)


def test_monitor_page_fragment_and_csv_for_the_owner(busy_study, researcher):
    busy_study.owner = researcher
    busy_study.save()
    client = Client()
    client.force_login(researcher)
    page = client.get(reverse("annotation:monitor", args=[busy_study.slug])).content.decode()
    assert 'hx-trigger="every 5s"' in page
    assert "htmx-2.0.11.min.js" in page
    assert "R-finished" in page
    fragment = client.get(reverse("annotation:monitor_fragment", args=[busy_study.slug]))
    assert fragment.content.decode().startswith('<div id="monitor-live"')
    response = client.get(reverse("annotation:monitor_csv", args=[busy_study.slug]))
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["rater"] for row in rows} == {"R-finished", "R-half"}
    assert rows[0]["attention_failed"] == "1"


def test_monitor_is_for_the_studys_researchers_only(busy_study, researcher):
    client = Client()
    url = reverse("annotation:monitor", args=[busy_study.slug])
    assert client.get(url).status_code == 302  # to the admin login
    client.force_login(researcher)  # staff, but not this study's owner
    assert client.get(url).status_code == 404
    assert client.get(reverse("annotation:monitor_csv", args=[busy_study.slug])).status_code \
        == 404


def test_csv_neutralises_formula_injection(busy_study, researcher):
    from evalstudy.models import Rater

    Rater.objects.filter(external_id="R-half").update(display_name="=HYPERLINK(\"x\")")
    busy_study.owner = researcher
    busy_study.save()
    client = Client()
    client.force_login(researcher)
    text = client.get(reverse("annotation:monitor_csv", args=[busy_study.slug])).content.decode()
    assert "'=HYPERLINK" in text
