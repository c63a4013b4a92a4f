"""The rater-side API: entry-token authentication, own slots only, idempotent submission with
and without an Idempotency-Key, throttling, and no system names in what raters receive."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from annotation.auth import RaterThrottle
from annotation.models import IdempotencyKey, Judgment
from evalstudy.models import Assignment, AssignmentSlot, Rater, Study
from tests.factories import invite, make_study

# Throttle counters start empty (tests/conftest.py): these tests call the API.
pytestmark = pytest.mark.usefixtures("fresh_throttles")

ANSWERS = {"answers": {"severity": "0", "usable": "yes"}}


@pytest.fixture
def open_one(db):
    return make_study(n_items=3, n_systems=3, status=Study.Status.OPEN, slug="open-one")


@pytest.fixture
def rater(open_one):
    return invite(open_one, external_id="PID-1")


def as_rater(rater: Rater) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Rater {rater.access_token}")


def submit(client, slot_id, body=ANSWERS, **headers):
    return client.post(reverse("api-rater-submit", args=[slot_id]), data=json.dumps(body),
                       content_type="application/json", **headers)


def next_slot(client, study):
    response = client.post(reverse("api-rater-next", args=[study.slug]))
    assert response.status_code == 200, response.content
    return response.json()


def test_rater_token_reaches_own_slots_and_nothing_else(open_one, rater):
    client = as_rater(rater)
    listed = client.get(reverse("api-rater-slots", args=[open_one.slug])).json()
    assert listed["slots"] == [] and listed["seat_state"] is None
    first = next_slot(client, open_one)
    # What a slot is (practice, check or target) is not told before it is answered.
    assert first["step"] == "rate" and first["slot"]["kind"] == "item"
    listed = client.get(reverse("api-rater-slots", args=[open_one.slug])).json()
    assert [q["key"] for q in listed["questions"]] == ["severity", "usable", "note"]
    # 1 calibration + 3 targets (latin square: 1 per item); only the served one is listed.
    assert listed["total"] == 4 and [s["id"] for s in listed["slots"]] == [first["slot"]["id"]]
    assert submit(client, first["slot"]["id"]).status_code == 201
    listed = client.get(reverse("api-rater-slots", args=[open_one.slug])).json()
    assert listed["slots"][0]["kind"] == "calibration" and listed["slots"][0]["completed"]
    text = json.dumps(listed)
    for name in ("sys-0", "sys-1", "sys-2"):
        assert name not in text, "raters never see system names"
    # A researcher endpoint refuses a rater token.
    response = client.get(reverse("api-study", args=[open_one.slug]))
    assert response.status_code == 403 and "rater tokens" in response.json()["message"]
    # Someone else's slot is a 404, whatever its id.
    other = as_rater(invite(open_one, external_id="PID-2"))
    theirs = next_slot(other, open_one)["slot"]["id"]
    response = submit(client, theirs)
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not Judgment.objects.filter(slot_id=theirs).exists()
    assert Client(HTTP_AUTHORIZATION="Rater wrong").get(
        reverse("api-rater-slots", args=[open_one.slug])).status_code == 401


def test_draft_study_does_not_exist_for_raters(db, rater):
    draft = make_study(slug="draft-one")
    response = as_rater(rater).get(reverse("api-rater-slots", args=[draft.slug]))
    assert response.status_code == 404


def test_full_list_then_done(open_one, rater):
    client = as_rater(rater)
    count = 0
    while (step := next_slot(client, open_one))["step"] == "rate":
        assert submit(client, step["slot"]["id"]).status_code == 201
        count += 1
    assert step == {"step": "done", "slot": None} and count == 4
    assert Judgment.objects.filter(rater=rater).count() == 8


def test_resubmission_without_key_is_idempotent(open_one, rater):
    client = as_rater(rater)
    slot = next_slot(client, open_one)["slot"]["id"]
    first = submit(client, slot)
    again = submit(client, slot)
    assert first.status_code == 201 and first.json()["created"] == 2
    assert again.status_code == 200 and again.json()["unchanged"] == 2
    assert Judgment.objects.filter(slot_id=slot).count() == 2


def test_idempotency_key_replays_and_refuses_reuse(open_one, rater):
    client = as_rater(rater)
    slot = next_slot(client, open_one)["slot"]["id"]
    first = submit(client, slot, HTTP_IDEMPOTENCY_KEY="k-1")
    replay = submit(client, slot, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == replay.status_code == 201
    assert replay.json() == first.json() and replay["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Judgment.objects.filter(slot_id=slot).count() == 2
    changed = {"answers": {"severity": "2", "usable": "no"}}
    response = submit(client, slot, changed, HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert set(Judgment.objects.filter(slot_id=slot).values_list("value", flat=True)) == {
        "0", "yes"}
    # Keys belong to one rater: another rater's "k-1" is a new key.
    other = as_rater(invite(open_one, external_id="PID-2"))
    theirs = next_slot(other, open_one)["slot"]["id"]
    assert submit(other, theirs, HTTP_IDEMPOTENCY_KEY="k-1").status_code == 201
    assert IdempotencyKey.objects.count() == 2


def test_invalid_answers_use_the_error_shape_and_are_replayed(open_one, rater):
    client = as_rater(rater)
    slot = next_slot(client, open_one)["slot"]["id"]
    bad = {"answers": {"severity": "7"}}
    response = submit(client, slot, bad, HTTP_IDEMPOTENCY_KEY="bad-1")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and set(body["field_errors"]) == {"severity", "usable"}
    assert submit(client, slot, bad, HTTP_IDEMPOTENCY_KEY="bad-1").json() == body
    assert submit(client, slot, {"nope": 1}).status_code == 400
    assert not Judgment.objects.filter(slot_id=slot).exists()


def test_not_current_slot_is_409(open_one, rater):
    client = as_rater(rater)
    next_slot(client, open_one)
    later = AssignmentSlot.objects.get(assignment__rater=rater, position=2)
    response = submit(client, later.pk)
    assert response.status_code == 409 and response.json()["code"] == "conflict"


def test_rater_endpoints_are_throttled_per_rater(open_one, rater, monkeypatch):
    monkeypatch.setattr(RaterThrottle, "THROTTLE_RATES", {"rater": "3/min"})
    client = as_rater(rater)
    url = reverse("api-rater-slots", args=[open_one.slug])
    assert [client.get(url).status_code for _ in range(4)] == [200, 200, 200, 429]
    other = as_rater(invite(open_one, external_id="PID-2"))
    assert other.get(url).status_code == 200  # a budget per rater, not per address


def test_session_from_entry_link_works_for_the_api(open_one, rater):
    browser = Client()
    browser.get(f"/enter/{rater.access_token}/")
    response = browser.get(reverse("api-rater-slots", args=[open_one.slug]))
    assert response.status_code == 200


@pytest.mark.parametrize("kind", ["llm", "metric"])
def test_proxy_rater_tokens_never_authenticate(open_one, kind):
    proxy = Rater.objects.create(kind=kind, external_id=f"{kind}-judge")
    response = as_rater(proxy).post(reverse("api-rater-next", args=[open_one.slug]))
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"
    assert not Assignment.objects.filter(rater=proxy).exists()


def test_session_rater_needs_the_csrf_token(open_one, rater):
    browser = Client(enforce_csrf_checks=True)
    browser.get(f"/enter/{rater.access_token}/")  # binds the session; no seat yet
    url = reverse("api-rater-next", args=[open_one.slug])
    response = browser.post(url)
    assert response.status_code == 403 and "CSRF" in response.json()["message"]
    assert not Assignment.objects.filter(rater=rater).exists()
    # Reading needs no token; writing with the token from the cookie works.
    assert browser.get(reverse("api-rater-slots", args=[open_one.slug])).status_code == 200
    # The rating pages carry the token (their forms); a page script would send it back.
    browser.get(reverse("annotation:rate", args=[open_one.slug]), follow=True)
    token = browser.cookies["csrftoken"].value
    assert browser.post(url, HTTP_X_CSRFTOKEN=token).status_code == 200
    # A request that names its rater by token carries no ambient credential: no CSRF token.
    other = invite(open_one, external_id="PID-2")
    scripted = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Rater {other.access_token}")
    assert scripted.post(url).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_racing_first_requests_with_one_key_run_once(monkeypatch):
    """Two first requests with the same key and different bodies: one runs, the other waits
    for it and is refused; the stored judgments are the answered request's."""
    import threading
    import time

    from django.db import connection

    from annotation import api as rater_api

    study = make_study(n_items=3, n_systems=3, status=Study.Status.OPEN, slug="race")
    rater = invite(study, external_id="PID-R")
    slot = next_slot(as_rater(rater), study)["slot"]["id"]
    real_submit, calls = rater_api.judgment_submit, []

    def slow_submit(**kwargs):
        calls.append(kwargs["answers"])
        time.sleep(0.5)  # hold the first request inside its work while the second arrives
        return real_submit(**kwargs)

    monkeypatch.setattr(rater_api, "judgment_submit", slow_submit)
    bodies = [ANSWERS, {"answers": {"severity": "2", "usable": "no"}}]
    results: list = [None, None]

    def send(index):
        try:
            response = submit(as_rater(rater), slot, bodies[index], HTTP_IDEMPOTENCY_KEY="race")
            results[index] = (response.status_code, response.json())
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    threads[0].start()
    time.sleep(0.2)
    threads[1].start()
    for thread in threads:
        thread.join(30)
    assert [r[0] for r in results] == [201, 422], results
    assert results[1][1]["code"] == "idempotency_key_reused"
    assert calls == [ANSWERS["answers"]]
    assert dict(Judgment.objects.filter(slot_id=slot).values_list("criterion__key", "value")
                ) == ANSWERS["answers"]
    stored = IdempotencyKey.objects.get(rater=rater, key="race")
    assert stored.status_code == 201 and stored.response == results[0][1]
