"""Production: every secret, host and service comes from the environment; DEBUG is off unless
DEBUG=true is set explicitly.

Required (ImproperlyConfigured naming the variable when missing): SECRET_KEY, ALLOWED_HOSTS,
DATABASE_URL, CELERY_BROKER_URL. There is no silent fall-back to SQLite or the filesystem
broker here: both live in one host's var/ folder, and a second web or worker host would not
see them. `python manage.py check --deploy` lists what else is per-host (e.g. a local-memory
cache).
"""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DEBUG", default=False)

SECRET_KEY = env.str("SECRET_KEY")
if len(SECRET_KEY) < 50 or SECRET_KEY.startswith(("insecure", "django-insecure", "test-")):
    raise ImproperlyConfigured(
        "SECRET_KEY is too short or a development key: use 50+ random characters, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("Set the ALLOWED_HOSTS environment variable (comma-separated)")

DATABASES = {"default": env.db_url("DATABASE_URL")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Behind PgBouncer in transaction mode (docs/guide/deployment.md): see base.py.
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool(
    "DB_DISABLE_SERVER_SIDE_CURSORS", default=False)
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL")
if CELERY_BROKER_URL.startswith("filesystem://"):
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL: the filesystem broker only works on one host; use redis:// or "
        "amqp:// in production"
    )

# --- HTTPS -----------------------------------------------------------------------------------
# Behind a TLS-terminating proxy (nginx, traefik, a cloud load balancer) that sets
# X-Forwarded-Proto, set USE_X_FORWARDED_PROTO=true so Django knows the request was HTTPS.
# Only then: a client talking to Django directly could otherwise claim HTTPS itself.
if env.bool("USE_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
# Health probes of load balancers and orchestrators come over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz/?$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SECURE = True
CSRF_COOKIE_HTTPONLY = True  # no script reads it: forms carry the token
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"

# Collected at image build time (collectstatic); whitenoise serves them compressed and with
# far-future cache headers, from every web process alike.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
