"""The admin's index is a researcher's home (annotation.researcher_home): their studies only,
each with its status, seats, judgments, last activity, what stops a draft from opening (linked
to its fix) and the next action; the models listed below; counted in a fixed number of
queries whatever the number of open studies."""

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.models import Item, StudyCollaborator
from evalstudy.services import assignment_claim
from tests.factories import UserFactory, invite, make_study


def _researcher(username):
    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label__in=["evalstudy", "annotation"]))
    client = Client()
    client.force_login(user)
    return user, client


def _judged(study, n_raters=1):
    """`n_raters` raters take a seat of the open `study` and answer its first slot."""
    for _ in range(n_raters):
        rater = invite(study)
        seat = assignment_claim(study=study, rater=rater)
        slot = seat.slots.order_by("position").first()
        slot.completed_at = timezone.now()
        slot.save(update_fields=["completed_at"])
        for criterion in study.criteria.all():
            Judgment.objects.create(slot=slot, criterion=criterion, rater=rater, value="1",
                                    submitted_at=timezone.now())


def _card(html, study):
    start = html.index(f'id="home-study-{study.pk}"')
    return html[start:html.index("</section>", start)]


def test_the_admin_opens_on_the_researchers_own_studies_with_their_next_action(db):
    owner, client = _researcher("home-owner")
    empty = make_study(owner=owner, slug="empty-draft", title="Empty draft")
    Item.objects.filter(study=empty).delete()
    ready = make_study(owner=owner, slug="ready-draft", title="Ready draft")
    waiting = make_study(owner=owner, slug="no-raters", title="No raters yet", status="open")
    running = make_study(owner=owner, slug="running", title="Running", status="open")
    _judged(running, n_raters=2)
    done = make_study(owner=owner, slug="finished", title="Finished", status="closed")
    shared = make_study(slug="shared", title="Shared with me", status="open")
    StudyCollaborator.objects.create(study=shared, user=owner, role="viewer")
    hidden = make_study(slug="someone-elses", title="Someone else's")

    html = client.get(reverse("admin:index")).content.decode()
    assert "Your studies" in html and "Someone else" not in html
    assert f'id="home-study-{hidden.pk}"' not in html
    # A draft that cannot open: its problems, each linked to its fix, and the first as the button.
    card = _card(html, empty)
    grid = reverse("admin:evalstudy_study_items_grid", args=[empty.pk])
    assert "Draft" in card and "The study has no items." in card
    assert f'<a class="button default" href="{grid}">Edit the items</a>' in card
    # A valid draft: the Open button (a form posting to the study's open view).
    card = _card(html, ready)
    assert "Ready to open." in card
    assert f'action="{reverse("admin:evalstudy_study_open", args=[ready.pk])}"' in card
    assert ">Open study</button>" in card
    # Open with no rater yet: invite some; open with raters: the monitor and the counts.
    assert reverse("admin:evalstudy_study_invite", args=[waiting.pk]) in _card(html, waiting)
    card = _card(html, running)
    seats = running.assignments.filter(source="design").count()
    assert f"<dd>2 / {seats}</dd>" in card
    assert f"<dd>{2 * running.criteria.count()}</dd>" in card  # judgments
    assert f'href="{reverse("annotation:monitor", args=["running"])}">Monitor</a>' in card
    assert reverse("analysis:page", args=["finished"]) in _card(html, done)
    # A viewer's study is listed, without an Open or Invite button for them.
    assert "Invite raters" not in _card(html, shared)
    # Django's model list is still there, below.
    assert 'id="all-models"' in html and "Audit events" in html


def test_a_superuser_sees_every_study(db):
    boss = UserFactory(username="home-boss", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(boss)
    study = make_study(slug="anyones", title="Anyone's")
    html = client.get(reverse("admin:index")).content.decode()
    assert f'id="home-study-{study.pk}"' in html


def test_the_home_counts_in_a_fixed_number_of_queries(db, django_assert_max_num_queries):
    owner, client = _researcher("home-busy")
    first = make_study(owner=owner, status="open")
    _judged(first)
    with django_assert_max_num_queries(12) as one_study:
        client.get(reverse("admin:index"))
    for _ in range(5):
        _judged(make_study(owner=owner, status="open"), n_raters=2)
    with django_assert_max_num_queries(len(one_study.captured_queries)):
        html = client.get(reverse("admin:index")).content.decode()
    assert html.count('class="home-study"') == 6
