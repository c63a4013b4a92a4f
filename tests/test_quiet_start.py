"""`make run` starts quietly and Ctrl-C ends it with exit status 0.

Before, every command of `make run` printed two SQLite warnings (models.W047: the unit
constraints of vote counts and adjudications used nulls_distinct=False, which SQLite skips),
the worker's start printed kombu's "No hostname was supplied" twice (the default broker URL
`filesystem://` had no host) and Celery's paragraph on running as root, and Ctrl-C ended on
`make: *** [Makefile:5: run] Error 130` (run.sh passed on the interrupted `wait`'s status).

The commands run as `make run` runs them: the run settings (config.settings.local) with no
DATABASE_URL or CELERY_BROKER_URL, each in a var directory of the test's own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOISE = ("W047", "No hostname was supplied", "superuser privileges",
         "This is a development server")


def run_environment(var: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    return {**env, "EVALSTUDY_VAR_DIR": str(var), "PYTHONUNBUFFERED": "1", **extra}


def test_the_run_settings_check_quietly(tmp_path):
    """`manage.py check` with the database checks, as migrate and demo_setup run them."""
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default"], cwd=ROOT,
        env=run_environment(tmp_path, DJANGO_SETTINGS_MODULE="config.settings.local"),
        capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "no issues" in output
    assert not [noise for noise in NOISE if noise in output], output


# --- supervise.sh: the part of run.sh that stops the children ----------------------------------
# A child prints its pid, creates `started` (when given), waits for `after` to exist (when
# given), sleeps, and exits with `status`.
_CHILD = """
import os, pathlib, sys, time
seconds, status, started, after = sys.argv[1:]
print("up", os.getpid(), flush=True)
if started:
    pathlib.Path(started).touch()
while after and not pathlib.Path(after).exists():
    time.sleep(0.05)
time.sleep(float(seconds))
sys.exit(int(status))
"""


def _supervise(*children: tuple[float, int, str, str]) -> subprocess.Popen:
    args = []
    for child in children:
        args += ["--", sys.executable, "-c", _CHILD, *map(str, child)]
    return subprocess.Popen(["bash", str(ROOT / "scripts" / "supervise.sh"), *args[1:]],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _children_up(process: subprocess.Popen, count: int) -> list[int]:
    pids, lines = [], []
    while len(pids) < count:
        line = process.stdout.readline()
        if not line:
            # What the pipe held and how supervise.sh ended, to tell a child that never ran
            # from one that was stopped before it said so.
            raise AssertionError(f"supervise.sh ended (status {process.wait(timeout=30)}) "
                                 f"before its children started; it printed {lines!r}")
        lines.append(line)
        if line.startswith("up "):
            pids.append(int(line.split()[1]))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; only supervise.sh could reap it.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_ctrl_c_stops_every_child_and_exits_0():
    process = _supervise((60, 0, "", ""), (60, 0, "", ""))
    try:
        children = _children_up(process, 2)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        output = process.stdout.read()
        assert "[run] stopped" in output
        assert not [pid for pid in children if _alive(pid)], "a child outlived supervise.sh"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_child_that_ends_by_itself_stops_the_others_and_its_status_is_returned(tmp_path):
    started = tmp_path / "started"  # the crash comes once the other child runs
    process = _supervise((60, 0, started, ""), (0, 3, "", started))
    try:
        survivor, _ = _children_up(process, 2)
        assert process.wait(timeout=30) == 3
        assert "exit status 3" in process.stdout.read()
        assert not _alive(survivor)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


# --- serve.sh: the web server and the worker, as make run starts them -----------------------------
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_the_web_server_and_the_worker_start_quietly_and_ctrl_c_exits_0(tmp_path):
    port = _free_port()
    process = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "serve.sh")], cwd=ROOT,
        env=run_environment(tmp_path, PORT=str(port)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "serve.sh ended early:\n" + "".join(lines)
            lines.append(line)
            text = "".join(lines)
            if "Quit the server with" in text and " ready." in text:
                break
        else:
            raise AssertionError("the web server or the worker did not start:\n" + text)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
        lines.append(process.stdout.read())
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = "".join(lines)
    assert f"[run] open http://127.0.0.1:{port}/" in output
    assert not [noise for noise in NOISE if noise in output], output
    assert "[run] stopped" in output


# --- the constraints that replaced nulls_distinct=False still hold ------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("pair", [False, True])
def test_a_second_row_for_the_same_unit_is_still_refused(study, pair):
    from django.db import IntegrityError, transaction
    from django.utils import timezone

    from analysis.models import Adjudication
    from annotation.models import VoteCount

    criterion = study.criteria.get(key="usable")
    first, second = study.items.first().outputs.order_by("pk")[:2]
    unit = {"criterion": criterion, "output": first, "output_b": second if pair else None}
    now = timezone.now()
    VoteCount.objects.create(study=study, value="yes", count=3, imported_at=now, **unit)
    Adjudication.objects.create(study=study, value="yes", adjudicated_at=now, **unit)
    with pytest.raises(IntegrityError), transaction.atomic():
        VoteCount.objects.create(study=study, value="yes", count=1, imported_at=now, **unit)
    with pytest.raises(IntegrityError), transaction.atomic():
        Adjudication.objects.create(study=study, value="no", adjudicated_at=now, **unit)
    VoteCount.objects.create(study=study, value="no", count=1, imported_at=now, **unit)
