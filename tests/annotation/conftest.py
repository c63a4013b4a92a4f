"""Fixtures shared by the rater and monitor tests."""

import pytest


@pytest.fixture
def researcher(db):
    from tests.factories import UserFactory

    return UserFactory(username="res", is_staff=True)
