"""An adaptive study in the admin: its change page saves with a plan inline (before and after
registration), and its systems, which the registered plan names, cannot be renamed, added or
deleted there once the study opened; registration resolves the plan's blanks (criterion,
every pair) so that a later change of the study cannot change the plan."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from evalstudy.models import Study
from evalstudy.services import assignment_claim, study_open, study_plan_save
from tests.evalstudy.test_authoring import change_form_data
from tests.factories import UserFactory, invite, make_study

pytestmark = pytest.mark.django_db


def _adaptive(**plan) -> Study:
    owner = UserFactory(username="owner", is_staff=True)
    owner.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    study = make_study(design="pairwise", n_items=10, n_systems=3, items_per_rater=4,
                       owner=owner, slug="ada")
    study.design = Study.Design.ADAPTIVE
    study.save()
    study_plan_save(study=study, fields={"target_ci_width": 1.0, "check_every": 8,
                                         "max_judgments": 40, **plan})
    return study


def _admin(study: Study) -> tuple[Client, str]:
    client = Client()
    client.force_login(study.owner)
    return client, reverse("admin:evalstudy_study_change", args=[study.pk])


@pytest.mark.parametrize("registered", [False, True])
def test_the_change_page_saves_unchanged_with_a_plan(registered):
    # The plan's default criterion is blank: read through it, the plan was a row of no study
    # and every save of the page failed ("must all belong to the same study").
    study = _adaptive()
    if registered:
        study_open(study=study)
    client, url = _admin(study)
    response = client.post(url, change_form_data(client.get(url)))
    assert response.status_code == 302, response.context["errors"]


def test_registration_resolves_the_plans_blanks():
    study = _adaptive()
    study_open(study=study)
    study.plan.refresh_from_db()
    names = sorted(study.systems.values_list("name", flat=True))
    assert study.plan.criterion == study.criteria.get(kind="pairwise")
    assert sorted(map(sorted, study.plan.contrasts)) == sorted(
        [[a, b] for i, a in enumerate(names) for b in names[i + 1:]])


def test_the_systems_of_a_registered_plan_cannot_be_renamed_but_seats_still_come():
    study = _adaptive()
    study_open(study=study)
    client, url = _admin(study)
    data = change_form_data(client.get(url))
    name_key = next(k for k in data if k.startswith("systems-") and k.endswith("-name"))
    renamed = {**data, name_key: "renamed"}
    response = client.post(url, renamed)
    assert response.status_code == 200
    assert "cannot change after its plan was registered" in response.content.decode()
    assert not study.systems.filter(name="renamed").exists()
    # a description may still change
    description_key = name_key.replace("-name", "-description")
    assert client.post(url, {**data, description_key: "a note"}).status_code == 302
    # and raters still get seats
    assert assignment_claim(study=study, rater=invite(study)) is not None


def test_a_system_renamed_behind_the_admins_back_stops_seats_without_a_server_error():
    from evalstudy.services import StudyFull

    study = _adaptive()
    study_open(study=study)
    study.plan.refresh_from_db()
    study.systems.filter(name=study.plan.contrasts[0][0]).update(name="renamed")
    with pytest.raises(StudyFull):
        assignment_claim(study=study, rater=invite(study))


def test_a_plan_without_a_stopping_target_is_refused_in_words():
    study = _adaptive()
    client, url = _admin(study)
    data = change_form_data(client.get(url))
    width_key = next(k for k in data if k.startswith("plan-") and k.endswith("target_ci_width"))
    response = client.post(url, {**data, width_key: ""})
    assert response.status_code == 200
    assert "A plan needs a stopping target" in response.content.decode()
    study.plan.refresh_from_db()
    assert study.plan.target_ci_width == 1.0
