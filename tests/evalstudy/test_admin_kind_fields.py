"""The admin's criterion form shows only its kind's fields (issue 28): a yes/no question shows no
scale points, options, slider range or severity weights; a form posted with a changed kind
comes back with the new kind's fields instead of being saved; the values of fields the kind
does not have are dropped on save. Which fields a kind has is its spec's (AnswerKind.settings).
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from evalstudy.criteria import SETTINGS, all_kinds, kind_of
from evalstudy.models import Criterion
from tests.evalstudy.test_authoring import change_form_data
from tests.factories import UserFactory, make_study

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client():
    client = Client()
    client.force_login(UserFactory(username="kinds", is_staff=True, is_superuser=True))
    return client


def shown_settings(html: str, prefix: str = "") -> set[str]:
    """The kind fields whose box the page shows (not hidden), for the form with `prefix`."""
    shown = set()
    for box in re.finditer(r'<div data-kinds="[^"]*"( hidden)?>(.*?)</div>', html, re.S):
        name = re.search(rf'name="{re.escape(prefix)}(\w+)"', box.group(2))
        if name and name.group(1) in SETTINGS and not box.group(1):
            shown.add(name.group(1))
    return shown


def criterion_page(client, criterion):
    return client.get(reverse("admin:evalstudy_criterion_change", args=[criterion.pk]))


@pytest.mark.parametrize("kind", [kind.name for kind in all_kinds()])
def test_a_criterion_page_shows_only_its_kinds_fields(superuser_client, kind):
    study = make_study(n_items=1, n_systems=2)
    criterion = Criterion.objects.create(study=study, key="q", prompt="?", kind=kind)
    html = criterion_page(superuser_client, criterion).content.decode()
    assert shown_settings(html) == set(kind_of(kind).settings) & set(SETTINGS)
    # Every field is still in the page (hidden), so the script can swap them at once.
    for name in SETTINGS:
        assert f'name="{name}"' in html
    assert f'name="kind_shown" value="{kind}"' in html


def test_a_yes_no_question_shows_no_scale_options_range_or_weights(superuser_client):
    study = make_study(n_items=1, n_systems=2)
    usable = Criterion.objects.get(study=study, key="usable")
    assert not kind_of(usable.kind).settings
    html = superuser_client.get(reverse("admin:evalstudy_study_change",
                                    args=[study.pk])).content.decode()
    index = next(i for i in range(3)
                 if f'name="criteria-{i}-key" value="usable"' in html.replace("\n", ""))
    assert shown_settings(html, f"criteria-{index}-") == set()


def _posted(client, criterion, **changes):
    page = criterion_page(client, criterion)
    data = change_form_data_of(page)
    data.update(changes)
    return client.post(reverse("admin:evalstudy_criterion_change", args=[criterion.pk]), data)


def change_form_data_of(page) -> dict:
    data = {}
    form = page.context["adminform"].form
    for bound in form:
        value = bound.value()
        if isinstance(value, bool):
            if value:
                data[bound.html_name] = "on"
        elif isinstance(value, list | tuple):
            data[bound.html_name] = [str(v) for v in value]
        elif value is not None:
            data[bound.html_name] = str(value)
    data["kind_shown"] = form.shown_kind  # as the page wrote it
    return data


def test_a_changed_kind_comes_back_with_its_fields_instead_of_being_saved(superuser_client):
    study = make_study(n_items=1, n_systems=2)
    criterion = Criterion.objects.get(study=study, key="usable")
    response = _posted(superuser_client, criterion, kind="likert")
    assert response.status_code == 200  # not saved: shown again
    html = response.content.decode()
    assert "are shown now" in html
    assert shown_settings(html) == {"scale_points", "labels"}
    assert 'name="kind_shown" value="likert"' in html
    assert Criterion.objects.get(pk=criterion.pk).kind == "binary"
    # Sent again from the page that shows the likert fields: saved.
    data = change_form_data_of(response)
    data.update({"scale_points": "5"})
    saved = superuser_client.post(reverse("admin:evalstudy_criterion_change",
                                      args=[criterion.pk]), data)
    assert saved.status_code == 302
    criterion.refresh_from_db()
    assert (criterion.kind, criterion.scale_points) == ("likert", 5)


def test_a_switch_the_script_made_saves_at_once(superuser_client):
    """The script says which kind's fields the form shows: the page was swapped already."""
    study = make_study(n_items=1, n_systems=2)
    criterion = Criterion.objects.get(study=study, key="usable")
    response = _posted(superuser_client, criterion, kind="likert", kind_shown="likert",
                       scale_points="7")
    assert response.status_code == 302
    assert Criterion.objects.get(pk=criterion.pk).scale_points == 7


def test_a_kind_with_no_fields_of_its_own_saves_at_once(superuser_client):
    study = make_study(n_items=1, n_systems=2)
    criterion = Criterion.objects.create(study=study, key="q", prompt="?", kind="slider",
                                         scale_min=0, scale_max=10)
    response = _posted(superuser_client, criterion, kind="binary")
    assert response.status_code == 302


def test_values_of_fields_the_kind_has_not_are_dropped_on_save(superuser_client):
    study = make_study(n_items=1, n_systems=2)
    criterion = Criterion.objects.create(
        study=study, key="q", prompt="?", kind="slider", scale_min=0, scale_max=10,
        labels={"0": "bad", "10": "good"})
    # A slider page posted as a yes/no question, with the slider's values still in the form
    # (hidden): nothing of them is stored.
    response = _posted(superuser_client, criterion, kind="binary", options=["x", "y"],
                       severity_weights="minor = 1", scale_points="5", allow_tie="on",
                       span_reference="on")
    assert response.status_code == 302, response.context["errors"]
    criterion.refresh_from_db()
    assert criterion.kind == "binary"
    assert (criterion.scale_min, criterion.scale_max, criterion.scale_points) == (None, None,
                                                                                  None)
    assert (criterion.labels, criterion.options, criterion.severity_weights) == ([], [], {})
    assert (criterion.allow_tie, criterion.span_reference) == (False, False)


def test_the_study_page_posted_unchanged_still_saves(superuser_client):
    study = make_study(n_items=2, n_systems=2)
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    page = superuser_client.get(url)
    data = change_form_data(page)
    for index in range(3):
        data[f"criteria-{index}-kind_shown"] = data[f"criteria-{index}-kind"]
    assert superuser_client.post(url, data).status_code == 302


def test_a_new_criterion_shows_the_fields_of_the_kind_chosen(superuser_client):
    study = make_study(n_items=1, n_systems=2)
    add = reverse("admin:evalstudy_criterion_add")
    page = superuser_client.get(add)
    assert shown_settings(page.content.decode()) == set()  # no kind chosen yet
    data = {"study": str(study.pk), "key": "fluency", "prompt": "How fluent?", "kind": "likert",
            "kind_shown": "", "order": "0", "required": "on", "labels": "", "options": "",
            "severity_weights": "", "show_if_values": ""}
    response = superuser_client.post(add, data)
    assert response.status_code == 200
    assert shown_settings(response.content.decode()) == {"scale_points", "labels"}
    assert not Criterion.objects.filter(study=study, key="fluency").exists()
    saved = superuser_client.post(add, {**data, "kind_shown": "likert", "scale_points": "5"})
    assert saved.status_code == 302
    assert Criterion.objects.get(study=study, key="fluency").scale_points == 5
    # A kind without fields of its own needs no second round.
    assert superuser_client.post(add, {**data, "key": "ok", "kind": "binary"}).status_code == 302
