"""The blindness audit for researchers: its page (content, escaping, who may read it), the
warning when a study opens, the API, identity terms in study files, the admin and the API's
study settings."""

from __future__ import annotations

import textwrap

import pytest
from django.contrib.auth.models import Permission
from django.forms import modelform_factory
from django.test import Client
from django.urls import reverse

from evalstudy.admin.studies import StudyAdminForm
from evalstudy.importers import spec_to_document, study_import_spec, study_to_spec
from evalstudy.models import Output, Study, StudyCollaborator, System
from evalstudy.services import study_warnings
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.study import parse_study_spec
from tests.factories import UserFactory, make_study, token_client

pytestmark = pytest.mark.django_db


def leaky_study(owner, slug="leaky"):
    """Two items x systems Zephyrix (alias zx-chat) and base: one output names its system,
    one carries a study term inside markup, the others are clean."""
    study = make_study(n_items=2, n_systems=2, owner=owner, slug=slug,
                       identity_terms=["Nimbus Labs"])
    System.objects.filter(study=study, name="sys-0").update(
        name="Zephyrix", metadata={"aliases": ["zx-chat"]})
    System.objects.filter(study=study, name="sys-1").update(name="base")
    outputs = Output.objects.filter(item__study=study).order_by("item__external_id",
                                                                "system__name")
    # Outputs in order: item-000 Zephyrix, item-000 base, item-001 Zephyrix, item-001 base.
    texts = ["Hello, I am ZX-Chat and the tower is wide.", "The base of the tower is wide.",
             "<script>alert(1)</script> by Nimbus Labs", "Plain answer."]
    for output, text in zip(outputs, texts, strict=True):
        Output.objects.filter(pk=output.pk).update(text=text)
    return study


@pytest.fixture
def people():
    owner = UserFactory(username="owner", is_staff=True)
    # A researcher: the admin's model permissions of the study app.
    owner.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    viewer = UserFactory(username="viewer", is_staff=True)
    other = UserFactory(username="other", is_staff=True)
    study = leaky_study(owner)
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    make_study(n_items=1, n_systems=2, owner=other, slug="others")
    return {"owner": owner, "viewer": viewer, "other": other, "study": study}


def page(user, slug="leaky"):
    client = Client()
    client.force_login(user)
    return client.get(reverse("evalstudy:blindness", args=[slug]))


def test_the_page_lists_hits_by_system_and_term_with_escaped_snippets(people):
    response = page(people["owner"])
    assert response.status_code == 200
    html = response.content.decode()
    assert "2 of 4 outputs may reveal their system" in html
    assert "<mark>ZX-Chat</mark>" in html and "(names Zephyrix)" in html
    assert "<strong>zx-chat</strong> · alias" in html
    assert "<strong>Nimbus Labs</strong> · study term" in html
    # The output's markup is shown as text, never run.
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # "base" would match ordinary text: skipped, with the reason.
    assert "<strong>base</strong> (system name of base): an ordinary word" in html


def test_viewers_read_it_other_studies_users_get_404(people):
    assert page(people["viewer"]).status_code == 200
    assert page(people["other"]).status_code == 404
    assert page(people["owner"], slug="others").status_code == 404
    assert page(people["owner"], slug="no-such-study").status_code == 404
    anonymous = Client().get(reverse("evalstudy:blindness", args=["leaky"]))
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]


def test_the_monitor_and_the_admin_link_to_it(people):
    client = Client()
    client.force_login(people["owner"])
    target = reverse("evalstudy:blindness", args=["leaky"])
    monitor = client.get(reverse("annotation:monitor", args=["leaky"]))
    assert target in monitor.content.decode()
    admin_page = client.get(reverse("admin:evalstudy_study_change", args=[people["study"].pk]))
    assert target in admin_page.content.decode()


def test_opening_warns_about_outputs_that_may_reveal_their_system(people):
    api = token_client(people["owner"])
    response = api.post(reverse("api-study-open", args=["leaky"]))
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "open"  # a warning, not a refusal
    assert ("2 outputs may reveal their system (see the blindness audit, "
            "/studies/leaky/blindness/).") in response.json()["warnings"]
    clean = Study.objects.get(slug="others")
    assert not any("reveal" in warning for warning in study_warnings(study=clean))


def test_the_admin_open_action_shows_the_warning(people):
    client = Client()
    client.force_login(people["owner"])
    response = client.post(reverse("admin:evalstudy_study_changelist"), {
        "action": "open_studies", "_selected_action": [people["study"].pk]}, follow=True)
    messages = [str(m) for m in response.context["messages"]]
    assert f"“{people['study'].title}”: opened." in messages
    assert any("2 outputs may reveal their system" in m for m in messages)


def test_the_api_lists_every_hit_and_the_summary(people):
    api = token_client(people["viewer"])
    response = api.get(reverse("api-study-blindness", args=["leaky"]))
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert [(h["system"], h["term"], h["kind"], h["match"]) for h in body["results"]] == [
        ("Zephyrix", "zx-chat", "alias", "ZX-Chat"),
        ("Zephyrix", "Nimbus Labs", "study term", "Nimbus Labs")]
    assert body["results"][1]["snippet"] == "<script>alert(1)</script> by Nimbus Labs"
    assert body["summary"]["flagged_outputs"] == 2
    assert body["summary"]["skipped"][0]["term"] == "base"
    paged = api.get(reverse("api-study-blindness", args=["leaky"]) + "?page_size=1")
    assert len(paged.json()["results"]) == 1 and paged.json()["next"]
    other = token_client(people["other"]).get(reverse("api-study-blindness", args=["leaky"]))
    assert other.status_code == 404


def test_the_api_sets_identity_terms_and_refuses_bad_ones(people):
    api = token_client(people["owner"])
    url = reverse("api-study", args=["leaky"])
    refused = api.patch(url, data={"identity_terms": ["Acme", "acme"]},
                        content_type="application/json")
    assert refused.status_code == 400
    assert "identity_terms" in refused.content.decode()
    assert Study.objects.get(slug="leaky").identity_terms == ["Nimbus Labs"]
    changed = api.patch(url, data={"identity_terms": [" Acme ", {"term": "by Acme",
                                                                  "phrase": True}]},
                        content_type="application/json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["identity_terms"] == ["Acme", {"term": "by Acme", "phrase": True}]


SPEC = textwrap.dedent("""\
    study:
      slug: terms
      title: Terms
      identity_terms:
        - Nimbus
        - {term: sent from my Nimbus, phrase: true}
    systems:
      - name: Zephyrix
        metadata: {aliases: [zx-chat]}
    criteria:
      - key: usable
        kind: binary
        prompt: Is it usable?
    items:
      - id: i1
        reference: r1
        outputs: {Zephyrix: x1}
""")


def test_identity_terms_round_trip_through_a_study_file():
    owner = UserFactory()
    spec = parse_study_spec(SPEC, "terms.yaml")
    study, outcome = study_import_spec(spec=spec, file_name="terms.yaml", owner=owner,
                                       actor=owner)
    assert outcome == "created"
    assert study.identity_terms == ["Nimbus", {"term": "sent from my Nimbus", "phrase": True}]
    document = spec_to_document(study_to_spec(study))
    assert document["study"]["identity_terms"] == study.identity_terms
    again = parse_study_spec(__import__("yaml").safe_dump(document), "again.yaml")
    assert study_import_spec(spec=again, file_name="again.yaml", owner=owner,
                             actor=owner)[1] == "unchanged"


def test_a_bad_identity_term_in_a_study_file_is_located():
    bad = SPEC.replace("    - Nimbus\n", "    - NIMBUS\n    - nimbus\n")
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(bad, "terms.yaml")
    [error] = caught.value.errors
    assert (error.line, error.path) == (4, "study.identity_terms")
    assert "term 2: 'nimbus' is the same as term 1" in error.message


@pytest.mark.parametrize(("typed", "stored"), [
    ("", []),
    ("Nimbus\n  Acme Labs  \n", ["Nimbus", "Acme Labs"]),
    ('Nimbus\n{"term": "sent from my Nimbus", "phrase": true}',
     ["Nimbus", {"term": "sent from my Nimbus", "phrase": True}]),
])
def test_the_admin_form_edits_identity_terms_one_a_line(typed, stored):
    study = make_study(n_items=1, n_systems=1)
    form = modelform_factory(Study, form=StudyAdminForm, fields=["identity_terms"])(
        data={"identity_terms": typed}, instance=study)
    assert form.is_valid(), form.errors
    form.save()
    assert Study.objects.get(pk=study.pk).identity_terms == stored
    # Shown again as it was stored, one row a term (admin/row_fields.py).
    shown = modelform_factory(Study, form=StudyAdminForm, fields=["identity_terms"])(
        instance=Study.objects.get(pk=study.pk))
    rows = shown.fields["identity_terms"].prepare_value(shown["identity_terms"].value())
    assert rows == [{"term": entry["term"], "phrase": True} if isinstance(entry, dict)
                    else {"term": entry, "phrase": False} for entry in stored]


@pytest.mark.parametrize(("typed", "message"), [
    ("Nimbus\nnimbus", "is the same as term 1"), ("***", "no letter or digit"),
    ('{"term": "x", "phrase": "yes"}', "phrase must be true or false")])
def test_the_admin_form_refuses_bad_identity_terms_and_stores_nothing(typed, message):
    study = make_study(n_items=1, n_systems=1, identity_terms=["Kept"])
    form = modelform_factory(Study, form=StudyAdminForm, fields=["identity_terms"])(
        data={"identity_terms": typed}, instance=study)
    assert not form.is_valid()
    assert message in str(form.errors["identity_terms"])
    assert Study.objects.get(pk=study.pk).identity_terms == ["Kept"]


def test_the_admin_change_page_shows_the_field(people):
    client = Client()
    client.force_login(people["owner"])
    html = client.get(reverse("admin:evalstudy_study_change",
                              args=[people["study"].pk])).content.decode()
    assert 'name="identity_terms-0-term"' in html and "Nimbus Labs" in html
    assert "Blindness audit" in html
