"""Sign-in throttling on the browser login page and the admin login."""

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import reverse

from tests.factories import UserFactory

LIMITS = {"LOGIN_FAILURE_LIMIT": 3, "LOGIN_FAILURE_LIMIT_PER_ADDRESS": 6,
          "LOGIN_LOCKOUT_SECONDS": 600}


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def _login(client, username, password, url=None, address="10.0.0.1"):
    return client.post(url or reverse("login"), {"username": username, "password": password},
                       REMOTE_ADDR=address)


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_repeated_failures_lock_the_username_for_that_address():
    UserFactory(username="ann", password="right-password-1")
    client = Client()
    for _ in range(3):
        assert _login(client, "ann", "wrong").status_code == 200
    locked = _login(client, "ann", "right-password-1")
    assert locked.status_code == 429
    assert "Too many failed sign-in attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    # Another address is not locked out, and can sign in.
    assert _login(Client(), "ann", "right-password-1", address="10.0.0.2").status_code == 302


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_success_resets_the_count():
    UserFactory(username="ann", password="right-password-1")
    for _ in range(2):
        _login(Client(), "ann", "wrong")
    assert _login(Client(), "ann", "right-password-1").status_code == 302
    for _ in range(2):
        _login(Client(), "ann", "wrong")
    assert _login(Client(), "ann", "right-password-1").status_code == 302


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_many_usernames_from_one_address_are_throttled_too():
    UserFactory(username="victim", password="right-password-1")
    for n in range(6):
        _login(Client(), f"guess{n}", "wrong")
    assert _login(Client(), "victim", "right-password-1").status_code == 429


@pytest.mark.django_db
@override_settings(**LIMITS, LOGIN_CLIENT_ADDRESS_HEADER="HTTP_X_REAL_IP")
def test_the_client_address_comes_from_the_proxy_header_when_configured():
    UserFactory(username="ann", password="right-password-1")
    for _ in range(3):
        Client().post(reverse("login"), {"username": "ann", "password": "wrong"},
                      REMOTE_ADDR="10.9.9.9", HTTP_X_REAL_IP="203.0.113.5")
    behind_same_proxy = Client().post(reverse("login"), {"username": "ann",
                                                         "password": "right-password-1"},
                                      REMOTE_ADDR="10.9.9.9", HTTP_X_REAL_IP="198.51.100.7")
    assert behind_same_proxy.status_code == 302


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_admin_login_is_throttled():
    UserFactory(username="boss", password="right-password-1", is_staff=True)
    url = reverse("admin:login")
    for _ in range(3):
        _login(Client(), "boss", "wrong", url=url)
    client = Client()
    response = _login(client, "boss", "right-password-1", url=url)
    assert "Too many failed sign-in attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session
