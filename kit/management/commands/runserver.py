"""`runserver` (the development server of `make run`) with a bounded number of requests, and
so of database connections, at a time.

Django's runserver starts a new thread for every request and never closes the thread's database
connection: with persistent connections (CONN_MAX_AGE > 0) each finished thread left one idle
PostgreSQL backend behind until garbage collection (7 after 30 page loads; on a shared server,
PostgreSQL's "too many clients"), and a burst of requests opened one backend per request. Here
at most EVALSTUDY_RUNSERVER_THREADS requests run at once (the next ones wait in the listen
queue) and each closes its connections when it ends, so the web server holds at most that many.
Static files are still served as by django.contrib.staticfiles' runserver, which this extends
(kit is installed before staticfiles so that this command is the one `runserver` finds).

gunicorn needs none of this: its workers are processes with a fixed pool of threads, each
keeping one connection (WEB_CONCURRENCY x GUNICORN_THREADS at most, config/gunicorn.conf.py).
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.contrib.staticfiles.management.commands.runserver import Command as StaticRunserver
from django.core.servers.basehttp import WSGIServer
from django.db import connections


class BoundedWSGIServer(WSGIServer):
    """Takes a request only while fewer than EVALSTUDY_RUNSERVER_THREADS run; each request's
    thread closes its database connections as it ends."""

    # Clients beyond the running requests wait here instead of retrying their connection.
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(settings.EVALSTUDY_RUNSERVER_THREADS)
        # The accepting thread's own: opened by the start's migration check, then never used.
        connections.close_all()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # socketserver calls this in the accepting thread, and shutdown_request exactly once
        # for every request it accepted (in the request's thread, or after a failed start).
        self._slots.acquire()
        return True

    def shutdown_request(self, request: Any) -> None:
        try:
            connections.close_all()
            super().shutdown_request(request)
        finally:
            self._slots.release()


class Command(StaticRunserver):
    help = (StaticRunserver.help + " At most EVALSTUDY_RUNSERVER_THREADS requests (and database "
            "connections) at a time.")

    server_cls = BoundedWSGIServer
