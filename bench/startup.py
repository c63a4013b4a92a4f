"""Benchmark: how long Django takes to start (`manage.py check`), and `make run` to come back.

What is measured
----------------
* ``check``: the wall time of ``.venv/bin/python manage.py check`` in a fresh process, with the
  settings ``manage.py`` uses (``config.settings.local``): what every command, page process and
  worker pays before it does anything. Best of ``--repeat`` runs (each run is printed).
* ``restart``: ``bash scripts/run.sh`` (what ``make run`` runs) on a database already migrated
  and holding the demo, from its start until ``GET /healthz`` answers 200, i.e. what a second
  ``make run`` costs before the server answers; then it is stopped (its web server and worker
  with it). The first ``make run`` of that database (migrations, the demo) runs once before,
  untimed. When the setup steps end (the line ``[run] open``) is printed as well.

References, measured in the same run
------------------------------------
* ``heavy preloaded``: the same ``manage.py check`` with the heavy libraries imported first in
  the same interpreter (torch, transformers, sentence_transformers, scipy.stats,
  matplotlib.pyplot, weasyprint): what a command cost when Django's start imported them (it
  imported torch and scipy.stats until issue 28). Its ratio says what share of that cost is
  left.
* ``bare Django``: a project with nothing of ours (Django's own admin, auth, contenttypes,
  sessions, messages and staticfiles, an in-memory SQLite) starting and running its check in a
  fresh process: the floor any Django project pays here.

Targets
-------
``target check_vs_heavy_preloaded: ratio R (goal <= 0.5)``: Django starts in at most half the
time it takes with the heavy libraries loaded; ``target check_vs_bare_django: ratio R (goal <=
4.0)``: our apps (admin, API schema, URL checks over some 30 view modules) add at most three bare
Django starts; ``target restart_vs_check: ratio R (goal <= 2.5)``: a restart costs about two
starts (one for the setup steps, one for the server) and a little work. The machine's load
average is printed before and after: on a shared machine a high load makes the figures noisy.

Run: ``.venv/bin/python bench/startup.py [--repeat 3] [--no-restart] [--smoke]``. The restart
uses ``DATABASE_URL`` (default ``postgres://postgres@127.0.0.1:5432/evalstudy_bench``, created
when missing) and ``CELERY_BROKER_URL`` (default: run.sh's embedded filesystem broker), on a
free local port. ``--smoke``: one ``check`` and one bare Django start on a throwaway SQLite
database, no restart and no goal (exits 0 unless something fails to start): what ``make test``
runs so the bench cannot silently break.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from bench.common import DEFAULT_DATABASE_URL, ensure_database  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() \
    else sys.executable
HEAVY = ("torch", "transformers", "sentence_transformers", "scipy.stats", "matplotlib.pyplot",
         "weasyprint")
CHECK_VS_HEAVY_GOAL = 0.5
CHECK_VS_BARE_GOAL = 4.0
RESTART_VS_CHECK_GOAL = 2.5
READY_TIMEOUT = 600.0  # seconds a restart may take before the bench gives up on it

_CHECK = ("import os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
          "'config.settings.local'); sys.argv = ['manage.py', 'check']; "
          "from django.core.management import execute_from_command_line; "
          "execute_from_command_line(sys.argv)")
_BARE = """
import django
from django.conf import settings
from django.core.management import call_command
settings.configure(
    SECRET_KEY="bench", DEBUG=False, ROOT_URLCONF=__name__, USE_TZ=True,
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth",
                    "django.contrib.contenttypes", "django.contrib.sessions",
                    "django.contrib.messages", "django.contrib.staticfiles"],
    MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
                "django.contrib.messages.middleware.MessageMiddleware"],
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True, "OPTIONS": {"context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages"]}}],
    STATIC_URL="static/")
django.setup()
from django.contrib import admin
from django.urls import path
urlpatterns = [path("admin/", admin.site.urls)]
call_command("check")
"""


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def timed_process(args: list[str], env: dict[str, str]) -> float:
    """Seconds a fresh process takes from start to exit (it must exit 0)."""
    started = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(args[:3])}... failed (exit {done.returncode}):\n"
                 f"{done.stderr[-3000:]}")
    return seconds


def best_of(label: str, repeat: int, args: list[str], env: dict[str, str]) -> float:
    runs = [timed_process(args, env) for _ in range(repeat)]
    print(f"{label:<28} best {min(runs):6.2f} s   runs " + " ".join(f"{s:.2f}" for s in runs))
    return min(runs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own server
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def run_sh(env: dict[str, str]) -> tuple[float, float | None]:
    """Start scripts/run.sh, wait until /healthz answers, stop it; (seconds to answer, seconds
    to the end of its setup steps)."""
    port = free_port()
    env = {**env, "HOST": "127.0.0.1", "PORT": str(port)}
    url = f"http://127.0.0.1:{port}/healthz"
    started = time.perf_counter()
    process = subprocess.Popen(["bash", "scripts/run.sh"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    setup_done: list[float] = []
    log: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            log.append(line)
            if line.startswith("[run] open") and not setup_done:
                setup_done.append(time.perf_counter() - started)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while not answers(url):
            if process.poll() is not None:
                sys.exit("scripts/run.sh stopped before answering:\n" + "".join(log[-40:]))
            if time.perf_counter() - started > READY_TIMEOUT:
                sys.exit(f"scripts/run.sh did not answer within {READY_TIMEOUT:.0f} s")
            time.sleep(0.1)
        ready = time.perf_counter() - started
    finally:
        # run.sh stops its server and worker on TERM (its trap); the whole group, to be sure.
        with contextlib.suppress(ProcessLookupError):  # the group may be gone
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # the group may be gone
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(timeout=5)
    return ready, (setup_done[0] if setup_done else None)


def target(name: str, ratio: float, goal: float) -> None:
    print(f"target {name}: ratio {ratio:.3f} (goal <= {goal})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each start (best kept)")
    parser.add_argument("--restarts", type=int, default=2, help="timed restarts of make run")
    parser.add_argument("--no-restart", action="store_true", help="skip make run's restart")
    parser.add_argument("--smoke", action="store_true",
                        help="one check and one bare Django start, no goal (for make test)")
    args = parser.parse_args()

    print(f"startup bench: Python {platform.python_version()}, {platform.system()} "
          f"{platform.release()} {platform.machine()}")
    print(load_average(), "(before)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local"}
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            smoke_env = {**env, "DATABASE_URL": f"sqlite:///{tmp}/smoke.sqlite3",
                         "CELERY_BROKER_URL": "memory://"}
            best_of("manage.py check", 1, [PYTHON, "-c", _CHECK], smoke_env)
            best_of("bare Django check", 1, [PYTHON, "-c", _BARE], smoke_env)
        print("smoke: tiny run, no restart, no goal")
        print(load_average(), "(after)")
        return

    repeat = max(1, args.repeat)
    check = best_of("manage.py check", repeat, [PYTHON, "-c", _CHECK], env)
    preload = "; ".join(f"import {name}" for name in HEAVY)
    heavy = best_of("check, heavy preloaded", repeat, [PYTHON, "-c", f"{preload}; {_CHECK}"],
                    env)
    bare = best_of("bare Django check", repeat, [PYTHON, "-c", _BARE], env)
    restart = None
    if not args.no_restart:
        env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
        if env["DATABASE_URL"].startswith(("postgres://", "postgresql://")):
            ensure_database(env["DATABASE_URL"])
        print(f"make run: database {env['DATABASE_URL']}, broker "
              f"{env.get('CELERY_BROKER_URL') or 'embedded filesystem broker'}")
        first, _ = run_sh(env)  # migrations and the demo, once
        print(f"{'make run, first':<28} {first:6.2f} s (untimed: migrates, loads the demo)")
        runs = []
        for _ in range(max(1, args.restarts)):
            ready, setup = run_sh(env)
            runs.append(ready)
            steps = f", setup steps done at {setup:.2f} s" if setup is not None else ""
            print(f"{'make run, restart':<28} {ready:6.2f} s to answer{steps}")
        restart = min(runs)
    print(load_average(), "(after)")
    target("check_vs_heavy_preloaded", check / heavy, CHECK_VS_HEAVY_GOAL)
    target("check_vs_bare_django", check / bare, CHECK_VS_BARE_GOAL)
    if restart is not None:
        target("restart_vs_check", restart / check, RESTART_VS_CHECK_GOAL)


if __name__ == "__main__":
    main()
