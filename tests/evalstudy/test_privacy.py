"""Rater personal data: the export holds what crowd entry stored; erasure replaces it with a
pseudonym and leaves every judgment, and so every analysis input, as it was."""

import json
import re

import pytest
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from analysis.selectors import JudgmentFilter, judgments_tidy
from annotation.models import Judgment
from evalstudy.models import AuditEvent, Enrollment, Rater, Study
from evalstudy.privacy import NotAPerson, rater_data_erase, rater_data_export
from tests.factories import RaterFactory, UserFactory, make_study

PID = "60a7c1e2f3b4d5e6f7a8b9c0"


@pytest.fixture
def consented_study(db):
    return make_study(n_items=4, n_systems=2, status=Study.Status.OPEN,
                      consent_text="You agree to take part.")


def _rate_everything(client, consented_study):
    client.post(reverse("annotation:consent", args=[consented_study.slug]), {"consent": "yes"})
    for _ in range(20):
        html = client.get(reverse("annotation:rate", args=[consented_study.slug]), follow=True)
        match = re.search(r'/slots/(\d+)/"', html.content.decode())
        if match is None:
            return
        client.post(reverse("annotation:submit", args=[consented_study.slug, int(match.group(1))]),
                    {"severity": "1", "usable": "yes"})
    raise AssertionError("the list did not end")


@pytest.fixture
def participant(consented_study):
    """A crowd participant who came from Prolific, consented and rated the whole list; plus a
    second participant whose data must stay untouched."""
    client = Client()
    client.get(reverse("annotation:crowd_entry", args=[consented_study.slug]),
               {"PROLIFIC_PID": PID, "STUDY_ID": "prolific-study-1", "SESSION_ID": "sess-77"})
    _rate_everything(client, consented_study)
    other = Client()
    other.get(reverse("annotation:crowd_entry", args=[consented_study.slug]),
              {"PROLIFIC_PID": "5f1e2d3c4b5a69788796ffff", "SESSION_ID": "sess-88"})
    _rate_everything(other, consented_study)
    rater = Rater.objects.get(external_id=PID)
    rater.metadata = {"email": "ann@example.org", "age_band": "30-39"}
    rater.save()
    return rater, client


def test_export_contains_what_crowd_entry_stored(participant, consented_study):
    rater, _ = participant
    data = rater_data_export(rater)
    json.dumps(data)  # JSON-safe
    assert data["rater"]["external_id"] == PID and data["rater"]["display_name"] == PID
    assert data["rater"]["metadata"] == {"email": "ann@example.org", "age_band": "30-39"}
    assert data["rater"]["has_personal_entry_link"] is True
    assert rater.access_token not in json.dumps(data)  # a credential, not personal data
    [enrollment] = data["enrollments"]
    assert enrollment["study"] == consented_study.slug
    assert enrollment["platform_study_id"] == "prolific-study-1"
    assert enrollment["platform_session_id"] == "sess-77"
    assert enrollment["consented_at"] is not None
    n_judgments = Judgment.objects.filter(rater=rater).count()
    assert n_judgments > 0 and data["judgments_per_study"] == {consented_study.slug: n_judgments}
    assert data["assignments"][0]["study"] == consented_study.slug
    assert data["user"] is None


def test_export_keeps_its_shape_with_the_other_apps_parts_in_place(participant):
    """The annotation app contributes its judgments through the privacy registry; the document
    keeps its keys and their order (a downloaded export is compared across versions)."""
    rater, _ = participant
    assert list(rater_data_export(rater)) == [
        "scope", "rater", "account", "user", "enrollments", "assignments",
        "judgments_per_study", "judgment_revisions", "media_listening",
        "answer_behaviour", "recalibration_rounds", "agreement_alerts",
        "prolific_submissions", "exported_at"]


def test_export_of_an_account_holder_includes_the_account(db):
    user = UserFactory(username="slp.jones", email="jones@clinic.example", first_name="Pat")
    rater = RaterFactory(kind=Rater.Kind.SLP, user=user, external_id="", display_name="Pat J")
    data = rater_data_export(rater)
    assert data["user"]["username"] == "slp.jones"
    assert data["user"]["email"] == "jones@clinic.example"
    assert data["user"]["first_name"] == "Pat"


def test_erase_keeps_judgments_and_analysis_inputs(participant, consented_study):
    rater, _ = participant
    other = Rater.objects.get(external_id="5f1e2d3c4b5a69788796ffff")
    judgments_before = list(Judgment.objects.order_by("id").values())
    tidy_before = judgments_tidy(consented_study, JudgmentFilter()).sort_values("judgment")
    researcher = UserFactory(username="pi", is_staff=True)

    rater_data_erase(rater, actor=researcher, source="admin")

    rater.refresh_from_db()
    assert rater.external_id.startswith("erased-") and rater.display_name == rater.external_id
    assert PID not in json.dumps(rater_data_export(rater))
    assert rater.metadata.keys() == {"erased_at"}
    assert Enrollment.objects.get(rater=rater).platform_session_id == ""
    assert Enrollment.objects.get(rater=rater).consented_at is not None  # evidence is kept
    assert list(Judgment.objects.order_by("id").values()) == judgments_before
    tidy_after = judgments_tidy(consented_study, JudgmentFilter()).sort_values("judgment")
    # The same rows and values; only the erased rater's label differs, one-to-one.
    labels = dict(zip(tidy_before["rater"], tidy_after["rater"], strict=True))
    other_pid = "5f1e2d3c4b5a69788796ffff"
    assert labels[PID] == rater.external_id and labels[other_pid] == other_pid
    assert len(set(labels.values())) == len(labels)
    unchanged = [c for c in tidy_before.columns if c != "rater"]
    assert tidy_after[unchanged].reset_index(drop=True).equals(
        tidy_before[unchanged].reset_index(drop=True))
    other.refresh_from_db()
    assert other.external_id == "5f1e2d3c4b5a69788796ffff"
    event = AuditEvent.objects.get(action="erase")
    assert event.actor == researcher and event.target_id == str(rater.pk)
    assert PID not in json.dumps(event.changes) + event.target_repr


def test_erase_ends_the_entry_link_and_the_participants_session(participant, consented_study):
    rater, client = participant
    old_token = rater.access_token
    assert Session.objects.count() == 2
    rater_data_erase(rater, actor=None)
    rater.refresh_from_db()
    assert rater.access_token != old_token
    assert Client().get(reverse("annotation:enter", args=[old_token])).status_code == 404
    assert Session.objects.count() == 1  # the other participant's session is kept
    response = client.get(reverse("annotation:rate", args=[consented_study.slug]))
    assert response.status_code == 404  # no rater behind this browser any more


def test_erase_anonymises_and_deactivates_the_account(db):
    user = UserFactory(username="slp.jones", email="jones@clinic.example", first_name="Pat")
    rater = RaterFactory(kind=Rater.Kind.SLP, user=user, external_id="", display_name="Pat J")
    rater_data_erase(rater, actor=None)
    user.refresh_from_db()
    rater.refresh_from_db()
    assert rater.user is None
    assert (user.email, user.first_name, user.is_active) == ("", "", False)
    assert user.username.startswith("erased-") and not user.has_usable_password()


def test_erase_twice_keeps_the_pseudonym_and_scrubs_earlier_audit_events(participant):
    rater, _ = participant
    admin = Client()
    admin.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    change = reverse("admin:evalstudy_rater_change", args=[rater.pk])
    form = {"kind": "crowd", "external_id": PID, "display_name": "Ann Example",
            "metadata": json.dumps(rater.metadata), "user": ""}
    assert admin.post(change, form).status_code == 302
    edit = AuditEvent.objects.get(action="update", target_type="evalstudy.rater")
    assert "Ann Example" in json.dumps(edit.changes) + edit.target_repr
    rater_data_erase(rater, actor=None)
    rater.refresh_from_db()
    pseudonym = rater.external_id
    rater_data_erase(rater, actor=None)
    rater.refresh_from_db()
    assert rater.external_id == pseudonym
    edit.refresh_from_db()
    assert "Ann Example" not in json.dumps(edit.changes) + edit.target_repr


def test_proxies_are_not_people(db):
    proxy = RaterFactory(kind=Rater.Kind.LLM, external_id="gpt-judge")
    with pytest.raises(NotAPerson):
        rater_data_erase(proxy, actor=None)
    proxy.refresh_from_db()
    assert proxy.external_id == "gpt-judge"


def test_command_exports_and_erases(participant, tmp_path, capsys):
    rater, _ = participant
    out = tmp_path / "data.json"
    call_command("rater_data", "--export", PID, "--out", str(out))
    assert json.loads(out.read_text())["rater"]["external_id"] == PID
    assert "wrote the personal data" in capsys.readouterr().out
    call_command("rater_data", "--export", str(rater.pk))
    assert json.loads(capsys.readouterr().out)["rater"]["id"] == rater.pk
    with pytest.raises(CommandError, match="--yes"):
        call_command("rater_data", "--erase", PID)
    assert Rater.objects.filter(external_id=PID).exists()
    with pytest.raises(CommandError, match="no rater"):
        call_command("rater_data", "--erase", "nobody", "--yes")
    call_command("rater_data", "--erase", PID, "--yes")
    assert not Rater.objects.filter(external_id=PID).exists()
    assert AuditEvent.objects.filter(action="erase", source="command").count() == 1
    assert AuditEvent.objects.filter(action="export", target_id=str(rater.pk)).count() == 2


def test_admin_actions_export_and_erase_with_confirmation(participant):
    rater, _ = participant
    admin = Client()
    admin.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    changelist = reverse("admin:evalstudy_rater_changelist")
    response = admin.post(changelist, {"action": "export_personal_data",
                                       "_selected_action": [rater.pk]})
    assert response["Content-Type"].startswith("application/json")
    assert json.loads(response.content)["rater"]["external_id"] == PID
    page = admin.post(changelist, {"action": "erase_personal_data",
                                   "_selected_action": [rater.pk]})
    assert b"cannot be undone" in page.content
    assert Rater.objects.filter(external_id=PID).exists()  # not before confirming
    admin.post(changelist, {"action": "erase_personal_data", "_selected_action": [rater.pk],
                            "confirm": "yes"})
    assert not Rater.objects.filter(external_id=PID).exists()


def _analyse(consented_study):
    from analysis.services import analysis_run_execute, analysis_run_start

    run = analysis_run_start(study=consented_study, options={"engine": "statsmodels", "pdf": True},
                             enqueue=False)
    return analysis_run_execute(run)


def _stored_text(model) -> str:
    """Every stored text of every row of `model`, as one string (JSON fields dumped)."""
    rows = model.objects.all().values()
    return "\n".join(json.dumps(row, default=str, ensure_ascii=False) for row in rows)


def test_erase_scrubs_analysis_runs_and_enrollment_events(participant, consented_study):
    """Analyses stored under the rater's old names (the PID, then a display name given in the
    admin) and audit events about its enrollment (an admin deletion records the platform
    session id) keep none of them after the erasure; the numbers stay the same."""
    from analysis.models import AnalysisRun

    rater, _ = participant
    admin = Client()
    admin.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    first = _analyse(consented_study)  # names the rater by its PID
    assert PID in json.dumps(first.result) and bytes(first.report_pdf).startswith(b"%PDF")
    form = {"kind": "crowd", "external_id": PID, "display_name": "Ann O'Brien",
            "metadata": json.dumps(rater.metadata), "user": ""}
    assert admin.post(reverse("admin:evalstudy_rater_change", args=[rater.pk]),
                      form).status_code == 302
    second = _analyse(consented_study)  # names it "Ann O'Brien"
    assert "Ann O'Brien" in json.dumps(second.result)
    # The review's case: an HTML report that shows the name (escaped) and a note with it.
    second.report_html += "<p>Rater Ann O&#x27;Brien screened out</p>"
    second.save(update_fields=["report_html"])
    enrollment = Enrollment.objects.get(rater=rater)
    delete = reverse("admin:evalstudy_enrollment_delete", args=[enrollment.pk])
    assert admin.post(delete, {"post": "yes"}).status_code == 302
    event = AuditEvent.objects.get(action="delete", target_type="evalstudy.enrollment")
    assert PID in event.target_repr or "Ann O'Brien" in event.target_repr
    # A secret: the trail never holds the platform session id (the review's case).
    assert "sess-77" not in json.dumps(event.changes)
    other_enrollment = Enrollment.objects.get(rater__external_id="5f1e2d3c4b5a69788796ffff")
    from evalstudy.audit import audit_record

    audit_record(actor=None, action=AuditEvent.Action.UPDATE, target=other_enrollment,
                 changes={"platform_session_id": ["sess-88", "sess-88b"]})
    results_before = {run.pk: run.result for run in AnalysisRun.objects.all()}

    rater_data_erase(rater, actor=None)

    rater.refresh_from_db()
    pseudonym = rater.external_id
    erased = [PID, "sess-77", "Ann O'Brien", "Ann O&#x27;Brien", "Ann O\\u0027Brien",
              "ann@example.org"]
    for text in (_stored_text(AnalysisRun), _stored_text(AuditEvent)):
        assert not [value for value in erased if value in text]
    for run in AnalysisRun.objects.all():
        # The same numbers, under the pseudonym; the PDF is gone and the run says so.
        renamed = json.dumps(results_before[run.pk]).replace(PID, pseudonym).replace(
            "Ann O'Brien", pseudonym)
        assert run.result == json.loads(renamed)
        assert pseudonym in json.dumps(run.result)
        assert run.report_pdf is None and "PDF removed" in run.step
        assert "5f1e2d3c4b5a69788796ffff" in json.dumps(run.result)
    assert f"Rater {pseudonym} screened out" in AnalysisRun.objects.get(pk=second.pk).report_html
    event.refresh_from_db()
    assert event.target_repr == f"{pseudonym} in {consented_study.slug}"
    assert "platform_session_id" not in event.changes  # never recorded
    assert event.changes["rater"] == [rater.pk, None]  # the link to the pseudonymous row stays
    # The other participant's event and values are untouched.
    kept = AuditEvent.objects.get(target_type="evalstudy.enrollment",
                                  target_id=str(other_enrollment.pk))
    assert kept.target_repr == f"5f1e2d3c4b5a69788796ffff in {consented_study.slug}"
    assert kept.changes == {"platform_session_id": ["sess-88", "sess-88b"]}
    assert AuditEvent.objects.get(action="erase").changes["analysis_runs_scrubbed"] == 2


@pytest.mark.slow
def test_gunicorn_access_log_keeps_no_entry_token_or_prolific_id(db):
    """The real gunicorn config on loopback: the access log shows the paths with secret
    segments masked and never the query string nor the referrer."""
    import socket
    import subprocess
    import time
    import urllib.error
    import urllib.request

    from tests.workers import ROOT, STARTUP_ENVIRONMENT, test_database_url

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**STARTUP_ENVIRONMENT, "DJANGO_SETTINGS_MODULE": "config.settings.test",
           "DATABASE_URL": test_database_url(), "WEB_CONCURRENCY": "1",
           "GUNICORN_BIND": f"127.0.0.1:{port}", "ALLOWED_HOSTS": "127.0.0.1"}
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "-c", "config/gunicorn.conf.py", "config.wsgi"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    secret = "Zq9SecretEntryToken0123456789"
    base = f"http://127.0.0.1:{port}"
    paths = [f"/enter/{secret}/", f"/c/some-study/?PROLIFIC_PID={PID}&SESSION_ID=sess-77",
             f"/accounts/reset/MQ/{secret}-reset/", "/healthz"]
    try:
        deadline = time.monotonic() + 60
        for path in paths:
            request = urllib.request.Request(base + path,
                                             headers={"Referer": f"{base}/enter/{secret}/"})
            while True:
                try:
                    urllib.request.urlopen(request, timeout=10).read()
                    break
                except urllib.error.HTTPError:
                    break  # 404s and redirects to sign-in are logged all the same
                except OSError:
                    assert time.monotonic() < deadline and server.poll() is None, "no server"
                    time.sleep(0.3)
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    access = [line for line in output.splitlines() if '" ' in line and "us " in line]
    assert '"GET /enter/<token>/" 404' in output, output[-3000:]
    assert '"GET /c/some-study/" 404' in output
    assert '"GET /accounts/reset/MQ/<token>/"' in output
    assert '"GET /healthz" 200' in output
    for value in (secret, PID, "sess-77", "PROLIFIC_PID"):
        assert value not in "\n".join(access), access


def test_django_log_lines_never_carry_an_entry_token(db, client, caplog):
    """A bad entry link is logged as "Not Found: /enter/<token>/", never with the secret."""
    import logging

    from kit.logs import MaskSecretPaths

    configured = [f for h in logging.getLogger().handlers for f in h.filters]
    assert any(isinstance(f, MaskSecretPaths) for f in configured)  # LOGGING applies it
    caplog.handler.addFilter(MaskSecretPaths())
    with caplog.at_level(logging.WARNING, logger="django.request"):
        client.get("/enter/SuperSecretToken123/")
    assert "SuperSecretToken123" not in caplog.text
    assert "/enter/<token>/" in caplog.text
