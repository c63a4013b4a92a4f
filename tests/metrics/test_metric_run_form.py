"""The metrics page's run form asks for each metric's parameters as inputs built from its
scorer's declared `params` (metrics/scorers/specs.py), not as JSON: what it stores is the
`{metric: {param: value}}` the JSON box held, only the changed ones; a bad value is refused
before any run is recorded."""

from __future__ import annotations

import inspect

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from kit.params import BOOL, CHOICE
from metrics.forms import MetricRunForm
from metrics.models import MetricRun
from metrics.scorers import registry
from tests.factories import UserFactory
from tests.metrics.test_metric_runs import asr_study  # noqa: F401  (fixture)


@pytest.mark.parametrize("name", list(registry.SPECS))
def test_every_declared_parameter_is_one_the_scorer_takes_with_the_same_default(name):
    declared = registry.SPECS[name].params
    try:
        cls = registry.scorer_class(name)
    except ValueError:
        pytest.skip(f"{name} is unavailable here")
    taken = inspect.signature(cls.__init__).parameters
    for param in declared:
        assert param.name in taken, f"{name} declares {param.name}, which it does not take"
        if param.default is not None and param.kind in (BOOL, CHOICE):
            assert taken[param.name].default == param.default, (name, param.name)
    # What the form stores builds a scorer (the constructor's own checks accept it).
    changed = {p.name: (not p.default) if p.kind == BOOL else p.choices[-1]
               for p in declared if p.kind in (BOOL, CHOICE)}
    if name != "bertscore":  # idf needs the study's references, filled by the run
        registry.build(name, changed)


def test_only_the_changed_parameters_of_the_ticked_metrics_are_stored():
    form = MetricRunForm({
        "metrics": ["wer", "bleu", "rouge"], "bleu__tokenize": "char", "bleu__normalise": "",
        "wer__normaliser": "", "chrf__word_order": "2", "heval__gamma": "0.3",
        # rouge's use_stemmer box (ticked by default) left unticked: False is a change
    })
    assert form.is_valid(), form.errors
    assert form.run_params() == {"bleu": {"tokenize": "char"}, "rouge": {"use_stemmer": False}}


def test_an_untouched_form_stores_no_parameter():
    unbound = MetricRunForm()
    posted = {"metrics": list(unbound.metric_names)}
    for _name, fields in unbound.by_metric():
        for field in fields:
            value = field.value()
            if value is True:
                posted[field.html_name] = "on"
            elif value not in (None, False):
                posted[field.html_name] = str(value)
    form = MetricRunForm(posted)
    assert form.is_valid(), form.errors
    assert form.run_params() == {}


@pytest.fixture
def owner_client(asr_study):  # noqa: F811
    user = UserFactory(username="metrics-form", is_staff=True)
    asr_study.owner = user
    asr_study.save()
    client = Client()
    client.force_login(user)
    return client


def test_the_page_offers_typed_inputs_and_no_json_box(asr_study, owner_client):  # noqa: F811
    page = owner_client.get(reverse("metrics:page", args=[asr_study.slug])).content.decode()
    assert 'name="params"' not in page and "JSON" not in page.split("<h2>Runs</h2>")[0]
    assert '<select name="bleu__tokenize"' in page
    assert 'type="number" name="chrf__word_order"' in page and 'min="0"' in page
    assert 'name="rouge__use_stemmer"' in page and "Settings of heval" in page


def test_starting_a_run_stores_the_inputs_as_its_parameters(asr_study, owner_client):  # noqa: F811
    owner_client.post(reverse("metrics:start", args=[asr_study.slug]), {
        "metrics": ["wer", "chrf"], "chrf__word_order": "2", "wer__normaliser": "raw",
        "model_path": ""})
    run = MetricRun.objects.get(study=asr_study)
    assert run.metrics == ["wer", "chrf"]
    assert run.params == {"wer": {"normaliser": "raw"}, "chrf": {"word_order": 2}}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("chrf__word_order", "-1", "chrf word_order"), ("heval__gamma", "2", "heval gamma"),
    ("bleu__tokenize", "klingon", "bleu tokenize"), ("chrf__word_order", "two", "whole number"),
])
def test_a_bad_value_is_refused_and_no_run_is_recorded(asr_study, owner_client, field,  # noqa: F811
                                                        value, message):
    response = owner_client.post(reverse("metrics:start", args=[asr_study.slug]), {
        "metrics": ["wer", "chrf", "heval", "bleu"], field: value}, follow=True)
    assert not MetricRun.objects.filter(study=asr_study).exists()
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request)) or \
        response.content.decode()
    assert message in shown, shown
