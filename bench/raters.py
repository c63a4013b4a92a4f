"""Benchmark: concurrent raters through the submit-and-next loop, under gunicorn, on PostgreSQL.

What is measured
----------------
The app runs under gunicorn (``--workers`` gthread workers of ``--threads`` threads, HTTP
keep-alive on) on 127.0.0.1 with ``bench.bench_settings`` (the test settings with DEBUG off and
the bench's URLs). Simulated raters (threads, each a browser with its own cookies and one
kept-alive connection, standard library HTTP only) enter a Latin-square study through its
crowd URL and rate its items the way the rating page does with JavaScript on: the answers are
POSTed with ``HX-Request: true`` and the answer is the next item itself (one round trip per
judgment). Only the pages that leave the loop (a practice item's feedback, the end) come as an
``HX-Redirect`` the browser then loads.

1. **Closed loop** (throughput; between the bare endpoint's two runs, the same threads also
   measure a *floor*, ``/bench/floor/``: a request with the loop's guarantees and none of its
   work, i.e. the CSRF check, the session read, and a transaction that locks a row, inserts two
   and updates one, answered with a line of HTML): ``--raters`` raters rate
   ``--judgments-per-rater`` items each, every rater submitting again as soon as the next item
   arrives, so the server is
   saturated. One sample is one submission and whatever it takes to reach the next item (one
   request; two at the end). Throughput is items judged per second from the moment every rater
   stands on their first target item (entry and the practice item come before, untimed) until
   the last one is done.
2. **Realistic raters** (latency): ``--realistic-raters`` (500) more raters enter, then each
   thinks ``--think`` (3 to 8) seconds, uniformly at random, before every submission, for
   ``--realistic-judgments`` (10) items: the load a study with that many raters at work puts on
   the server. The figure is the latency of a submission (p50, p95, p99).

About ``--double-rate`` (default 10 %) of the closed loop's submissions are sent twice: half as
a sequential retry (the same POST again after the first answer), half as a concurrent double
submit (both POSTs on two connections before either answer is read). Both copies must succeed
and store one judgment. Those samples are reported on their own line, not in the percentiles.

Why a reference
---------------
Seconds depend on the machine, so the same run measures a bare endpoint (``/bench/insert/``, in
``bench.bench_urls``, never in the product's URLs) that does exactly one ``INSERT INTO
bench_insert`` per POST: what any request to this app costs at least (HTTP, WSGI, middleware,
one write). The same threads with the same kept-alive connections POST to it as many times as
they will submit items, once before and once after the closed loop, and the report gives the
loop's throughput and median latency relative to it.

Targets
-------
The run ends with ``target rater_loop: ratio R (goal >= 0.5)`` (judgments per second of the
closed loop over the bare endpoint's requests per second, before and after together) and
``target realistic_p99_vs_100ms: ratio R (goal <= 1.0)`` (the realistic raters' p99 latency
over 100 ms), with the machine's load average beside them.

Checks
------
After the run the database is compared with what the clients saw: duplicates (judgments with the
same slot and criterion beyond the first; the unique constraint should make this 0), lost
submissions (a POST answered with a redirect whose answers are not stored for that rater and
slot), revisions (a repeated identical answer must not create one), raters that did not reach
the end page, and requests answered with 5xx or failing. The script exits 1 if any is not 0.

Run: ``.venv/bin/python bench/raters.py [--raters 100 --judgments-per-rater 20 --workers 4
--threads 1 --realistic-raters 500 --think 3 8 --realistic-judgments 10 --keep]``
(``--realistic-raters 0`` skips phase 2). DATABASE_URL defaults to
``postgres://postgres@127.0.0.1:5432/evalstudy_bench``; the database is created if missing and
migrated. The bench study (slug ``bench-raters``), its raters
and the ``bench_insert`` table are deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from bench.common import FLOOR_ROWS, setup_django  # noqa: E402

SETTINGS = "bench.bench_settings"
SLUG = "bench-raters"
PID_PREFIX = "BENCH-rater-"
# The answers every simulated rater gives; they match the criteria that make_study creates
# (severity 0 hides the conditional "note" question).
ANSWERS = {"severity": "0", "usable": "yes"}
REQUEST_TIMEOUT_S = 60
# How long gunicorn's workers may take to import Django and answer, while the master runs:
# seconds on a quiet machine, but a loaded one once took more than the 30 s allowed then, and
# the bench gave up on a server that was coming up (--ready-timeout).
READY_TIMEOUT_S = 300

FORM_RE = re.compile(r'<form[^>]*\baction="(/s/[^/"]+/slots/(\d+)/)"')
# What the rating page's htmx sends with a submission.
HTMX = {"HX-Request": "true"}
# gunicorn keeps an idle connection this long, as a browser and a proxy in front would.
KEEPALIVE_S = 30
CSRF_RE = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
PRACTICE_MARK = "Practice item"
DONE_MARK = "You have finished every item"


class BenchError(Exception):
    """A simulated rater met a page or status it cannot go on from."""


# --- database and Django ------------------------------------------------------------------


def execute(statement: str, params: list | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def reset_insert_table() -> None:
    execute("CREATE TABLE IF NOT EXISTS bench_insert "
            "(id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
    execute("TRUNCATE bench_insert RESTART IDENTITY")
    execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigint PRIMARY KEY, at timestamptz)")
    execute("INSERT INTO bench_floor SELECT g, now() FROM generate_series(0, %s) g "
            "ON CONFLICT DO NOTHING", [FLOOR_ROWS - 1])
    execute("CREATE TABLE IF NOT EXISTS bench_floor_rows "
            "(id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
    execute("TRUNCATE bench_floor_rows RESTART IDENTITY")


def delete_bench_data(*, drop_table: bool) -> None:
    """Delete the bench study, its raters and (optionally) the bench_insert table."""
    from annotation.models import Judgment
    from evalstudy.models import Assignment, Rater, Study

    # Judgments protect their criterion and slots their output, so the study's judgments and
    # seats go first.
    Judgment.objects.filter(slot__assignment__study__slug=SLUG).delete()
    Assignment.objects.filter(study__slug=SLUG).delete()
    Study.objects.filter(slug=SLUG).delete()
    Rater.objects.filter(kind=Rater.Kind.CROWD, external_id__startswith=PID_PREFIX).delete()
    if drop_table:
        execute("DROP TABLE IF EXISTS bench_insert, bench_floor, bench_floor_rows")


def create_study(n_raters: int, n_items: int):
    """An open Latin-square study of 2 systems with a seat for each of `n_raters` raters.

    Each seat holds every item once (n_items target slots) after one calibration item; no
    consent text, no instructions and no attention checks, so raters go straight to rating.
    """
    from evalstudy.models import Assignment, Study
    from tests.factories import make_study

    study = make_study(
        n_items=n_items, n_systems=2, design=Study.Design.LATIN_SQUARE,
        ratings_per_output=math.ceil(n_raters / 2), status=Study.Status.OPEN,
        slug=SLUG, title="Benchmark: raters", seed=20261121,
        crowd_platform="other",  # bench participant ids say they are bench raters
    )
    seats = Assignment.objects.filter(study=study).count()
    if seats < n_raters:
        raise RuntimeError(f"the bench study has {seats} seats for {n_raters} raters")
    return study


# --- the server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gunicorn_path() -> str:
    beside = Path(sys.executable).parent / "gunicorn"
    if beside.exists():
        return str(beside)
    return shutil.which("gunicorn") or str(ROOT / ".venv" / "bin" / "gunicorn")


class Server:
    """gunicorn serving config.wsgi with the bench settings on 127.0.0.1:<free port>, gthread
    workers keeping connections alive as a browser's are."""

    def __init__(self, workers: int, threads: int, url: str,
                 ready_timeout: float = READY_TIMEOUT_S):
        self.ready_timeout = ready_timeout
        self.ready_s: float | None = None
        self.workers = workers
        self.threads = threads
        self.port = free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="bench-raters-gunicorn-", suffix=".log")[1])
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "DATABASE_URL": url}
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        command = [
            gunicorn_path(), "config.wsgi:application", "--chdir", str(ROOT),
            "--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers),
            "--threads", str(self.threads), "--worker-class", "gthread",
            "--keep-alive", str(KEEPALIVE_S), "--worker-connections", "2000",
            "--log-level", "warning",
            "--error-logfile", str(self.log_path),
        ]
        with open(self.log_path, "ab") as log:
            # A session of its own: Ctrl-C reaches this script, which then stops the server.
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_ready()

    def wait_ready(self) -> None:
        """Return once a worker answers an HTTP request (Django imported, the app loaded),
        for as long as the gunicorn master runs, up to `ready_timeout` seconds. A connection
        the master accepts before any worker has booted waits in its backlog: each attempt
        gives it 10 s, then tries again."""
        started = time.monotonic()
        while (waited := time.monotonic() - started) < self.ready_timeout:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode} after "
                                   f"{waited:.0f} s:\n{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/bench/insert/")  # POST only: any answer means it is up
                conn.getresponse().read()
                conn.close()
                self.ready_s = time.monotonic() - started
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"gunicorn is running but no worker answered within "
                           f"{self.ready_timeout:.0f} s (--ready-timeout; load average "
                           f"{os.getloadavg()[0]:.1f}):\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# --- simulated raters ---------------------------------------------------------------------


@dataclass
class Response:
    status: int
    location: str  # a redirect's Location, or htmx's HX-Redirect
    text: str
    htmx_redirect: bool = False


class Stats:
    """Counters shared by every rater thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []  # exceptions and unusable pages, one line each

    def status(self, code: int) -> None:
        with self.lock:
            self.statuses[code] += 1

    def requests(self) -> int:
        with self.lock:
            return sum(self.statuses.values())

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)


class Client:
    """One browser: its own cookies and one kept-alive connection (a second one only for a
    concurrent double submit), reopened when the server has closed it while idle."""

    def __init__(self, port: int, stats: Stats):
        self.port = port
        self.stats = stats
        self.cookies: dict[str, str] = {}
        self.conn: http.client.HTTPConnection | None = None
        self.last_used = 0.0

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)

    def send(self, method: str, path: str, form: dict[str, str] | None = None,
             headers: dict[str, str] | None = None, *, spare: bool = False):
        """Send a request on the kept-alive connection (or, with `spare`, on a new one, for a
        second request in flight at once); returns the connection to `receive` from."""
        headers = dict(headers or {})
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if spare:
            conn = self._connect()
            conn.request(method, path, body=body, headers=headers)
            return conn
        if self.conn is not None and time.monotonic() - self.last_used > KEEPALIVE_S / 2:
            # Idle for long: the server may close it any moment, so start afresh (a POST is
            # never sent twice behind the rater's back).
            self.conn.close()
            self.conn = None
        self.last_used = time.monotonic()
        for attempt in range(2):
            if self.conn is None:
                self.conn = self._connect()
            try:
                self.conn.request(method, path, body=body, headers=headers)
                return self.conn
            except (ConnectionError, http.client.HTTPException):
                # The server closed the idle connection: a browser opens another.
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def receive(self, conn: http.client.HTTPConnection) -> Response:
        try:
            answer = conn.getresponse()
            text = answer.read().decode("utf-8", errors="replace")
        except (ConnectionError, http.client.HTTPException):
            conn.close()
            if conn is self.conn:
                self.conn = None
            raise
        for header in answer.msg.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0]
            if value in ("", '""') or "max-age=0" in rest.lower():
                self.cookies.pop(name.strip(), None)
            else:
                self.cookies[name.strip()] = value
        if conn is not self.conn or answer.will_close:
            conn.close()
            if conn is self.conn:
                self.conn = None
        self.stats.status(answer.status)
        location = answer.getheader("HX-Redirect") or answer.getheader("Location") or ""
        if location:
            parts = urlsplit(location)
            location = parts.path + (f"?{parts.query}" if parts.query else "")
        return Response(answer.status, location, text,
                        htmx_redirect=bool(answer.getheader("HX-Redirect")))

    def request(self, method: str, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> Response:
        conn = self.send(method, path, form, headers)
        try:
            return self.receive(conn)
        except (ConnectionError, http.client.HTTPException):
            if method != "GET":
                raise  # a POST is not sent again behind the rater's back
            return self.receive(self.send(method, path, form, headers))

    def get_following(self, path: str) -> Response:
        for _ in range(5):
            response = self.request("GET", path)
            if response.status not in (301, 302, 303):
                return response
            path = response.location
        raise BenchError(f"too many redirects ending at {path}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (0 < p <= 100) of `samples`; nan when there are none."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class SimulatedRater:
    pid: str
    slug: str
    client: Client
    rng: random.Random
    double_rate: float
    page: Response | None = None
    # (slot id, how it was sent) of every POST the rater saw succeed, in order.
    submitted: list[tuple[int, str]] = field(default_factory=list)
    entry_ms: list[float] = field(default_factory=list)
    single_ms: list[float] = field(default_factory=list)
    double_ms: list[float] = field(default_factory=list)
    reference_ms: list[float] = field(default_factory=list)
    floor_ms: list[float] = field(default_factory=list)
    practice: int = 0
    targets: int = 0
    done: bool = False
    finished_at: float = 0.0

    def form(self) -> tuple[str, int, str]:
        """The current page's form action, slot id and CSRF token."""
        assert self.page is not None
        action = FORM_RE.search(self.page.text)
        token = CSRF_RE.search(self.page.text)
        if self.page.status != 200 or action is None or token is None:
            first = re.sub(r"\s+", " ", self.page.text)[:200]
            raise BenchError(f"{self.pid}: no rating form (status {self.page.status}): {first}")
        return action.group(1), int(action.group(2)), token.group(1)

    def on_practice_item(self) -> bool:
        return self.page is not None and PRACTICE_MARK in self.page.text

    def on_end_page(self) -> bool:
        return self.page is not None and self.page.status == 200 and DONE_MARK in self.page.text

    def enter(self) -> None:
        """Crowd entry, then every practice item (untimed): leaves the rater on a target."""
        start = time.perf_counter()
        self.page = self.client.get_following(f"/c/{self.slug}/?PROLIFIC_PID={self.pid}")
        self.entry_ms.append((time.perf_counter() - start) * 1000)
        while self.on_practice_item():
            self.submit(mode="single")
            self.practice += 1

    def submit(self, mode: str) -> None:
        """POST the answers to the current slot as the page's htmx does (once, or twice as
        `retry`/`double`): the answer is the next item, or an HX-Redirect the browser loads (a
        practice item's feedback, then the next item; the end)."""
        action, slot_id, token = self.form()
        answers = {"csrfmiddlewaretoken": token, **ANSWERS}
        if mode == "double":  # both copies on the wire before either answer is read
            first = self.client.send("POST", action, answers, HTMX)
            second = self.client.send("POST", action, answers, HTMX, spare=True)
            responses = [self.client.receive(first), self.client.receive(second)]
        else:
            responses = [self.client.request("POST", action, answers, HTMX)]
            if mode == "retry":
                responses.append(self.client.request("POST", action, answers, HTMX))
        if all(r.status == 200 for r in responses):  # the rater was told it worked
            self.submitted.append((slot_id, mode))
        else:
            codes = [r.status for r in responses]
            raise BenchError(f"{self.pid}: slot {slot_id} ({mode}) answered {codes}")
        swapped = [r for r in responses if not r.htmx_redirect and FORM_RE.search(r.text)]
        if swapped:
            page = swapped[-1]
        else:
            target = responses[-1].location
            if not responses[-1].htmx_redirect:
                raise BenchError(f"{self.pid}: slot {slot_id} answered with neither an item "
                                 "nor a redirect")
            page = self.client.get_following(target)
            if "/feedback/" in target:
                page = self.client.get_following(f"/s/{self.slug}/")
        self.page = page
        shown = FORM_RE.search(page.text)
        if shown is not None and int(shown.group(2)) == slot_id:
            raise BenchError(f"{self.pid}: slot {slot_id} was served again after it was stored")

    def rate_thinking(self, judgments: int, think: tuple[float, float]) -> None:
        """A realistic rater: before each of `judgments` submissions, think a while (uniform in
        `think` seconds); each submission's latency is one sample."""
        for _ in range(judgments):
            if self.on_end_page():
                break
            time.sleep(self.rng.uniform(*think))
            start = time.perf_counter()
            self.submit("single")
            self.single_ms.append((time.perf_counter() - start) * 1000)
            self.targets += 1
        self.done = True
        self.finished_at = time.perf_counter()
        self.client.close()

    def rate(self, limit: int) -> None:
        """The timed loop: submit-and-next until the end page (at most `limit` submissions)."""
        while not self.on_end_page():
            if self.targets >= limit:
                raise BenchError(f"{self.pid}: no end page after {limit} submissions")
            mode = "single"
            if self.rng.random() < self.double_rate:
                mode = self.rng.choice(("retry", "double"))
            start = time.perf_counter()
            self.submit(mode)
            elapsed = (time.perf_counter() - start) * 1000
            (self.single_ms if mode == "single" else self.double_ms).append(elapsed)
            self.targets += 1
        self.done = True
        self.finished_at = time.perf_counter()

    def floor(self, count: int) -> None:
        """`count` POSTs to the floor endpoint (CSRF, session, the loop's five statements,
        no loop), with the current page's CSRF token, one sample each."""
        token = CSRF_RE.search(self.page.text if self.page else "")
        form = {"csrfmiddlewaretoken": token.group(1) if token else ""}
        for _ in range(count):
            start = time.perf_counter()
            response = self.client.request("POST", "/bench/floor/", form)
            self.floor_ms.append((time.perf_counter() - start) * 1000)
            if response.status != 200:
                raise BenchError(f"{self.pid}: /bench/floor/ answered {response.status}")
        self.finished_at = time.perf_counter()

    def reference(self, count: int) -> None:
        """`count` POSTs to the bare one-INSERT endpoint, one sample each."""
        for _ in range(count):
            start = time.perf_counter()
            response = self.client.request("POST", "/bench/insert/")
            self.reference_ms.append((time.perf_counter() - start) * 1000)
            if response.status != 200:
                raise BenchError(f"{self.pid}: /bench/insert/ answered {response.status}")
        self.finished_at = time.perf_counter()


def machine_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class Phase:
    seconds: float
    client_cpu_s: float  # CPU time of this process (the simulated raters) during the phase
    machine_busy: float | None  # share of all cores busy during the phase (any process)


def run_phase(raters: list[SimulatedRater], work: Callable[[SimulatedRater], None],
              stats: Stats) -> Phase:
    """Run `work` for every rater in its own thread, all released at once; measures from the
    release to the last rater's end (failed raters included)."""
    barrier = threading.Barrier(len(raters) + 1)

    def body(rater: SimulatedRater) -> None:
        barrier.wait()
        try:
            work(rater)
        except (BenchError, OSError, http.client.HTTPException) as error:
            stats.fail(f"{type(error).__name__}: {error}")
        finally:
            rater.finished_at = time.perf_counter()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in raters]
    for thread in threads:
        thread.start()
    barrier.wait()
    start, cpu_start, ticks_start = time.perf_counter(), time.process_time(), machine_cpu_ticks()
    for thread in threads:
        while thread.is_alive():  # join in slices so that Ctrl-C gets through
            thread.join(0.5)
    cpu, ticks = time.process_time() - cpu_start, machine_cpu_ticks()
    busy = None
    if ticks_start is not None and ticks is not None and ticks[1] > ticks_start[1]:
        busy = (ticks[0] - ticks_start[0]) / (ticks[1] - ticks_start[1])
    return Phase(max(r.finished_at for r in raters) - start, cpu, busy)


# --- checks against the database ----------------------------------------------------------


@dataclass
class Checks:
    judgments: int
    duplicates: int
    lost: int
    unacknowledged: int  # completed target slots whose POST no client saw succeed
    revisions: int
    reference_rows: int


def check_database(study, raters: list[SimulatedRater]) -> Checks:
    from annotation.models import Judgment, JudgmentRevision
    from evalstudy.models import Assignment, AssignmentSlot

    judgments = Judgment.objects.filter(slot__assignment__study=study)
    duplicates = execute(
        f"SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM "
        f'"{Judgment._meta.db_table}" j JOIN "{AssignmentSlot._meta.db_table}" s '
        f'ON s.id = j.slot_id JOIN "{Assignment._meta.db_table}" a ON a.id = s.assignment_id '
        f"WHERE a.study_id = %s GROUP BY j.slot_id, j.criterion_id HAVING COUNT(*) > 1) d",
        [study.pk],
    )[0][0]
    stored: dict[tuple[str, int], dict[str, str]] = {}
    for pid, slot_id, key, value in judgments.values_list(
        "slot__assignment__rater__external_id", "slot_id", "criterion__key", "value"
    ):
        stored.setdefault((pid, slot_id), {})[key] = value
    believed = {(r.pid, slot_id) for r in raters for slot_id, _ in r.submitted}
    lost = sum(1 for key in believed if stored.get(key) != ANSWERS)
    completed = set(
        AssignmentSlot.objects.filter(assignment__study=study, completed_at__isnull=False)
        .values_list("assignment__rater__external_id", "id")
    )
    return Checks(
        judgments=judgments.count(), duplicates=int(duplicates), lost=lost,
        unacknowledged=len(completed - believed),
        revisions=JudgmentRevision.objects.filter(judgment__slot__assignment__study=study)
        .count(),
        reference_rows=execute("SELECT COUNT(*) FROM bench_insert")[0][0],
    )


# --- report -------------------------------------------------------------------------------


def latency(samples: list[float]) -> str:
    return (f"p50 {percentile(samples, 50):7.1f}  p95 {percentile(samples, 95):7.1f}  "
            f"p99 {percentile(samples, 99):7.1f} ms")


def busy_share(seconds: float = 1.0) -> float | None:
    """The share of all cores busy (any process) over the next `seconds`."""
    before = machine_cpu_ticks()
    time.sleep(seconds)
    after = machine_cpu_ticks()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def print_environment(args: argparse.Namespace, url: str, server: Server,
                      idle_check: float | None) -> None:
    from django.db import connection

    (version,) = execute("SHOW server_version")[0]
    parts = urlsplit(url)
    print(f"machine:    {platform.platform()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"PostgreSQL: {version} at {parts.hostname}:{parts.port or 5432}"
          f"/{connection.settings_dict['NAME']} (CONN_MAX_AGE "
          f"{connection.settings_dict['CONN_MAX_AGE']})")
    print(f"gunicorn:   {args.workers} gthread workers x {args.threads} threads, keep-alive "
          f"{KEEPALIVE_S} s, on 127.0.0.1:{server.port}, first answer after "
          f"{server.ready_s or 0:.1f} s")
    if idle_check is not None:
        print(f"load:       {idle_check:.0%} of all cores busy in a second before the bench "
              f"started, load average {os.getloadavg()[0]:.2f}"
              + ("  (NOT IDLE: figures will be low and noisy)" if idle_check > 0.1 else ""))
    print(f"parameters: raters={args.raters} judgments_per_rater={args.judgments_per_rater} "
          f"double_rate={args.double_rate}; realistic_raters={args.realistic_raters} "
          f"think={args.think[0]:g}-{args.think[1]:g} s "
          f"realistic_judgments={args.realistic_judgments}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raters", type=int, default=100, help="concurrent simulated raters")
    parser.add_argument("--judgments-per-rater", type=int, default=20,
                        help="target items each rater judges (the study's item count)")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn gthread workers")
    parser.add_argument("--threads", type=int, default=1, help="threads per gunicorn worker")
    parser.add_argument("--realistic-raters", type=int, default=500,
                        help="raters of the latency phase (0: skip it)")
    parser.add_argument("--think", type=float, nargs=2, default=(3.0, 8.0),
                        metavar=("MIN", "MAX"), help="their think time before each item, s")
    parser.add_argument("--realistic-judgments", type=int, default=10,
                        help="items each of them judges")
    parser.add_argument("--double-rate", type=float, default=0.1,
                        help="share of submissions sent twice (retry or concurrent double)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the bench study, its raters and bench_insert at the end")
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S,
                        help="seconds gunicorn's workers may take to answer a first request "
                             f"({READY_TIMEOUT_S})")
    parser.add_argument("--smoke", action="store_true",
                        help="4 raters x 3 items, 2 workers, no realistic phase, no goal "
                             "(for make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.raters, args.judgments_per_rater, args.workers = 4, 3, 2
        args.realistic_raters, args.double_rate = 0, 0.5
    if min(args.raters, args.judgments_per_rater, args.workers, args.threads) < 1:
        parser.error("--raters, --judgments-per-rater, --workers and --threads must be at "
                     "least 1")
    if args.realistic_raters < 0 or not 0 <= args.think[0] <= args.think[1]:
        parser.error("--realistic-raters must be at least 0 and --think MIN <= MAX")
    args.realistic_judgments = min(args.realistic_judgments, args.judgments_per_rater)
    if not 0 <= args.double_rate <= 1:
        parser.error("--double-rate must be between 0 and 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    idle_check = busy_share()  # before this script loads anything
    url = setup_django("bench/raters.py", settings=SETTINGS)
    delete_bench_data(drop_table=False)
    reset_insert_table()
    started = time.perf_counter()
    study = create_study(args.raters + args.realistic_raters, args.judgments_per_rater)
    print(f"setup:      study {SLUG}: {args.judgments_per_rater} items x 2 systems, "
          f"{study.assignments.count()} seats ({time.perf_counter() - started:.1f} s, untimed)")

    stats = Stats()
    server = Server(args.workers, args.threads, url, args.ready_timeout)

    def simulated(n: int, double_rate: float) -> SimulatedRater:
        return SimulatedRater(pid=f"{PID_PREFIX}{n:05d}", slug=SLUG,
                              client=Client(server.port, stats),
                              rng=random.Random(f"{study.seed}-{n}"), double_rate=double_rate)

    raters = [simulated(n, args.double_rate) for n in range(args.raters)]
    realistic = [simulated(args.raters + n, 0.0) for n in range(args.realistic_raters)]
    n = args.judgments_per_rater
    phases: dict[str, Phase] = {}
    requests: dict[str, int] = {}

    def phase(name: str, work: Callable[[SimulatedRater], None],
              group: list[SimulatedRater] = raters) -> None:
        before = stats.requests()
        phases[name] = run_phase(group, work, stats)
        requests[name] = stats.requests() - before

    try:
        server.start()
        print_environment(args, url, server, idle_check)
        phase("entry", SimulatedRater.enter)
        reset_insert_table()
        # The reference runs before and after the rater loop, so that a change in the
        # machine's load during the run shows as a difference between the two.
        for name, work in (("reference", lambda r: r.reference(n)),
                           ("floor", lambda r: r.floor(n)),
                           ("rating", lambda r: r.rate(n + 5)),
                           ("reference after", lambda r: r.reference(n))):
            if not stats.failures:
                phase(name, work)
        for rater in raters:
            rater.client.close()
        if realistic and not stats.failures:
            phase("realistic entry", SimulatedRater.enter, realistic)
            load_before = os.getloadavg()[0]
            phase("realistic", lambda r: r.rate_thinking(args.realistic_judgments,
                                                         tuple(args.think)), realistic)
            load_during = (load_before, os.getloadavg()[0])
    except KeyboardInterrupt:
        server.stop()
        print(f"\ninterrupted: gunicorn stopped (its log: {server.log_path})", file=sys.stderr)
        if not args.keep:
            delete_bench_data(drop_table=True)
        return 130
    finally:
        server.stop()

    checks = check_database(study, raters + realistic)
    entry_ms = [ms for r in raters for ms in r.entry_ms]
    single_ms = [ms for r in raters for ms in r.single_ms]
    double_ms = [ms for r in raters for ms in r.double_ms]
    modes = Counter(mode for r in raters for _, mode in r.submitted)
    errors_5xx = sum(count for code, count in stats.statuses.items() if code >= 500)
    not_done = sum(1 for r in raters + realistic if not r.done)
    targets: list[str] = []

    if "entry" in phases:
        print(f"\nentry:      {len(raters)} raters entered and judged "
              f"{sum(r.practice for r in raters)} practice items in "
              f"{phases['entry'].seconds:.1f} s (untimed); entry {latency(entry_ms)}")
    if stats.failures or "reference after" not in phases:
        print("\nFAILED before the timed phases ended:")
    else:
        judged = sum(r.targets for r in raters)
        rows = [  # label, phase name, count, latency samples
            ("bare INSERT, before", "reference", n * len(raters),
             [ms for r in raters for ms in r.reference_ms[:n]]),
            ("guarantees' floor", "floor", n * len(raters),
             [ms for r in raters for ms in r.floor_ms]),
            ("submit-and-next", "rating", judged, single_ms),
            ("bare INSERT, after", "reference after", n * len(raters),
             [ms for r in raters for ms in r.reference_ms[n:]]),
        ]
        print(f"\n{'':<22} {'count':>6} {'seconds':>8} {'per s':>7} {'HTTP/s':>7} "
              f"{'client CPU':>10} {'all cores':>9}   latency")
        for label, name, count, samples in rows:
            current = phases[name]
            busy = f"{current.machine_busy:.0%}" if current.machine_busy is not None else "?"
            print(f"{label:<22} {count:>6} {current.seconds:>8.2f} "
                  f"{count / current.seconds:>7.1f} {requests[name] / current.seconds:>7.1f} "
                  f"{current.client_cpu_s:>8.1f} s {busy:>9}   {latency(samples)}")
        print(f"{'  of which sent twice':<22} {len(double_ms):>6} {'':>44}{latency(double_ms)}")
        reference_ms = rows[0][3] + rows[3][3]
        reference_s = phases["reference"].seconds + phases["reference after"].seconds
        reference_rate = len(reference_ms) / reference_s
        rating_rate = judged / phases["rating"].seconds
        print(f"\nratio to the bare endpoint (before and after together): throughput "
              f"{rating_rate / reference_rate:.3f}x ({rating_rate:.1f} judgments/s vs "
              f"{reference_rate:.1f} inserts/s), p50 latency "
              f"{percentile(single_ms, 50) / percentile(reference_ms, 50):.1f}x "
              f"(sent-once samples only)")
        floor_rate = n * len(raters) / phases["floor"].seconds
        print(f"floor:      a request with the loop's guarantees and none of its work (CSRF, "
              f"session, lock, two inserts, an update, a line of HTML): "
              f"{floor_rate / reference_rate:.3f}x the bare endpoint; the loop runs at "
              f"{rating_rate / floor_rate:.3f}x that floor")
        targets.append(f"target rater_loop: ratio {rating_rate / reference_rate:.3f} "
                       "(goal >= 0.5)")
        if "realistic" in phases:
            thinking_ms = [ms for r in realistic for ms in r.single_ms]
            current = phases["realistic"]
            judged = sum(r.targets for r in realistic)
            print(f"\nrealistic:  {len(realistic)} raters thinking {args.think[0]:g}-"
                  f"{args.think[1]:g} s per item: {judged} judgments in {current.seconds:.1f} s "
                  f"({judged / current.seconds:.1f}/s), {latency(thinking_ms)}; load average "
                  f"{load_during[0]:.2f} before, {load_during[1]:.2f} at the end")
            targets.append(f"target realistic_p99_vs_100ms: ratio "
                           f"{percentile(thinking_ms, 99) / 100:.3f} (goal <= 1.0)")
    print(f"\njudgments:  {checks.judgments} stored ({len(ANSWERS)} answers per item)")
    if realistic:
        print(f"            (realistic raters: {sum(len(r.submitted) for r in realistic)} "
              "submissions)")
    print(f"duplicates: {checks.duplicates}")
    print(f"lost:       {checks.lost} (of "
          f"{sum(len(r.submitted) for r in raters + realistic)} submissions the clients saw "
          "succeed)")
    inserts = sum(len(r.reference_ms) for r in raters)
    print(f"unacknowledged: {checks.unacknowledged}   revisions: {checks.revisions}   "
          f"bench_insert rows: {checks.reference_rows} (of {inserts} answered)")
    print(f"retries:    {modes['retry']} sequential, {modes['double']} concurrent double "
          "submits (both copies must succeed)")
    print(f"statuses:   {dict(sorted(stats.statuses.items()))}")
    print(f"errors:     {errors_5xx} 5xx, {len(stats.failures)} failed raters, "
          f"{not_done} raters without the end page")
    for line in stats.failures[:10]:
        print(f"  {line}")
    failed = bool(checks.duplicates or checks.lost or checks.unacknowledged or checks.revisions
                  or errors_5xx or stats.failures or not_done or checks.reference_rows != inserts)
    if errors_5xx or stats.failures:
        print(f"\ngunicorn log ({server.log_path}):\n{server.log_tail()}")
    elif not args.keep:
        server.log_path.unlink(missing_ok=True)

    if args.keep:
        print(f"\nkept study {SLUG} (id {study.pk}), its raters and table bench_insert")
    else:
        delete_bench_data(drop_table=True)
    print("\nFAILED" if failed else "\nOK")
    load = os.getloadavg()
    print(f"machine load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on "
          f"{os.cpu_count()} CPUs")
    if args.smoke:
        print("smoke: tiny sizes, no goal")
        return 1 if failed else 0
    for line in targets:
        print(line)
    return 1 if failed else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops gunicorn too, as Ctrl-C does
    sys.exit(main())
