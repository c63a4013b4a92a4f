"""The rater's loop in one round trip and a handful of statements (annotation.loop), with every
guarantee of the general path: the same answers stored, the same refusals, one judgment per
double submit. The loop is the fast storage strategy of the one entry for storing an answer
(`annotation.services.judgment_submit`, which chooses it): the same scenarios run through that
entry with the fast strategy available and not, and must leave the same rows behind; and no
interface calls the loop's write path itself."""

from __future__ import annotations

import ast
import datetime as dt
import re
import threading
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotation import loop
from annotation.models import Judgment, JudgmentRevision
from annotation.services import SessionRater, SubmissionRefused, judgment_submit
from evalstudy.models import Assignment, AssignmentSlot, AttentionCheck, Enrollment, Study
from tests.factories import UserFactory, invite, make_study
from tests.test_architecture import ROOT, source_files

HX = {"HTTP_HX_REQUEST": "true"}
GOOD = {"severity": "0", "usable": "yes"}
# The most a submit-and-next may cost, BEGIN and COMMIT included (the target).
MAX_STATEMENTS = 6


def _form(html: str) -> tuple[str, int]:
    found = re.search(r'<form[^>]*action="(/s/[^"]+/slots/(\d+)/)"', html)
    assert found, html[:500]
    return found.group(1), int(found.group(2))


def _enter(client: Client, opened: Study, **fields) -> str:
    """A personal-link rater of `study` in `client`'s session; returns the first page."""
    rater = invite(opened, **fields)
    assert client.get(reverse("annotation:enter", args=[rater.access_token])).status_code == 302
    return client.get(reverse("annotation:rate", args=[opened.slug])).content.decode()


def _through_practice(client: Client, opened: Study, page: str) -> str:
    action, _ = _form(page)
    assert "Practice item" in page
    response = client.post(action, {"severity": "0", "usable": "yes"}, **HX)
    assert response["HX-Redirect"].endswith("/feedback/")
    return client.get(reverse("annotation:rate", args=[opened.slug])).content.decode()


@pytest.fixture
def opened(db):
    return make_study(n_items=4, n_systems=2, status=Study.Status.OPEN)


def test_a_submission_is_answered_with_the_next_item_in_at_most_six_statements(opened):
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    action, slot_id = _form(page)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(action, GOOD, **HX)
    assert response.status_code == 200
    html = response.content.decode()
    _next_action, next_id = _form(html)
    assert next_id != slot_id and "3 of 5" in html and "<main id=\"main\">" in html
    assert "{#" not in html and "<html" not in html  # the item alone, swapped in place
    assert len(queries) <= MAX_STATEMENTS, [q["sql"][:80] for q in queries]
    stored = dict(Judgment.objects.filter(slot_id=slot_id).values_list("criterion__key",
                                                                          "value"))
    assert stored == GOOD
    served = AssignmentSlot.objects.get(pk=next_id)
    assert served.served_at is not None and served.completed_at is None
    assert AssignmentSlot.objects.get(pk=slot_id).completed_at is not None


def test_a_due_lease_renewal_and_the_last_item_cost_no_extra_statement(opened):
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    seat = Assignment.objects.get(study=opened, rater__isnull=False)
    stale = timezone.now() + dt.timedelta(minutes=1)  # renewed long ago: due now
    Assignment.objects.filter(pk=seat.pk).update(lease_expires_at=stale)
    for _ in range(4):
        action, _ = _form(page)
        with CaptureQueriesContext(connection) as queries:
            response = client.post(action, GOOD, **HX)
        assert len(queries) <= MAX_STATEMENTS, [q["sql"][:80] for q in queries]
        page = response.content.decode()
    seat.refresh_from_db()
    assert seat.lease_expires_at > stale + dt.timedelta(minutes=opened.lease_minutes - 2)
    assert seat.state == Assignment.State.DONE and seat.completed_at is not None
    assert response["HX-Redirect"] == reverse("annotation:rate", args=[opened.slug])
    assert "finished every item" in client.get(response["HX-Redirect"]).content.decode()


def test_an_account_holders_submission_also_fits(opened):
    user = UserFactory()
    invite(opened, user=user, kind="slp")
    client = Client()
    client.force_login(user)
    page = _through_practice(client, opened,
                             client.get(reverse("annotation:rate", args=[opened.slug])
                                        ).content.decode())
    action, slot_id = _form(page)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(action, GOOD, **HX)
    assert response.status_code == 200 and _form(response.content.decode())[1] != slot_id
    assert len(queries) <= MAX_STATEMENTS, [q["sql"][:80] for q in queries]


def test_without_javascript_the_post_redirects_and_the_page_serves_the_next_item(opened):
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    action, slot_id = _form(page)
    response = client.post(action, GOOD)
    assert response.status_code == 302
    assert response["Location"] == reverse("annotation:rate", args=[opened.slug])
    with CaptureQueriesContext(connection) as queries:
        following = client.get(response["Location"])
    assert following.status_code == 200 and "<html" in following.content.decode()
    assert _form(following.content.decode())[1] != slot_id
    assert len(queries) <= MAX_STATEMENTS


def test_the_fast_path_leaves_what_it_cannot_take_to_the_general_path(opened, monkeypatch):
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    action, slot_id = _form(page)
    taken = []
    original = loop.submit_and_next

    def spy(**kwargs):
        page = original(**kwargs)
        taken.append(page is not None)
        return page

    monkeypatch.setattr(loop, "submit_and_next", spy)
    # Invalid answers: the same item with the reasons, nothing stored.
    bad = client.post(action, {"severity": "0"}, **HX)
    assert bad.status_code == 400 and "an answer is required" in bad.content.decode()
    assert not Judgment.objects.filter(slot_id=slot_id).exists()
    # A first answer, then the same answers again (a retry): both on the fast path, both
    # answered with the next item, stored once.
    first = client.post(action, GOOD, **HX)
    with CaptureQueriesContext(connection) as queries:
        again = client.post(action, GOOD, **HX)
    assert first.status_code == again.status_code == 200 and not again.get("HX-Redirect")
    assert _form(again.content.decode())[1] == _form(first.content.decode())[1] != slot_id
    assert len(queries) <= MAX_STATEMENTS + 1  # the stored answers are read to compare
    assert Judgment.objects.filter(slot_id=slot_id).count() == 2
    # A revision of that answer: the general path keeps the earlier value.
    client.post(action, {"severity": "1", "usable": "yes"}, **HX)
    assert JudgmentRevision.objects.filter(judgment__slot_id=slot_id).count() == 1
    assert taken == [False, True, True, False]


def test_refusals_stay_refusals(opened):
    client, other = Client(), Client()
    page = _through_practice(client, opened, _enter(client, opened))
    action, slot_id = _form(page)
    _enter(other, opened)
    # Another rater's slot: not theirs.
    assert other.post(action, GOOD, **HX).status_code == 404
    # A later slot than the current one: not yet.
    later = AssignmentSlot.objects.filter(assignment__slots__pk=slot_id,
                                          completed_at__isnull=True).exclude(pk=slot_id).first()
    assert client.post(re.sub(r"\d+/$", f"{later.pk}/", action), GOOD, **HX).status_code == 409
    # A stopped participant, a closed study: refused with the reason, nothing stored.
    Enrollment.objects.filter(study=opened, rater__assignments__slots__pk=slot_id).update(
        stopped_at=timezone.now())
    assert client.post(action, GOOD, **HX).status_code == 409
    Enrollment.objects.update(stopped_at=None)
    Study.objects.filter(pk=opened.pk).update(status=Study.Status.CLOSED)
    assert client.post(action, GOOD, **HX).status_code == 409
    assert not Judgment.objects.filter(slot__kind="target").exists()


def test_a_crowd_browser_bound_under_an_old_platform_session_cannot_answer(db):
    opened = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN)
    first = Client()
    first.get(reverse("annotation:crowd_entry", args=[opened.slug]),
              {"PROLIFIC_PID": "5f1e2d3c4b5a69788796a5b1", "SESSION_ID": "s1"})
    page = first.get(reverse("annotation:rate", args=[opened.slug])).content.decode()
    action, _ = _form(page)
    # The participation is now bound to another platform session (as a takeover leaves it).
    Enrollment.objects.filter(study=opened).update(platform_session_id="s2")
    assert first.post(action, GOOD, **HX).status_code == 404
    assert not Judgment.objects.exists()


# --- the same scenarios, fast path on and off ---------------------------------------------------
def _scenario(slug_suffix: str) -> tuple:
    """A rater through practice, items, a failed attention check, a revision and a double
    submit; returns what is stored, in a form that does not depend on ids."""
    opened = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN, slug=f"s-{slug_suffix}",
                       attention_check_every=2, attention_fail_limit=2, seed=7)
    AttentionCheck.objects.filter(study=opened).update(expected={"severity": "2"})
    client = Client()
    page = _enter(client, opened, external_id="same-person")
    answers = [{"severity": "0", "usable": "yes"}, {"severity": "2", "usable": "no",
                                                     "note": "garbled"},
               {"severity": "1", "usable": "yes"}, {"severity": "0", "usable": "no"}]
    for step in range(12):
        if "finished every item" in page or "rate-form" not in page:
            break
        action, _slot_id = _form(page)
        response = client.post(action, answers[step % len(answers)], **HX)
        if step == 3:  # the same answer sent again
            client.post(action, answers[step % len(answers)], **HX)
        page = (response.content.decode() if not response.get("HX-Redirect")
                else client.get(reverse("annotation:rate", args=[opened.slug])).content.decode())
    slots = AssignmentSlot.objects.filter(assignment__study=opened, assignment__rater__isnull=False
                                          ).order_by("position")
    stored = [(s.position, s.kind, s.served_at is not None, s.completed_at is not None,
               tuple(sorted(Judgment.objects.filter(slot=s).values_list("criterion__key",
                                                                       "value"))))
              for s in slots]
    seat = Assignment.objects.get(study=opened, rater__isnull=False)
    enrollment = Enrollment.objects.get(study=opened)
    return stored, seat.state, enrollment.stop_reason, page.count("rate-form")


def test_the_fast_and_the_general_strategy_of_the_rating_page_leave_the_same_rows(
        db, monkeypatch):
    fast = _scenario("fast")
    monkeypatch.setattr(loop, "fast_path_available", lambda: False)
    general = _scenario("general")
    assert fast == general
    assert any(kind == "attention" for _, kind, *_ in fast[0])


@pytest.mark.django_db(transaction=True)
def test_a_double_submit_from_two_connections_stores_one_answer():
    opened = make_study(n_items=3, n_systems=2, status=Study.Status.OPEN)
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    action, slot_id = _form(page)
    statuses = []

    def send():
        twin = Client()
        twin.cookies = client.cookies  # the same browser session
        statuses.append(twin.post(action, GOOD, **HX).status_code)
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 200]
    assert Judgment.objects.filter(slot_id=slot_id).count() == 2  # severity and usable, once
    assert not JudgmentRevision.objects.exists()


def test_without_prepared_statements_the_loop_sends_each_statement_whole(opened, settings):
    # Behind a pooler in transaction mode a statement prepared on one server session is
    # missing on the next: the setting turns preparing off.
    settings.EVALSTUDY_DB_PREPARED_STATEMENTS = False
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    action, slot_id = _form(page)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(action, GOOD, **HX)
    assert response.status_code == 200 and _form(response.content.decode())[1] != slot_id
    assert not any(q["sql"].startswith(("PREPARE", "EXECUTE")) for q in queries)
    assert len(queries) <= MAX_STATEMENTS


def test_time_on_task_starts_when_an_item_is_shown_not_behind_a_feedback_page(opened):
    client = Client()
    page = _enter(client, opened)
    action, practice_id = _form(page)
    seat = AssignmentSlot.objects.get(pk=practice_id).assignment
    first_item = seat.slots.get(position=1)
    assert client.post(action, GOOD, **HX)["HX-Redirect"].endswith("/feedback/")
    # The rater reads the feedback: the next item is not on screen yet.
    first_item.refresh_from_db()
    assert first_item.served_at is None
    client.get(reverse("annotation:rate", args=[opened.slug]))
    first_item.refresh_from_db()
    assert first_item.served_at is not None


def test_an_attention_check_that_stops_the_rater_serves_nothing_more(db):
    opened = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN,
                       attention_check_every=1, attention_fail_limit=1)
    client = Client()
    page = _through_practice(client, opened, _enter(client, opened))
    for _ in range(4):
        action, slot_id = _form(page)
        kind = AssignmentSlot.objects.get(pk=slot_id).kind
        response = client.post(action, GOOD, **HX)  # fails the check (it expects severity 2)
        if kind == "attention":
            break
        page = response.content.decode()
    assert Enrollment.objects.get(study=opened).stop_reason == "attention"
    later = AssignmentSlot.objects.filter(assignment__slots__pk=slot_id,
                                          position__gt=AssignmentSlot.objects.get(
                                              pk=slot_id).position)
    assert not later.filter(served_at__isnull=False).exists()


def test_a_slot_id_no_row_can_have_is_a_404_not_a_500(opened):
    client = Client()
    _enter(client, opened)
    response = client.post(f"/s/{opened.slug}/slots/99999999999999999999/", GOOD, **HX)
    assert response.status_code == 404


# --- one entry for storing an answer: judgment_submit chooses the strategy ----------------------
def _submitted_through_the_one_entry(slug_suffix: str) -> tuple:
    """A rater's answers stored by calling `judgment_submit` alone (as every interface does):
    practice, items, a failed attention check, a double submit and a refused change; returns
    what each call came to and what is stored, in a form that does not depend on ids."""
    study = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN, slug=f"e-{slug_suffix}",
                       attention_check_every=2, attention_fail_limit=2, seed=7)
    AttentionCheck.objects.filter(study=study).update(expected={"severity": "2"})
    client = Client()
    rater = invite(study, external_id="same-person")
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    client.get(reverse("annotation:rate", args=[study.slug]))  # the seat, its first slot served
    submitter = SessionRater(slug=study.slug, rater_id=rater.pk, user_id=None,
                             find=lambda: rater)
    seat = Assignment.objects.get(study=study, rater=rater)
    answers = [{"severity": "0", "usable": "yes"}, {"severity": "2", "usable": "no",
                                                     "note": "garbled"},
               {"severity": "1", "usable": "yes"}, {"severity": "0", "usable": "no"}]
    outcomes, served = [], []
    for step in range(12):
        slot = seat.slots.filter(completed_at__isnull=True).order_by("position").first()
        if slot is None:
            break
        for _ in range(2 if step == 3 else 1):  # step 3: the same answers sent again
            try:
                counts = judgment_submit(rater=submitter, slot_id=slot.pk,
                                         answers=answers[step % len(answers)])
            except SubmissionRefused as refused:  # the rater was stopped
                outcomes.append(("refused", refused.status))
                break
            outcomes.append((counts.created, counts.revised, counts.unchanged, counts.removed,
                             counts.slot_kind, counts.stopped))
            served.append(counts.served is not None)
        else:
            continue
        break
    answered = seat.slots.filter(completed_at__isnull=False).order_by("-position").first()
    try:  # a change to an answered item: this study allows none, whoever stores it
        judgment_submit(rater=submitter, slot_id=answered.pk, answers={"severity": "1",
                                                                       "usable": "no"})
    except SubmissionRefused as refused:
        outcomes.append(("refused", refused.status))
    stored = [(s.position, s.kind, s.completed_at is not None,
               tuple(sorted(Judgment.objects.filter(slot=s).values_list("criterion__key",
                                                                       "value"))))
              for s in seat.slots.order_by("position")]
    seat.refresh_from_db()
    return (outcomes, stored, seat.state, Enrollment.objects.get(study=study).stop_reason,
            JudgmentRevision.objects.filter(judgment__slot__assignment=seat).count()), served


def test_judgment_submit_stores_the_same_rows_whichever_strategy_it_chooses(db, monkeypatch):
    fast, served_fast = _submitted_through_the_one_entry("fast")
    monkeypatch.setattr(loop, "fast_path_available", lambda: False)
    general, served_general = _submitted_through_the_one_entry("general")
    assert fast == general
    assert any(served_fast) and not any(served_general)  # the loop did store in the first
    assert any(kind == "attention" for _, kind, *_ in fast[1])


def test_a_rater_of_the_api_is_stored_by_the_general_strategy(opened, monkeypatch):
    client = Client()
    rater = invite(opened)
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    client.get(reverse("annotation:rate", args=[opened.slug]))
    slot = Assignment.objects.get(rater=rater).slots.order_by("position").first()
    monkeypatch.setattr(loop, "submit_and_next", lambda **kwargs: pytest.fail(kwargs))
    counts = judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    assert counts.created == 2 and counts.served is None


def _names_the_loops_write_path(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return any((isinstance(node, ast.Name) and node.id == "submit_and_next")
               or (isinstance(node, ast.Attribute) and node.attr == "submit_and_next")
               or (isinstance(node, ast.alias) and node.name == "submit_and_next")
               for node in ast.walk(tree))


def test_only_judgment_submit_reaches_the_loops_write_path():
    """Views, the API, commands and tasks store an answer through `judgment_submit` alone: the
    loop's fast write is its storage strategy, never an interface's choice."""
    callers = sorted(str(path.relative_to(ROOT)) for path in source_files(ROOT)
                     if _names_the_loops_write_path(path))
    assert callers == ["annotation/services.py"]  # (annotation/loop.py defines it)


def test_the_checker_sees_a_view_that_calls_the_loop(tmp_path):
    view = tmp_path / "views.py"
    view.write_text("from annotation import loop\n\ndef submit(request):\n"
                    "    return loop.submit_and_next(slug='s')\n", encoding="utf-8")
    assert _names_the_loops_write_path(view)
    view.write_text("from annotation.services import judgment_submit\n", encoding="utf-8")
    assert not _names_the_loops_write_path(view)
