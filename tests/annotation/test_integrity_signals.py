"""Integrity signals through the database: the rating page and the rater API post the page's
counters with the answers and the server keeps them per slot (never refusing or losing an
answer over missing or malformed counters); the monitor, its CSV and the progress API show the
flags, agreement over time and its alerts; recalibration rounds serve the calibration items
again (audited, permission-checked across studies) and the periodic task records alerts."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import AgreementAlert, Judgment, RecalibrationRound, SlotBehaviour
from annotation.monitor_selectors import study_monitor
from annotation.recalibration import (
    RecalibrationNotPossible,
    integrity_scan,
    recalibration_start,
)
from annotation.services import judgment_submit, progress_export
from annotation.tasks import integrity_scan_task
from evalstudy.models import AssignmentSlot, AuditEvent, Enrollment, Study
from evalstudy.services import assignment_next
from tests.factories import UserFactory, invite, make_study, token_client

GOOD = {"severity": "0", "usable": "yes"}
COUNTERS = {"pastes": 2, "focus_losses": 1, "seconds_away": 45, "keystrokes": 0, "inputs": 9}


@pytest.fixture
def signal_study(db):
    return make_study(n_items=8, n_systems=2, status=Study.Status.OPEN, owner=UserFactory(
        is_staff=True))


def _enter(client: Client, rater) -> None:
    assert client.get(reverse("annotation:enter", args=[rater.access_token])).status_code == 302


def _current_slot(client: Client, study: Study) -> int:
    html = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    return int(re.search(r'/slots/(\d+)/"', html).group(1))


def _post(client: Client, study: Study, slot: int, answers: dict, behaviour=None):
    data = dict(answers)
    if behaviour is not None:
        data["integrity.behaviour"] = (behaviour if isinstance(behaviour, str)
                                       else json.dumps(behaviour))
    return client.post(reverse("annotation:submit", args=[study.slug, slot]), data)


def _past_practice(client: Client, study: Study) -> int:
    practice = _current_slot(client, study)
    _post(client, study, practice, GOOD)
    return _current_slot(client, study)


# --- recording --------------------------------------------------------------------------------
def test_the_rating_page_stores_the_counters_with_the_answer(signal_study):
    client, rater = Client(), invite(signal_study)
    _enter(client, rater)
    slot = _past_practice(client, signal_study)
    response = _post(client, signal_study, slot,
                     {"severity": "2", "usable": "no", "note": "pasted"}, COUNTERS)
    assert response.status_code == 302
    stored = SlotBehaviour.objects.get(slot_id=slot)
    assert (stored.pastes, stored.focus_losses, stored.seconds_away, stored.keystrokes,
            stored.inputs, stored.submissions) == (2, 1, 45, 0, 9, 1)
    # The counters are not an answer: no judgment under their field's name.
    assert set(Judgment.objects.filter(slot_id=slot).values_list("criterion__key", flat=True)
               ) == {"severity", "usable", "note"}
    # They are the rater's data: in their personal-data export.
    from annotation.privacy import judgments_export
    exported = judgments_export(rater, None)["answer_behaviour"]
    assert [(e["pastes"], e["seconds_away"]) for e in exported] == [(2, 45)]


@pytest.mark.parametrize("behaviour", [None, "", "{not json", json.dumps({"pastes": 1}),
                                       json.dumps({**COUNTERS, "pastes": "many"}), "[1,2]",
                                       # nested past json's recursion limit (a 500 before)
                                       "[" * 1999])
def test_missing_or_malformed_counters_never_cost_the_answer(signal_study, behaviour):
    client, rater = Client(), invite(signal_study)
    _enter(client, rater)
    slot = _past_practice(client, signal_study)
    response = _post(client, signal_study, slot, GOOD, behaviour)
    assert response.status_code == 302
    assert Judgment.objects.filter(slot_id=slot).count() == 2
    assert AssignmentSlot.objects.get(pk=slot).completed_at is not None
    assert not SlotBehaviour.objects.filter(slot_id=slot).exists()


def test_out_of_range_counters_are_clamped_not_refused(signal_study):
    client, rater = Client(), invite(signal_study)
    _enter(client, rater)
    slot = _past_practice(client, signal_study)
    _post(client, signal_study, slot, GOOD, {**COUNTERS, "pastes": -3, "seconds_away": 10**9})
    stored = SlotBehaviour.objects.get(slot_id=slot)
    assert (stored.pastes, stored.seconds_away) == (0, 86_400)


def test_the_general_path_stores_them_too_and_a_revision_adds_to_them(db):
    """Revisions take the general path (judgment_submit): their counters add up."""
    study = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN, allow_revision=True)
    client, rater = Client(), invite(study)
    _enter(client, rater)
    slot = _past_practice(client, study)
    _post(client, study, slot, GOOD, COUNTERS)
    # a retry of the same answer stores nothing and counts nothing twice
    _post(client, study, slot, GOOD, COUNTERS)
    assert SlotBehaviour.objects.get(slot_id=slot).submissions == 1
    edit = client.post(reverse("annotation:submit", args=[study.slug, slot]),
                       {"severity": "1", "usable": "no", "integrity.behaviour": json.dumps(
                           {**COUNTERS, "pastes": 0, "keystrokes": 5})})
    assert edit.status_code == 302
    stored = SlotBehaviour.objects.get(slot_id=slot)
    assert (stored.submissions, stored.pastes, stored.keystrokes, stored.seconds_away) == (
        2, 2, 5, 90)


def test_the_rater_api_takes_an_optional_behaviour_object(signal_study):
    rater = invite(signal_study)
    api = Client(HTTP_AUTHORIZATION=f"Rater {rater.access_token}")
    practice = assignment_next(study=signal_study, rater=rater)
    url = reverse("api-rater-submit", args=[practice.pk])
    # malformed: the answers are stored, the counters are not
    response = api.post(url, {"answers": GOOD, "behaviour": "lots"},
                        content_type="application/json")
    assert response.status_code == 201, response.content
    assert not SlotBehaviour.objects.exists()
    slot = assignment_next(study=signal_study, rater=rater)
    response = api.post(reverse("api-rater-submit", args=[slot.pk]),
                        {"answers": GOOD, "behaviour": COUNTERS},
                        content_type="application/json")
    assert response.status_code == 201, response.content
    assert SlotBehaviour.objects.get(slot=slot).pastes == 2
    # without the object at all
    slot = assignment_next(study=signal_study, rater=rater)
    assert api.post(reverse("api-rater-submit", args=[slot.pk]), {"answers": GOOD},
                    content_type="application/json").status_code == 201
    assert SlotBehaviour.objects.count() == 1


# --- flags on the monitor -----------------------------------------------------------------------
def _rate_all(study, rater, *, behaviour, answers, seconds=20.0, start=None):
    now = start or timezone.now() - dt.timedelta(hours=2)
    while (slot := assignment_next(study=study, rater=rater, now=now)) is not None:
        now += dt.timedelta(seconds=seconds)
        given = answers if slot.kind == "target" else GOOD
        judgment_submit(rater=rater, slot_id=slot.pk, answers=given, now=now)
        if slot.kind == "target":
            from annotation.behaviour import slot_behaviour_record
            slot_behaviour_record(slot_id=slot.pk, raw=behaviour, now=now)
        now += dt.timedelta(seconds=1)


@pytest.fixture
def flagged_study(db):
    """Two raters over 8 items each: `honest` types their notes, `paster` pastes them."""
    study = make_study(n_items=8, n_systems=2, status=Study.Status.OPEN,
                       owner=UserFactory(is_staff=True))
    note = {"severity": "2", "usable": "no", "note": "the number is wrong"}
    _rate_all(study, invite(study, external_id="honest"), answers=note,
              behaviour={**COUNTERS, "pastes": 0, "seconds_away": 0, "keystrokes": 40})
    _rate_all(study, invite(study, external_id="paster"), answers=note,
              behaviour={**COUNTERS, "pastes": 1, "seconds_away": 0})
    return study


def _row(monitor, name):
    return next(r for r in monitor.raters if r.rater_id == Enrollment.objects.get(
        study=monitor.study, rater__external_id=name).rater_id)


def test_the_monitor_shows_who_pasted_their_free_text(flagged_study):
    monitor = study_monitor(flagged_study)
    paster, honest = _row(monitor, "paster"), _row(monitor, "honest")
    assert paster.integrity.flagged and paster.integrity.signals == ["paste"]
    assert paster.integrity.shares["paste"] == 1.0
    assert not honest.integrity.flagged and honest.integrity.shares["paste"] == 0.0
    # the CSV and the progress API carry the same columns
    stream = io.StringIO()
    progress_export(study=flagged_study, stream=stream)
    rows = {r["rater"]: r for r in csv.DictReader(io.StringIO(stream.getvalue()))}
    by_flag = {r["integrity_flagged"] for r in rows.values()}
    assert by_flag == {"0", "1"}
    flagged_row = next(r for r in rows.values() if r["integrity_flagged"] == "1")
    assert flagged_row["paste_share"] == "1.000"
    assert "pasted into free text: 8 of 8" in flagged_row["integrity_detail"]
    owner = flagged_study.owner
    progress = token_client(owner).get(reverse("api-study-progress",
                                               args=[flagged_study.slug])).json()
    api_rows = {r["rater_id"]: r for r in progress["raters"]}
    assert api_rows[paster.rater_id]["integrity_flagged"] is True
    assert api_rows[paster.rater_id]["integrity_signals"] == ["paste"]
    assert api_rows[honest.rater_id]["integrity_shares"]["paste"] == 0.0
    # the page
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("annotation:monitor", args=[flagged_study.slug])).content.decode()
    assert 'class="badge integrity-flag"' in page and "pasted into free text: 8 of 8" in page
    # flags are evidence only: nobody was excluded or stopped
    assert not Enrollment.objects.filter(excluded_at__isnull=False).exists()
    assert not Enrollment.objects.filter(stopped_at__isnull=False).exists()


def test_per_slot_speed_uses_the_studys_speeder_threshold(db):
    from annotation.behaviour import study_integrity

    study = make_study(n_items=8, n_systems=2, status=Study.Status.OPEN, speeder_seconds=5.0)
    _rate_all(study, invite(study, external_id="quick"), answers=GOOD, behaviour=None,
              seconds=2.0)
    _rate_all(study, invite(study, external_id="slow"), answers=GOOD, behaviour=None,
              seconds=20.0)
    found = study_integrity(study)
    by_name = {Enrollment.objects.get(study=study, rater_id=r).rater.external_id: v
               for r, v in found.raters.items()}
    assert by_name["quick"].signals == ["speed"] and by_name["quick"].shares["speed"] == 1.0
    assert by_name["slow"].shares["speed"] == 0.0
    # no counters were posted: the page's signals are unobserved, not "clean"
    assert by_name["slow"].shares["paste"] is None


# --- agreement over time, alerts, recalibration -------------------------------------------------
@pytest.fixture
def drifting_study(db):
    """Four raters judge the same 10 outputs; `drifter` agrees with the others on the first
    five and contradicts them on the last five (three others: their majority stays clear).
    Windows of 5, alert below 0.6."""
    study = make_study(n_items=5, n_systems=2, status=Study.Status.OPEN, design="crossed",
                       ratings_per_output=4, agreement_window=5, agreement_alert_threshold=0.6,
                       owner=UserFactory(is_staff=True))
    start = timezone.now() - dt.timedelta(hours=3)
    for name in ("a", "b", "c"):
        _rate_all(study, invite(study, external_id=name), answers=GOOD, behaviour=None,
                  start=start)
    drifter = invite(study, external_id="drifter")
    now, done = start, 0
    while (slot := assignment_next(study=study, rater=drifter, now=now)) is not None:
        now += dt.timedelta(seconds=20)
        if slot.kind == "target":
            done += 1
            answers = GOOD if done <= 5 else {"severity": "1", "usable": "no"}
        else:
            answers = GOOD
        judgment_submit(rater=drifter, slot_id=slot.pk, answers=answers, now=now)
    return study


def test_agreement_over_time_alerts_on_the_monitor_and_the_task_records_it_once(drifting_study):
    drifter = Enrollment.objects.get(study=drifting_study, rater__external_id="drifter").rater
    row = _row(study_monitor(drifting_study), "drifter")
    # two criteria per slot: 20 scored judgments, 4 windows of 5; the last 10 disagree
    assert [w.alert for w in row.agreement_windows] == [False, False, True, True]
    assert row.agreement_alerts == 2
    assert integrity_scan() == 2
    assert integrity_scan_task.apply().get() == 0  # recorded once per window
    alerts = AgreementAlert.objects.filter(study=drifting_study)
    assert {a.rater_id for a in alerts} == {drifter.pk}
    assert [(a.window, a.first, a.last, a.agreement, a.threshold) for a in alerts] == [
        (3, 11, 15, 0.0, 0.6), (4, 16, 20, 0.0, 0.6)]
    client = Client()
    client.force_login(drifting_study.owner)
    page = client.get(reverse("annotation:monitor", args=[drifting_study.slug])).content.decode()
    assert "Agreement alerts" in page and page.count('class="window badge warn"') == 2
    progress = token_client(drifting_study.owner).get(
        reverse("api-study-progress", args=[drifting_study.slug])).json()
    api_row = next(r for r in progress["raters"] if r["rater_id"] == drifter.pk)
    assert [w["alert"] for w in api_row["agreement_windows"]] == [False, False, True, True]


def _half_rated(study, name="r"):
    rater = invite(study, external_id=name)
    practice = assignment_next(study=study, rater=rater)
    judgment_submit(rater=rater, slot_id=practice.pk, answers=GOOD)
    first = assignment_next(study=study, rater=rater)
    judgment_submit(rater=rater, slot_id=first.pk, answers=GOOD)
    return rater


def test_a_recalibration_round_serves_the_calibration_items_next_with_feedback(signal_study):
    rater = _half_rated(signal_study)
    client = Client()
    client.force_login(signal_study.owner)
    # without JavaScript: a plain form post, back on the monitor with a message
    url = reverse("annotation:rater_action", args=[signal_study.slug, rater.pk, "recalibrate"])
    response = client.post(url, {"reason": "agreement 0.4"}, follow=True)
    assert "recalibration round 1 started" in response.content.decode()
    round_ = RecalibrationRound.objects.get(study=signal_study, rater=rater)
    assert (round_.number, round_.reason, round_.started_by) == (1, "agreement 0.4",
                                                                 signal_study.owner)
    assert AuditEvent.objects.filter(study=signal_study, source="web",
                                     changes__recalibration_round=1).exists()
    # the rater's next item is the practice item again, with its feedback
    rater_client = Client()
    _enter(rater_client, rater)
    html = rater_client.get(reverse("annotation:rate", args=[signal_study.slug])).content.decode()
    assert "turn on the light" in html
    slot = int(re.search(r'/slots/(\d+)/"', html).group(1))
    assert slot == round_.slots.get().pk
    answered = _post(rater_client, signal_study, slot, {"severity": "2", "usable": "no"})
    assert answered["Location"].endswith(f"/slots/{slot}/feedback/")
    # a wrong answer in a round never stops the rater (calibration pass mark or not)
    assert Enrollment.objects.get(study=signal_study, rater=rater).stopped_at is None
    nxt = _current_slot(rater_client, signal_study)
    assert AssignmentSlot.objects.get(pk=nxt).kind == "target"
    _post(rater_client, signal_study, nxt, GOOD)
    # judgments are marked by round in the analysis's table
    from analysis.extras.integrity import prepare
    from analysis.selectors import judgments_tidy
    table = prepare(signal_study, judgments_tidy(signal_study), {})
    assert sorted(table.groupby("slot")["recalibration_round"].first().tolist()) == [0, 1]
    # the round finishes once its items are answered
    integrity_scan()
    round_.refresh_from_db()
    assert round_.completed_at is not None


def test_recalibration_is_refused_while_a_round_runs_or_without_items_left(signal_study):
    rater = _half_rated(signal_study)
    recalibration_start(study=signal_study, rater_id=rater.pk)
    with pytest.raises(RecalibrationNotPossible, match="still running"):
        recalibration_start(study=signal_study, rater_id=rater.pk)
    api = token_client(signal_study.owner)
    url = reverse("api-study-rater-recalibrate", args=[signal_study.slug, rater.pk])
    assert api.post(url).status_code == 409
    assert RecalibrationRound.objects.count() == 1


def test_a_researcher_of_one_study_cannot_recalibrate_another_studys_rater(db):
    owner, stranger, viewer = (UserFactory(is_staff=True) for _ in range(3))
    study = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN, owner=owner)
    other = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN, owner=stranger)
    from evalstudy.models import StudyCollaborator
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    mine, theirs = _half_rated(study, "mine"), _half_rated(other, "theirs")

    def api_url(s, r):
        return reverse("api-study-rater-recalibrate", args=[s.slug, r.pk])

    # the owner of `study` naming the other study's rater: 404 on both routes
    assert token_client(owner).post(api_url(study, theirs)).status_code == 404
    client = Client()
    client.force_login(owner)
    assert client.post(reverse("annotation:rater_action",
                               args=[study.slug, theirs.pk, "recalibrate"])).status_code == 404
    # the other study's owner on this study: not their study
    assert token_client(stranger).post(api_url(study, mine)).status_code == 404
    assert token_client(viewer).post(api_url(study, mine)).status_code == 403
    assert not RecalibrationRound.objects.exists()
    assert token_client(owner).post(api_url(study, mine)).status_code == 200
    assert RecalibrationRound.objects.get().rater == mine
