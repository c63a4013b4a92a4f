#!/usr/bin/env bash
# `make run`: install what is needed, migrate, load the demo, then run the web server and a real
# Celery worker (with the beat scheduler) together. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh requirements.txt
export DJANGO_SETTINGS_MODULE=${DJANGO_SETTINGS_MODULE:-config.settings.local}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
export SITE_URL=${SITE_URL:-http://$HOST:$PORT}
mkdir -p var
PY=.venv/bin/python

echo "[run] database: ${DATABASE_URL:-embedded SQLite (var/evalstudy.sqlite3)}"
echo "[run] broker:   ${CELERY_BROKER_URL:-embedded filesystem broker (var/broker)}"
# One Django start for both setup steps, which runs the system checks once: the web server
# below skips them (the same code, checked a moment ago), so a restart with nothing to migrate
# pays two starts before the server answers (this one and the server's), not four.
$PY manage.py demo_setup --migrate

pids=()
stop() {
  trap - INT TERM EXIT
  echo "[run] stopping web server and worker"
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT

.venv/bin/celery -A config worker --beat -Q default,cpu,gpu,llm --concurrency 2 \
  --loglevel INFO --schedule var/celerybeat-schedule &
pids+=($!)
$PY manage.py runserver "$HOST:$PORT" --noreload --skip-checks &
pids+=($!)
echo "[run] open $SITE_URL/ (Ctrl-C stops the web server and the worker)"
# Stop everything as soon as either process dies.
wait -n "${pids[@]}"
