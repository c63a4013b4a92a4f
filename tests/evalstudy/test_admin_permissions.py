"""The admin follows evalstudy.permissions: viewers read only, editors change, only owners
manage collaborators and delete, other researchers see nothing, raters are scoped."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from evalstudy.models import Enrollment, Rater, StudyCollaborator
from tests.factories import UserFactory, make_study


def researcher(username):
    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def setup(db):
    owner, owner_client = researcher("owner")
    viewer, viewer_client = researcher("viewer")
    editor, editor_client = researcher("editor")
    _, other_client = researcher("other")
    study = make_study(owner=owner, slug="scoped")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    StudyCollaborator.objects.create(study=study, user=editor, role="editor")
    mine = Rater.objects.create(kind="crowd", external_id="PID-MINE")
    Enrollment.objects.create(study=study, rater=mine)
    theirs = Rater.objects.create(kind="crowd", external_id="PID-THEIRS")
    Enrollment.objects.create(study=make_study(slug="elsewhere"), rater=theirs)
    return study, {"owner": owner_client, "viewer": viewer_client, "editor": editor_client,
                   "other": other_client}


def test_study_change_page_by_role(setup):
    study, clients = setup
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    page = {role: client.get(url) for role, client in clients.items()}
    assert page["other"].status_code == 302  # admin's "doesn't exist" redirect, no page
    assert page["viewer"].status_code == 200 and b'name="_save"' not in page["viewer"].content
    assert b'name="_save"' in page["editor"].content
    delete = reverse("admin:evalstudy_study_delete", args=[study.pk])
    assert clients["editor"].get(delete).status_code == 403
    assert clients["owner"].get(delete).status_code == 200
    system = study.systems.first()
    system_url = reverse("admin:evalstudy_system_change", args=[system.pk])
    assert clients["viewer"].post(system_url, {"name": "renamed"}).status_code == 403
    # Collaborators: the editor sees them but cannot change them; the owner can.
    row = StudyCollaborator.objects.get(study=study, user__username="viewer")
    row_url = reverse("admin:evalstudy_studycollaborator_change", args=[row.pk])
    assert clients["editor"].post(row_url, {"study": study.pk, "user": row.user_id,
                                            "role": "editor"}).status_code == 403
    response = clients["owner"].post(row_url, {"study": study.pk, "user": row.user_id,
                                               "role": "editor"})
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.role == "editor"


def test_rater_admin_lists_only_raters_of_own_studies(setup):
    _, clients = setup
    url = reverse("admin:evalstudy_rater_changelist")
    mine = clients["owner"].get(url).content.decode()
    assert "PID-MINE" in mine and "PID-THEIRS" not in mine
    assert "PID-MINE" not in clients["other"].get(url).content.decode()
