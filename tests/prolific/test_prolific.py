"""Prolific operations against a fake of Prolific's REST API on loopback (tests/prolific_fake):
linking, sync and matching, seats of returned and timed-out participants handed on at once,
approve / reject / bonus with the bodies Prolific documents, the token never shown, roles and
tenancy, and the bounded retry on 429 and 5xx."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from evalstudy.models import Assignment, AuditEvent, Enrollment, StudyCollaborator
from evalstudy.services import StudyFull, assignment_next, study_open
from prolific import services
from prolific.client import ProlificAuthError, ProlificClient, ProlificUnavailable
from prolific.models import ProlificLink, ProlificSubmission
from tests.factories import UserFactory, invite, make_study
from tests.prolific_fake import FakeProlific, running_fake

PSTUDY = "5f0e4a3b2c1d0e9f8a7b6c5d"
OTHER_PSTUDY = "6a0e4a3b2c1d0e9f8a7b6c5e"
P = ["aaaaaaaaaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaaaaaaaaa2", "aaaaaaaaaaaaaaaaaaaaaaa3",
     "aaaaaaaaaaaaaaaaaaaaaaa4"]
REASON = ("You answered every item in under two seconds and failed both attention checks, "
          "so the answers cannot be used in this study.")


@pytest.fixture
def fake(settings):
    with running_fake(FakeProlific(token="tok-secret-123")) as server:
        server.add_study(PSTUDY, "Speech study")
        server.add_study(OTHER_PSTUDY, "Another owner's study")
        settings.PROLIFIC_API_URL = server.url
        settings.PROLIFIC_API_TOKEN = ""
        settings.PROLIFIC_RETRIES = 2
        settings.PROLIFIC_TIMEOUT_S = 5
        yield server


def user(name, **kw):
    return UserFactory(username=name, is_staff=True, **kw)


def api(u):
    client = Client()
    client.force_login(u)
    return client


def post(client, url, body=None):
    return client.post(url, data=json.dumps(body or {}), content_type="application/json")


@pytest.fixture
def world(db, fake):
    owner, editor, viewer, other = (user(n) for n in ("owner", "editor", "viewer", "other"))
    study = make_study(owner=owner, slug="speech")  # 3 lists: 3 seats
    StudyCollaborator.objects.create(study=study, user=editor, role="editor")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    theirs = make_study(owner=other, slug="theirs")
    raters = [invite(study, external_id=pid) for pid in P]
    their_rater = invite(theirs, external_id=P[0])  # the same person in another owner's study
    return {"study": study, "theirs": theirs, "raters": raters, "their_rater": their_rater,
            "owner": owner, "editor": editor, "viewer": viewer, "other": other}


def link(world, study=None, pstudy=PSTUDY, token="tok-secret-123"):
    return services.prolific_link(study=study or world["study"], prolific_study_id=pstudy,
                                  api_token=token, actor=world["owner"], source="api")


def url(name, slug="speech", **kw):
    return reverse(name, kwargs={"slug": slug, **kw})


# --- link --------------------------------------------------------------------------------
def test_link_reads_the_study_from_prolific_and_audits(world, fake):
    response = post(api(world["editor"]), url("api-study-prolific"),
                    {"prolific_study_id": PSTUDY, "api_token": "tok-secret-123"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["prolific_name"] == "Speech study" and body["token_set"] is True
    assert "tok-secret-123" not in response.content.decode()
    assert "api_token" not in body
    assert fake.calls[-1][:2] == ("GET", f"/api/v1/studies/{PSTUDY}/")
    assert fake.calls[-1][3] == "Token tok-secret-123"
    event = AuditEvent.objects.get(study=world["study"], target_type="prolific link")
    assert event.source == "api" and event.actor == world["editor"]
    assert "tok-secret-123" not in json.dumps(event.changes)


def test_link_with_a_wrong_token_or_id_stores_nothing(world, fake):
    client = api(world["owner"])
    wrong = post(client, url("api-study-prolific"),
                 {"prolific_study_id": PSTUDY, "api_token": "guessed"})
    assert wrong.status_code == 400 and "Invalid token" in json.dumps(wrong.json())
    missing = post(client, url("api-study-prolific"),
                   {"prolific_study_id": "ffffffffffffffffffffffff",
                    "api_token": "tok-secret-123"})
    assert missing.status_code == 400 and "No such study" in json.dumps(missing.json())
    bad_id = post(client, url("api-study-prolific"),
                  {"prolific_study_id": "../../admin", "api_token": "tok-secret-123"})
    assert bad_id.status_code == 400
    assert not ProlificLink.objects.exists()
    assert not any("admin" in call[1] for call in fake.calls)  # no path injection sent


def test_token_from_the_environment(world, fake, settings, monkeypatch):
    settings.PROLIFIC_API_TOKEN = "tok-secret-123"
    fake.studies[PSTUDY]["internal_name"] = services.internal_name_for(world["study"])
    services.prolific_link(study=world["study"], prolific_study_id=PSTUDY, actor=None,
                           source="command")
    monkeypatch.setenv("PROLIFIC_TOKEN_SPEECH", "per-study-token")
    fake.token = "per-study-token"
    linked = services.prolific_link(study=world["study"], prolific_study_id=PSTUDY,
                                    token_env="PROLIFIC_TOKEN_SPEECH", actor=None,
                                    source="command")
    assert fake.calls[-1][3] == "Token per-study-token" and linked.api_token == ""


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "PATH; rm", "prolific_x",
                                  "PROLIFIC_API_URL"])
def test_a_link_cannot_send_another_secret_as_its_token(world, fake, monkeypatch, name):
    """token_env names only PROLIFIC_* variables: SECRET_KEY would go to Prolific as a token,
    and token_set would tell whether a variable exists."""
    monkeypatch.setenv("SECRET_KEY", "server-secret")
    before = len(fake.calls)
    response = post(api(world["owner"]), url("api-study-prolific"),
                    {"prolific_study_id": PSTUDY, "token_env": name})
    assert response.status_code == 400 and "token_env" in response.json()["field_errors"]
    admin_user = user(f"root-{len(name)}", is_superuser=True)
    page = api(admin_user).post(reverse("admin:prolific_prolificlink_add"), {
        "study": world["study"].pk, "prolific_study_id": PSTUDY, "token_env": name,
        "api_token": ""})
    assert page.status_code == 200 and not ProlificLink.objects.exists()
    assert len(fake.calls) == before  # nothing was sent
    # A row set otherwise (the shell) is not read either.
    row = ProlificLink(study=world["study"], prolific_study_id=PSTUDY, token_env="SECRET_KEY")
    assert services.token_for(row) == ""


def test_token_is_never_shown_by_the_api_nor_the_admin(world, fake):
    link(world)
    got = api(world["viewer"]).get(url("api-study-prolific"))
    assert got.status_code == 200 and got.json()["token_set"] is True
    assert "tok-secret-123" not in got.content.decode()
    admin_user = user("root", is_superuser=True)
    client = api(admin_user)
    the_link = ProlificLink.objects.get()
    page = client.get(reverse("admin:prolific_prolificlink_change", args=[the_link.pk]))
    assert page.status_code == 200
    assert "tok-secret-123" not in page.content.decode()
    listing = client.get(reverse("admin:prolific_prolificlink_changelist"))
    assert "tok-secret-123" not in listing.content.decode() and ">set<" in listing.content.decode()
    # The audit trail of the admin's save says the token changed, never what it is.
    response = client.post(reverse("admin:prolific_prolificlink_change", args=[the_link.pk]), {
        "study": world["study"].pk, "prolific_study_id": PSTUDY, "token_env": "",
        "api_token": ""})
    assert response.status_code == 302, response.content.decode()[:2000]
    the_link.refresh_from_db()
    assert the_link.api_token == "tok-secret-123"  # empty field: kept
    trail = json.dumps(list(AuditEvent.objects.values_list("changes", flat=True)))
    assert "tok-secret-123" not in trail


def test_admin_refuses_a_link_prolific_refuses(world, fake):
    admin_user = user("root", is_superuser=True)
    response = api(admin_user).post(reverse("admin:prolific_prolificlink_add"), {
        "study": world["study"].pk, "prolific_study_id": PSTUDY, "token_env": "",
        "api_token": "wrong"})
    assert response.status_code == 200 and "Invalid token" in response.content.decode()
    assert not ProlificLink.objects.exists()


def test_admin_of_another_owner_sees_no_link(world, fake):
    link(world)
    other = world["other"]
    other.user_permissions.set(Permission.objects.filter(content_type__app_label="prolific"))
    client = api(other)
    listing = client.get(reverse("admin:prolific_prolificlink_changelist"))
    assert PSTUDY not in listing.content.decode()
    page = client.get(reverse("admin:prolific_prolificlink_change",
                              args=[ProlificLink.objects.get().pk]))
    assert page.status_code in (302, 404)


# --- the installation-wide token and other labs' Prolific studies ---------------------------
LAB2 = "7b0e4a3b2c1d0e9f8a7b6c5f"
LAB3 = "8c0e4a3b2c1d0e9f8a7b6c60"


@pytest.fixture
def installation_token(fake, settings):
    """Only the installation-wide token is configured; the fake also holds another lab's
    Prolific study, reachable with that token, with participants who never came here."""
    settings.PROLIFIC_API_TOKEN = "tok-secret-123"
    fake.add_study(LAB2, "lab2 survey")
    fake.add_submission(LAB2, "lab2sub1", "cccccccccccccccccccccccc", "AWAITING REVIEW")
    return settings


def test_installation_token_cannot_link_another_labs_prolific_study(world, fake,
                                                                    installation_token,
                                                                    monkeypatch):
    """An editor of `speech`, with no token of their own, cannot link (and so sync, read and
    act on) another lab's Prolific study that the installation token reaches."""
    response = post(api(world["editor"]), url("api-study-prolific"),
                    {"prolific_study_id": LAB2})
    assert response.status_code == 400, response.content
    problem = " ".join(response.json()["field_errors"]["prolific_study_id"])
    assert services.internal_name_for(world["study"]) in problem and "api_token" in problem
    assert "token_env" in problem and "lab2 survey" not in response.content.decode()
    with pytest.raises(ValidationError) as refused:
        services.prolific_link(study=world["study"], prolific_study_id=LAB2,
                               actor=world["editor"], source="command")
    assert "prolific_study_id" in refused.value.message_dict
    # token_env naming the installation's own variable is the installation token still.
    monkeypatch.setenv("PROLIFIC_API_TOKEN", "tok-secret-123")
    # (An editor may not name a server variable at all; a command on the server may.)
    named = post(api(world["editor"]), url("api-study-prolific"),
                 {"prolific_study_id": LAB2, "token_env": "PROLIFIC_API_TOKEN"})
    assert named.status_code == 400 and "token_env" in named.json()["field_errors"]
    with pytest.raises(ValidationError) as refused:
        services.prolific_link(study=world["study"], prolific_study_id=LAB2, actor=None,
                               token_env="PROLIFIC_API_TOKEN", source="command")
    assert "prolific_study_id" in refused.value.message_dict
    # Nor through the admin.
    admin_user = user("root", is_superuser=True)
    page = api(admin_user).post(reverse("admin:prolific_prolificlink_add"), {
        "study": world["study"].pk, "prolific_study_id": LAB2, "token_env": "",
        "api_token": ""})
    assert page.status_code == 200
    assert services.internal_name_for(world["study"]) in page.content.decode()
    assert not ProlificLink.objects.exists() and not ProlificSubmission.objects.exists()
    assert not AuditEvent.objects.filter(target_type="prolific link").exists()
    assert post(api(world["editor"]), url("api-study-prolific-sync")).status_code == 409
    assert not fake.writes()


def test_installation_token_links_the_study_evalstudy_named_for_it(world, fake,
                                                                   installation_token):
    """The Prolific study the platform names for `speech` (as prolific_create does) links
    with the installation token alone; a Prolific study named for another study does not."""
    fake.studies[LAB2]["internal_name"] = services.internal_name_for(world["study"])
    response = post(api(world["editor"]), url("api-study-prolific"),
                    {"prolific_study_id": LAB2})
    assert response.status_code == 200, response.content
    assert response.json()["token_set"] is True
    linked = ProlificLink.objects.get(study=world["study"])
    assert linked.prolific_study_id == LAB2 and linked.api_token == ""
    assert fake.calls[-1][3] == "Token tok-secret-123"
    assert AuditEvent.objects.filter(study=world["study"], target_type="prolific link",
                                     action="create").exists()
    fake.add_study(LAB3, "Speech, lab 1")
    fake.studies[LAB3]["internal_name"] = services.internal_name_for(world["study"])
    with pytest.raises(ValidationError) as refused:
        services.prolific_link(study=world["theirs"], prolific_study_id=LAB3,
                               actor=world["other"], source="api")
    assert "evalstudy theirs" in str(refused.value)
    assert not ProlificLink.objects.filter(study=world["theirs"]).exists()


def test_a_per_link_token_links_any_prolific_study_it_reaches(world, fake, installation_token,
                                                              monkeypatch):
    """A token of the link's own proves the linker's access to the Prolific study: given
    (stored), named by token_env (set by a command on the server), or stored already when
    relinking."""
    fake.token = "lab2-own-token"  # the fake now answers lab 2's own token only
    response = post(api(world["editor"]), url("api-study-prolific"),
                    {"prolific_study_id": LAB2, "api_token": "lab2-own-token"})
    assert response.status_code == 200, response.content
    assert ProlificLink.objects.get().api_token == "lab2-own-token"
    assert fake.calls[-1][3] == "Token lab2-own-token"
    fake.add_study(LAB3, "lab2 pilot")
    relinked = services.prolific_link(study=world["study"], prolific_study_id=LAB3,
                                      actor=world["editor"], source="api")
    assert relinked.prolific_study_id == LAB3 and fake.calls[-1][3] == "Token lab2-own-token"
    ProlificLink.objects.all().delete()
    monkeypatch.setenv("PROLIFIC_TOKEN_LAB2", "lab2-own-token")
    linked = services.prolific_link(study=world["study"], prolific_study_id=LAB2,
                                    token_env="PROLIFIC_TOKEN_LAB2", actor=None,
                                    source="command")
    assert linked.token_env == "PROLIFIC_TOKEN_LAB2" and linked.api_token == ""
    assert fake.calls[-1][3] == "Token lab2-own-token"


def test_sync_stores_no_submission_of_participants_who_never_enrolled(world, fake):
    """Submissions of the Prolific study by people who did not enter through this study (or
    entered another study only) are neither stored, listed nor acted on; a row stored before
    is removed. The monitor says how many were ignored."""
    their_only = invite(world["theirs"], external_id="ffffffffffffffffffffffff")
    fake.add_submission(PSTUDY, "subA", "dddddddddddddddddddddddd", "AWAITING REVIEW")
    fake.add_submission(PSTUDY, "subB", "eeeeeeeeeeeeeeeeeeeeeeee", "RETURNED")
    fake.add_submission(PSTUDY, "subC", their_only.external_id, "AWAITING REVIEW")
    the_link = link(world)
    # Stored before this fix, unmatched: removed by the next sync, never listed.
    ProlificSubmission.objects.create(link=the_link, submission_id="subOld",
                                      participant_id="dddddddddddddddddddddddd",
                                      status="APPROVED")
    rows = api(world["viewer"]).get(url("api-study-prolific-submissions")).json()["results"]
    assert rows == []
    counts = services.prolific_sync(study=world["study"], actor=None, source="system")
    assert counts == {"submissions": 3, "matched": 0, "unmatched": 3, "seats_freed": 0,
                      "skipped": 0}
    assert not ProlificSubmission.objects.exists()
    event = AuditEvent.objects.filter(study=world["study"], action="import").latest("at")
    assert event.changes["unmatched_removed"] == 1
    for sub in ("subA", "subB", "subC"):
        response = post(api(world["editor"]), url("api-study-prolific-approve",
                                                  submission_id=sub))
        assert response.status_code == 404, sub
    assert post(api(world["editor"]), url("api-study-prolific-bonus", submission_id="subA"),
                {"amount_minor": 100}).status_code == 404
    assert not fake.writes()
    done = api(world["editor"]).post(reverse("prolific:sync", args=["speech"]), follow=True)
    assert ("3 submissions on Prolific not from this study&#x27;s participants were ignored"
            in done.content.decode())
    assert "subA" not in done.content.decode()
    out = io.StringIO()
    call_command("prolific_sync", "--study", "speech", stdout=out)
    assert "3 submissions on Prolific not from this study's participants" in out.getvalue()


# --- sync ----------------------------------------------------------------------------------
def test_sync_pages_matches_and_frees_seats_of_returned_and_timed_out(world, fake):
    study, raters = world["study"], world["raters"]
    study_open(study=study)
    for rater in raters[:3]:
        assignment_next(study=study, rater=rater)
    with pytest.raises(StudyFull):
        assignment_next(study=study, rater=raters[3])
    # The first came in with Prolific's SESSION_ID (the submission id), the others by PID.
    Enrollment.objects.filter(rater=raters[0]).update(platform_session_id="sub1")
    fake.add_submission(PSTUDY, "sub1", P[0], "RETURNED")
    fake.add_submission(PSTUDY, "sub2", P[1], "TIMED-OUT")
    fake.add_submission(PSTUDY, "sub3", P[2], "AWAITING REVIEW")
    fake.add_submission(PSTUDY, "sub4", "bbbbbbbbbbbbbbbbbbbbbbbb", "ACTIVE")  # never came in
    fake.add_submission(OTHER_PSTUDY, "subX", P[3], "ACTIVE")  # another Prolific study
    link(world)
    counts = services.prolific_sync(study=study, actor=world["owner"], source="api")
    assert counts == {"submissions": 4, "matched": 3, "unmatched": 1, "seats_freed": 2,
                      "skipped": 0}
    pages = [c for c in fake.calls if c[1].endswith("/submissions/")]
    assert len(pages) == 2  # page size 2: the next link was followed
    subs = {s.submission_id: s for s in ProlificSubmission.objects.all()}
    assert subs["sub1"].enrollment.rater == raters[0]
    assert "sub4" not in subs and "subX" not in subs  # not this study's participants
    assert Assignment.objects.get(study=study, rater=raters[0]).state == "expired"
    assert Assignment.objects.get(study=study, rater=raters[1]).state == "expired"
    assert Assignment.objects.get(study=study, rater=raters[2]).state == "active"
    # The seat goes to the next rater at once, without waiting for the lease.
    slot = assignment_next(study=study, rater=raters[3])
    assert slot is not None
    assert Assignment.objects.get(study=study, rater=raters[3]).replaces is not None
    # Idempotent: a second sync frees nothing more.
    again = services.prolific_sync(study=study, actor=None, source="system")
    assert again["seats_freed"] == 0
    assert AuditEvent.objects.filter(study=study, action="import").count() == 2


def test_sync_never_matches_another_studys_participant(world, fake):
    theirs = world["theirs"]
    study_open(study=theirs)
    assignment_next(study=theirs, rater=world["their_rater"])
    fake.add_submission(PSTUDY, "sub1", P[0], "RETURNED")
    link(world)
    services.prolific_sync(study=world["study"], actor=None, source="system")
    sub = ProlificSubmission.objects.get()
    assert sub.enrollment.study == world["study"]
    # The same participant id in another owner's study keeps their seat.
    assert Assignment.objects.get(study=theirs, rater=world["their_rater"]).state == "active"


def test_sync_command_and_periodic_task(world, fake):
    with pytest.raises(CommandError, match="not linked"):
        call_command("prolific_sync", "--study", "speech")
    link(world)
    fake.add_submission(PSTUDY, "sub1", P[0], "AWAITING REVIEW")
    call_command("prolific_sync", "--study", "speech")
    assert AuditEvent.objects.filter(action="import", source="command").exists()
    from prolific.tasks import prolific_sync_open_studies_task

    assert prolific_sync_open_studies_task() == 0  # the study is a draft
    study_open(study=world["study"])
    assert prolific_sync_open_studies_task() == 1
    assert AuditEvent.objects.filter(action="import", source="system").exists()


def test_periodic_sync_goes_on_past_a_failing_study(world, fake):
    link(world)
    link(world, study=world["theirs"], pstudy=OTHER_PSTUDY)
    study_open(study=world["study"])
    study_open(study=world["theirs"])
    ProlificLink.objects.filter(study=world["study"]).update(api_token="revoked")
    assert services.prolific_sync_open_studies() == 1


# --- actions ---------------------------------------------------------------------------------
def synced(world, fake, status="AWAITING REVIEW"):
    fake.add_submission(PSTUDY, "sub1", P[0], status)
    link(world)
    services.prolific_sync(study=world["study"], actor=None, source="system")


def test_approve_sends_prolifics_body_and_audits(world, fake):
    synced(world, fake)
    response = post(api(world["editor"]), url("api-study-prolific-approve",
                                              submission_id="sub1"))
    assert response.status_code == 200 and response.json()["status"] == "APPROVED"
    assert fake.writes()[-1] == ("POST", "/api/v1/submissions/sub1/transition/",
                                 {"action": "APPROVE"})
    event = AuditEvent.objects.filter(study=world["study"], action="update").latest("at")
    assert event.changes["status"] == ["AWAITING REVIEW", "APPROVED"]
    assert event.actor == world["editor"] and event.source == "api"


def test_reject_needs_a_long_message_and_a_category(world, fake):
    synced(world, fake)
    client = api(world["editor"])
    reject = url("api-study-prolific-reject", submission_id="sub1")
    before = len(fake.calls)
    short = post(client, reject, {"message": "Too fast.", "rejection_category": "TOO_QUICKLY"})
    assert short.status_code == 400 and "message" in short.json()["field_errors"]
    nocat = post(client, reject, {"message": REASON, "rejection_category": "BECAUSE"})
    assert nocat.status_code == 400 and "rejection_category" in nocat.json()["field_errors"]
    assert len(fake.calls) == before  # refused before Prolific is called
    with pytest.raises(ValidationError):
        services.prolific_reject(study=world["study"], submission_id="sub1", message="x" * 99,
                                 category="OTHER", actor=None, source="command")
    ok = post(client, reject, {"message": REASON, "rejection_category": "FAILED_CHECK"})
    assert ok.status_code == 200 and ok.json()["status"] == "REJECTED"
    assert fake.writes()[-1][2] == {"action": "REJECT", "message": REASON,
                                    "rejection_category": "FAILED_CHECK"}


def test_prolifics_own_refusal_is_passed_on(world, fake):
    synced(world, fake)
    fake.submissions.pop("sub1")  # gone on Prolific's side
    response = post(api(world["owner"]), url("api-study-prolific-approve",
                                             submission_id="sub1"))
    assert response.status_code == 400 and "No such submission" in json.dumps(response.json())
    assert ProlificSubmission.objects.get().status == "AWAITING REVIEW"
    assert not AuditEvent.objects.filter(action="update").exists()


def test_bonus_sets_up_and_pays_in_minor_units(world, fake):
    synced(world, fake, "APPROVED")
    client = api(world["editor"])
    bonus = url("api-study-prolific-bonus", submission_id="sub1")
    for bad in ({"amount_minor": 0}, {"amount_minor": -5}, {"amount_minor": "1.5"},
                {"amount_minor": 5001}, {}):
        assert post(client, bonus, bad).status_code == 400, bad
    assert not fake.bonuses
    response = post(client, bonus, {"amount_minor": 125})
    assert response.status_code == 200 and response.json()["bonus_minor"] == 125
    (bulk,) = fake.bonuses.values()
    assert fake.writes()[-2] == ("POST", "/api/v1/submissions/bonus-payments/",
                                 {"study_id": PSTUDY, "csv_bonuses": f"{P[0]},1.25\n"})
    assert bulk["amount"] == 125 and fake.paid == [bulk["id"]]
    event = AuditEvent.objects.filter(action="update").latest("at")
    assert event.changes["bonus_minor"] == 125


# --- roles and tenancy -----------------------------------------------------------------------
def test_viewers_read_editors_act_strangers_get_404(world, fake):
    synced(world, fake)
    viewer, other = api(world["viewer"]), api(world["other"])
    assert viewer.get(url("api-study-prolific-submissions")).status_code == 200
    rows = viewer.get(url("api-study-prolific-submissions")).json()["results"]
    assert [r["submission_id"] for r in rows] == ["sub1"]
    writes = len(fake.writes())
    assert post(viewer, url("api-study-prolific-approve", submission_id="sub1")).status_code == 403
    assert post(viewer, url("api-study-prolific-sync")).status_code == 403
    for name in ("api-study-prolific", "api-study-prolific-submissions"):
        assert other.get(url(name)).status_code == 404
    assert post(other, url("api-study-prolific-approve", submission_id="sub1")).status_code == 404
    assert post(other, url("api-study-prolific-bonus", submission_id="sub1"),
                {"amount_minor": 100}).status_code == 404
    assert len(fake.writes()) == writes


def test_an_owner_cannot_act_on_another_studys_submission(world, fake):
    synced(world, fake)  # sub1 belongs to "speech"
    other = api(world["other"])
    # The other owner cannot link their study to the same Prolific study (and so read its
    # participants), even with the token; the answer does not name the study that has it.
    taken = post(other, url("api-study-prolific", slug="theirs"),
                 {"prolific_study_id": PSTUDY, "api_token": "tok-secret-123"})
    assert taken.status_code == 400 and "speech" not in taken.content.decode()
    # Linked to their own Prolific study, they reach none of speech's submissions, though
    # their own study has a participant with the same Prolific id.
    link(world, study=world["theirs"], pstudy=OTHER_PSTUDY)
    services.prolific_sync(study=world["theirs"], actor=None, source="system")
    for name, body in (("api-study-prolific-approve", None),
                       ("api-study-prolific-reject",
                        {"message": REASON, "rejection_category": "OTHER"}),
                       ("api-study-prolific-bonus", {"amount_minor": 100})):
        response = post(other, url(name, slug="theirs", submission_id="sub1"), body)
        assert response.status_code == 404, (name, response.content)
    # ... and a submission id that was never synced is unknown, for the owner as well.
    response = post(api(world["owner"]), url("api-study-prolific-approve",
                                             submission_id="nope"))
    assert response.status_code == 404
    assert not fake.writes()


def test_actions_on_an_unlinked_study_are_409(world, fake):
    client = api(world["owner"])
    assert post(client, url("api-study-prolific-sync")).status_code == 409
    assert post(client, url("api-study-prolific-approve", submission_id="sub1")).status_code == 409
    assert client.get(url("api-study-prolific")).status_code == 404


# --- retries ---------------------------------------------------------------------------------
def test_429_is_retried_after_retry_after(world, fake):
    synced(world, fake)
    waits = []
    fake.throttle_next = 1
    client = ProlificClient(token="tok-secret-123", base_url=fake.url, sleep=waits.append)
    assert client.transition("sub1", {"action": "APPROVE"})["status"] == "APPROVED"
    assert waits == [0.0]  # the fake's Retry-After: 0
    posts = [c for c in fake.calls if c[1].endswith("/transition/")]
    assert len(posts) == 2  # refused once, then done once
    # Through the API as well: the caller sees one success.
    fake.submissions["sub1"]["status"] = "AWAITING REVIEW"
    fake.throttle_next = 1
    response = post(api(world["owner"]), url("api-study-prolific-approve", submission_id="sub1"))
    assert response.status_code == 200


def test_retries_are_bounded_and_5xx_writes_are_not_repeated(world, fake):
    waits = []
    client = ProlificClient(token="tok-secret-123", base_url=fake.url, retries=2,
                            backoff=0.5, sleep=waits.append)
    fake.throttle_next = 10
    with pytest.raises(ProlificUnavailable):
        client.study(PSTUDY)
    assert len(waits) == 2
    fake.throttle_next = 0
    fake.fail_next_5xx = 1
    assert client.study(PSTUDY)["id"] == PSTUDY  # a read is retried after a 5xx
    fake.add_submission(PSTUDY, "sub9", P[0], "AWAITING REVIEW")
    fake.fail_next_5xx = 1
    before = len(fake.calls)
    with pytest.raises(ProlificUnavailable):  # a write that may have been done is not repeated
        client.transition("sub9", {"action": "APPROVE"})
    assert len(fake.calls) == before + 1
    with pytest.raises(ProlificAuthError):
        ProlificClient(token="", base_url=fake.url).study(PSTUDY)


def test_prolific_down_or_a_revoked_token(world, fake, settings):
    link(world)
    ProlificLink.objects.update(api_token="revoked")
    client = api(world["owner"])
    response = post(client, url("api-study-prolific-sync"))
    assert response.status_code == 502 and "Invalid token" in response.json()["message"]
    settings.PROLIFIC_API_URL = "http://127.0.0.1:9/api/v1/"  # nothing listens there
    settings.PROLIFIC_RETRIES = 0
    down = post(client, url("api-study-prolific"),
                {"prolific_study_id": PSTUDY, "api_token": "tok-secret-123"})
    assert down.status_code == 400 and "did not answer" in json.dumps(down.json())
    assert ProlificLink.objects.get().api_token == "revoked"  # nothing stored


def test_beat_syncs_linked_studies():
    from django.conf import settings

    from config.celery import app

    app.loader.import_default_modules()
    entry = settings.CELERY_BEAT_SCHEDULE["prolific-sync"]
    assert entry["task"] in app.tasks


def test_export_and_erasure_of_a_participant(world, fake):
    from evalstudy.privacy import rater_data_erase, rater_data_export

    synced(world, fake)
    rater = world["raters"][0]
    exported = rater_data_export(rater)
    assert exported["prolific_submissions"][0]["participant_id"] == P[0]
    rater_data_erase(rater)
    sub = ProlificSubmission.objects.get()
    assert sub.participant_id.startswith("erased-") and P[0] not in sub.participant_id
    services.prolific_sync(study=world["study"], actor=None, source="system")
    assert ProlificSubmission.objects.get().participant_id == sub.participant_id


def test_an_answer_cannot_send_the_token_elsewhere_nor_inject_ids(world, fake):
    """A `next` link to another host is not followed (the token would go with it); ids that
    are not Prolific's are skipped, never stored or put into a later request's path."""
    link(world)
    fake.add_submission(PSTUDY, "../../bulk-bonus-payments/x/pay", P[0], "AWAITING REVIEW")
    fake.add_submission(PSTUDY, "sub2", "x/../y", "RETURNED")
    counts = services.prolific_sync(study=world["study"], actor=None, source="system")
    assert counts["skipped"] == 2 and not ProlificSubmission.objects.exists()
    client = ProlificClient(token="tok-secret-123", base_url=fake.url)
    with pytest.raises(services.ProlificError, match="outside"):
        list(client.paginate("http://127.0.0.2:9/api/v1/studies/x/submissions/"))
    fake.page_size = 1
    fake.submissions.clear()
    fake.add_submission(PSTUDY, "sub1", P[0])
    fake.add_submission(PSTUDY, "sub3", P[2])
    real_url = fake.url
    fake.url = "http://127.0.0.2:9/api/v1/"  # the fake's next links now point elsewhere
    try:
        with pytest.raises(services.ProlificError, match="outside"):
            services.prolific_sync(study=world["study"], actor=None, source="system")
    finally:
        fake.url = real_url
    assert not ProlificSubmission.objects.exists()  # nothing half-synced


def test_a_huge_retry_after_is_capped(world, fake):
    waits = []
    client = ProlificClient(token="tok-secret-123", base_url=fake.url, max_wait=30,
                            sleep=waits.append)
    fake.throttle_next, fake.retry_after = 1, "86400"
    assert client.study(PSTUDY)["id"] == PSTUDY
    assert waits == [30]


# --- the monitor page ------------------------------------------------------------------------
def test_monitor_section_and_sync_now(world, fake):
    monitor = reverse("annotation:monitor", args=["speech"])
    sync = reverse("prolific:sync", args=["speech"])
    page = api(world["viewer"]).get(monitor)
    assert page.status_code == 200 and "Not linked to a Prolific study" in page.content.decode()
    link(world)
    fake.add_submission(PSTUDY, "sub1", P[0], "RETURNED")
    viewer_page = api(world["viewer"]).get(monitor).content.decode()
    assert PSTUDY in viewer_page and "tok-secret-123" not in viewer_page
    assert "Sync from Prolific now" not in viewer_page  # viewers read only
    assert api(world["viewer"]).post(sync).status_code == 403
    assert api(world["other"]).post(sync).status_code == 404
    assert api(world["editor"]).get(sync).status_code == 405
    assert not ProlificSubmission.objects.exists()
    editor = api(world["editor"])
    assert "Sync from Prolific now" in editor.get(monitor).content.decode()
    done = editor.post(sync, follow=True)
    assert done.status_code == 200 and "Prolific: 1 submission," in done.content.decode()
    assert "RETURNED" in done.content.decode()
    assert AuditEvent.objects.filter(action="import", source="web").exists()


def test_admin_keeps_a_link_with_its_study_and_one_prolific_study_per_link(world, fake):
    link(world)
    admin_user = user("root", is_superuser=True)
    client = api(admin_user)
    the_link = ProlificLink.objects.get()
    # The study field is read-only on change: a posted study is ignored.
    response = client.post(reverse("admin:prolific_prolificlink_change", args=[the_link.pk]), {
        "study": world["theirs"].pk, "prolific_study_id": PSTUDY, "token_env": "",
        "api_token": ""})
    assert response.status_code == 302
    assert ProlificLink.objects.get().study == world["study"]
    taken = client.post(reverse("admin:prolific_prolificlink_add"), {
        "study": world["theirs"].pk, "prolific_study_id": PSTUDY, "token_env": "",
        "api_token": "tok-secret-123"})
    assert taken.status_code == 200 and "already linked" in taken.content.decode()
    assert ProlificLink.objects.count() == 1


def test_only_an_administrator_names_a_server_variable_as_a_links_token(world, fake,
                                                                        monkeypatch):
    """PROLIFIC_TOKEN_LAB2 holds another lab's token: an editor naming it would borrow that
    lab's access (token_env counted as the linker's own token). Refused for editors, nothing
    stored; a superuser assigns it; the admin shows it read-only to editors."""
    from prolific.services import prolific_link

    monkeypatch.setenv("PROLIFIC_TOKEN_LAB2", "tok-secret-123")
    study = world["study"]
    with pytest.raises(ValidationError) as refused:
        prolific_link(study=study, prolific_study_id=PSTUDY, actor=world["owner"],
                      source="api", token_env="PROLIFIC_TOKEN_LAB2")
    assert "Only an administrator" in str(refused.value)
    response = post(api(world["editor"]), url("api-study-prolific"),
                    {"prolific_study_id": PSTUDY, "token_env": "PROLIFIC_TOKEN_LAB2"})
    assert response.status_code == 400 and "token_env" in response.json()["field_errors"]
    assert not ProlificLink.objects.filter(study=study).exists()
    root = user("root-admin", is_superuser=True)
    link_ = prolific_link(study=study, prolific_study_id=PSTUDY, actor=root, source="admin",
                          token_env="PROLIFIC_TOKEN_LAB2")
    assert link_.token_env == "PROLIFIC_TOKEN_LAB2"


def test_a_freed_slug_does_not_pass_the_installation_token_rule(world, fake, installation_token):
    """A Prolific study created for study "speech" keeps its name after that study is gone;
    another owner's study renamed "speech" must not link it with the installation token."""
    fake.studies[LAB2]["internal_name"] = services.internal_name_for(world["study"])
    world["study"].delete()
    theirs = world["theirs"]
    theirs.slug = "speech"
    theirs.save(update_fields=["slug"])
    with pytest.raises(ValidationError) as refused:
        services.prolific_link(study=theirs, prolific_study_id=LAB2, actor=world["other"],
                               source="api")
    assert "prolific_study_id" in refused.value.message_dict
    assert not ProlificLink.objects.exists()


def test_the_admin_lists_only_the_studys_own_participants_submissions(world, fake):
    """Rows stored before sync kept to enrolled participants (another lab's participant ids
    and statuses) are not listed by the admin either, and the migration forgets them."""
    import importlib

    from django.apps import apps as django_apps

    link(world)
    own = ProlificSubmission.objects.create(
        link=ProlificLink.objects.get(), submission_id="s-own", participant_id=P[0],
        status="APPROVED", enrollment=Enrollment.objects.get(rater=world["raters"][0]))
    stranger = ProlificSubmission.objects.create(
        link=ProlificLink.objects.get(), submission_id="s-stranger",
        participant_id="f" * 24, status="APPROVED")
    root = user("root", is_superuser=True)
    html = api(root).get(reverse("admin:prolific_prolificsubmission_changelist")
                         ).content.decode()
    assert own.submission_id in html and stranger.participant_id not in html
    migration = importlib.import_module("prolific.migrations.0002_forget_unmatched_submissions")
    migration.forget_unmatched(django_apps, None)
    assert list(ProlificSubmission.objects.values_list("submission_id", flat=True)) == ["s-own"]
