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


# --- actions, raters' personal data, and choices of other studies' rows ----------------------
def _messages(response) -> str:
    return " ".join(str(message) for message in response.context["messages"])


def test_viewer_cannot_run_study_actions_but_may_export_the_spec(setup):
    from analysis.models import AnalysisRun
    from metrics.models import MetricRun

    study, clients = setup
    url = reverse("admin:evalstudy_study_changelist")
    for action in ("open_studies", "close_studies", "build_assignments", "compute_metrics",
                   "run_analysis"):
        response = clients["viewer"].post(
            url, {"action": action, "_selected_action": [study.pk]}, follow=True)
        assert response.status_code == 200
        assert "Skipped scoped:" in _messages(response) and "editor" in _messages(response)
    study.refresh_from_db()
    assert study.status == "draft" and not study.assignments.exists()
    assert not AnalysisRun.objects.filter(study=study).exists()
    assert not MetricRun.objects.filter(study=study).exists()
    # Reading is fine for a viewer.
    spec = clients["viewer"].post(url, {"action": "export_specs", "_selected_action": [study.pk]})
    assert spec.status_code == 200 and b"slug: scoped" in spec.content
    # An editor acts; of two selected studies only the one they may change is touched.
    other = make_study(slug="not-theirs", owner=UserFactory(username="stranger"))
    StudyCollaborator.objects.create(study=other, user=study.collaborators.get(
        username="editor"), role="viewer")
    response = clients["editor"].post(
        url, {"action": "open_studies", "_selected_action": [study.pk, other.pk]}, follow=True)
    study.refresh_from_db()
    other.refresh_from_db()
    assert study.status == "open" and other.status == "draft"
    assert "Skipped not-theirs:" in _messages(response)


def test_viewer_cannot_resume_proxy_runs(setup):
    from proxies.models import ProxyRun

    study, clients = setup
    viewer = study.collaborators.get(username="viewer")
    viewer.user_permissions.add(*Permission.objects.filter(content_type__app_label="proxies"))
    judge = Rater.objects.create(kind="llm", external_id="latte:judge:x")
    run = ProxyRun.objects.create(study=study, rater=judge, method="latte",
                                  criteria=["usable"], status="failed")
    response = clients["viewer"].post(
        reverse("admin:proxies_proxyrun_changelist"),
        {"action": "resume_runs", "_selected_action": [run.pk]}, follow=True)
    run.refresh_from_db()
    assert run.status == "failed"
    assert "Skipped" in _messages(response) and "0 runs sent" in _messages(response)


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_only_the_owner_changes_exports_or_erases_a_rater(setup, role):
    _study, clients = setup
    rater = Rater.objects.get(external_id="PID-MINE")
    rater.metadata = {"email": "p@example.org"}
    rater.save()
    client = clients[role]
    change = reverse("admin:evalstudy_rater_change", args=[rater.pk])
    assert client.post(change, {"kind": "crowd", "external_id": "HACKED", "display_name": "",
                                "metadata": "{}"}).status_code == 403
    assert client.post(reverse("admin:evalstudy_rater_delete", args=[rater.pk]),
                       {"post": "yes"}).status_code == 403
    url = reverse("admin:evalstudy_rater_changelist")
    export = client.post(url, {"action": "export_personal_data",
                               "_selected_action": [rater.pk]}, follow=True)
    assert b"p@example.org" not in export.content and "skipped" in _messages(export)
    erase = client.post(url, {"action": "erase_personal_data", "_selected_action": [rater.pk],
                              "confirm": "yes"}, follow=True)
    assert "skipped" in _messages(erase)
    rater.refresh_from_db()
    assert rater.external_id == "PID-MINE" and rater.metadata == {"email": "p@example.org"}
    # The owner may do all of it.
    owner = clients["owner"]
    export = owner.post(url, {"action": "export_personal_data", "_selected_action": [rater.pk]})
    assert b"p@example.org" in export.content
    owner.post(url, {"action": "erase_personal_data", "_selected_action": [rater.pk],
                     "confirm": "yes"})
    rater.refresh_from_db()
    assert rater.external_id != "PID-MINE"


def test_foreign_keys_offer_and_accept_only_rows_of_studies_the_user_may_change(setup):
    from evalstudy.models import Assignment, Criterion, Item, Output, System

    study, clients = setup
    secret = make_study(slug="secret-study")
    System.objects.filter(study=secret).exclude(pk=secret.systems.first().pk).delete()
    System.objects.filter(study=secret).update(name="SECRETSYS")
    Criterion.objects.filter(study=secret, key="usable").update(key="SECRETKEY")
    editor = clients["editor"]
    for page in ("output_add", "item_add", "criterion_add", "assignment_add"):
        html = editor.get(reverse(f"admin:evalstudy_{page}")).content.decode()
        assert "SECRETSYS" not in html and "SECRETKEY" not in html, page
    theirs = (secret.items.first(), secret.systems.first())
    mine = (study.items.first(), study.systems.first())
    Output.objects.filter(item__in=[theirs[0], mine[0]]).delete()
    url = reverse("admin:evalstudy_output_add")
    for item, system in ((theirs[0], mine[1]), (mine[0], theirs[1])):
        response = editor.post(url, {"item": item.pk, "system": system.pk, "text": "INJECTED"})
        assert response.status_code == 200  # the form again, with the error
        assert "studies on which you have the editor role" in response.content.decode()
    # A viewer may not add rows to the study they only read.
    response = clients["viewer"].post(url, {"item": mine[0].pk, "system": mine[1].pk,
                                            "text": "INJECTED"})
    assert response.status_code in (200, 403)
    # Nor may an item of one study get an output of another study's system (both editable).
    own_other = make_study(slug="own-other", owner=study.owner)
    response = clients["owner"].post(url, {"item": mine[0].pk,
                                           "system": own_other.systems.first().pk,
                                           "text": "MIXED"})
    assert response.status_code == 200 and "same study" in response.content.decode()
    assert not Output.objects.filter(text__in=["INJECTED", "MIXED"]).exists()
    # The item page's output inline: a system of another study is refused.
    item_url = reverse("admin:evalstudy_item_change", args=[mine[0].pk])
    response = editor.post(item_url, {
        "study": study.pk, "external_id": mine[0].external_id, "reference": "r", "context": "",
        "metadata": "{}", "outputs-TOTAL_FORMS": "1", "outputs-INITIAL_FORMS": "0",
        "media-TOTAL_FORMS": "0", "media-INITIAL_FORMS": "0",
        "outputs-0-system": theirs[1].pk, "outputs-0-text": "INLINE"})
    assert response.status_code == 200
    assert "the studies on which you have" in response.content.decode()
    assert not Output.objects.filter(text="INLINE").exists()
    # Rows of the editor's own study go through, on both pages.
    response = editor.post(item_url, {
        "study": study.pk, "external_id": mine[0].external_id, "reference": "r", "context": "",
        "metadata": "{}", "outputs-TOTAL_FORMS": "1", "outputs-INITIAL_FORMS": "0",
        "media-TOTAL_FORMS": "0", "media-INITIAL_FORMS": "0",
        "outputs-0-system": mine[1].pk, "outputs-0-text": "INLINE"})
    assert response.status_code == 302 and Output.objects.filter(text="INLINE").exists()
    mine[0].outputs.all().delete()
    response = editor.post(url, {"item": mine[0].pk, "system": mine[1].pk, "text": "OWN"})
    assert response.status_code == 302 and Output.objects.filter(text="OWN").exists()
    # A seat of the editor's study cannot be given to a rater of a study they cannot see.
    seat = Assignment.objects.create(study=study)
    stranger = Rater.objects.get(external_id="PID-THEIRS")
    response = editor.post(reverse("admin:evalstudy_assignment_change", args=[seat.pk]), {
        "study": study.pk, "rater": stranger.pk, "source": "design", "part_index": 0,
        "replica": 0, "state": "open", "slots-TOTAL_FORMS": "0", "slots-INITIAL_FORMS": "0"})
    assert response.status_code == 200
    assert "the studies on which you have" in response.content.decode()
    seat.refresh_from_db()
    assert seat.rater_id is None
    assert Item.objects.filter(study=secret).count() == secret.items.count()


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_entry_links_and_metadata_are_shown_to_owners_only(db, client, role):
    from django.contrib.auth.models import Permission

    from evalstudy.models import StudyCollaborator
    from tests.factories import UserFactory, invite, make_study

    owner = UserFactory(username="own", is_staff=True)
    member = UserFactory(username="member", is_staff=True)
    for user in (owner, member):
        user.user_permissions.set(Permission.objects.filter(
            content_type__app_label="evalstudy", content_type__model="rater"))
    study = make_study(owner=owner, slug="secret-links")
    StudyCollaborator.objects.create(study=study, user=member, role=role)
    rater = invite(study, external_id="PID-9", metadata={"email": "p9@example.org"})
    client.force_login(member)
    for url in ("/admin/evalstudy/rater/", f"/admin/evalstudy/rater/{rater.pk}/change/"):
        page = client.get(url).content.decode()
        assert rater.access_token not in page and "p9@example.org" not in page
    client.force_login(owner)
    page = client.get(f"/admin/evalstudy/rater/{rater.pk}/change/").content.decode()
    assert rater.access_token in page and "p9@example.org" in page


def test_a_collaborator_without_the_admins_view_permission_gets_403_not_500(setup):
    """The study's extra admin pages refuse with 403 (they raised a name Django does not
    have, a 500)."""
    study, _ = setup
    bare = UserFactory(username="bare-viewer", is_staff=True)  # no evalstudy permissions
    StudyCollaborator.objects.create(study=study, user=bare, role="viewer")
    client = Client()
    client.force_login(bare)
    for url in (reverse("admin:evalstudy_study_design_csv", args=[study.pk]),
                reverse("admin:evalstudy_study_spec", args=[study.pk, "yaml"])):
        assert client.get(url).status_code == 403, url
