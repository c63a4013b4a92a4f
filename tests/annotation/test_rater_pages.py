"""The rater's pages through Django's test client: entry links, blinding, escaping, CSRF."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from annotation.models import Judgment
from evalstudy.models import Output, Study
from tests.factories import UserFactory, invite, make_study


@pytest.fixture
def coded_study(db):
    study = make_study(n_items=3, n_systems=2, status=Study.Status.OPEN, completion_code="C0DE42")
    study.systems.filter(name="sys-0").update(description="secret description of sys-0")
    return study


def _enter(client, rater):
    response = client.get(reverse("annotation:enter", args=[rater.access_token]))
    assert response.status_code == 302


def _current_slot_id(html):
    return int(re.search(r'/slots/(\d+)/"', html).group(1))


def test_entry_link_binds_the_session_and_the_dashboard_lists_its_study(coded_study):
    client, rater = Client(), invite(coded_study)
    _enter(client, rater)
    page = client.get(reverse("annotation:dashboard")).content.decode()
    assert coded_study.title in page
    assert reverse("annotation:rate", args=[coded_study.slug]) in page


def test_unknown_entry_token_is_404(db):
    assert Client().get(reverse("annotation:enter", args=["nope"])).status_code == 404


def test_rater_account_login_works_too(coded_study):
    user = UserFactory()
    invite(coded_study, user=user, kind="slp")
    client = Client()
    assert client.login(username=user.username, password="pw-for-tests")
    assert client.get(reverse("annotation:rate", args=[coded_study.slug])).status_code == 200


def test_rating_pages_never_reveal_systems(coded_study):
    client, rater = Client(), invite(coded_study)
    _enter(client, rater)
    for _ in range(6):
        response = client.get(reverse("annotation:rate", args=[coded_study.slug]))
        html = response.content.decode()
        for system in coded_study.systems.all():
            assert system.name not in html
            assert not system.description or system.description not in html
        if "finished every item" in html:
            break
        slot_id = _current_slot_id(html)
        client.post(reverse("annotation:submit", args=[coded_study.slug, slot_id]),
                    {"severity": "1", "usable": "yes"})
    # The end page, reached; a personal-link rater gets no crowd completion code.
    assert "finished every item" in html and "C0DE42" not in html


def test_output_text_is_escaped(coded_study):
    Output.objects.filter(item__study=coded_study).update(text="<script>alert(1)</script>")
    client, rater = Client(), invite(coded_study)
    _enter(client, rater)
    html = client.get(reverse("annotation:rate", args=[coded_study.slug])).content.decode()
    slot_id = _current_slot_id(html)  # calibration first
    client.post(reverse("annotation:submit", args=[coded_study.slug, slot_id]),
                {"severity": "0", "usable": "yes"})
    html = client.get(reverse("annotation:rate", args=[coded_study.slug])).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_submit_stores_and_moves_on_and_refuses_without_csrf(coded_study):
    rater = invite(coded_study)
    strict = Client(enforce_csrf_checks=True)
    _enter(strict, rater)
    html = strict.get(reverse("annotation:rate", args=[coded_study.slug])).content.decode()
    slot_id = _current_slot_id(html)
    url = reverse("annotation:submit", args=[coded_study.slug, slot_id])
    assert strict.post(url, {"severity": "0", "usable": "yes"}).status_code == 403
    assert not Judgment.objects.exists()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    response = strict.post(url, {"severity": "0", "usable": "yes", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Judgment.objects.filter(slot_id=slot_id).count() == 2
    html = strict.get(reverse("annotation:rate", args=[coded_study.slug])).content.decode()
    assert _current_slot_id(html) != slot_id


def test_invalid_post_rerenders_with_the_error_and_keeps_the_answers(coded_study):
    client, rater = Client(), invite(coded_study)
    _enter(client, rater)
    html = client.get(reverse("annotation:rate", args=[coded_study.slug])).content.decode()
    slot_id = _current_slot_id(html)
    response = client.post(reverse("annotation:submit", args=[coded_study.slug, slot_id]),
                           {"severity": "2"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "an answer is required" in html
    assert re.search(r'value="2"[^>]*checked', html)
    assert not Judgment.objects.exists()


def test_posting_to_another_raters_slot_is_404_and_stores_nothing(coded_study):
    owner, intruder = Client(), Client()
    _enter(owner, invite(coded_study))
    _enter(intruder, invite(coded_study))
    html = owner.get(reverse("annotation:rate", args=[coded_study.slug])).content.decode()
    intruder.get(reverse("annotation:rate", args=[coded_study.slug]))
    response = intruder.post(
        reverse("annotation:submit", args=[coded_study.slug, _current_slot_id(html)]),
        {"severity": "0", "usable": "yes"},
    )
    assert response.status_code == 404
    assert not Judgment.objects.exists()


def test_pairwise_page_labels_outputs_a_and_b_only(db):
    study = make_study(n_items=2, n_systems=2, design="pairwise", status=Study.Status.OPEN)
    client = Client()
    _enter(client, invite(study))
    html = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    slot_id = _current_slot_id(html)
    client.post(reverse("annotation:submit", args=[study.slug, slot_id]), {"preference": "A"})
    html = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert "<h2>A</h2>" in html and "<h2>B</h2>" in html
    assert "sys-0" not in html and "sys-1" not in html


def test_closed_study_page_says_it_is_not_open_and_a_draft_does_not_exist(db):
    study = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN)
    client = Client()
    _enter(client, invite(study))
    study.status = Study.Status.CLOSED
    study.save()
    response = client.get(reverse("annotation:rate", args=[study.slug]))
    assert response.status_code == 409
    assert "not open" in response.content.decode()
    draft = make_study(n_items=2, n_systems=1)
    _enter(client, invite(draft))
    assert client.get(reverse("annotation:rate", args=[draft.slug])).status_code == 404
