"""Inviting raters (admin, API) makes raters of one study; account holders are enrolled, never
re-created; the shell's personal-data command finds a person in every study."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse

from evalstudy.models import Enrollment, Rater, Study, StudyCollaborator
from tests.factories import UserFactory, invite, make_study, token_client


@pytest.fixture
def permitted_researcher(db):
    user = UserFactory(username="res", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    return user


def test_the_admin_invites_a_personal_link_rater_into_one_study(client, permitted_researcher):
    study = make_study(owner=permitted_researcher, slug="mine", status=Study.Status.OPEN)
    client.force_login(permitted_researcher)
    response = client.post("/admin/evalstudy/rater/add/", {
        "study": study.pk, "kind": "slp", "display_name": "Dr Who", "external_id": "who",
        "metadata": "{}", "username": ""})
    assert response.status_code == 302, response.content.decode()[:2000]
    rater = Rater.objects.get(external_id="who")
    assert rater.study == study and rater.user is None
    assert Enrollment.objects.filter(study=study, rater=rater).exists()
    page = client.get(f"/admin/evalstudy/rater/{rater.pk}/change/").content.decode()
    assert rater.access_token in page  # the owner sees the link to send
    # The same external id twice in one study is refused with the reason.
    again = client.post("/admin/evalstudy/rater/add/", {
        "study": study.pk, "kind": "slp", "display_name": "x", "external_id": "who",
        "metadata": "{}", "username": ""})
    assert again.status_code == 200 and "already has a rater" in again.content.decode()


def test_the_admin_enrols_an_account_holder_without_a_link(client, permitted_researcher):
    study = make_study(owner=permitted_researcher, slug="mine", status=Study.Status.OPEN)
    holder = UserFactory(username="slp-holder")
    client.force_login(permitted_researcher)
    response = client.post("/admin/evalstudy/rater/add/", {
        "study": study.pk, "kind": "slp", "display_name": "", "external_id": "",
        "metadata": "{}", "username": "slp-holder"})
    assert response.status_code == 302
    rater = Rater.objects.get(user=holder)
    assert rater.study is None and Enrollment.objects.filter(study=study, rater=rater).exists()
    # The holder signs in and finds the study; no entry link exists for them.
    holder_client = type(client)()
    holder_client.force_login(holder)
    assert study.title in holder_client.get("/").content.decode()


def test_the_admin_offers_only_studies_the_user_may_edit(client, permitted_researcher):
    other_owner = UserFactory(username="other", is_staff=True)
    theirs = make_study(owner=other_owner, slug="theirs")
    viewed = make_study(owner=other_owner, slug="viewed")
    StudyCollaborator.objects.create(study=viewed, user=permitted_researcher, role="viewer")
    client.force_login(permitted_researcher)
    for study in (theirs, viewed):
        response = client.post("/admin/evalstudy/rater/add/", {
            "study": study.pk, "kind": "slp", "display_name": "x", "external_id": "x",
            "metadata": "{}", "username": ""})
        assert response.status_code == 200 and "Select a valid choice" in (
            response.content.decode())
    assert not Rater.objects.exists()


def test_the_api_invites_into_the_study_and_refuses_proxies_and_strangers(permitted_researcher):
    study = make_study(owner=permitted_researcher, slug="mine", status=Study.Status.OPEN)
    api = token_client(permitted_researcher)
    url = reverse("api-study-raters", args=["mine"])
    created = api.post(url, {"kind": "crowd", "external_id": "P1"}, content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    assert f"/enter/{Rater.objects.get(pk=body['id']).access_token}/" in body["entry_url"]
    assert Rater.objects.get(pk=body["id"]).study == study
    assert api.post(url, {"kind": "crowd", "external_id": "P1"},
                    content_type="application/json").status_code == 400
    assert api.post(url, {"kind": "llm", "external_id": "judge"},
                    content_type="application/json").status_code == 400
    # Accounts: the same answer whether the name exists or not, and nothing of the account.
    UserFactory(username="slp-holder", first_name="Anna", last_name="Holder")
    unknown = api.post(url, {"kind": "slp", "username": "nobody"},
                       content_type="application/json")
    known = api.post(url, {"kind": "slp", "username": "slp-holder"},
                     content_type="application/json")
    assert unknown.status_code == known.status_code == 202
    assert unknown.json() == known.json() and "Anna" not in known.content.decode()
    holder = Rater.objects.get(user__username="slp-holder")
    listed = api.get(url).json()["results"]
    assert holder.pk not in [r["id"] for r in listed], "not a rater until they accept"
    # The same participant id in another owner's study is another rater.
    other = make_study(owner=UserFactory(username="o2", is_staff=True), slug="other")
    token_client(other.owner).post(reverse("api-study-raters", args=["other"]),
                                   {"kind": "crowd", "external_id": "P1"},
                                   content_type="application/json")
    assert Rater.objects.filter(external_id="P1").count() == 2


def test_the_personal_data_command_covers_a_person_in_every_study(db, tmp_path):
    first = make_study(slug="first", status=Study.Status.OPEN)
    second = make_study(slug="second", status=Study.Status.OPEN)
    for study in (first, second):
        invite(study, external_id="PID-7", display_name="PID-7")
    out = tmp_path / "data.json"
    call_command("rater_data", "--export", "PID-7", "--out", str(out))
    exported = json.loads(out.read_text(encoding="utf-8"))
    assert sorted(e["enrollments"][0]["study"] for e in exported) == ["first", "second"]
    call_command("rater_data", "--erase", "PID-7", "--study", "second", "--yes")
    assert Rater.objects.filter(external_id="PID-7").get().study == first
    call_command("rater_data", "--erase", "PID-7", "--yes")
    assert not Rater.objects.filter(external_id="PID-7").exists()
