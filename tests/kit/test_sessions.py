"""kit.sessions: Django's database sessions, read without the ORM, reading what Django's own
store reads and nothing it would not."""

import datetime as dt

import pytest
from django.contrib.sessions.backends.db import SessionStore as DjangoStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from kit.sessions import SessionStore

pytestmark = pytest.mark.django_db


def test_a_session_written_by_django_reads_the_same_in_one_plain_statement():
    django = DjangoStore()
    django["rater"] = 42
    django["nested"] = {"a": [1, 2]}
    django.create()
    django.save()
    store = SessionStore(django.session_key)
    with CaptureQueriesContext(connection) as queries:
        loaded = store.load()
    assert loaded == DjangoStore(django.session_key).load() == {
        "rater": 42, "nested": {"a": [1, 2]}}
    assert len(queries) == 1 and "FROM \"django_session\"" in queries[0]["sql"]
    # What it writes, Django reads.
    store["more"] = "yes"
    store.save()
    assert DjangoStore(store.session_key).load()["more"] == "yes"


def test_an_expired_unknown_or_malformed_key_reads_as_no_session():
    django = DjangoStore()
    django["rater"] = 1
    django.create()
    django.save()
    Session.objects.filter(pk=django.session_key).update(
        expire_date=timezone.now() - dt.timedelta(seconds=1))
    for key in (django.session_key, "x" * 32, "short", None):
        store = SessionStore(key)
        assert store.load() == {}
        assert store.session_key is None
