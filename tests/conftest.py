import pytest

import tests.workers  # noqa: F401 - snapshots the environment before anything starts R


@pytest.fixture
def study(db):
    """A small valid latin-square study: 3 systems x 6 items, severity + binary criteria."""
    # Imported here so that the Django-free suites (metrics/scorers, analysis/stats) also run
    # with `-p no:django`.
    from tests.factories import make_study

    return make_study()


@pytest.fixture
def fresh_throttles():
    """An empty cache before and after the test: API and sign-in throttles count there."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()
