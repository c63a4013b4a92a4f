"""Running a Prolific study from evalstudy: creating the Prolific study as a draft, messaging
a participant, and approving, rejecting, paying and messaging from the monitor page, all
against the fake of Prolific's REST API on loopback (tests/prolific_fake)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from evalstudy.models import AuditEvent
from evalstudy.services import study_build_assignments
from prolific import services
from prolific.models import ProlificLink
from tests.prolific.test_prolific import PSTUDY, REASON, P, api, link, post, synced, url


def _codes(world, **fields):
    study = world["study"]
    for key, value in {"completion_code": "C0MPL3TE", "screen_out_code": "SCR33N",
                       **fields}.items():
        setattr(study, key, value)
    study.save()
    return study


def test_create_makes_a_draft_with_the_crowd_url_codes_and_seats_and_links_it(world, fake,
                                                                             settings):
    settings.SITE_URL = "https://eval.example.org"
    study = _codes(world)
    study_build_assignments(study=study)
    response = post(api(world["editor"]), url("api-study-prolific-create"),
                    {"description": "Rate transcripts.", "reward_minor": 450, "minutes": 25,
                     "api_token": "tok-secret-123"})
    assert response.status_code == 201, response.content
    created = fake.writes()[-1]
    assert created[1] == "/api/v1/studies/"
    body = created[2]
    assert body["external_study_url"] == "https://eval.example.org/c/speech/"
    assert body["prolific_id_option"] == "url_parameters"
    assert body["completion_codes"][0] == {"code": "C0MPL3TE", "code_type": "COMPLETED",
                                           "actions": [{"action": "MANUALLY_REVIEW"}]}
    assert body["completion_codes"][1]["code"] == "SCR33N"
    assert body["total_available_places"] == 3  # the design's seats
    assert (body["reward"], body["estimated_completion_time"]) == (450, 25)
    linked = ProlificLink.objects.get(study=study)
    assert linked.prolific_study_id == response.json()["prolific_study_id"]
    assert linked.prolific_status == "UNPUBLISHED"
    assert "tok-secret-123" not in response.content.decode()
    event = AuditEvent.objects.filter(study=study, action="create").latest("at")
    assert event.changes["places"] == 3 and event.source == "api"


def test_create_is_refused_with_nothing_stored_and_prolific_not_called(world, fake):
    client = api(world["editor"])
    before = len(fake.calls)
    no_code = post(client, url("api-study-prolific-create"),
                   {"reward_minor": 450, "minutes": 25})
    assert no_code.status_code == 400 and "completion_code" in no_code.json()["field_errors"]
    _codes(world, crowd_platform="mturk")
    not_prolific = post(client, url("api-study-prolific-create"),
                        {"reward_minor": 450, "minutes": 25})
    assert "crowd_platform" in not_prolific.json()["field_errors"]
    assert len(fake.calls) == before and not ProlificLink.objects.exists()
    _codes(world, crowd_platform="prolific")
    link(world)
    again = post(client, url("api-study-prolific-create"), {"reward_minor": 450, "minutes": 25})
    assert again.status_code == 400 and "prolific_study_id" in again.json()["field_errors"]
    assert ProlificLink.objects.get().prolific_study_id == PSTUDY
    # A viewer may not, another owner gets 404.
    assert post(api(world["viewer"]), url("api-study-prolific-create"),
                {"reward_minor": 1, "minutes": 1}).status_code == 403
    assert post(api(world["other"]), url("api-study-prolific-create"),
                {"reward_minor": 1, "minutes": 1}).status_code == 404


def test_prolific_refusing_the_creation_stores_nothing(world, fake, settings):
    settings.SITE_URL = "not-a-url"  # the fake, like Prolific, wants a valid URL
    _codes(world)
    response = post(api(world["editor"]), url("api-study-prolific-create"),
                    {"reward_minor": 450, "minutes": 25, "places": 4,
                     "api_token": "tok-secret-123"})
    assert response.status_code == 400 and "valid URL" in str(response.json())
    assert not ProlificLink.objects.exists()


def test_message_goes_to_the_participant_about_this_study_and_is_audited(world, fake):
    synced(world, fake)
    response = post(api(world["editor"]), url("api-study-prolific-message",
                                              submission_id="sub1"),
                    {"body": "Thank you: one item did not load, you will get a bonus."})
    assert response.status_code == 200, response.content
    assert fake.messages == [{"recipient_id": P[0], "study_id": PSTUDY,
                              "body": "Thank you: one item did not load, you will get a bonus."}]
    assert AuditEvent.objects.filter(changes__message__startswith="Thank you").exists()
    empty = post(api(world["editor"]), url("api-study-prolific-message", submission_id="sub1"),
                 {"body": "   "})
    assert empty.status_code == 400 and len(fake.messages) == 1
    with pytest.raises(ValidationError):
        services.prolific_message(study=world["study"], submission_id="sub1", body="x" * 5001,
                                  actor=None, source="command")
    # Another owner's study cannot reach this participant.
    assert post(api(world["other"]), url("api-study-prolific-message", slug="theirs",
                                         submission_id="sub1"),
                {"body": "hello"}).status_code in (404, 409)
    assert len(fake.messages) == 1


def test_the_monitor_approves_rejects_pays_and_messages(world, fake):
    synced(world, fake)
    fake.add_submission(PSTUDY, "sub2", P[1], "AWAITING REVIEW")
    services.prolific_sync(study=world["study"], actor=None, source="system")
    monitor = reverse("annotation:monitor", args=["speech"])
    editor = api(world["editor"])
    page = editor.get(monitor).content.decode()
    assert "Reject on Prolific" in page and "sub1" in page and "Pay the bonus" in page
    viewer_page = api(world["viewer"]).get(monitor).content.decode()
    assert "sub1" in viewer_page and "Reject on Prolific" not in viewer_page

    def act(submission, **data):
        return editor.post(reverse("prolific:submission_action", args=["speech", submission]),
                           data, follow=True)

    assert "sub1: approved." in act("sub1", action="approve").content.decode()
    assert fake.submissions["sub1"]["status"] == "APPROVED"
    short = act("sub2", action="reject", rejection_category="TOO_QUICKLY", message="Too fast")
    assert "nothing was sent" in short.content.decode()
    assert fake.submissions["sub2"]["status"] == "AWAITING REVIEW"
    act("sub2", action="reject", rejection_category="TOO_QUICKLY", message=REASON)
    assert fake.submissions["sub2"]["status"] == "REJECTED"
    assert "bonus paid" in act("sub1", action="bonus", amount_minor="125").content.decode()
    assert fake.paid and "1.25" in next(iter(fake.bonuses.values()))["csv"]
    assert "message sent" in act("sub1", action="message", body="Thanks!").content.decode()
    assert fake.messages[-1]["recipient_id"] == P[0]
    events = AuditEvent.objects.filter(study=world["study"], source="web",
                                       target_type="prolific submission")
    assert events.count() == 4
    # Viewers and other owners cannot act; GET is refused.
    forbidden = reverse("prolific:submission_action", args=["speech", "sub1"])
    assert api(world["viewer"]).post(forbidden, {"action": "approve"}).status_code == 403
    assert api(world["other"]).post(forbidden, {"action": "approve"}).status_code == 404
    theirs = reverse("prolific:submission_action", args=["theirs", "sub1"])
    assert api(world["other"]).post(theirs, {"action": "approve"}, follow=True).status_code == 200
    assert fake.submissions["sub1"]["status"] == "APPROVED"  # unchanged: not their study's
    assert editor.get(forbidden).status_code == 405


def test_the_monitor_creates_the_prolific_study(world, fake, settings):
    settings.PROLIFIC_API_TOKEN = "tok-secret-123"
    _codes(world)
    monitor = reverse("annotation:monitor", args=["speech"])
    editor = api(world["editor"])
    assert "Create on Prolific" in editor.get(monitor).content.decode()
    create = reverse("prolific:create", args=["speech"])
    bad = editor.post(create, {"reward_minor": "", "minutes": "20"}, follow=True)
    assert "Nothing was created" in bad.content.decode() and not ProlificLink.objects.exists()
    done = editor.post(create, {"reward_minor": "300", "minutes": "20", "places": "5"},
                       follow=True)
    assert "Created the draft Prolific study" in done.content.decode()
    assert fake.writes()[-1][2]["total_available_places"] == 5
    assert fake.writes()[-1][2]["internal_name"] == services.internal_name_for(
        world["study"])
    created = ProlificLink.objects.get(study=world["study"])
    assert created.api_token == ""  # the installation token only
    # The study the platform created is this study's: relinking it with the installation
    # token alone is allowed (its internal name says so).
    relinked = services.prolific_link(study=world["study"],
                                      prolific_study_id=created.prolific_study_id,
                                      actor=world["editor"], source="api")
    assert relinked.pk == created.pk
    assert api(world["viewer"]).post(create, {"reward_minor": "1",
                                              "minutes": "1"}).status_code == 403
