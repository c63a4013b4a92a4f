"""The proxy-run admin form asks for the judge's parameters as inputs built from the proxy
methods' specs (proxies/methods/, `ProxyMethod.params`) and for the backend as name/value rows:
no JSON box. What is stored is what the JSON held; a bad value or a parameter of another method
is an error on its input, and no run is recorded."""

from __future__ import annotations

import pytest
from django.urls import reverse

from proxies.admin import PARAM_PREFIX
from proxies.methods import all_methods
from proxies.models import ProxyRun
from tests.factories import UserFactory, make_study
from tests.proxies.test_proxy_api import allowed_latte  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_throttles")]


@pytest.fixture
def signed_in(client):
    owner = UserFactory(username="owner", is_staff=True, is_superuser=True)
    client.force_login(owner)
    return client, make_study(owner=owner, slug="asr")


def _backend_rows(server) -> dict:
    rows = [("base_url", server.base_url), ("model", "judge-test"), ("max_retries", "0")]
    data = {"backend_config-rows": str(len(rows) + 1)}
    for index, (name, value) in enumerate(rows):
        data[f"backend_config-{index}-name"] = name
        data[f"backend_config-{index}-value"] = value
    return data


def test_the_add_page_has_an_input_per_method_parameter_and_no_json_box(signed_in):
    client, _ = signed_in
    html = client.get(reverse("admin:proxies_proxyrun_add")).content.decode()
    assert 'name="backend_config"' not in html and 'name="params_config"' not in html
    for method in all_methods():
        for param in method.params:
            assert f'name="{PARAM_PREFIX}{param.name}' in html, param.name
    assert 'name="backend_config-0-name"' in html
    assert 'name="param_static_roles-0-type"' in html  # DRPE's roles: a row each


def test_a_threshold_typed_in_its_input_is_stored_as_the_json_held_it(
        signed_in, allowed_latte):  # noqa: F811
    client, study = signed_in
    response = client.post(reverse("admin:proxies_proxyrun_add"), {
        "study": study.pk, "method": "latte", "criteria_keys": "usable", "template": "",
        **_backend_rows(allowed_latte), f"{PARAM_PREFIX}threshold": "0.8"})
    assert response.status_code == 302, response.content.decode()[:3000]
    run = ProxyRun.objects.get()
    assert run.params == {"threshold": 0.8}
    assert run.backend["base_url"] == allowed_latte.base_url and run.backend["max_retries"] == 0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("threshold", "1.5", "less than or equal to 1"),
    ("dynamic_roles", "3", "latte does not take dynamic_roles"),
    ("static_roles-0-type", "Critic", "row 1: fill in who they are"),
])
def test_a_bad_parameter_is_an_error_on_its_input_and_no_run_is_recorded(
        signed_in, allowed_latte, field, value, message):  # noqa: F811
    client, study = signed_in
    post = {"study": study.pk, "method": "latte", "criteria_keys": "usable", "template": "",
            **_backend_rows(allowed_latte), f"{PARAM_PREFIX}{field}": value}
    if field.startswith("static_roles"):
        post[f"{PARAM_PREFIX}static_roles-rows"] = "2"
    response = client.post(reverse("admin:proxies_proxyrun_add"), post)
    assert response.status_code == 200
    assert message in response.content.decode().replace("&#x27;", "'")
    assert not ProxyRun.objects.exists()


def test_drpe_roles_typed_as_rows_are_stored_as_the_list_of_roles(
        client, allowed_latte):  # noqa: F811
    owner = UserFactory(username="owner", is_staff=True, is_superuser=True)
    client.force_login(owner)
    study = make_study(owner=owner, slug="pairs", design="pairwise", n_systems=2)
    response = client.post(reverse("admin:proxies_proxyrun_add"), {
        "study": study.pk, "method": "drpe", "criteria_keys": "", "template": "",
        **_backend_rows(allowed_latte), f"{PARAM_PREFIX}dynamic_roles": "2",
        f"{PARAM_PREFIX}static_roles-rows": "3",
        f"{PARAM_PREFIX}static_roles-0-type": " Critic ",
        f"{PARAM_PREFIX}static_roles-0-description": "Checks fluent writing.",
        f"{PARAM_PREFIX}static_roles-2-type": "Editor",
        f"{PARAM_PREFIX}static_roles-2-description": "Cuts what is not needed.",
        f"{PARAM_PREFIX}aggregation": "sum"})
    assert response.status_code == 302, response.content.decode()[:3000]
    assert ProxyRun.objects.get().params == {
        "static_roles": [{"type": "Critic", "description": "Checks fluent writing."},
                         {"type": "Editor", "description": "Cuts what is not needed."}],
        "dynamic_roles": 2, "aggregation": "sum"}
