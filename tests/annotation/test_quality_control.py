"""Live quality control through the database: the monitor flags simulated speeders and
straight-liners from their real judgments (in a bounded number of queries), the calibration
pass mark stops a rater through the rater pages, and researchers exclude, include and reopen a
rater's seat through the API (audited, permission-checked), which the analysis follows."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from analysis.selectors import JudgmentFilter, exclusions_describe, judgments_tidy
from annotation.models import Judgment
from annotation.monitor_selectors import study_monitor
from annotation.rater_actions import rater_exclude
from annotation.services import judgment_submit, progress_export
from evalstudy.models import Assignment, AuditEvent, Enrollment, Study, StudyCollaborator
from evalstudy.services import assignment_next
from tests.factories import UserFactory, invite, make_study, token_client

GOOD = {"severity": "0", "usable": "yes"}


def _truth(output_id: int) -> dict[str, str]:
    severity = str(output_id % 3)
    return {"severity": severity, "usable": "yes" if severity == "0" else "no"}


def _rate_all(study: Study, rater, *, seconds: float, answer, start: dt.datetime) -> None:
    """The rater answers every slot of their seat, each `seconds` after it was served."""
    now = start
    while (slot := assignment_next(study=study, rater=rater, now=now)) is not None:
        if slot.kind == "target":
            answers = answer(slot)
        else:
            answers = GOOD  # the practice item, answered as expected
        now = now + dt.timedelta(seconds=seconds)
        judgment_submit(rater=rater, slot_id=slot.pk, answers=answers, now=now)
        now = now + dt.timedelta(seconds=1)


def give_to_a_new_owner(study: Study):
    """A new staff user who owns `study` (the researcher acting in the test)."""
    owner = UserFactory(is_staff=True)
    study.owner = owner
    study.save(update_fields=["owner"])
    return owner


@pytest.fixture
def qc_study(db):
    """Crossed: 6 raters each rate the same 12 outputs. Four careful raters (about 12 s per
    item, the true answer), one speeder (1 s, a fixed guess), one straight-liner (12 s,
    severity 1 and usable "no" on every item)."""
    study = make_study(n_items=6, n_systems=2, design="crossed", ratings_per_output=6,
                       status=Study.Status.OPEN)
    start = timezone.now() - dt.timedelta(hours=2)
    for k in range(4):
        careful = invite(study, external_id=f"careful-{k}")
        _rate_all(study, careful, seconds=11 + k, start=start,
                  answer=lambda slot: _truth(slot.output_id))
    speeder = invite(study, external_id="speeder")
    _rate_all(study, speeder, seconds=1, start=start,
              answer=lambda slot: {"severity": "2", "usable": "yes"}
              if slot.output_id % 2 else {"severity": "0", "usable": "no"})
    liner = invite(study, external_id="liner")
    _rate_all(study, liner, seconds=12, start=start,
              answer=lambda slot: {"severity": "1", "usable": "no"})
    return study


def test_the_monitor_flags_the_speeder_and_the_straight_liner(qc_study):
    monitor = study_monitor(qc_study)
    rows = {row.rater: row for row in monitor.raters}
    assert set(rows) == {"careful-0", "careful-1", "careful-2", "careful-3", "speeder", "liner"}
    assert monitor.speeder_derived and monitor.speeder_seconds is not None
    assert 1.0 < monitor.speeder_seconds < 11.0
    assert [name for name, row in rows.items() if row.speeder] == ["speeder"]
    assert rows["speeder"].min_seconds == pytest.approx(1.0)
    assert [name for name, row in rows.items() if row.straightlining] == ["liner"]
    assert "severity" in rows["liner"].straightlining_detail
    # Agreement and competence put the careful raters above the other two.
    careful = [rows[f"careful-{k}"] for k in range(4)]
    for bad in (rows["speeder"], rows["liner"]):
        assert bad.agreement < min(r.agreement for r in careful)
        assert bad.competence < min(r.competence for r in careful)
    assert monitor.competence_criteria == ["severity", "usable"]


def test_the_studys_own_speeder_threshold_wins(qc_study):
    qc_study.speeder_seconds = 12.5
    qc_study.save(update_fields=["speeder_seconds"])
    monitor = study_monitor(qc_study)
    assert not monitor.speeder_derived and monitor.speeder_seconds == 12.5
    flagged = {row.rater for row in monitor.raters if row.speeder}
    assert flagged == {"speeder", "careful-0", "careful-1", "liner"}  # 1, 11, 12, 12 s


def test_the_monitor_reads_a_bounded_number_of_queries(qc_study):
    with CaptureQueriesContext(connection) as six:
        study_monitor(qc_study)
    small = make_study(n_items=2, n_systems=2, design="crossed", ratings_per_output=2,
                       status=Study.Status.OPEN)
    for k in range(2):
        _rate_all(small, invite(small, external_id=f"few-{k}"), seconds=9,
                  start=timezone.now() - dt.timedelta(hours=1),
                  answer=lambda slot: _truth(slot.output_id))
    with CaptureQueriesContext(connection) as two:
        study_monitor(small)
    assert len(six.captured_queries) == len(two.captured_queries) <= 14


def test_the_csv_and_the_progress_api_carry_the_quality_columns(qc_study):
    stream = io.StringIO()
    progress_export(study=qc_study, stream=stream)
    rows = {row["rater"]: row for row in csv.DictReader(io.StringIO(stream.getvalue()))}
    assert rows["speeder"]["speeder"] == "1" and rows["careful-0"]["speeder"] == "0"
    assert rows["liner"]["straightlining"] == "1"
    assert float(rows["careful-0"]["competence"]) > float(rows["speeder"]["competence"])
    owner = give_to_a_new_owner(qc_study)
    body = token_client(owner).get(reverse("api-study-progress",
                                           args=[qc_study.slug])).json()
    found = {row["rater"]: row for row in body["raters"]}
    assert found["speeder"]["speeder"] is True and found["liner"]["straightlining"] is True
    assert body["speeder_derived"] is True and body["competence_criteria"] == ["severity",
                                                                              "usable"]


def test_the_monitor_fragment_shows_flags_and_actions(qc_study):
    owner = give_to_a_new_owner(qc_study)
    client = Client()
    client.force_login(owner)
    html = client.get(reverse("annotation:monitor_fragment",
                              args=[qc_study.slug])).content.decode()
    assert 'aria-label="Speeder"' in html and ">straight</span>" in html
    assert html.count('name="csrfmiddlewaretoken"') >= 6
    # The buttons post to the monitor's own action view (htmx or a plain form), not the API.
    assert "/raters/" in html and "/exclude/" in html and "/reopen/" in html
    assert "/api/" not in html
    # A viewer reads the flags but is offered no action (the API would refuse it anyway).
    viewer = UserFactory(is_staff=True)
    StudyCollaborator.objects.create(study=qc_study, user=viewer, role="viewer")
    client.force_login(viewer)
    for name in ("annotation:monitor_fragment", "annotation:monitor"):
        page = client.get(reverse(name, args=[qc_study.slug])).content.decode()
        assert 'aria-label="Speeder"' in page and "/exclude/" not in page, name


# --- the calibration pass mark -------------------------------------------------------------
def _slot_id(html: str) -> int:
    return int(re.search(r'/slots/(\d+)/"', html).group(1))


@pytest.mark.parametrize("answers, stopped", [({"severity": "2", "usable": "no"}, True),
                                              (GOOD, False)])
def test_the_calibration_pass_mark_gates_the_real_items(db, answers, stopped):
    study = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN,
                       calibration_pass_mark=1.0)
    rater = invite(study)
    client = Client()
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    page = client.get(reverse("annotation:rate", args=[study.slug]), follow=True)
    assert "Practice item" in page.content.decode()
    slot_id = _slot_id(page.content.decode())
    response = client.post(reverse("annotation:submit", args=[study.slug, slot_id]), answers)
    assert response.url.endswith(f"/slots/{slot_id}/feedback/")  # the feedback comes first
    html = client.get(reverse("annotation:rate", args=[study.slug]), follow=True
                      ).content.decode()
    enrollment = Enrollment.objects.get(rater=rater)
    if stopped:
        assert "did not reach the study's pass mark" in html
        assert enrollment.stop_reason == "calibration"
        seat = Assignment.objects.get(rater=rater)
        assert seat.state == Assignment.State.EXPIRED  # the real items went to someone else
        assert not Judgment.objects.filter(rater=rater, slot__kind="target").exists()
    else:
        assert enrollment.stopped_at is None
        assert "/slots/" in html and "Practice item" not in html


def test_the_pass_mark_waits_for_every_practice_item_and_speaks_french(db):
    from evalstudy.models import CalibrationItem

    study = make_study(n_items=4, n_systems=2, calibration_pass_mark=0.5, language="fr")
    CalibrationItem.objects.create(study=study, key="calib-bad", reference="call mum",
                                   text="call bob", expected={"severity": "2"})
    from evalstudy.services import study_open
    study_open(study=study)
    rater = invite(study)
    first = assignment_next(study=study, rater=rater)
    judgment_submit(rater=rater, slot_id=first.pk, answers={"severity": "1", "usable": "no"})
    assert Enrollment.objects.get(rater=rater).stopped_at is None  # one more to answer
    second = assignment_next(study=study, rater=rater)
    assert second.kind == "calibration"
    counts = judgment_submit(rater=rater, slot_id=second.pk,
                             answers={"severity": "1", "usable": "no"})
    assert counts.stopped and Enrollment.objects.get(rater=rater).stop_reason == "calibration"
    client = Client()
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    html = client.get(reverse("annotation:rate", args=[study.slug]), follow=True
                      ).content.decode()
    assert "seuil de réussite" in html


# --- researchers' actions on a rater ----------------------------------------------------------
def _url(name: str, study: Study, rater) -> str:
    return reverse(name, kwargs={"slug": study.slug, "pk": rater.pk})


def test_exclude_and_include_are_audited_and_followed_by_the_analysis(qc_study):
    owner = give_to_a_new_owner(qc_study)
    api = token_client(owner)
    speeder = Enrollment.objects.get(rater__external_id="speeder").rater
    everyone = judgments_tidy(qc_study)
    assert "speeder" in set(everyone["rater"])

    response = api.post(_url("api-study-rater-exclude", qc_study, speeder),
                        {"reason": "median 1 s per item"}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["excluded"] is True and response["HX-Trigger"] == "monitor-refresh"
    enrollment = Enrollment.objects.get(rater=speeder)
    assert enrollment.excluded_by == owner and enrollment.excluded_reason == "median 1 s per item"
    kept = judgments_tidy(qc_study)
    assert "speeder" not in set(kept["rater"])
    assert len(kept) < len(everyone)
    assert len(judgments_tidy(qc_study, JudgmentFilter(include_excluded=True))) == len(
        everyone)
    assert "raters excluded by the researcher excluded" in JudgmentFilter().describe()
    assert Judgment.objects.filter(rater=speeder).exists()  # the judgments stay stored
    row = next(r for r in study_monitor(qc_study).raters if r.rater == "speeder")
    assert row.excluded and row.excluded_reason == "median 1 s per item"

    assert api.post(_url("api-study-rater-include", qc_study, speeder)).status_code == 200
    assert len(judgments_tidy(qc_study)) == len(everyone)
    events = list(AuditEvent.objects.filter(study=qc_study, action="update",
                                            target_type="evalstudy.enrollment")
                  .order_by("pk").values_list("changes", "source", "actor"))
    assert [(c["excluded_from_analysis"], s, a) for c, s, a in events] == [
        ([False, True], "api", owner.pk), ([True, False], "api", owner.pk)]


def test_min_competence_leaves_out_the_raters_mace_distrusts(qc_study):
    kept = judgments_tidy(qc_study, JudgmentFilter(min_competence=0.6))
    assert set(kept["rater"]) == {f"careful-{k}" for k in range(4)}
    # The report says how many raters each rater-level exclusion removed, and why.
    speeder = Enrollment.objects.get(study=qc_study, rater__external_id="speeder")
    rater_exclude(study=qc_study, rater_id=speeder.rater_id, reason="1 s per item")
    said = exclusions_describe(qc_study, JudgmentFilter(min_competence=0.6))
    assert said[0] == ("1 rater excluded by the researcher on the monitor: left out (reasons "
                       "given: 1 s per item)")
    assert said[1].startswith("2 raters with a MACE competence below 0.6 left out (competences ")
    assert exclusions_describe(qc_study, JudgmentFilter(include_excluded=True))[0].endswith(
        "included (include_excluded) (reasons given: 1 s per item)")
    with pytest.raises(TypeError):
        JudgmentFilter(min_competence=2)


def test_the_analysis_reads_competence_from_the_rater_quality_selector_not_the_monitor(
        qc_study, monkeypatch):
    """The analysis asks for MACE competence alone (annotation.rater_quality), not for the
    monitor's every signal (straight-lining, agreement, drift windows) to keep one number, and
    gets the number the monitor shows."""
    from analysis.selectors import rater_competences
    from annotation import rater_quality

    shown = {row.rater_id: row.competence for row in study_monitor(qc_study).raters
             if row.competence is not None}
    monkeypatch.setattr(rater_quality, "rater_signals",
                        lambda study: pytest.fail("the analysis computed the monitor's signals"))
    assert rater_competences(qc_study) == pytest.approx(shown)
    assert len(shown) == 6


def test_the_analysis_reads_nothing_of_the_monitor_page():
    from tests.test_architecture import ROOT, imports_of, source_files

    readers = sorted({imp.module for path in source_files(ROOT, packages=("analysis",))
                      for imp in imports_of(path, ROOT)
                      if imp.target.startswith("annotation.monitor")})
    assert readers == []


def test_reopen_hands_the_unjudged_slots_on_and_keeps_the_judgments(db):
    owner = UserFactory(is_staff=True)
    study = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN, owner=owner)
    rater = invite(study)
    for _ in range(3):
        slot = assignment_next(study=study, rater=rater)
        judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    api = token_client(owner)
    response = api.post(_url("api-study-rater-reopen-seat", study, rater))
    assert response.status_code == 200, response.content
    body = response.json()
    old = Assignment.objects.get(rater=rater)
    replacement = Assignment.objects.get(pk=body["replacement_seat"])
    assert old.state == Assignment.State.EXPIRED and replacement.replaces == old
    assert replacement.rater is None and replacement.state == Assignment.State.OPEN
    assert body["stopped"] == "reopened"
    assert Judgment.objects.filter(rater=rater).count() == 6  # 3 slots x 2 criteria, kept
    assert AuditEvent.objects.filter(study=study, target_type="evalstudy.assignment",
                                     target_id=str(old.pk), source="api").exists()
    # Nothing left to hand on: a conflict, and nothing changes.
    again = api.post(_url("api-study-rater-reopen-seat", study, rater))
    assert again.status_code == 409
    # The rater's page says the researcher ended it.
    client = Client()
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    html = client.get(reverse("annotation:rate", args=[study.slug]), follow=True
                      ).content.decode()
    assert "researcher has ended your participation" in html


def test_reopen_a_finished_list_needs_all_items_and_copies_every_slot(qc_study):
    owner = give_to_a_new_owner(qc_study)
    api = token_client(owner)
    liner = Enrollment.objects.get(rater__external_id="liner").rater
    assert api.post(_url("api-study-rater-reopen-seat", qc_study, liner)).status_code == 409
    response = api.post(_url("api-study-rater-reopen-seat", qc_study, liner),
                        {"all_items": True}, content_type="application/json")
    assert response.status_code == 200, response.content
    old = Assignment.objects.get(rater=liner)
    replacement = Assignment.objects.get(pk=response.json()["replacement_seat"])
    assert replacement.slots.count() == old.slots.count()
    assert not replacement.slots.filter(completed_at__isnull=False).exists()


def test_only_editors_of_the_study_act_and_another_studys_rater_is_a_404(db):
    owner, viewer, stranger = (UserFactory(is_staff=True) for _ in range(3))
    study = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN, owner=owner)
    other = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN, owner=stranger)
    from evalstudy.models import StudyCollaborator
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    mine, theirs = invite(study), invite(other)
    url = _url("api-study-rater-exclude", study, mine)
    assert token_client(viewer).post(url).status_code == 403
    assert token_client(stranger).post(url).status_code == 404  # not their study
    # The other study's owner, on their own study, naming a rater of this one: 404.
    assert token_client(stranger).post(
        _url("api-study-rater-exclude", other, mine)).status_code == 404
    # This study's owner naming the other study's rater: 404, and nothing changes.
    for name in ("api-study-rater-exclude", "api-study-rater-include",
                 "api-study-rater-reopen-seat"):
        assert token_client(owner).post(_url(name, study, theirs)).status_code == 404
    assert not Enrollment.objects.filter(excluded_at__isnull=False).exists()
    assert token_client(owner).post(url).status_code == 200


def test_the_monitor_buttons_work_without_javascript_and_with_htmx(qc_study):
    """A plain form post lands back on the monitor with a message (it used to land on the
    API's JSON); an htmx post answers the status line and refreshes the table."""
    owner = give_to_a_new_owner(qc_study)
    speeder = Enrollment.objects.get(study=qc_study, rater__external_id="speeder").rater
    client = Client()
    client.force_login(owner)
    url = reverse("annotation:rater_action", args=[qc_study.slug, speeder.pk, "exclude"])
    response = client.post(url, {"reason": "0.2 s per item"}, follow=True)
    assert response.redirect_chain[-1][0].endswith(f"/monitor/{qc_study.slug}/#raters")
    assert "excluded from the analysis" in response.content.decode()
    enrollment = Enrollment.objects.get(study=qc_study, rater=speeder)
    assert enrollment.excluded_at is not None and enrollment.excluded_reason == "0.2 s per item"
    assert AuditEvent.objects.filter(study=qc_study, source="web",
                                     target_type="evalstudy.enrollment").exists()
    include = reverse("annotation:rater_action", args=[qc_study.slug, speeder.pk, "include"])
    answer = client.post(include, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and answer["HX-Trigger"] == "monitor-refresh"
    assert "included in the analysis again" in answer.content.decode()
    # Reopening a finished list without all_items changes nothing and says why.
    reopen = reverse("annotation:rater_action", args=[qc_study.slug, speeder.pk, "reopen"])
    refused = client.post(reopen, HTTP_HX_REQUEST="true").content.decode()
    assert "nothing changed" in refused and 'class="warn"' in refused
    assert client.post(reverse("annotation:rater_action",
                               args=[qc_study.slug, speeder.pk, "delete"])).status_code == 404
    assert client.get(url).status_code == 405
    # A viewer may not act; another lab's owner does not see the study at all.
    viewer, stranger = UserFactory(is_staff=True), UserFactory(is_staff=True)
    StudyCollaborator.objects.create(study=qc_study, user=viewer, role="viewer")
    client.force_login(viewer)
    assert client.post(url).status_code == 403
    client.force_login(stranger)
    assert client.post(url).status_code == 404
    assert Enrollment.objects.get(study=qc_study, rater=speeder).excluded_at is None


# --- the quality settings in study files and the study API ---------------------------------
def test_the_quality_settings_travel_in_study_files_and_the_api(db):
    from evalstudy.importers import study_import_spec, study_spec_export
    from evalstudy.spec.errors import SpecInvalid
    from evalstudy.spec.study import parse_study_spec
    from tests.evalstudy.test_spec import BASE, edit

    text = edit(BASE, "  title: Tiny study\n",
                "  title: Tiny study\n  speeder_seconds: 2.5\n  calibration_pass_mark: 0.8\n")
    owner = UserFactory(is_staff=True)
    study, _ = study_import_spec(spec=parse_study_spec(text, "q.yaml"), file_name="q.yaml",
                                 owner=owner)
    assert (study.speeder_seconds, study.calibration_pass_mark) == (2.5, 0.8)
    assert study_spec_export(study=study, fmt="yaml")["study"]["calibration_pass_mark"] == 0.8
    with pytest.raises(SpecInvalid, match=r"q.yaml:5: study.calibration_pass_mark: must be "
                                          r"at least 0.0 and at most 1.0, got 1.5"):
        parse_study_spec(edit(text, "0.8", "1.5"), "q.yaml")
    client = Client()
    client.force_login(owner)
    url = reverse("api-study", args=[study.slug])
    assert client.get(url).json()["calibration_pass_mark"] == 0.8
    bad = client.patch(url, {"calibration_pass_mark": 2}, content_type="application/json")
    assert bad.status_code == 400 and "calibration_pass_mark" in bad.json()["field_errors"]
    ok = client.patch(url, {"speeder_seconds": None}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["speeder_seconds"] is None
