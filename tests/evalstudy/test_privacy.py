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
def study(db):
    return make_study(n_items=4, n_systems=2, status=Study.Status.OPEN,
                      consent_text="You agree to take part.")


def _rate_everything(client, study):
    client.post(reverse("annotation:consent", args=[study.slug]), {"consent": "yes"})
    for _ in range(20):
        html = client.get(reverse("annotation:rate", args=[study.slug]), follow=True)
        match = re.search(r'/slots/(\d+)/"', html.content.decode())
        if match is None:
            return
        client.post(reverse("annotation:submit", args=[study.slug, int(match.group(1))]),
                    {"severity": "1", "usable": "yes"})
    raise AssertionError("the list did not end")


@pytest.fixture
def participant(study):
    """A crowd participant who came from Prolific, consented and rated the whole list; plus a
    second participant whose data must stay untouched."""
    client = Client()
    client.get(reverse("annotation:crowd_entry", args=[study.slug]),
               {"PROLIFIC_PID": PID, "STUDY_ID": "prolific-study-1", "SESSION_ID": "sess-77"})
    _rate_everything(client, study)
    other = Client()
    other.get(reverse("annotation:crowd_entry", args=[study.slug]),
              {"PROLIFIC_PID": "OTHERPID", "SESSION_ID": "sess-88"})
    _rate_everything(other, study)
    rater = Rater.objects.get(external_id=PID)
    rater.metadata = {"email": "ann@example.org", "age_band": "30-39"}
    rater.save()
    return rater, client


def test_export_contains_what_crowd_entry_stored(participant, study):
    rater, _ = participant
    data = rater_data_export(rater)
    json.dumps(data)  # JSON-safe
    assert data["rater"]["external_id"] == PID and data["rater"]["display_name"] == PID
    assert data["rater"]["metadata"] == {"email": "ann@example.org", "age_band": "30-39"}
    assert data["rater"]["has_personal_entry_link"] is True
    assert rater.access_token not in json.dumps(data)  # a credential, not personal data
    [enrollment] = data["enrollments"]
    assert enrollment["study"] == study.slug
    assert enrollment["platform_study_id"] == "prolific-study-1"
    assert enrollment["platform_session_id"] == "sess-77"
    assert enrollment["consented_at"] is not None
    n_judgments = Judgment.objects.filter(rater=rater).count()
    assert n_judgments > 0 and data["judgments_per_study"] == {study.slug: n_judgments}
    assert data["assignments"][0]["study"] == study.slug
    assert data["user"] is None


def test_export_of_an_account_holder_includes_the_account(db):
    user = UserFactory(username="slp.jones", email="jones@clinic.example", first_name="Pat")
    rater = RaterFactory(kind=Rater.Kind.SLP, user=user, external_id="", display_name="Pat J")
    data = rater_data_export(rater)
    assert data["user"]["username"] == "slp.jones"
    assert data["user"]["email"] == "jones@clinic.example"
    assert data["user"]["first_name"] == "Pat"


def test_erase_keeps_judgments_and_analysis_inputs(participant, study):
    rater, _ = participant
    other = Rater.objects.get(external_id="OTHERPID")
    judgments_before = list(Judgment.objects.order_by("id").values())
    tidy_before = judgments_tidy(study, JudgmentFilter()).sort_values("judgment")
    researcher = UserFactory(username="pi", is_staff=True)

    rater_data_erase(rater, actor=researcher, source="admin")

    rater.refresh_from_db()
    assert rater.external_id.startswith("erased-") and rater.display_name == rater.external_id
    assert PID not in json.dumps(rater_data_export(rater))
    assert rater.metadata.keys() == {"erased_at"}
    assert Enrollment.objects.get(rater=rater).platform_session_id == ""
    assert Enrollment.objects.get(rater=rater).consented_at is not None  # evidence is kept
    assert list(Judgment.objects.order_by("id").values()) == judgments_before
    tidy_after = judgments_tidy(study, JudgmentFilter()).sort_values("judgment")
    # The same rows and values; only the erased rater's label differs, one-to-one.
    labels = dict(zip(tidy_before["rater"], tidy_after["rater"], strict=True))
    assert labels[PID] == rater.external_id and labels["OTHERPID"] == "OTHERPID"
    assert len(set(labels.values())) == len(labels)
    unchanged = [c for c in tidy_before.columns if c != "rater"]
    assert tidy_after[unchanged].reset_index(drop=True).equals(
        tidy_before[unchanged].reset_index(drop=True))
    other.refresh_from_db()
    assert other.external_id == "OTHERPID"
    event = AuditEvent.objects.get(action="erase")
    assert event.actor == researcher and event.target_id == str(rater.pk)
    assert PID not in json.dumps(event.changes) + event.target_repr


def test_erase_ends_the_entry_link_and_the_participants_session(participant, study):
    rater, client = participant
    old_token = rater.access_token
    assert Session.objects.count() == 2
    rater_data_erase(rater, actor=None)
    rater.refresh_from_db()
    assert rater.access_token != old_token
    assert Client().get(reverse("annotation:enter", args=[old_token])).status_code == 404
    assert Session.objects.count() == 1  # the other participant's session is kept
    response = client.get(reverse("annotation:rate", args=[study.slug]))
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
