"""Settings shared by every environment.

Every value that differs between machines comes from the environment through `env`, which fails
loudly (ImproperlyConfigured naming the variable) when a required value is missing. With no
variables at all the app runs on the embedded default: SQLite in `var/` and a Celery broker on
the filesystem, so `make run` needs no server.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(environ.Env().str("EVALSTUDY_VAR_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()
# A .env file beside manage.py is optional; real environment variables win over it.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = env.str("SECRET_KEY")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SITE_URL = env.str("SITE_URL", default="http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: its runserver (kit.management.commands.runserver) bounds the requests
    # and database connections the development server holds at a time.
    "kit",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "evalstudy",
    "annotation",
    "metrics",
    "proxies",
    "analysis",
    "prolific",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "kit.i18n.DefaultLanguageMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Database sessions (they can be searched and ended: evalstudy.privacy), read without the ORM.
SESSION_ENGINE = "kit.sessions"

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'evalstudy.sqlite3'}"
    ),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
    # Reuse connections across requests: a new PostgreSQL backend per request cost more than
    # the request itself (bench/raters.py). A persistent connection belongs to a thread, so the
    # servers bound how many there are: gunicorn holds at most one per worker thread
    # (WEB_CONCURRENCY x GUNICORN_THREADS), runserver at most EVALSTUDY_RUNSERVER_THREADS (it
    # closes them after each request: kit.management.commands.runserver), each Celery worker
    # process one. Django's own pool (OPTIONS "pool") needs psycopg 3; this project runs
    # psycopg2. Many web hosts: PgBouncer in front (docs/guide/deployment.md).
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # On behind PgBouncer in transaction mode: a server-side cursor (QuerySet.iterator())
    # would outlive the transaction that opened it on the server.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool(
        "DB_DISABLE_SERVER_SIDE_CURSORS", default=False)
# Requests the development server (runserver, `make run`) handles at a time; each holds one
# database connection while it runs.
EVALSTUDY_RUNSERVER_THREADS = env.int("EVALSTUDY_RUNSERVER_THREADS", default=8)
# The rater loop's statements (annotation.loop) are prepared once per database connection. Turn
# this off behind a connection pooler in transaction mode (PgBouncer's default), which hands a
# client a different server session from one transaction to the next.
EVALSTUDY_DB_PREPARED_STATEMENTS = env.bool("EVALSTUDY_DB_PREPARED_STATEMENTS", default=True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Wait for the worker's writes instead of failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "annotation:dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
# The languages of the rater interface; each study picks one (Study.language). Researchers'
# own texts (instructions, prompts, labels) are shown as written. The list is
# evalstudy.spec.fields.RATER_LANGUAGES (tests/test_i18n.py keeps them equal).
LANGUAGES = [("en", "English"), ("fr", "Français"), ("es", "Español")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request otherwise
STATICFILES_DIRS = [BASE_DIR / "static"]

# Uploads (spec, CSV, JSONL) are read in memory up to this size and refused above it.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=50 * 1024 * 1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = DATA_UPLOAD_MAX_MEMORY_SIZE
# Files uploaded through the admin import pages (DATA_UPLOAD_MAX_MEMORY_SIZE does not count
# file parts, so the forms check this).
EVALSTUDY_UPLOAD_MAX_BYTES = env.int("EVALSTUDY_UPLOAD_MAX_BYTES",
                                     default=DATA_UPLOAD_MAX_MEMORY_SIZE)

# Shared by the login throttle and the API throttles. The local-memory default is per process:
# a deployment with several web processes points CACHE_URL at Redis (redis://host:6379/2).
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://")}

# --- Security headers and sign-in ----------------------------------------------------------
# Content Security Policy (django-csp) in every environment, so development and the browser
# tests run under the policy production sends. Pages load scripts and styles from static/ only;
# the stored analysis report, a standalone document with its own <style> and inline plots,
# widens style-src and img-src for itself (analysis.views).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        # Media stimuli come from this site (annotation.media_views), or with
        # EVALSTUDY_MEDIA_REDIRECT from the storage's own signed URLs: name its origin here.
        "media-src": ["'self'", *env.list("EVALSTUDY_MEDIA_CSP_ORIGINS", default=[])],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Sign-in throttle (kit.login_throttle): failures per username and client address, and
# per address for any username (0: no per-address limit), within the lockout window.
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_FAILURE_LIMIT_PER_ADDRESS = env.int("LOGIN_FAILURE_LIMIT_PER_ADDRESS", default=50)
LOGIN_LOCKOUT_SECONDS = env.int("LOGIN_LOCKOUT_SECONDS", default=15 * 60)
# Behind a proxy, the META key of the header carrying the client's address (HTTP_X_REAL_IP).
LOGIN_CLIENT_ADDRESS_HEADER = env.str("LOGIN_CLIENT_ADDRESS_HEADER", default="")

# --- Health endpoint (/healthz) -------------------------------------------------------------
HEALTHZ_TIMEOUT = env.float("HEALTHZ_TIMEOUT", default=1.0)
# The workers' answer is cached this long: at most one broadcast per interval.
HEALTHZ_WORKERS_CACHE_SECONDS = env.float("HEALTHZ_WORKERS_CACHE_SECONDS", default=30)
# Off: missing workers are reported but /healthz still answers 200 (web and workers scale and
# restart separately). On: 503 unless every queue below has a consumer.
HEALTHZ_WORKERS_REQUIRED = env.bool("HEALTHZ_WORKERS_REQUIRED", default=False)
HEALTHZ_REQUIRED_QUEUES = env.list("HEALTHZ_REQUIRED_QUEUES",
                                   default=["default", "cpu", "gpu", "llm"])

# --- Celery -------------------------------------------------------------------------------
# Embedded default: kombu's filesystem transport, which needs no server; the web process and
# the worker exchange messages through files in var/broker. The host name means nothing to it,
# but without one kombu logs "No hostname was supplied. Reverting to default 'localhost'" each
# time it reads the URL (twice in every worker's start).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://localhost/")
_BROKER_DIR = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's filesystem transport expects its folders to exist.
    for _folder in ("processed", "control"):
        (_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR),
        "data_folder_out": str(_BROKER_DIR),
        "processed_folder": str(_BROKER_DIR / "processed"),
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # An unacknowledged task (its worker died) goes back to the queue after this many seconds.
    # Tasks are idempotent, so a redelivery while a slow original still runs costs only time.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600),
        # kombu sweeps for such messages every interval x throttle seconds (100 by default).
        "unacked_restore_interval": env.int("CELERY_UNACKED_RESTORE_INTERVAL", default=10),
        "unacked_restore_throttle": env.int("CELERY_UNACKED_RESTORE_THROTTLE", default=10),
    }
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=None) or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_ROUTES = {
    "metrics.gpu.*": {"queue": "gpu"},
    "metrics.llm.*": {"queue": "llm"},  # the proxies' tasks' old names (proxies.task_names.ALIASES)
    "metrics.cpu.*": {"queue": "cpu"},
    "proxies.gpu.*": {"queue": "gpu"},
    "proxies.llm.*": {"queue": "llm"},
    "proxies.cpu.*": {"queue": "cpu"},
    "analysis.*": {"queue": "cpu"},
}
# Encoder model used by the model-backed metrics when a run names none.
EVALSTUDY_ENCODER_PATH = env.str("EVALSTUDY_ENCODER_PATH", default="")
# The most threads torch may use in one worker process for the encoder and BERTScore's matching
# (unset: torch's own default, one per core). On a host whose cores are shared (several worker
# processes, the web), one thread per process avoids torch's threads waiting on each other.
EVALSTUDY_TORCH_THREADS = env.int("EVALSTUDY_TORCH_THREADS", default=None)
# Directories under which a user may choose a model directory (comma-separated): a study's
# encoder_path, a metric run's model_path, a learned proxy's params.model_path, a local judge's
# backend model_path. A chosen directory must resolve (symlinks followed, ".." resolved) to one
# inside these; anything else is refused before a file is read. EVALSTUDY_ENCODER_PATH and the
# embedded all-MiniLM-L6-v2 are always allowed; EVALSTUDY_PROXY_DIR (studies' trained proxies)
# never is (metrics.services.model_dir_check).
EVALSTUDY_MODEL_DIRS = env.list("EVALSTUDY_MODEL_DIRS", default=[str(VAR_DIR / "models")])
# Outputs per metric task: big enough to batch the encoder well, small enough to spread work.
EVALSTUDY_METRIC_BATCH_SIZE = env.int("EVALSTUDY_METRIC_BATCH_SIZE", default=256)
# The default LLM judge: any OpenAI-compatible server (vLLM, llama.cpp, Ollama, a hosted API).
# Its key is read by the workers from the environment variable EVALSTUDY_JUDGE_API_KEY and is
# never stored with a run.
EVALSTUDY_JUDGE_BASE_URL = env.str("EVALSTUDY_JUDGE_BASE_URL", default="")
EVALSTUDY_JUDGE_MODEL = env.str("EVALSTUDY_JUDGE_MODEL", default="")
EVALSTUDY_JUDGE_MODE = env.str("EVALSTUDY_JUDGE_MODE", default="chat")
EVALSTUDY_JUDGE_CONCURRENCY = env.int("EVALSTUDY_JUDGE_CONCURRENCY", default=8)
# Environment variables a run may name as its key (`api_key_env`): nothing else is ever read.
# Each key is tied to the one origin (scheme, host, port) it may be sent to: an entry `NAME`
# to the origin of EVALSTUDY_JUDGE_BASE_URL (to none while that is unset), `NAME=https://host`
# or `NAME=https://host:port` to that origin. A run naming a key with a base_url of another
# origin is refused, when started and again on the worker before the key is read. Binding a
# key to an origin does not open the network to it (EVALSTUDY_JUDGE_ALLOWED_* below).
EVALSTUDY_JUDGE_KEY_ENVS = env.list("EVALSTUDY_JUDGE_KEY_ENVS",
                                    default=["EVALSTUDY_JUDGE_API_KEY"])
# Where judge requests may go (proxies.judges.network): editors choose base_url and the workers
# send the requests from inside the deployment's network. Public addresses only, checked on every
# connection the workers make: loopback, link-local (169.254.169.254: cloud metadata), private
# (RFC 1918, fc00::/7), multicast, unspecified, reserved and other non-public addresses, IPv4-
# mapped forms included, are refused unless listed here as networks (CIDR, comma-separated, e.g.
# "10.0.5.0/24" for a vLLM server inside the network). The origin (scheme, host, port) of
# EVALSTUDY_JUDGE_BASE_URL is trusted as configured, whatever its address. Redirects are never
# followed and HTTP(S)_PROXY variables are ignored for judge requests.
EVALSTUDY_JUDGE_ALLOWED_NETWORKS = env.list("EVALSTUDY_JUDGE_ALLOWED_NETWORKS", default=[])
# Host names judge requests may go to (empty: any name whose addresses pass the rule above).
# Set it in production as well: editors choose base_url.
EVALSTUDY_JUDGE_ALLOWED_HOSTS = env.list("EVALSTUDY_JUDGE_ALLOWED_HOSTS", default=[])
# Units per proxy-judge task.
EVALSTUDY_PROXY_BATCH_SIZE = env.int("EVALSTUDY_PROXY_BATCH_SIZE", default=64)
# Trained learned-proxy artefacts (versioned directories). Workers that train and those that
# score must share it: on several hosts, point it at shared storage.
EVALSTUDY_PROXY_DIR = env.str("EVALSTUDY_PROXY_DIR", default=str(VAR_DIR / "proxies"))
# A running metric/analysis/proxy run whose heartbeat is older than this is marked failed
# (its worker died or lost the message): beat checks every few minutes.
EVALSTUDY_STALE_RUN_MINUTES = env.int("EVALSTUDY_STALE_RUN_MINUTES", default=30)
# Prolific's REST API (prolific app): base URL, a default token (a study may name its own
# environment variable or store one in the admin), timeouts and retries, the largest bonus one
# request may pay (minor units: pence/cents), and how often beat syncs linked open studies.
PROLIFIC_API_URL = env.str("PROLIFIC_API_URL", default="https://api.prolific.com/api/v1/")
PROLIFIC_API_TOKEN = env.str("PROLIFIC_API_TOKEN", default="")
PROLIFIC_TIMEOUT_S = env.float("PROLIFIC_TIMEOUT_S", default=15.0)
PROLIFIC_RETRIES = env.int("PROLIFIC_RETRIES", default=3)
PROLIFIC_MAX_RETRY_WAIT_S = env.float("PROLIFIC_MAX_RETRY_WAIT_S", default=30.0)
PROLIFIC_MAX_BONUS_MINOR = env.int("PROLIFIC_MAX_BONUS_MINOR", default=5000)
PROLIFIC_SYNC_EVERY_S = env.float("PROLIFIC_SYNC_EVERY_S", default=300.0)
CELERY_BEAT_SCHEDULE = {
    "expire-abandoned-leases": {
        "task": "evalstudy.assignments_expire_leases",
        "schedule": 60.0,
    },
    "fail-stale-runs": {
        "task": "evalstudy.runs_fail_stale",
        "schedule": 300.0,
    },
    "prolific-sync": {
        "task": "prolific.sync_open_studies",
        "schedule": PROLIFIC_SYNC_EVERY_S,
    },
    # A `train_proxy --sync` process that died (killed, out of memory) is failed within a
    # minute instead of at the stale-run sweep (proxies.training).
    "fail-dead-trainings": {
        "task": "proxies.cpu.learned_proxies_fail_dead",
        "schedule": 60.0,
    },
    # Agreement over time (annotation.recalibration): alerts recorded even when no one is
    # looking at the monitor.
    "integrity-scan": {
        "task": "annotation.integrity_scan",
        "schedule": 300.0,
    },
    # Adaptive studies (analysis.stopping): the pre-registered stopping rule's next look, the
    # strengths new seats are built from, and the study closed when the rule is met.
    "adaptive-stopping-checks": {
        "task": "analysis.stopping_checks",
        "schedule": 60.0,
    },
}

REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header turns "not signed in" into 401 (session auth
    # alone would answer 403). Raters may also present their personal entry token.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "evalstudy.tokens.ApiTokenAuthentication",
        "annotation.auth.RaterTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "kit.rest.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "kit.rest.PageNumberPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kit.rest.exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "rater": env.str("API_THROTTLE_RATER", default="600/min"),
        "token_obtain": env.str("API_THROTTLE_TOKEN_OBTAIN", default="10/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "evalstudy API",
    "DESCRIPTION": "Studies, items and outputs, raters and judgments, metric and analysis runs, "
                   "exports. Authenticate with `Authorization: Token <key>` (scripts), a "
                   "browser session, or `Authorization: Rater <entry token>` (rater endpoints).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kit.openapi.document_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "StudyStatusEnum": "evalstudy.models.Study.Status",
        "RunStatusEnum": "kit.runs.BackgroundRun.Status",
        "LearnedProxyKindEnum": "proxies.methods.learned_kind_choices",
        "RaterKindEnum": "evalstudy.models.Rater.Kind",
        "CriterionKindEnum": "evalstudy.criteria.kind_choices",
        # A proxy run may be learned; a judge prompt version is an LLM judge's only.
        "ProxyMethodEnum": "proxies.methods.METHOD_CHOICES",
        "JudgeMethodEnum": "proxies.methods.VERSIONED_METHOD_CHOICES",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Django logs "Not Found: <path>" for a bad entry link: the path is the rater's secret.
    "filters": {"mask_secrets": {"()": "kit.logs.MaskSecretPaths"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["mask_secrets"]}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # Libraries that narrate their work at INFO ("Step 5 - Creating layout - Page 3", font
    # subsetting): noise in `analyze` and in worker logs; their warnings still show.
    "loggers": {name: {"level": "WARNING"} for name in (
        "weasyprint", "weasyprint.progress", "fontTools", "fontTools.subset",
        "fontTools.ttLib", "matplotlib", "PIL")},
}

# --- Limits on specs, uploads and designs ---------------------------------------------------
# Every file, request body and study is bounded, so that no upload can take the web process's
# memory or time, or reach Python's recursion limit (evalstudy.spec.limits.SpecLimits; the
# manual, docs/guide/configuration.md, "Limits"). Each refusal names the setting to raise.
# A spec's size, refused before it is parsed: about 2 s and 140 MB to read 5 MiB. Large item
# sets belong in CSV/JSONL item files (import_items, the items endpoint).
EVALSTUDY_SPEC_MAX_BYTES = env.int("EVALSTUDY_SPEC_MAX_BYTES", default=5 * 1024 * 1024)
# Lists and mappings inside each other in a spec or a JSONL line (the outermost is 1; at most
# 100, below Python's recursion limit).
EVALSTUDY_SPEC_MAX_DEPTH = env.int("EVALSTUDY_SPEC_MAX_DEPTH", default=32)
# Values, lists and mappings in a spec, counted while it is read; an alias counts as all it
# repeats (no "billion laughs"). Bounds the parse at about 3 s and 170 MB.
EVALSTUDY_SPEC_MAX_NODES = env.int("EVALSTUDY_SPEC_MAX_NODES", default=400_000)
# Items of a study (spec, item files, API), and items or outputs in one API request; also the
# upper bound of items_per_rater, attention_check_every and attention_fail_limit.
EVALSTUDY_MAX_ITEMS = env.int("EVALSTUDY_MAX_ITEMS", default=100_000)
EVALSTUDY_MAX_SYSTEMS = env.int("EVALSTUDY_MAX_SYSTEMS", default=50)
EVALSTUDY_MAX_CRITERIA = env.int("EVALSTUDY_MAX_CRITERIA", default=50)
EVALSTUDY_MAX_RATINGS_PER_OUTPUT = env.int("EVALSTUDY_MAX_RATINGS_PER_OUTPUT", default=100)
# How long a seat may stay idle before it is handed on (a week).
EVALSTUDY_MAX_LEASE_MINUTES = env.int("EVALSTUDY_MAX_LEASE_MINUTES", default=7 * 24 * 60)
# Slots study_open may build (items x systems, or ordered pairs of systems, x
# ratings_per_output, plus each seat's calibration items and attention checks). It builds them
# in the request: about 28,000 slots a second on PostgreSQL here.
EVALSTUDY_MAX_DESIGN_SLOTS = env.int("EVALSTUDY_MAX_DESIGN_SLOTS", default=500_000)

# --- Media stimuli (evalstudy.media, annotation.media; docs/guide/media.md) ------------------
# Where stored media files live with the default FileSystemStorage. Never served as static
# files: raters get them through signed, expiring URLs (annotation.media_views). Several web
# hosts share it (or use an object storage through STORAGES["default"], e.g. django-storages'
# S3 backend).
MEDIA_ROOT = env.str("MEDIA_ROOT", default=str(VAR_DIR / "media"))
# A directory on the server that imports may name media files in (relative paths, never out
# of it); empty: only uploaded zip archives and allowed URLs.
EVALSTUDY_MEDIA_IMPORT_ROOT = env.str("EVALSTUDY_MEDIA_IMPORT_ROOT", default="")
# Host names https media URLs may be fetched from (exact names, comma-separated); empty: none.
# Their addresses must be public (loopback, private and link-local addresses are refused).
EVALSTUDY_MEDIA_URL_HOSTS = env.list("EVALSTUDY_MEDIA_URL_HOSTS", default=[])
# A CA bundle (PEM) for media hosts with certificates of a private authority; empty: the
# system's trusted authorities.
EVALSTUDY_MEDIA_URL_CA_FILE = env.str("EVALSTUDY_MEDIA_URL_CA_FILE", default="") or None
# Tests only: lets a test fetch media from its own server on 127.0.0.1.
EVALSTUDY_MEDIA_URL_ALLOW_LOOPBACK = False
# One media file: its size, its duration, the time ffprobe/ffmpeg may take to check it and
# the time a download may take.
EVALSTUDY_MEDIA_MAX_BYTES = env.int("EVALSTUDY_MEDIA_MAX_BYTES", default=200 * 1024 * 1024)
EVALSTUDY_MEDIA_MAX_SECONDS = env.float("EVALSTUDY_MEDIA_MAX_SECONDS", default=30 * 60)
EVALSTUDY_MEDIA_PROBE_TIMEOUT = env.float("EVALSTUDY_MEDIA_PROBE_TIMEOUT", default=60)
EVALSTUDY_MEDIA_FETCH_TIMEOUT = env.float("EVALSTUDY_MEDIA_FETCH_TIMEOUT", default=60)
# An uploaded zip archive of media files (admin, API).
EVALSTUDY_MEDIA_ARCHIVE_MAX_BYTES = env.int("EVALSTUDY_MEDIA_ARCHIVE_MAX_BYTES",
                                            default=2 * 1024 * 1024 * 1024)
# How long a rater's signed media URL works (seconds); a page older than this is reloaded.
EVALSTUDY_MEDIA_URL_MAX_AGE = env.int("EVALSTUDY_MEDIA_URL_MAX_AGE", default=60 * 60)
# With an object storage (S3 through django-storages): send raters to the storage's own
# short-lived signed URL instead of streaming the file through the web process. Add the
# storage's origin to EVALSTUDY_MEDIA_CSP_ORIGINS.
EVALSTUDY_MEDIA_REDIRECT = env.bool("EVALSTUDY_MEDIA_REDIRECT", default=False)
# Programs that check media files (Debian's ffmpeg package), run as separate processes.
EVALSTUDY_FFPROBE = env.str("EVALSTUDY_FFPROBE", default="ffprobe")
EVALSTUDY_FFMPEG = env.str("EVALSTUDY_FFMPEG", default="ffmpeg")
