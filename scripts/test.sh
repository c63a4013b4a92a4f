#!/usr/bin/env bash
# `make test`: install what is needed, make sure PostgreSQL and Redis run, lint, type-check the
# Django-free cores, build the manual, run the suite in parallel.
#
# One pytest-xdist worker per core (PYTEST_WORKERS=N overrides; PYTEST_WORKERS=0 runs in this
# process), each with its own database, broker keys and var/ (config/settings/test.py);
# `--dist loadgroup` keeps the tests marked @pytest.mark.xdist_group(name) on one worker.
# pytest-randomly shuffles the order and prints the seed ("Using --randomly-seed=N"): rerun an
# order with PYTEST_ARGS="--randomly-seed=N", or keep the file order with
# PYTEST_ARGS="-p no:randomly". --durations=25 lists the slowest tests and fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh requirements-dev.txt
bash scripts/services.sh
.venv/bin/ruff check .
# The Django-free cores and the typed Django apps are type-checked (the list: pyproject.toml
# [tool.mypy] files).
.venv/bin/mypy
# The manual: a broken link, anchor or nav entry fails the build (mkdocs.yml: strict). The site
# goes to var/site, never into the tree.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir var/site
WORKERS=${PYTEST_WORKERS:-$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)}
exec .venv/bin/python -m pytest -n "$WORKERS" --dist loadgroup --durations=25 "$@"
