"""Editors' judge settings have upper bounds (proxies.runs.backends BACKEND_LIMITS and
PARAM_LIMITS), refused with the bound when a run is started; the Django-free backends keep
their own defaults and accept what a library caller asks for."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from proxies.models import ProxyRun
from proxies.runs import proxy_run_prepare

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_loopback_judges")]

OPENAI = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}

# (backend option, the largest value allowed, a value above it)
BACKEND_BOUNDS = [
    ("max_retries", 8, 1000),
    ("timeout_s", 120, 86400.0),
    ("concurrency", 64, 10_000),
    ("answer_tokens", 16, 100_000),
    ("top_logprobs", 20, 1000),
    ("backoff_s", 10, 3600),
    ("max_backoff_s", 60, 3600),
    ("max_retry_after_s", 120, 86400),
]


@pytest.mark.parametrize(("name", "bound", "too_much"), BACKEND_BOUNDS)
def test_backend_numbers_have_upper_bounds(study, name, bound, too_much):
    with pytest.raises(ValidationError) as refused:
        proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                          backend={**OPENAI, name: too_much})
    assert f"backend: {name} must be at most {bound}, got {too_much!r}" in refused.value.messages
    fields = proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                               backend={**OPENAI, name: bound})
    assert fields["backend"][name] == bound


def test_infinity_and_nan_are_above_every_bound(study):
    for value in (float("inf"), float("nan")):
        with pytest.raises(ValidationError, match="timeout_s must be at most 120"):
            proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                              backend={**OPENAI, "timeout_s": value})


@pytest.mark.parametrize(("name", "bound"), [("batch_size", 256), ("max_length", 8192)])
def test_local_judge_numbers_have_upper_bounds(study, name, bound):
    with pytest.raises(ValidationError, match=f"backend: {name} must be at most {bound}, "
                                              f"got {bound * 100}"):
        proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                          backend={"backend": "hf", "model_path": "/models/x", name: bound * 100})


@pytest.mark.parametrize(("params", "message"), [
    ({"dynamic_roles": 10_000}, "params: dynamic_roles must be an integer from 0 to at most 16"),
    ({"dynamic_roles": "4"}, "params: dynamic_roles must be an integer"),
    ({"max_tokens": 1_000_000}, "params: max_tokens must be an integer from 1 to at most 4096"),
    ({"max_tokens": 0}, "params: max_tokens must be an integer from 1 to at most 4096"),
    ({"static_roles": [{"type": "Reader", "description": "reads"}] * 17},
     "params: static_roles may hold at most 16 roles, got 17"),
    ({"static_roles": [{"type": "Reader"}]}, "params: static_roles must be a list"),
    ({"dedup_eps": 5}, "params: dedup_eps (a cosine distance) must lie in (0, 2]"),
])
def test_drpe_parameters_have_bounds(params, message):
    from tests.factories import make_study

    study = make_study(n_items=2, n_systems=2, design="pairwise")
    with pytest.raises(ValidationError) as refused:
        proxy_run_prepare(study=study, method="drpe", backend=OPENAI, params=params)
    assert any(text.startswith(message) for text in refused.value.messages), \
        refused.value.messages
    ok = proxy_run_prepare(study=study, method="drpe", backend=OPENAI,
                           params={"dynamic_roles": 16, "max_tokens": 4096, "dedup_eps": 0.3,
                                   "static_roles": [{"type": "Reader",
                                                     "description": "reads"}] * 16})
    assert ok["params"]["dynamic_roles"] == 16
    assert not ProxyRun.objects.exists()


def test_the_operators_concurrency_may_exceed_the_editors_bound(study, settings):
    settings.EVALSTUDY_JUDGE_BASE_URL = "http://127.0.0.1:9/v1"
    settings.EVALSTUDY_JUDGE_MODEL = "m"
    settings.EVALSTUDY_JUDGE_CONCURRENCY = 200
    fields = proxy_run_prepare(study=study, method="latte", criteria=["usable"])
    assert fields["backend"]["concurrency"] == 200
    with pytest.raises(ValidationError, match="concurrency must be at most 200"):
        proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                          backend={"concurrency": 201})


def test_the_django_free_backend_keeps_its_defaults_and_takes_any_value():
    from proxies.judges.backends.openai import OpenAICompatibleBackend
    from proxies.judges.backends.registry import build_backend

    backend = OpenAICompatibleBackend("http://127.0.0.1:9/v1", "m")
    assert (backend.max_retries, backend.timeout_s, backend.concurrency) == (5, 60.0, 8)
    big = build_backend({"backend": "openai", **OPENAI, "max_retries": 1000,
                         "concurrency": 500})
    assert (big.max_retries, big.concurrency) == (1000, 500)


@pytest.mark.parametrize(("name", "value"), [("epochs", 10_000), ("batch_size", 1e9),
                                             ("max_length", 100_000), ("epochs", 0),
                                             ("learning_rate", float("inf"))])
def test_learned_proxy_training_numbers_are_bounded(db, name, value):
    from django.core.exceptions import ValidationError

    from proxies.training import learned_proxy_check
    from tests.factories import make_study

    with pytest.raises(ValidationError, match=name):
        learned_proxy_check(study=make_study(), params={name: value})
    learned_proxy_check(study=make_study(), params={"epochs": 3, "batch_size": 16})
