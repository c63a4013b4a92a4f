"""Small things a new user hit (issue 16): every point of an 11-point scale has a key, the
Add-study form shows no seed it will not keep, and the site has an icon."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.selectors import question_choices
from evalstudy.models import Criterion, Study
from tests.factories import UserFactory


def test_every_point_of_an_eleven_point_scale_has_a_key(db):
    criterion = Criterion(kind="likert", scale_points=11, key="x", prompt="?")
    keys = [choice.key for choice in question_choices(criterion)]
    assert keys == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "-"]
    options = Criterion(kind="categorical", options=[f"o{n}" for n in range(12)], key="y",
                        prompt="?")
    assert [choice.key for choice in question_choices(options)][9:] == ["0", "-", ""]


@pytest.mark.django_db
def test_the_add_study_form_shows_no_seed_and_a_saved_study_shows_its_own():
    admin = UserFactory(is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    add = client.get(reverse("admin:evalstudy_study_add")).content.decode()
    assert "field-seed" not in add
    study = Study.objects.create(slug="s", title="S")
    change = client.get(reverse("admin:evalstudy_study_change", args=[study.pk])).content.decode()
    assert "field-seed" in change and str(study.seed) in change


@pytest.mark.django_db
def test_the_site_has_an_icon():
    page = Client().get("/accounts/login/").content.decode()
    assert 'rel="icon"' in page and "favicon" in page
    response = Client().get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith(".svg")
