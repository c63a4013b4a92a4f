#!/usr/bin/env bash
# The last step of `make run` (scripts/run.sh), once installed and set up: the web server and a
# real Celery worker (with the beat scheduler) side by side until Ctrl-C (scripts/supervise.sh).
# What it prints is what a person needs: where to open the site and how to stop; the framework's
# start-up noise is turned off at its source (see each flag).
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=${DJANGO_SETTINGS_MODULE:-config.settings.local}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
export SITE_URL=${SITE_URL:-http://$HOST:$PORT}
VAR=${EVALSTUDY_VAR_DIR:-var}
PY=.venv/bin/python
# Django's own "this is a development server" banner: the line below says what it is.
export DJANGO_RUNSERVER_HIDE_WARNING=true

worker_env=()
if [ "$(id -u)" = "0" ]; then
  echo "[run] running as root (the worker too): fine in a throwaway container; on a shared" \
       "machine, run make run as a normal user"
  # Celery warns at length when its worker runs as root, and refuses only when the worker
  # accepts pickled messages, which this one never does (CELERY_ACCEPT_CONTENT is JSON). The
  # line above says it once; this filter hides that one message of the worker's, no other.
  worker_env=(env "PYTHONWARNINGS=ignore:You're running the worker with superuser privileges:UserWarning")
fi

echo "[run] open $SITE_URL/ (admin: $SITE_URL/admin/); Ctrl-C stops the web server and the worker"
# --quiet: no start banner (its queues and task list are in config/celery.py); the worker still
# logs every task it takes at INFO.
exec bash scripts/supervise.sh \
  "${worker_env[@]}" .venv/bin/celery -A config --quiet worker --beat -Q default,cpu,gpu,llm \
    --concurrency 2 --loglevel INFO --schedule "$VAR/celerybeat-schedule" \
  -- $PY manage.py runserver "$HOST:$PORT" --noreload --skip-checks
