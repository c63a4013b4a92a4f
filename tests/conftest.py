import pytest

from tests.factories import make_study


@pytest.fixture
def study(db):
    """A small valid latin-square study: 3 systems x 6 items, severity + binary criteria."""
    return make_study()
