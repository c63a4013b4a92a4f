"""The Open and Close buttons of a study's page and its monitor (evalstudy.admin.study_actions):
editors of the study only, audited as the bulk actions are, back where the button was; a
refused open lists each problem as an error message of its own, linked to its fix; and the
admin's messages name studies as typed and count in proper plurals."""

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from evalstudy.models import AuditEvent, Criterion, Item, StudyCollaborator
from prolific.services import sync_summary
from tests.factories import UserFactory, make_study


def _researcher(username):
    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    client = Client()
    client.force_login(user)
    return user, client


def _messages(response):
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def test_the_open_button_opens_the_study_audited_and_goes_back_to_the_monitor(db):
    owner, client = _researcher("opener")
    study = make_study(owner=owner, slug="newc-trial", title="Newcastle trial")
    monitor = reverse("annotation:monitor", args=[study.slug])
    response = client.post(reverse("admin:evalstudy_study_open", args=[study.pk]),
                           {"next": monitor}, follow=True)
    study.refresh_from_db()
    assert study.status == "open" and study.assignments.exists()
    assert response.redirect_chain[-1][0] == monitor
    # Named as typed, not "Newc-trial": the admin capitalises a message's first letter.
    assert ("success", "“Newcastle trial”: opened; raters can start.") in _messages(response)
    event = AuditEvent.objects.get(study=study, action="open")
    assert event.source == "admin" and event.actor == owner
    assert event.changes == {"status": ["draft", "open"]}


def test_a_refused_open_lists_each_problem_as_an_error_linked_to_its_fix(db):
    owner, client = _researcher("refused")
    study = make_study(owner=owner, slug="empty", title="Empty study")
    Item.objects.filter(study=study).delete()
    Criterion.objects.filter(study=study, key="usable").update(kind="categorical", options=[])
    response = client.post(reverse("admin:evalstudy_study_open", args=[study.pk]), follow=True)
    study.refresh_from_db()
    assert study.status == "draft" and not study.assignments.exists()
    assert not AuditEvent.objects.filter(study=study, action="open").exists()
    found = _messages(response)
    assert [level for level, _ in found] == ["error"] * len(found)  # no green tick anywhere
    heading, *problems = [text for _, text in found]
    assert heading == f"“Empty study”: not opened ({len(problems)} problems)."
    grid = reverse("admin:evalstudy_study_items_grid", args=[study.pk])
    page = reverse("admin:evalstudy_study_change", args=[study.pk])
    assert f'The study has no items. <a href="{grid}">Edit the items</a>' in problems
    assert any("categorical needs at least 2 options" in text
               and f'href="{page}#criteria-group"' in text for text in problems)
    # Rendered as links inside red boxes, one a problem, on the study's page.
    html = response.content.decode()
    assert f'<li class="error">The study has no items. <a href="{grid}">' in html
    assert "problem-list" not in html


def test_one_problem_is_one_problem(db):
    owner, client = _researcher("single")
    study = make_study(owner=owner, title="One gap")
    Item.objects.filter(study=study).delete()
    response = client.post(reverse("admin:evalstudy_study_open", args=[study.pk]), follow=True)
    assert ("error", "“One gap”: not opened (1 problem).") in _messages(response)


def test_the_close_button_closes_and_the_page_shows_the_right_button(db):
    owner, client = _researcher("closer")
    study = make_study(owner=owner, status="open")
    page = reverse("admin:evalstudy_study_change", args=[study.pk])
    html = client.get(page).content.decode()
    assert 'id="close-study"' in html and 'id="open-study"' not in html
    response = client.post(reverse("admin:evalstudy_study_close", args=[study.pk]), follow=True)
    study.refresh_from_db()
    assert study.status == "closed"
    assert response.redirect_chain[-1][0] == page
    assert AuditEvent.objects.filter(study=study, action="close", source="admin").exists()
    html = response.content.decode()
    assert 'id="open-study"' in html and "Reopen study" in html


def test_only_editors_open_or_close_and_only_by_post(db):
    owner, _ = _researcher("boss-of-it")
    viewer, viewer_client = _researcher("looker")
    _, stranger_client = _researcher("stranger")
    study = make_study(owner=owner)
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    url = reverse("admin:evalstudy_study_open", args=[study.pk])
    assert viewer_client.post(url).status_code == 403
    assert stranger_client.post(url).status_code == 404
    editor, editor_client = _researcher("helper")
    StudyCollaborator.objects.create(study=study, user=editor, role="editor")
    assert editor_client.get(url).status_code == 405
    study.refresh_from_db()
    assert study.status == "draft"
    page = viewer_client.get(reverse("admin:evalstudy_study_change", args=[study.pk]))
    assert 'id="open-study"' not in page.content.decode()
    monitor = viewer_client.get(reverse("annotation:monitor", args=[study.slug]))
    assert 'id="open-study"' not in monitor.content.decode()
    monitor = editor_client.get(reverse("annotation:monitor", args=[study.slug]))
    assert 'id="open-study"' in monitor.content.decode()


def test_the_button_never_sends_the_browser_to_another_site(db):
    owner, client = _researcher("careful")
    study = make_study(owner=owner)
    response = client.post(reverse("admin:evalstudy_study_close", args=[study.pk]),
                           {"next": "https://evil.example/phish"})
    assert response["Location"] == reverse("admin:evalstudy_study_change", args=[study.pk])


def test_study_messages_count_in_plurals(db):
    owner, client = _researcher("counter")
    study = make_study(owner=owner, slug="plural")
    other = make_study(slug="not-mine-either")
    StudyCollaborator.objects.create(study=other, user=owner, role="viewer")
    response = client.post(reverse("admin:evalstudy_study_changelist"), {
        "action": "close_studies", "_selected_action": [study.pk, other.pk]}, follow=True)
    texts = [text for _, text in _messages(response)]
    assert f"“{study.title}”: closed." in texts
    # The slug after a verb: not capitalised into "Not-mine-either".
    assert any(text.startswith("Skipped not-mine-either: ") for text in texts)
    counts = {"submissions": 1, "matched": 1, "seats_freed": 1, "unmatched": 1, "skipped": 1}
    assert sync_summary(counts) == (
        "Prolific: 1 submission, 1 from this study's participants synced, 1 seat freed. "
        "1 submission on Prolific not from this study's participants was ignored. "
        "1 with an id that is not Prolific's was skipped.")
    assert "2 seats freed" in sync_summary({**counts, "seats_freed": 2})


def test_a_stranger_cannot_close_another_owners_open_study_and_no_next_leaves_the_site(db):
    owner, client = _researcher("keeper")
    _, stranger = _researcher("closer")
    study = make_study(owner=owner, status="open")
    close = reverse("admin:evalstudy_study_close", args=[study.pk])
    assert stranger.post(close).status_code == 404
    study.refresh_from_db()
    assert study.status == "open"
    assert not AuditEvent.objects.filter(study=study, action="close").exists()
    for target in ("//evil.example/x", "https:evil.example", "javascript:alert(1)",
                   "/\\evil.example"):
        response = client.post(close, {"next": target})
        assert response["Location"] == reverse("admin:evalstudy_study_change",
                                               args=[study.pk]), target
