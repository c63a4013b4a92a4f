"""`runserver` (the development server of `make run`) with a bounded number of requests, and
so of database connections, at a time.

Django's runserver starts a new thread for every request and never closes the thread's database
connection: with persistent connections (CONN_MAX_AGE > 0) each finished thread left one idle
PostgreSQL backend behind until garbage collection (7 after 30 page loads; on a shared server,
PostgreSQL's "too many clients"), and a burst of requests opened one backend per request. Here
at most EVALSTUDY_RUNSERVER_THREADS requests run at once (the next ones wait for a slot) and
each closes its connections when it ends, so the web server holds at most that many. The bound
counts requests, not connections: a browser keeps its connections open between pages, and an
idle one must not hold a slot.
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
from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer
from django.db import connections


class BoundedRequestHandler(WSGIRequestHandler):
    """Serves a connection's requests one after another, each in one of the server's slots:
    the slot is taken once a request has arrived (after its request line is read) and given
    back, with the request's database connections closed, when its answer is written. A
    connection kept alive between requests (a browser keeps several per window) holds no
    slot while it waits; counting connections instead let two idle browser windows hold every
    slot while the next page waited for ever."""

    def handle_one_request(self) -> None:
        self._in_slot = False
        try:
            super().handle_one_request()
        finally:
            if self._in_slot:
                connections.close_all()
                self.server.request_slots.release()  # type: ignore[attr-defined]

    def parse_request(self) -> bool:
        # Called by handle_one_request once the request line has come in.
        self.server.request_slots.acquire()  # type: ignore[attr-defined]
        self._in_slot = True
        return super().parse_request()


class BoundedWSGIServer(WSGIServer):
    """Runs at most EVALSTUDY_RUNSERVER_THREADS requests at once (BoundedRequestHandler)."""

    # Connections beyond the running requests wait here instead of retrying.
    request_queue_size = 128

    def __init__(self, server_address: Any, handler_class: Any, *args: Any,
                 **kwargs: Any) -> None:
        # Django's `run` passes its own handler class: ours bounds the requests.
        super().__init__(server_address, BoundedRequestHandler, *args, **kwargs)
        self.request_slots = threading.BoundedSemaphore(settings.EVALSTUDY_RUNSERVER_THREADS)
        # The accepting thread's own: opened by the start's migration check, then never used.
        connections.close_all()


class Command(StaticRunserver):
    help = (StaticRunserver.help + " At most EVALSTUDY_RUNSERVER_THREADS requests (and database "
            "connections) at a time.")

    server_cls = BoundedWSGIServer
