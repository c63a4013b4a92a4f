"""A study's invite page (evalstudy.admin.invite): every entry link absolute with a Copy
button, personal links for the study's owner only, links added from a form, a CSV download
(audited as an export); and the rater admin shows links absolute too."""

import csv
import io

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from evalstudy.models import AuditEvent, Rater, StudyCollaborator
from tests.factories import UserFactory, invite, make_study


def _researcher(username):
    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    client = Client()
    client.force_login(user)
    return user, client


def test_the_invite_page_lists_every_entry_link_absolute_with_a_copy_button(db):
    owner, client = _researcher("inviter")
    study = make_study(owner=owner, slug="invites", status="open")
    ana = invite(study, kind="expert", display_name="Ana")
    html = client.get(reverse("admin:evalstudy_study_invite", args=[study.pk])).content.decode()
    link = f"http://testserver/enter/{ana.access_token}/"
    assert f'<code class="copy-text">{link}</code>' in html
    assert f'data-copy="{link}"' in html and 'aria-label="Copy the link of Ana"' in html
    assert "no seat yet" in html
    crowd = "http://testserver/c/invites/?PROLIFIC_PID={{%PROLIFIC_PID%}}"
    assert f'data-copy="{crowd}' in html
    assert "js/copy_link.js" in html  # the button's script, a file (no inline script: CSP)
    assert "<script>" not in html


def test_added_links_are_invited_raters_and_the_csv_lists_them_all(db):
    owner, client = _researcher("csv-owner")
    study = make_study(owner=owner, slug="csv-study", status="open")
    url = reverse("admin:evalstudy_study_invite", args=[study.pk])
    response = client.post(url, {"count": "1", "kind": "expert"}, follow=True)
    assert "Added 1 personal link." in [str(m) for m in response.context["messages"]]
    client.post(url, {"count": "2", "kind": "slp"})
    raters = list(Rater.objects.filter(study=study, origin="invited").order_by("id"))
    assert [r.kind for r in raters] == ["expert", "slp", "slp"]
    assert AuditEvent.objects.filter(study=study, action="create",
                                     target_type="evalstudy.rater").count() == 3
    # Bad input: a clear error, nothing added.
    response = client.post(url, {"count": "0", "kind": "expert"})
    assert response.status_code == 200 and "greater than or equal to 1" in response.content.decode()
    assert Rater.objects.filter(study=study).count() == 3
    download = client.get(reverse("admin:evalstudy_study_invite_csv", args=[study.pk]))
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    assert rows[0]["kind"] == "crowd (any participant)"
    assert rows[0]["url"].startswith("http://testserver/c/csv-study/?PROLIFIC_PID=")
    assert [row["url"] for row in rows[1:]] == [
        f"http://testserver/enter/{r.access_token}/" for r in raters]
    event = AuditEvent.objects.get(study=study, action="export")
    assert event.changes["what"] == "entry links" and event.changes["rows"] == 3


def test_editors_see_the_crowd_url_but_not_personal_links(db):
    owner, _ = _researcher("link-owner")
    editor, editor_client = _researcher("link-editor")
    viewer, viewer_client = _researcher("link-viewer")
    study = make_study(owner=owner, slug="guarded", status="open")
    StudyCollaborator.objects.create(study=study, user=editor, role="editor")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    secret = invite(study, kind="expert").access_token
    page = editor_client.get(reverse("admin:evalstudy_study_invite", args=[study.pk]))
    html = page.content.decode()
    assert secret not in html and "/c/guarded/" in html
    assert "shown to the study's owner only" in html
    assert editor_client.get(reverse("admin:evalstudy_study_invite_csv",
                                     args=[study.pk])).status_code == 403
    assert viewer_client.get(reverse("admin:evalstudy_study_invite",
                                     args=[study.pk])).status_code == 403
    assert not AuditEvent.objects.filter(study=study, action="export").exists()


def test_the_rater_admin_shows_an_absolute_entry_link_with_a_copy_button(db, settings):
    settings.SITE_URL = "https://rate.example.org"
    boss = UserFactory(username="links-boss", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(boss)
    rater = invite(make_study(status="open"), kind="expert")
    html = client.get(reverse("admin:evalstudy_rater_changelist")).content.decode()
    link = f"https://rate.example.org/enter/{rater.access_token}/"
    assert f'data-copy="{link}"' in html and "js/copy_link.js" in html


def test_the_study_page_shows_its_crowd_url_with_a_copy_button(db, settings):
    settings.SITE_URL = "https://rate.example.org/"
    owner, client = _researcher("crowd-owner")
    study = make_study(owner=owner, slug="crowded")
    html = client.get(reverse("admin:evalstudy_study_change", args=[study.pk])).content.decode()
    url = "https://rate.example.org/c/crowded/?PROLIFIC_PID={{%PROLIFIC_PID%}}&amp;STUDY_ID="
    assert f'data-copy="{url}' in html and 'aria-label="Copy the crowd entry URL"' in html
    assert f'href="/admin/evalstudy/study/{study.pk}/invite/"' in html


def test_another_owners_study_is_out_of_reach_and_a_huge_or_odd_count_adds_nothing(db):
    """Attacks on the invite page: a researcher with no role on the study cannot read its
    links or its CSV, nor add links (404: the study is not theirs to know of); a viewer cannot
    add links; a count that is huge, negative or not a number adds nobody."""
    owner, owner_client = _researcher("victim-owner")
    _, stranger = _researcher("prowler")
    viewer, viewer_client = _researcher("peeker")
    study = make_study(owner=owner, slug="private-one", status="open")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    secret = invite(study, kind="expert").access_token
    page = reverse("admin:evalstudy_study_invite", args=[study.pk])
    download = reverse("admin:evalstudy_study_invite_csv", args=[study.pk])
    before = Rater.objects.filter(study=study).count()
    for response in (stranger.get(page), stranger.get(download),
                     stranger.post(page, {"count": "3", "kind": "expert"})):
        assert response.status_code == 404
        assert secret not in response.content.decode()
    assert viewer_client.post(page, {"count": "3", "kind": "expert"}).status_code == 403
    for count in ("100000000", "-5", "3; DROP TABLE evalstudy_rater", "<script>"):
        owner_client.post(page, {"count": count, "kind": "expert"})
    assert Rater.objects.filter(study=study).count() == before
    assert not AuditEvent.objects.filter(study=study, action="export").exists()
