"""Preview as a rater (annotation.preview): a researcher walks a draft study's first seat
(practice item and its feedback, attention checks, a conditional question) to the end page,
answers checked as a rater's are, and not one row is written."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation.models import Judgment, JudgmentRevision, ListeningLog
from annotation.preview import SESSION_KEY, preview_seat
from evalstudy.models import (
    Assignment,
    AssignmentSlot,
    AuditEvent,
    CalibrationItem,
    Enrollment,
    Item,
    Output,
    Rater,
    Study,
    StudyCollaborator,
)
from evalstudy.services import study_open
from tests.factories import UserFactory, invite, make_study

pytestmark = pytest.mark.django_db
COUNTED = (Judgment, JudgmentRevision, Assignment, AssignmentSlot, Enrollment, Rater, AuditEvent,
           ListeningLog)


def _counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in COUNTED}


@pytest.fixture
def draft_and_designer():
    owner = UserFactory(username="designer", is_staff=True)
    study = make_study(n_items=4, n_systems=2, attention_check_every=2, owner=owner,
                       consent_text="Do you agree?", instructions="Rate **carefully**.")
    return study, owner


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _position(html: str) -> int:
    found = re.search(r'name="position" value="(\d+)"', html)
    assert found, html[:800]
    return int(found.group(1))


def test_the_first_seat_is_the_seat_the_real_build_makes(draft_and_designer):
    study, _ = draft_and_designer
    seat = preview_seat(study)
    assert seat.problems == []
    assert all(slot.pk is None for slot in seat.slots)  # in memory only
    planned = [(s.kind, s.output_id, s.calibration_item_id, s.attention_check_id)
               for s in seat.slots]
    assert Assignment.objects.filter(study=study).count() == 0
    study_open(study=study)
    real = Assignment.objects.get(study=study, seat_index=0)
    assert planned == [(s.kind, s.output_id, s.calibration_item_id, s.attention_check_id)
                       for s in real.slots.order_by("position")]
    assert [kind for kind, *_ in planned].count("attention") == 2
    assert planned[0][0] == "calibration"


def test_a_full_walk_checks_answers_as_a_rater_and_stores_nothing(draft_and_designer):
    study, owner = draft_and_designer
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    before = _counts()
    start = client.get(url)
    html = start.content.decode()
    assert start.status_code == 200 and "Preview — nothing is stored" in html
    assert "Do you agree?" in html and "<strong>carefully</strong>" in html
    assert "1 practice item" in html and "4 items to rate" in html and "2 attention checks" in html
    assert client.post(reverse("annotation:preview_start", args=[study.slug])).status_code == 302

    seat = preview_seat(study)
    seen_kinds = []
    conditional_checked = False
    for position, slot in enumerate(seat.slots):
        html = client.get(url).content.decode()
        assert "Preview — nothing is stored" in html
        assert _position(html) == position
        assert f"{position + 1} of {len(seat.slots)}" in html
        assert "sys-0" not in html and "sys-1" not in html  # blinded, as on the real page
        seen_kinds.append(slot.kind)
        if slot.kind == "calibration":
            assert "Practice item" in html and "turn on the light" in html
            response = client.post(url, {"position": position, "severity": "1", "usable": "yes"})
            assert response["Location"] == reverse("annotation:preview_feedback",
                                                   args=[study.slug])
            feedback = client.get(response["Location"]).content.decode()
            assert "Some of your answers differ from the expected answers." in feedback
            assert "Identical: no errors." in feedback  # the item's own explanation
            continue
        if slot.kind == "attention":
            assert "banana umbrella" in html
            answers = {"severity": "2", "usable": "no"}
        else:
            assert slot.output.text in html
            answers = {"severity": "0", "usable": "yes"}
            if not conditional_checked:
                conditional_checked = True
                # The real validation: a missing answer and a value not on the scale.
                refused = client.post(url, {"position": position, "severity": "9"})
                assert refused.status_code == 400
                text = refused.content.decode()
                assert "an answer is required" in text and "choose one of" in text
                assert _position(text) == position  # still the same item
                # The conditional question: shown only after severity 2, ignored otherwise.
                assert 'data-show-if="severity"' in text
                response = client.post(url, {"position": position, "severity": "0",
                                             "usable": "yes", "note": "hidden, so dropped"})
                assert response.status_code == 302  # accepted: the hidden note is not asked
                continue
        response = client.post(url, {"position": position, **answers})
        assert response.status_code == 302, response.content[:400]
        # A repeated post of the same item (a double click) is not a second answer.
        assert client.post(url, {"position": position, **answers}).status_code == 302
    walk = client.session[SESSION_KEY]
    assert walk["study"] == study.pk and walk["position"] == len(seat.slots)
    assert "answers" not in walk  # the walk keeps no answers but the last practice one
    assert sorted(set(seen_kinds)) == ["attention", "calibration", "target"]
    done = client.get(url).content.decode()
    assert "End of the preview" in done and study.labels["done"] in done
    # Not one row written: no rater, enrolment, seat, slot, judgment, log or audit event.
    assert _counts() == before
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT
    # Restarting forgets the walk.
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    assert _position(client.get(url).content.decode()) == 0
    assert _counts() == before


def test_a_conditional_question_that_is_shown_is_checked(draft_and_designer):
    study, owner = draft_and_designer
    # Make the note required: shown (severity 2) it must be answered.
    study.criteria.filter(key="note").update(required=True)
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    seat = preview_seat(study)
    first_target = next(i for i, s in enumerate(seat.slots) if s.kind == "target")
    for position in range(first_target):  # the practice item
        client.post(url, {"position": position, "severity": "0", "usable": "yes"})
    refused = client.post(url, {"position": first_target, "severity": "2", "usable": "no"})
    assert refused.status_code == 400 and "an answer is required" in refused.content.decode()
    response = client.post(url, {"position": first_target, "severity": "2", "usable": "no",
                                 "note": "lost a word"})
    assert response.status_code == 302
    assert _position(client.get(url).content.decode()) == first_target + 1


def test_failed_attention_checks_end_the_walk_as_they_would_stop_a_rater(draft_and_designer):
    study, owner = draft_and_designer
    Study.objects.filter(pk=study.pk).update(attention_fail_limit=1)
    study.refresh_from_db()
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    before = _counts()
    for position, slot in enumerate(preview_seat(study).slots):
        client.post(url, {"position": position, "severity": "0", "usable": "yes"})
        if slot.kind == "attention":
            break
    html = client.get(url).content.decode()
    assert "A rater would be stopped here" in html
    assert "did not match what they asked for" in html
    assert _counts() == before


def test_a_french_study_is_previewed_in_french_with_an_english_banner(draft_and_designer):
    study, owner = draft_and_designer
    Study.objects.filter(pk=study.pk).update(language="fr")
    client = _client(owner)
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    html = client.get(reverse("annotation:preview", args=[study.slug])).content.decode()
    assert "Preview — nothing is stored" in html and 'lang="fr"' in html
    assert "Consignes" in html or "Instructions" in html


def test_an_empty_study_says_what_it_lacks(db):
    owner = UserFactory(username="empty-owner", is_staff=True)
    study = make_study(n_items=0, n_systems=1, owner=owner)
    client = _client(owner)
    html = client.get(reverse("annotation:preview", args=[study.slug])).content.decode()
    assert "nothing to walk yet" in html and "Opening this study would be refused" in html
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    assert "nothing to walk yet" in client.get(
        reverse("annotation:preview", args=[study.slug])).content.decode()


def test_who_may_preview(draft_and_designer):
    study, owner = draft_and_designer
    urls = [reverse("annotation:preview", args=[study.slug]),
            reverse("annotation:preview_feedback", args=[study.slug])]
    viewer = UserFactory(username="preview-viewer", is_staff=True)
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    assert _client(viewer).get(urls[0]).status_code == 200
    other_owner = UserFactory(username="preview-other", is_staff=True)
    make_study(n_items=1, n_systems=1, owner=other_owner)
    for url in urls:
        assert _client(other_owner).get(url).status_code == 404, url
    assert _client(other_owner).post(
        reverse("annotation:preview_start", args=[study.slug])).status_code == 404
    # A rater's account, a rater's link session, nobody: the sign-in page, never the study.
    opened = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN, owner=owner)
    rater = invite(opened)
    entered = Client()
    entered.get(reverse("annotation:enter", args=[rater.access_token]))
    for client in (Client(), _client(UserFactory(username="plain")), entered):
        response = client.get(reverse("annotation:preview", args=[opened.slug]))
        assert response.status_code == 302 and "login" in response["Location"]


def test_media_play_for_the_studys_researchers_only(draft_and_designer, media_root, tmp_path):
    from evalstudy.media import item_media_upload
    from tests.media_files import write_tone

    study, owner = draft_and_designer
    tone = write_tone(tmp_path / "tone.wav", seconds=1.0)
    item = Item.objects.filter(study=study).first()
    with open(tone, "rb") as stream:
        media = item_media_upload(item=item, upload=stream, name="tone.wav")
    media_url = reverse("annotation:preview_media", args=[study.slug, media.pk])
    client = _client(owner)
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    url = reverse("annotation:preview", args=[study.slug])
    seat = preview_seat(study)
    for position, slot in enumerate(seat.slots):
        if slot.kind == "target" and slot.output.item_id == item.pk:
            html = client.get(url).content.decode()
            assert f'src="{media_url}"' in html and "<audio" in html
            break
        client.post(url, {"position": position, "severity": "0", "usable": "yes"})
    response = client.get(media_url, HTTP_RANGE="bytes=0-9")
    assert response.status_code == 206 and response["Content-Type"].startswith("audio/")
    other_owner = UserFactory(username="media-other", is_staff=True)
    other = make_study(n_items=1, n_systems=1, owner=other_owner)
    assert _client(other_owner).get(media_url).status_code == 404
    assert _client(other_owner).get(reverse(
        "annotation:preview_media", args=[other.slug, media.pk])).status_code == 404


@pytest.mark.parametrize("design", ["pairwise", "ranking"])
def test_side_by_side_designs_are_previewed_with_their_letters(db, design):
    from evalstudy.models import Criterion

    owner = UserFactory(username=f"owner-{design}", is_staff=True)
    study = make_study(n_items=2, n_systems=3 if design == "ranking" else 2, design=design,
                       owner=owner)
    if design == "ranking":
        study.criteria.all().delete()
        Criterion.objects.create(study=study, key="rank", kind="ranking", prompt="Rank them")
        study.calibration_items.all().delete()  # tuple designs take no practice items yet
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    seat = preview_seat(study)
    before = _counts()
    for position, slot in enumerate(seat.slots):
        html = client.get(url).content.decode()
        if slot.kind != "target":
            client.post(url, {"position": position, "preference": "A",
                              "rank__A": "1", "rank__B": "2", "rank__C": "3"})
            continue
        if design == "pairwise":
            assert "A is better" in html and "B is better" in html
            answers = {"preference": "B"}
        else:
            assert 'name="rank__C"' in html
            refused = client.post(url, {"position": position, "rank__A": "1", "rank__B": "1",
                                        "rank__C": "2"})
            assert refused.status_code == 400  # the same rank twice: the real rule refuses
            answers = {"rank__A": "2", "rank__B": "1", "rank__C": "3"}
        assert client.post(url, {"position": position, **answers}).status_code == 302
        break
    assert _counts() == before


# --- what a walk costs: the session it fills, the rows a request reads ----------------------------
def _walk_size(client: Client) -> int:
    return len(json.dumps(client.session.get(SESSION_KEY)))


def test_the_session_holds_one_walk_whose_size_does_not_grow_with_the_answers(db):
    owner = UserFactory(username="long-walker", is_staff=True)
    first = make_study(n_items=30, n_systems=2, attention_check_every=5, owner=owner)
    second = make_study(n_items=3, n_systems=2, owner=owner)
    client = _client(owner)
    url = reverse("annotation:preview", args=[first.slug])
    client.post(reverse("annotation:preview_start", args=[first.slug]))
    seat = preview_seat(first)
    assert len(seat.slots) == 1 + 30 + 6
    sizes = []
    for position, slot in enumerate(seat.slots):
        answers = ({"severity": "2", "usable": "no", "note": "a long note " * 20}
                   if slot.kind == "target" else {"severity": "0", "usable": "yes"})
        assert client.post(url, {"position": position, **answers}).status_code == 302
        sizes.append(_walk_size(client))
    assert "End of the preview" in client.get(url).content.decode()
    # Answers of earlier slots are not kept: only the position and a failure count change.
    assert max(sizes) - sizes[0] <= 4, sizes
    assert "a long note" not in json.dumps(client.session[SESSION_KEY])
    # Previewing another study replaces the walk: the session keeps one walk, not one a study.
    client.post(reverse("annotation:preview_start", args=[second.slug]))
    assert str(first.pk) not in client.session[SESSION_KEY]
    assert client.session[SESSION_KEY]["study"] == second.pk
    assert "Start the preview" in client.get(url).content.decode()  # the first walk is gone
    second_url = reverse("annotation:preview", args=[second.slug])
    assert _position(client.get(second_url).content.decode()) == 0


def test_failed_attention_checks_are_counted_as_they_are_answered(draft_and_designer):
    study, owner = draft_and_designer
    Study.objects.filter(pk=study.pk).update(attention_fail_limit=2)
    study.refresh_from_db()
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    seen = 0
    for position, slot in enumerate(preview_seat(study).slots):
        client.post(url, {"position": position, "severity": "0", "usable": "yes"})
        if slot.kind == "attention":
            seen += 1
            html = client.get(url).content.decode()
            # Missed once: a rater goes on; missed twice (the limit): they are stopped.
            assert ("A rater would be stopped here" in html) == (seen == 2), seen
            assert client.session[SESSION_KEY]["failures"] == seen
    assert seen == 2


def test_the_feedback_page_shows_the_last_practice_answer(draft_and_designer):
    study, owner = draft_and_designer
    CalibrationItem.objects.create(study=study, key="calib-2", reference="a", text="b",
                                   feedback="Second.", order=1,
                                   expected={"severity": "2", "usable": "no"})
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    feedback_url = reverse("annotation:preview_feedback", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    client.post(url, {"position": 0, "severity": "0", "usable": "yes"})
    assert "Your answers match the expected answers." in client.get(feedback_url).content.decode()
    client.post(url, {"position": 1, "severity": "0", "usable": "yes"})
    html = client.get(feedback_url).content.decode()
    assert "Second." in html and "Some of your answers differ" in html
    client.post(url, {"position": 2, "severity": "0", "usable": "yes"})  # not a practice item
    assert client.get(feedback_url).status_code == 302


def _output_rows_selected(queries) -> list[str]:
    """The captured queries that read rows of the output table (not counts)."""
    return [q["sql"] for q in queries
            if re.match(r'SELECT (DISTINCT )?"evalstudy_output"\.', q["sql"])]


def _step(client: Client, study: Study) -> tuple[int, int, int, list[str]]:
    """(queries, Output rows built, seats planned, output row queries) of a GET of the
    current item, after the walk's practice item."""
    url = reverse("annotation:preview", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    client.post(url, {"position": 0, "severity": "0", "usable": "yes"})
    built = []
    planned = []

    def count_output(sender, instance, **kwargs):
        built.append(instance)

    from annotation import preview

    real_order_seat = preview.order_seat

    def counting_order_seat(*args, **kwargs):
        planned.append(1)
        return real_order_seat(*args, **kwargs)

    post_init.connect(count_output, sender=Output)
    preview.order_seat = counting_order_seat
    try:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
    finally:
        post_init.disconnect(count_output, sender=Output)
        preview.order_seat = real_order_seat
    assert response.status_code == 200 and _position(response.content.decode()) == 1
    return len(captured), len(built), len(planned), _output_rows_selected(captured)


def test_a_step_of_the_walk_reads_its_own_slot_only(db):
    owner = UserFactory(username="big-walker", is_staff=True)
    small = make_study(n_items=20, n_systems=3, owner=owner)
    large = make_study(n_items=80, n_systems=3, owner=owner)
    client = _client(owner)
    small_queries, small_built, small_planned, _small_sql = _step(client, small)
    large_queries, large_built, large_planned, large_sql = _step(client, large)
    # The seat's order is planned when the walk starts, not again at each step...
    assert small_planned == large_planned == 0
    # ...and a step reads its own output (with its item), never the study's 240 outputs.
    assert small_built == large_built == 1
    assert large_sql and all('"evalstudy_output"."id" IN' in sql for sql in large_sql), large_sql
    assert small_queries == large_queries


def test_the_start_reads_the_outputs_of_the_first_seat_only(db):
    owner = UserFactory(username="part-walker", is_staff=True)
    study = make_study(n_items=80, n_systems=3, items_per_rater=10, owner=owner)
    built = []

    def count_output(sender, instance, **kwargs):
        built.append(instance)

    post_init.connect(count_output, sender=Output)
    try:
        with CaptureQueriesContext(connection) as captured:
            response = _client(owner).post(reverse("annotation:preview_start",
                                                   args=[study.slug]))
    finally:
        post_init.disconnect(count_output, sender=Output)
    assert response.status_code == 302 and built == []
    sql = _output_rows_selected(captured)
    assert sql and all('"evalstudy_output"."item_id" IN' in q for q in sql), sql


def test_a_changed_draft_is_planned_again(draft_and_designer):
    study, owner = draft_and_designer
    second = CalibrationItem.objects.create(study=study, key="calib-2", reference="x",
                                            text="the other practice", order=1,
                                            expected={"severity": "0"})
    client = _client(owner)
    url = reverse("annotation:preview", args=[study.slug])
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    client.post(url, {"position": 0, "severity": "0", "usable": "yes"})
    assert "the other practice" in client.get(url).content.decode()  # calib-good came first
    # The practice items swap places (no row added or removed): the seat keeps its length,
    # so the walk goes on, on the order planned again rather than the one it kept.
    CalibrationItem.objects.filter(study=study, key="calib-good").update(order=2)
    html = client.get(url).content.decode()
    assert _position(html) == 1 and "turn on the light" in html
    assert client.session[SESSION_KEY]["order"][0] == ["c", second.pk]
    # An item added: the seat is longer, so the walk starts over, as before.
    item = Item.objects.create(study=study, external_id="late", reference="late")
    Output.objects.bulk_create(Output(item=item, system=system, text="late output")
                               for system in study.systems.all())
    assert "Start the preview" in client.get(url).content.decode()
    assert client.post(url, {"position": 1, "severity": "0", "usable": "yes"}).status_code == 302
    client.post(reverse("annotation:preview_start", args=[study.slug]))
    assert len(client.session[SESSION_KEY]["order"]) == len(preview_seat(study).slots) == 9
