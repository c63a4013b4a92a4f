#!/usr/bin/env bash
# `make run`: install what is needed, migrate, load the demo, then run the web server and a real
# Celery worker (with the beat scheduler) together (scripts/serve.sh). Ctrl-C stops both and
# exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh requirements.txt
export DJANGO_SETTINGS_MODULE=${DJANGO_SETTINGS_MODULE:-config.settings.local}
export HOST=${HOST:-127.0.0.1}
export PORT=${PORT:-8000}
export SITE_URL=${SITE_URL:-http://$HOST:$PORT}
mkdir -p var
PY=.venv/bin/python

echo "[run] database: ${DATABASE_URL:-embedded SQLite (var/evalstudy.sqlite3)}"
echo "[run] broker:   ${CELERY_BROKER_URL:-embedded filesystem broker (var/broker)}"
# One Django start for both setup steps, which runs the system checks once: the web server
# below skips them (the same code, checked a moment ago), so a restart with nothing to migrate
# pays two starts before the server answers (this one and the server's), not four.
$PY manage.py demo_setup --migrate

exec bash scripts/serve.sh
