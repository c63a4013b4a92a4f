"""Fixtures shared by the study tests: a staff owner, its token client, a draft study, a
superuser's signed-in client."""

import pytest


@pytest.fixture
def owner(db):
    from tests.factories import UserFactory

    return UserFactory(username="owner", is_staff=True)


@pytest.fixture
def api(owner):
    """A client that authenticates every request with the owner's token."""
    from tests.factories import token_client

    return token_client(owner)


@pytest.fixture
def draft(owner):
    from tests.factories import make_study

    return make_study(n_items=3, n_systems=2, owner=owner, slug="draft")


@pytest.fixture
def boss_client(db):
    """A client signed in as the superuser "boss" (the admin's pages)."""
    from django.test import Client

    from tests.factories import UserFactory

    client = Client()
    client.force_login(UserFactory(username="boss", is_staff=True, is_superuser=True))
    return client
