#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis answer on 127.0.0.1 for the test suite: starts them when they
# are installed but stopped, and says how to install them when they are absent.
set -euo pipefail
say() { printf '\033[1m[services]\033[0m %s\n' "$*"; }
PGHOST=${PGHOST:-127.0.0.1}

if ! pg_isready -h "$PGHOST" -q 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    say "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
    for _ in $(seq 30); do pg_isready -h "$PGHOST" -q && break; sleep 1; done
  else
    say "PostgreSQL is not installed. Install it (Debian/Ubuntu: apt-get install postgresql)"
    say "or point DATABASE_URL at a server you have."
    exit 1
  fi
fi
if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
  if command -v redis-server >/dev/null 2>&1; then
    say "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
    for _ in $(seq 30); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 1; done
  else
    say "Redis is not installed. Install it (Debian/Ubuntu: apt-get install redis-server)"
    say "or point CELERY_BROKER_URL at a broker you have."
    exit 1
  fi
fi
say "PostgreSQL and Redis are up"
