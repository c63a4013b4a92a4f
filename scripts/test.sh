#!/usr/bin/env bash
# `make test`: install what is needed, make sure PostgreSQL and Redis run, lint, type-check the
# Django-free cores, run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh requirements-dev.txt
bash scripts/services.sh
.venv/bin/ruff check .
# The Django-free cores are type-checked (the list: pyproject.toml [tool.mypy] files).
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
