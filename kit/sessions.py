"""Django's database sessions, read without the ORM.

Every request of a rater reads its session; through the ORM that read costs more in Python
(building and compiling the query) than the database takes to answer it. This store reads the
same `django_session` row with one plain statement and is otherwise Django's own
(`django.contrib.sessions.backends.db`): same table, same encoding, same expiry, same writes,
so sessions can be searched and ended as database sessions (`evalstudy.privacy`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib.sessions.backends import db
from django.db import connections, router
from django.utils import timezone


@functools.cache
def _select_sql(table: str, quote: Callable[[str], str]) -> str:
    return (f"SELECT session_data, expire_date FROM {quote(table)} "  # noqa: S608 - a quoted identifier
            "WHERE session_key = %s AND expire_date > %s")


class SessionStore(db.SessionStore):
    def _get_session_from_db(self):
        key = self.session_key  # None when the cookie held no valid key
        if not key:
            self._session_key = None
            return None
        model = self.model
        connection = connections[router.db_for_read(model)]
        with connection.cursor() as cursor:
            cursor.execute(_select_sql(model._meta.db_table, connection.ops.quote_name),
                           [key, timezone.now()])
            row = cursor.fetchone()
        if row is None:
            self._session_key = None
            return None
        return model(session_key=key, session_data=row[0], expire_date=row[1])
