"""A study may show raters the WER alignment of each output with its reference (off by
default): the metrics' own alignment, on both paths of the rater loop, escaped, never for
pairwise items, and without a database query of its own."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation import alignment
from evalstudy.models import Output, Study
from evalstudy.services import study_open
from evalstudy.spec.study import parse_study_spec
from metrics.apps import wer_alignment
from tests.factories import UserFactory, invite, make_study, token_client

HX = {"HTTP_HX_REQUEST": "true"}
ANSWERS = {"severity": "0", "usable": "yes"}


def _first_item(client: Client, study: Study) -> str:
    """The rater's first target item (past the practice item and its feedback)."""
    client.get(reverse("annotation:enter", args=[invite(study).access_token]))
    practice = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    client.post(_action(practice), ANSWERS, **HX)
    return client.get(reverse("annotation:rate", args=[study.slug])).content.decode()


def _action(page: str) -> str:
    return re.search(r'<form[^>]*action="(/s/[^"]+/slots/\d+/)"', page).group(1)


def _outputs_say(study: Study, reference: str, text: str) -> None:
    Output.objects.filter(item__study=study).update(text=text)
    study.items.update(reference=reference)


def test_the_metrics_register_the_wer_alignment():
    ops = wer_alignment("Turn on the light.", "turn of the light now")
    assert [op["op"] for op in ops] == ["equal", "substitute", "equal", "insert"]
    assert ops[1] == {"op": "substitute", "ref": ["on"], "hyp": ["of"]}
    assert alignment._provider is wer_alignment  # metrics.apps registered it


def test_a_spec_turns_it_on_and_it_is_off_by_default():
    spec = ("study:\n  slug: s\n  title: S\n{extra}systems:\n  - name: a\ncriteria:\n"
            "  - {{key: usable, kind: binary, prompt: Usable?}}\n"
            "items:\n  - {{id: i1, reference: r, outputs: {{a: x}}}}\n")
    assert parse_study_spec(spec.format(extra=""), "s.yaml").settings["alignment_shown"] is False
    on = parse_study_spec(spec.format(extra="  alignment_shown: true\n"), "s.yaml")
    assert on.settings["alignment_shown"] is True


@pytest.mark.django_db
def test_the_api_turns_it_on():
    owner = UserFactory(is_staff=True)
    study = make_study(n_items=1, n_systems=1, owner=owner)
    response = token_client(owner).patch(reverse("api-study", args=[study.slug]),
                                         data={"alignment_shown": True},
                                         content_type="application/json")
    assert response.status_code == 200 and response.json()["alignment_shown"] is True


@pytest.mark.django_db
@pytest.mark.parametrize("fast", [True, False])
def test_raters_see_replaced_missing_and_added_words_when_the_study_shows_them(fast,
                                                                              monkeypatch):
    if not fast:
        monkeypatch.setattr("annotation.loop.fast_path_available", lambda: False)
    study = make_study(n_items=3, n_systems=1, alignment_shown=True, language="fr")
    _outputs_say(study, "turn on the kitchen light", "turn of the light")
    study_open(study=study)
    client = Client()
    page = _first_item(client, study)
    assert "Différences avec la référence" in page
    assert '<mark class="sub" title="au lieu de « on »">of' in page
    assert '<span class="visually-hidden">manquant : </span>kitchen</del>' in page
    Output.objects.filter(item__study=study).update(text="turn on the kitchen light now")
    following = client.post(_action(page), ANSWERS, **HX)
    if not fast:
        following = client.get(following["HX-Redirect"])
    assert '<span class="visually-hidden">ajouté : </span>now</ins>' in following.content.decode()


@pytest.mark.django_db
def test_it_costs_the_loop_no_statement():
    study = make_study(n_items=3, n_systems=1, alignment_shown=True)
    _outputs_say(study, "turn on the light", "turn of the light")
    study_open(study=study)
    client = Client()
    page = _first_item(client, study)
    with CaptureQueriesContext(connection) as queries:
        following = client.post(_action(page), ANSWERS, **HX).content.decode()
    assert '<mark class="sub"' in following and len(queries) <= 6


@pytest.mark.django_db
def test_nothing_is_shown_by_default_without_a_reference_or_for_pairwise_items():
    plain = make_study(n_items=2, n_systems=1)
    hidden_reference = make_study(n_items=2, n_systems=1, alignment_shown=True,
                                  reference_shown=False)
    pairwise = make_study(n_items=2, n_systems=2, design="pairwise", alignment_shown=True)
    for study in (plain, hidden_reference, pairwise):
        _outputs_say(study, "turn on the light", "turn of the light")
        study_open(study=study)
        page = _first_item(Client(), study)
        assert "alignment-shown" not in page and "<mark" not in page, study.slug


@pytest.mark.django_db
def test_the_words_are_escaped():
    study = make_study(n_items=2, n_systems=1, alignment_shown=True)
    _outputs_say(study, "say hello", "say <img src=x onerror=alert(1)>")
    study_open(study=study)
    page = _first_item(Client(), study)
    assert "alignment-shown" in page
    assert "<img" not in page and "&lt;img" in page


@pytest.mark.django_db
def test_a_failing_provider_leaves_the_page_working(monkeypatch):
    def broken(reference, text):
        raise RuntimeError("boom")

    monkeypatch.setattr(alignment, "_provider", broken)
    study = make_study(n_items=2, n_systems=1, alignment_shown=True)
    study_open(study=study)
    page = _first_item(Client(), study)
    assert "rate-form" in page and "alignment-shown" not in page
