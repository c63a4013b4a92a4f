"""The monitor of an adaptive study: the plan as registered, its looks so far, and whether the
stopping rule closed the study."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation.plan_monitor import plan_monitor
from evalstudy.models import Study
from evalstudy.services import stopping_check_record, study_close, study_open, study_plan_save
from tests.factories import make_study


@pytest.fixture
def adaptive(researcher):
    study = make_study(design="pairwise", n_items=6, n_systems=3, items_per_rater=3,
                       owner=researcher, slug="adapt-monitor")
    Study.objects.filter(pk=study.pk).update(design=Study.Design.ADAPTIVE)
    study.refresh_from_db()
    study_plan_save(study=study, fields={
        "contrasts": [["sys-0", "sys-1"], ["sys-0", "sys-2"]], "target_ci_width": 1.25,
        "check_every": 30, "max_looks": 4, "max_judgments": 120, "spending": "pocock"})
    return study


def _look(study, look, met, reason=""):
    return stopping_check_record(plan=study.plan, strengths=None, fields={
        "look": look, "judgments": 30 * look, "information_fraction": 30 * look / 120,
        "alpha_spent": 0.01 * look, "boundary": 2.361, "nominal_alpha": 0.0182,
        "estimates": [], "met": met, "reason": reason})


def _text(client, study):
    html = client.get(reverse("annotation:monitor", args=[study.slug])).content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    return re.sub(r" ([,.:])", r"\1", text)  # "</strong>, " read as written


def test_the_monitor_shows_the_registered_plan_and_its_looks(adaptive, researcher):
    client = Client()
    client.force_login(researcher)
    text = _text(client, adaptive)
    assert "Stopping rule (adaptive collection)" in text
    assert "Not registered yet" in text and "No look yet" in text

    study_open(study=adaptive)
    _look(adaptive, 1, met=False)
    _look(adaptive, 2, met=False)
    text = _text(client, adaptive)
    assert "Collecting: the rule has not been met yet." in text
    registered = adaptive.plan.__class__.objects.get(study=adaptive).registered_at
    assert f"Registered {registered:%Y-%m-%d %H:%M} UTC" in text
    assert "sys-0 vs sys-1, sys-0 vs sys-2" in text
    assert "at most 1.25 wide" in text and "at the latest at look 4" in text
    assert "Pocock type" in text and "every 30 judgments" in text
    # Each look: number, judgments, information fraction, alpha spent, boundary, met.
    assert "1 30 0.250 0.01000 2.361 no" in text
    assert "2 60 0.500 0.02000 2.361 no" in text


def test_the_monitor_says_when_the_rule_closed_the_study(adaptive, researcher):
    study_open(study=adaptive)
    _look(adaptive, 1, met=False)
    _look(adaptive, 2, met=True, reason="every repeated CI at most 1.25 wide")
    adaptive.refresh_from_db()
    assert adaptive.status == Study.Status.CLOSED  # the rule closed it
    client = Client()
    client.force_login(researcher)
    text = _text(client, adaptive)
    assert ("Closed by the stopping rule at look 2 (60 judgments): every repeated CI at "
            "most 1.25 wide.") in text
    assert "2 60 0.500 0.02000 2.361 yes: every repeated CI at most 1.25 wide" in text


def test_a_study_closed_by_hand_says_so(adaptive, researcher):
    study_open(study=adaptive)
    _look(adaptive, 1, met=False)
    study_close(study=adaptive)
    client = Client()
    client.force_login(researcher)
    assert "Closed by hand, before the stopping rule was met." in _text(client, adaptive)


def test_other_designs_show_no_plan_and_cost_no_query(researcher):
    study = make_study(owner=researcher, slug="plain")
    with CaptureQueriesContext(connection) as queries:
        assert plan_monitor(study) is None
    assert len(queries) == 0
    client = Client()
    client.force_login(researcher)
    assert "Stopping rule" not in _text(client, study)


def test_the_plan_section_reads_in_two_queries_whatever_the_looks(adaptive):
    study_open(study=adaptive)
    for look in range(1, 4):
        _look(adaptive, look, met=False)
    with CaptureQueriesContext(connection) as queries:
        monitor = plan_monitor(adaptive)
        assert [look.look for look in monitor.looks] == [1, 2, 3]
        assert monitor.closed_by_rule is False
    assert len(queries) == 2
