"""gunicorn settings for the web processes: `gunicorn -c config/gunicorn.conf.py config.wsgi`.

Everything can be set from the environment (the container sets them from .env). Web processes
keep no state of their own (sessions, caches, throttles, reports and uploads live in PostgreSQL
and Redis), so scaling out is more processes here or more hosts behind the proxy.
"""

import multiprocessing
import os

from gunicorn.glogging import Logger

from kit.logs import mask_secret_path  # pure Python: no Django set-up needed


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
# WEB_CONCURRENCY is the name platforms (and gunicorn itself) use for the process count.
workers = _int("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count() + 1)
threads = _int("GUNICORN_THREADS", 1)
# Uploads and exports are the slow requests; long work goes to Celery and returns 202.
timeout = _int("GUNICORN_TIMEOUT", 60)
graceful_timeout = _int("GUNICORN_GRACEFUL_TIMEOUT", 30)
keepalive = _int("GUNICORN_KEEPALIVE", 5)
# Recycle processes now and then: bounds any slow leak (e.g. in a native library).
max_requests = _int("GUNICORN_MAX_REQUESTS", 2000)
max_requests_jitter = _int("GUNICORN_MAX_REQUESTS_JITTER", 200)
# The proxy in front (nginx, traefik, a load balancer) whose X-Forwarded-* headers are trusted.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
# Heartbeat files in memory: a container's disk can be slow enough to get workers killed.
# /dev/shm: gunicorn's advice for its heartbeat files (a tmpfs), not a place for data.
worker_tmp_dir = os.environ.get("GUNICORN_WORKER_TMP_DIR", "/dev/shm" if os.path.isdir(  # noqa: S108
    "/dev/shm") else None)  # noqa: S108
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-")
errorlog = os.environ.get("GUNICORN_ERROR_LOG", "-")
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# Client, method, path, status, size, duration in microseconds, user agent. Not the query
# string nor the referrer: crowd entry URLs carry Prolific ids there, and a log line cannot be
# erased with the rater's personal data. Paths that hold a secret are masked (below).
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(D)sus "%(a)s"'

class MaskingLogger(Logger):
    """gunicorn's logger whose access-log atoms hold no secrets and no query strings, whatever
    `access_log_format` asks for: the path (`U`, and the request line `r` rebuilt from it) is
    masked, and the query string and referrer (`q`, `f`, and their header/environment forms)
    are left out."""

    _DROPPED = ("q", "f", "{referer}i", "{http_referer}e", "{query_string}e")
    _PATHS = ("{raw_uri}e", "{path_info}e", "{request_uri}e")

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        path = mask_secret_path(environ.get("PATH_INFO") or "")
        atoms["U"] = path
        atoms["r"] = f"{environ.get('REQUEST_METHOD')} {path} {environ.get('SERVER_PROTOCOL')}"
        for key in self._PATHS:
            if key in atoms:
                atoms[key] = mask_secret_path(str(atoms[key]))
        for key in self._DROPPED:
            if key in atoms:
                atoms[key] = "-"
        return atoms


logger_class = MaskingLogger
