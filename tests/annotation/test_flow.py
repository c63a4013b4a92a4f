"""A participant's way through a study over HTTP: crowd entry, screening, consent,
instructions, calibration feedback, attention checks, revisions, completion."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from annotation.models import Judgment, JudgmentRevision
from evalstudy.models import Assignment, Enrollment, Rater, Study
from tests.factories import invite, make_study

PID = "5f1e2d3c4b5a69788796a5b4"


@pytest.fixture
def crowd_study(db):
    return make_study(
        n_items=8, n_systems=2, status=Study.Status.OPEN, attention_check_every=2,
        attention_fail_limit=2, consent_text="You agree to take part.",
        instructions="Rate **carefully**.", completion_code="DONE42",
        completion_url="https://platform.example/complete?cc=DONE42",
        screen_out_code="OUT13", screen_out_url="https://platform.example/complete?cc=OUT13",
    )


def _entry(client, study, pid=PID):
    url = reverse("annotation:crowd_entry", args=[study.slug])
    return client.get(url, {"PROLIFIC_PID": pid, "STUDY_ID": "st1", "SESSION_ID": "se1"})


def _page(client, study):
    return client.get(reverse("annotation:rate", args=[study.slug]), follow=True)


def _slot_id(html):
    return int(re.search(r'/slots/(\d+)/"', html).group(1))


def _post(client, study, slot_id, answers):
    return client.post(reverse("annotation:submit", args=[study.slug, slot_id]), answers)


def _start(client, study):
    _entry(client, study)
    client.post(reverse("annotation:consent", args=[study.slug]), {"consent": "yes"})
    client.post(reverse("annotation:instructions", args=[study.slug]))


def test_crowd_entry_creates_then_resumes_the_same_participant(crowd_study):
    client = Client()
    response = _entry(client, crowd_study)
    assert response.status_code == 302
    rater = Rater.objects.get(kind="crowd", external_id=PID)
    enrollment = Enrollment.objects.get(rater=rater, study=crowd_study)
    assert (enrollment.platform_study_id, enrollment.platform_session_id) == ("st1", "se1")
    # a new browser with the same PID is the same participant
    other = Client()
    _entry(other, crowd_study)
    assert Rater.objects.filter(external_id=PID).count() == 1
    assert Enrollment.objects.count() == 1


def test_crowd_entry_without_participant_id_creates_nothing(crowd_study):
    response = Client().get(reverse("annotation:crowd_entry", args=[crowd_study.slug]))
    assert response.status_code == 400
    assert "PROLIFIC_PID" in response.content.decode()
    assert not Rater.objects.exists()


def test_consent_then_instructions_then_calibration(crowd_study):
    client = Client()
    _entry(client, crowd_study)
    page = _page(client, crowd_study)
    assert page.redirect_chain[-1][0].endswith("/consent/")
    assert "You agree to take part." in page.content.decode()
    client.post(reverse("annotation:consent", args=[crowd_study.slug]), {"consent": "yes"})
    enrollment = Enrollment.objects.get()
    assert enrollment.consented_at is not None
    page = _page(client, crowd_study)
    assert page.redirect_chain[-1][0].endswith("/instructions/")
    assert "<strong>carefully</strong>" in page.content.decode()
    client.post(reverse("annotation:instructions", args=[crowd_study.slug]))
    html = _page(client, crowd_study).content.decode()
    assert "Practice item" in html


def test_declining_consent_stops_without_a_seat(crowd_study):
    client = Client()
    _entry(client, crowd_study)
    client.post(reverse("annotation:consent", args=[crowd_study.slug]), {"consent": "no"})
    html = _page(client, crowd_study).content.decode()
    assert "chose not to take part" in html
    assert Enrollment.objects.get().stop_reason == "declined"
    assert not Assignment.objects.filter(rater__isnull=False).exists()


def test_calibration_feedback_shows_expected_answer_and_explanation(crowd_study):
    client = Client()
    _start(client, crowd_study)
    slot_id = _slot_id(_page(client, crowd_study).content.decode())
    response = _post(client, crowd_study, slot_id, {"severity": "2", "usable": "yes"})
    assert response.url.endswith(f"/slots/{slot_id}/feedback/")
    html = client.get(response.url).content.decode()
    assert "Some of your answers differ" in html
    assert "2: Meaning lost or changed" in html and "0: Meaning fully preserved" in html
    assert "Identical: no errors." in html


def _answer_everything(client, study, *, attention_answers):
    """Walks the list; returns the final page."""
    for _ in range(40):
        html = _page(client, study).content.decode()
        if "/slots/" not in html:
            return html
        slot_id = _slot_id(html)
        answers = {"severity": "1", "usable": "yes"}
        if "banana umbrella" in html:  # the attention check's output
            answers = attention_answers
        _post(client, study, slot_id, answers)
    raise AssertionError("the list never ended")


def test_passing_participant_gets_the_completion_code_and_redirect(crowd_study):
    client = Client()
    _start(client, crowd_study)
    html = _answer_everything(client, crowd_study,
                              attention_answers={"severity": "2", "usable": "no"})
    assert "DONE42" in html
    assert 'http-equiv="refresh" content="10;url=https://platform.example/complete?cc=DONE42"' \
        in html
    # A crowd participant has no list of studies here: an end text, not a link back to one.
    assert "Your work here is finished." in html and "Back to your studies" not in html
    seat = Assignment.objects.get(rater__external_id=PID)
    assert seat.state == Assignment.State.DONE


def test_failing_attention_checks_stops_politely_and_hands_the_seat_on(crowd_study):
    client = Client()
    _start(client, crowd_study)
    html = _answer_everything(client, crowd_study,
                              attention_answers={"severity": "0", "usable": "yes"})
    assert "OUT13" in html and "check questions" in html
    enrollment = Enrollment.objects.get()
    assert enrollment.stop_reason == "attention"
    old = Assignment.objects.get(rater__external_id=PID)
    assert old.state == Assignment.State.EXPIRED
    replacement = Assignment.objects.get(replaces=old)
    assert replacement.rater is None and replacement.state == "open"
    kept = Judgment.objects.filter(rater=old.rater).count()
    assert kept > 0
    # submitting anything now is refused and stores nothing
    slot = old.slots.filter(completed_at__isnull=True).first()
    response = _post(client, crowd_study, slot.pk, {"severity": "0", "usable": "yes"})
    assert response.status_code == 409
    assert Judgment.objects.filter(rater=old.rater).count() == kept


def test_screening_rule_excludes_participants_of_an_excluded_study(crowd_study):
    earlier = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN)
    crowd_study.excluded_studies.add(earlier)
    _entry(Client(), earlier)
    client = Client()
    _entry(client, crowd_study)
    html = _page(client, crowd_study).content.decode()
    assert "participation rules" in html and "OUT13" in html
    assert Enrollment.objects.get(study=crowd_study).stop_reason == "screening"


def test_going_back_revises_an_earlier_item_and_keeps_history(db):
    study = make_study(n_items=3, n_systems=1, status=Study.Status.OPEN)
    client = Client()
    client.get(reverse("annotation:enter", args=[invite(study).access_token]))
    for _ in range(3):  # calibration, item 1, item 2
        _post(client, study, _slot_id(_page(client, study).content.decode()),
              {"severity": "0", "usable": "yes"})
    html = _page(client, study).content.decode()
    previous = re.search(r'href="(/s/[^"]+/edit/)"', html).group(1)
    edit = client.get(previous).content.decode()
    assert "changing an earlier answer" in edit
    assert re.search(r'value="0"[^>]*checked', edit)
    slot_id = _slot_id(edit)
    _post(client, study, slot_id, {"severity": "1", "usable": "yes"})
    judgment = Judgment.objects.get(slot_id=slot_id, criterion__key="severity")
    assert judgment.value == "1"
    assert JudgmentRevision.objects.get(judgment=judgment).value == "0"


def test_every_rater_page_is_blind_to_systems(crowd_study):
    crowd_study.systems.update(description="hidden-system-description")
    names = list(crowd_study.systems.values_list("name", flat=True))
    client = Client()
    bodies = [_entry(client, crowd_study).content.decode()]
    bodies.append(_page(client, crowd_study).content.decode())
    client.post(reverse("annotation:consent", args=[crowd_study.slug]), {"consent": "yes"})
    bodies.append(_page(client, crowd_study).content.decode())
    client.post(reverse("annotation:instructions", args=[crowd_study.slug]))
    html = _page(client, crowd_study).content.decode()
    bodies.append(html)
    response = _post(client, crowd_study, _slot_id(html), {"severity": "0", "usable": "yes"})
    bodies.append(client.get(response.url).content.decode())
    bodies.append(_answer_everything(client, crowd_study,
                                     attention_answers={"severity": "2", "usable": "no"}))
    for body in bodies:
        for name in names:
            assert name not in body
        assert "hidden-system-description" not in body


@pytest.mark.parametrize(("platform", "good", "bad"), [
    ("prolific", "5f1e2d3c4b5a69788796a5b4",
     ["abc", "5f1e2d3c4b5a69788796a5b", "5f1e2d3c4b5a69788796a5bz"]),
    ("mturk", "A1B2C3D4E5F6G7", ["abc", "a1b2c3d4e5f6g7", "B1B2C3D4E5F6G7"]),
    ("other", "abc", ["a b", "x" * 101, ""]),
])
def test_the_crowd_url_takes_only_the_platforms_participant_ids(db, platform, good, bad):
    """A mistyped or made-up participant id ("abc" on Prolific) is refused at the door with
    nothing created, instead of becoming a rater no one can pay."""
    study = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN,
                       crowd_platform=platform)
    for pid in bad:
        response = _entry(Client(), study, pid)
        assert response.status_code == 400, pid
    assert not Rater.objects.filter(study=study).exists()
    assert _entry(Client(), study, good).status_code == 302
    assert Rater.objects.filter(study=study, external_id=good).exists()


def test_a_personal_link_rater_never_sees_the_crowd_completion_code(crowd_study):
    """The completion code pays a crowd participant: a rater the researcher invited with a
    personal link (of kind crowd or any other) finishes without it or the platform's link."""
    for kind in ("crowd", "expert"):
        rater = invite(crowd_study, kind=kind)
        client = Client()
        client.get(reverse("annotation:enter", args=[rater.access_token]))
        client.post(reverse("annotation:consent", args=[crowd_study.slug]), {"consent": "yes"})
        client.post(reverse("annotation:instructions", args=[crowd_study.slug]))
        html = _answer_everything(client, crowd_study,
                                  attention_answers={"severity": "2", "usable": "no"})
        assert "finished every item" in html
        assert "DONE42" not in html and "platform.example" not in html
        assert "You may close this page; your personal link stays valid" in html
        assert "Back to your studies" not in html


def test_an_account_holder_goes_back_to_their_studies_at_the_end(crowd_study):
    from tests.factories import UserFactory

    user = UserFactory(username="account-rater")
    invite(crowd_study, kind="expert", user=user)
    client = Client()
    client.force_login(user)
    client.post(reverse("annotation:consent", args=[crowd_study.slug]), {"consent": "yes"})
    client.post(reverse("annotation:instructions", args=[crowd_study.slug]))
    html = _answer_everything(client, crowd_study,
                              attention_answers={"severity": "2", "usable": "no"})
    assert "finished every item" in html
    assert "Back to your studies" in html and 'id="end-text"' not in html


def test_a_study_has_a_crowd_url_only_once_a_platform_is_chosen_and_opens_with_codes(db):
    """A new study takes no crowd participants (its crowd URL is a 404) until its researcher
    picks a platform; a crowd study then opens only with its completion and screen-out codes,
    or with the explicit choice to go without them."""
    from django.core.exceptions import ValidationError

    from evalstudy.services import study_open

    personal = make_study(n_items=2, n_systems=2, crowd_platform="none", crowd_no_codes=False,
                          status=Study.Status.OPEN)
    assert _entry(Client(), personal).status_code == 404
    assert not Rater.objects.filter(study=personal).exists()
    crowd = make_study(n_items=2, n_systems=2, crowd_platform="prolific", crowd_no_codes=False,
                       completion_code="DONE1")
    with pytest.raises(ValidationError) as refused:
        study_open(study=crowd)
    assert "needs its screen_out_code" in str(refused.value)
    assert "completion_code and" not in str(refused.value)
    crowd.screen_out_code = "OUT1"
    crowd.save()
    assert study_open(study=crowd).status == Study.Status.OPEN
    no_codes = make_study(n_items=2, n_systems=2, crowd_platform="mturk", crowd_no_codes=True)
    assert study_open(study=no_codes).status == Study.Status.OPEN


def test_a_link_rater_told_the_study_is_closed_is_not_sent_to_a_list_of_studies(crowd_study):
    from evalstudy.services import study_close

    rater = invite(crowd_study, kind="expert")
    client = Client()
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    client.post(reverse("annotation:consent", args=[crowd_study.slug]), {"consent": "yes"})
    client.post(reverse("annotation:instructions", args=[crowd_study.slug]))
    study_close(study=crowd_study)
    page = client.get(reverse("annotation:rate", args=[crowd_study.slug]))
    html = page.content.decode()
    assert page.status_code == 409 and "This study is not open." in html
    assert "Back to your studies" not in html
