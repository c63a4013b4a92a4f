"""Fixtures every folder uses. A fixture lives in the conftest.py of the narrowest folder that
holds all its users, and each name is defined once (tests/test_fixture_names.py): a test's
own variant gets a name that says what differs."""

from pathlib import Path

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


@pytest.fixture
def media_root(settings, tmp_path) -> Path:
    """Stored media go to a fresh directory, so a test can see that nothing was left."""
    root = tmp_path / "stored"
    settings.MEDIA_ROOT = str(root)
    return root


@pytest.fixture
def proxy_dir_in_tmp(settings, tmp_path):
    """Trained proxies (models, soft prompts) go to a fresh directory per test."""
    settings.EVALSTUDY_PROXY_DIR = str(tmp_path / "proxies")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A 3-layer tiny BERT with the embedded encoder's tokenizer, saved once per session
    (tests read it, none writes to it)."""
    from tests.tiny_models import save_tiny_bert

    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))
