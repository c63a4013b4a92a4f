"""Benchmark: the researcher's first hour. The tutorial (docs/tutorial.md, "Your first study in
ten minutes") followed in Chromium against `make run`, timed step by step.

What is measured
----------------
``scripts/run.sh`` (what ``make run`` runs) starts on a fresh, temporary var directory: a fresh
clone's embedded default (SQLite, the filesystem broker, a real Celery worker with the beat
scheduler, the demo loaded); ``DATABASE_URL`` and ``CELERY_BROKER_URL`` are not passed to it,
so nothing of yours is touched. Its start is not timed: the clock starts once ``/healthz``
answers, as a person starts reading the tutorial once ``make run`` has printed its links. Then
Chromium follows the tutorial's twelve steps through ``tests/browser/tutorial_steps.py``, the
same step functions the browser test runs (tests/browser/test_tutorial_browser.py), and each
step's seconds are printed: what the platform makes a person wait for (page loads, the metric
run and the analysis in the worker) plus the steps' own typing and clicking, which a person
does more slowly. The steps check what the tutorial says the pages show, so a wrong page is a
failure, not a fast step.

Reference and target
--------------------
The goal is absolute (issue 29): the whole tutorial, run by this script, in under 3 minutes
after ``make run`` is up. ``target first_hour_tutorial: ratio R (goal <= 1.0)``, R = the
steps' total seconds / 180. The machine's load average is printed before and after: on a
shared machine a high load makes the figures noisy.

Run: ``.venv/bin/python bench/first_hour.py [--url URL] [--smoke]``. ``--url``: time a
``make run`` that is already up at URL (its database must not hold ``my-first-study`` yet).
``--smoke``: the first two steps only, no goal (exits 0 when they hold): what ``make test``
runs so that the bench cannot silently break; the browser test follows every step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from bench.startup import answers, free_port, load_average  # noqa: E402

GOAL_SECONDS = 180.0
SMOKE_STEPS = 2
READY_TIMEOUT = 900.0  # a first make run migrates and makes the demo's recordings
# What scripts/run.sh must not inherit: a fresh clone's make run sets none of them.
NOT_PASSED = ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE", "SITE_URL",
              "EVALSTUDY_VAR_DIR", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID")


@contextlib.contextmanager
def make_run(var_dir: Path) -> Iterator[str]:
    """scripts/run.sh on `var_dir` and a free port, until /healthz answers; yields its URL and
    stops it (web server and worker: run.sh's trap, then the process group) afterwards."""
    port = free_port()
    env = {name: value for name, value in os.environ.items() if name not in NOT_PASSED}
    env.update({"EVALSTUDY_VAR_DIR": str(var_dir), "HOST": "127.0.0.1", "PORT": str(port)})
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    log_path = var_dir / "make-run.log"
    log = log_path.open("w", encoding="utf-8")
    process = subprocess.Popen(["bash", "scripts/run.sh"], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        while not answers(f"{url}/healthz"):
            if process.poll() is not None:
                sys.exit("scripts/run.sh stopped before answering:\n" + _tail(log_path))
            if time.perf_counter() - started > READY_TIMEOUT:
                sys.exit(f"scripts/run.sh did not answer within {READY_TIMEOUT:.0f} s:\n"
                         + _tail(log_path))
            time.sleep(0.2)
        print(f"make run: up in {time.perf_counter() - started:.1f} s (untimed), fresh var "
              f"directory {var_dir}: embedded SQLite, filesystem broker, a real worker")
        yield url
    finally:
        stopping = time.perf_counter()
        with contextlib.suppress(ProcessLookupError):  # the group may be gone
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
            print(f"make run: stopped in {time.perf_counter() - stopping:.1f} s")
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _tail(path: Path, lines: int = 40) -> str:
    return "".join(path.read_text(encoding="utf-8", errors="replace").splitlines(True)[-lines:])


def follow_tutorial(url: str, *, limit: int | None) -> list[tuple[str, float]]:
    """Chromium through the tutorial's steps (the first `limit` of them) at `url`, as the
    browser test follows them; (heading, seconds) per step."""
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS
    from tests.browser.tutorial_steps import HEIGHT, WIDTH, Tutor, follow

    timings: list[tuple[str, float]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        contexts = []

        def window():
            context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            context.set_default_timeout(30_000)  # a loaded machine: the steps, not the limits
            contexts.append(context)
            return context.new_page()

        try:
            tutor = Tutor(page=window(), base_url=url, open_window=window)
            for step, seconds in follow(tutor):
                timings.append((step.heading, seconds))
                print(f"step {step.heading:<52} {seconds:7.2f} s", flush=True)
                if limit is not None and len(timings) >= limit:
                    break
        finally:
            for context in contexts:
                with contextlib.suppress(Exception):  # a rater's window closed by its step
                    context.close()
            browser.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a make run already up (default: start a fresh one)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"the first {SMOKE_STEPS} steps, no goal (for make test)")
    args = parser.parse_args()

    print(f"first-hour bench: Python {platform.python_version()}, {platform.system()} "
          f"{platform.release()} {platform.machine()}")
    print(load_average(), "(before)")
    limit = SMOKE_STEPS if args.smoke else None
    if args.url:
        timings = follow_tutorial(args.url.rstrip("/"), limit=limit)
    else:
        with tempfile.TemporaryDirectory(prefix="first-hour-") as var_dir, \
                make_run(Path(var_dir)) as url:
            timings = follow_tutorial(url, limit=limit)
    total = sum(seconds for _, seconds in timings)
    print(f"{'total':<57} {total:7.2f} s ({len(timings)} steps)")
    print(load_average(), "(after)")
    if args.smoke:
        print(f"smoke: {len(timings)} of the tutorial's steps (the browser test follows all), "
              "no goal")
        return
    print(f"target first_hour_tutorial: ratio {total / GOAL_SECONDS:.3f} (goal <= 1.0)")


if __name__ == "__main__":
    main()
