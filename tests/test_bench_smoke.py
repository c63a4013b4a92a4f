"""Every bench runs in its smoke mode (`--smoke`: tiny sizes, no goal, no timing asserted), in a
process of its own as a person runs it, so that a schema or API change cannot break a bench
unseen (bench/design.py's reference COPY once lacked a NOT NULL column and failed outright for
weeks). A new bench/*.py script is picked up here and must take --smoke. The PostgreSQL
benches use a database of this test worker's own, created and migrated on first use and kept
for the next run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import STARTUP_ENVIRONMENT

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
# Modules of bench/ that are not benches (shared code, the bench server's settings and URLs).
HELPERS = {"__init__.py", "common.py", "bench_settings.py", "bench_urls.py"}
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in HELPERS)
TIMEOUT_S = 900


def bench_database_url() -> str:
    """This worker's bench database on the test server: the configured database's name +
    "_bench" + the xdist worker's name (the benches create and delete their own studies,
    tables and rows: not in pytest-django's database, nor in another worker's)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    worker = f"_{settings.XDIST_WORKER}" if settings.XDIST_WORKER else ""
    return f"postgres://{db['USER']}{password}@{host}:{port}/{db['NAME']}_bench{worker}"


def test_every_bench_is_listed_and_takes_smoke():
    assert {"design.py", "raters.py", "startup.py"} <= set(SCRIPTS)
    for name in SCRIPTS:
        assert "--smoke" in (BENCH / name).read_text(encoding="utf-8"), name


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_the_bench_runs_in_smoke_mode(script):
    if script == "validity.py":
        from bench.validity import HATS

        if not HATS.exists():
            pytest.skip(f"{HATS} not found (the shared data sets)")
    if script == "analysis.py":
        from analysis.stats import rbridge

        if not rbridge.r_available():
            pytest.skip(f"R unavailable: {rbridge.r_unavailable_reason()}")
    env = {**STARTUP_ENVIRONMENT, "DATABASE_URL": bench_database_url(),
           "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # each bench chooses its settings
    done = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    smoke = [line for line in done.stdout.splitlines() if line.startswith("smoke:")]
    assert smoke and smoke[-1].endswith("no goal"), output[-3000:]
    # No goal is claimed in smoke mode: the figures of a tiny run would mean nothing.
    assert not any(line.startswith("target ") for line in done.stdout.splitlines())
