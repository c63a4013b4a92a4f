#!/usr/bin/env bash
# `make test`: install what is needed, make sure PostgreSQL and Redis run, lint, run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh requirements-dev.txt
bash scripts/services.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
