"""The web servers hold a bounded number of PostgreSQL connections, however many requests come.

Before, runserver (`make run` with DATABASE_URL=postgres://..., the default DB_CONN_MAX_AGE=60)
started a thread per request and left each thread's persistent connection open behind it: 7 idle
backends after 30 page loads, and one per request in a burst, until a shared server answered
"too many clients" and the admin 500. Now runserver runs at most EVALSTUDY_RUNSERVER_THREADS
requests at a time and closes their connections as they end (kit.management.commands.runserver);
gunicorn holds at most one per worker thread (WEB_CONCURRENCY x GUNICORN_THREADS).

Each server is the real one, started on this test's database with persistent connections on;
100 requests at once go to /healthz (a `SELECT 1` each), while another connection counts the
database's backends in pg_stat_activity.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg2
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 100


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _database() -> dict:
    db = connection.settings_dict
    return {"dbname": db["NAME"], "user": db["USER"], "password": db["PASSWORD"] or None,
            "host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432}


def _database_url(db: dict) -> str:
    password = f":{db['password']}" if db["password"] else ""
    return f"postgres://{db['user']}{password}@{db['host']}:{db['port']}/{db['dbname']}"


# The server's connections carry this name (libpq reads PGAPPNAME), so that the count leaves out
# this test's own and the counter's.
SERVER_APPLICATION = "evalstudy-connection-bound-test"


class BackendCounter(threading.Thread):
    """Counts the server's backends on the database every few milliseconds."""

    def __init__(self, db: dict) -> None:
        super().__init__(daemon=True)
        self.db, self.most, self.stopping = db, 0, threading.Event()
        self._connection = psycopg2.connect(**db)
        self._connection.autocommit = True

    def count(self) -> int:
        with self._connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                           "AND application_name = %s", [self.db["dbname"], SERVER_APPLICATION])
            return cursor.fetchone()[0]

    def run(self) -> None:
        while not self.stopping.is_set():
            self.most = max(self.most, self.count())
            time.sleep(0.005)


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=180) as response:  # noqa: S310 - our own server
        return response.status


def _wait_until_serving(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert server.poll() is None, f"the server ended:\n{log.read_text()[-3000:]}"
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the server did not answer:\n{log.read_text()[-3000:]}")


SERVERS = {
    # (command, environment, the bound its settings give)
    "runserver": (lambda port: [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}",
                                "--noreload", "--skip-checks"],
                  {"EVALSTUDY_RUNSERVER_THREADS": "4"}, 4),
    "gunicorn": (lambda port: [str(Path(sys.executable).parent / "gunicorn"), "-c",
                               "config/gunicorn.conf.py", "config.wsgi"],
                 {"WEB_CONCURRENCY": "2", "GUNICORN_THREADS": "3"}, 2 * 3),
}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("server_name", list(SERVERS))
def test_a_burst_of_requests_holds_at_most_the_servers_bound_of_connections(server_name,
                                                                            tmp_path):
    command, server_env, bound = SERVERS[server_name]
    port, db = _free_port(), _database()
    env = {**os.environ, **server_env,
           "DJANGO_SETTINGS_MODULE": "config.settings.local", "DATABASE_URL": _database_url(db),
           "DB_CONN_MAX_AGE": "60",  # persistent connections, as the settings default to
           "CELERY_BROKER_URL": "memory://", "EVALSTUDY_VAR_DIR": str(tmp_path / "var"),
           "PGAPPNAME": SERVER_APPLICATION,
           "GUNICORN_BIND": f"127.0.0.1:{port}", "GUNICORN_ACCESS_LOG": str(tmp_path / "access"),
           "DJANGO_RUNSERVER_HIDE_WARNING": "true"}
    log = tmp_path / "server.log"
    with log.open("w") as output:
        server = subprocess.Popen(command(port), cwd=ROOT, env=env, stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/healthz"
    counter = BackendCounter(db)
    try:
        _wait_until_serving(url, server, log)
        counter.start()
        with ThreadPoolExecutor(max_workers=REQUESTS) as pool:
            statuses = list(pool.map(_get, [url] * REQUESTS))
        counter.stopping.set()
        counter.join()
        after = counter.count()
    finally:
        counter.stopping.set()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    assert statuses == [200] * REQUESTS
    assert counter.most > 0, "the counter saw no connection: it proves nothing"
    assert counter.most <= bound, (
        f"{server_name} held {counter.most} connections at once; its settings allow {bound}")
    assert after <= bound
