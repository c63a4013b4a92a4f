"""Benchmark: concurrent raters through the submit-and-next loop, under gunicorn, on PostgreSQL.

What is measured
----------------
The app runs under gunicorn (``--workers`` sync workers, one thread each) on 127.0.0.1 with
``bench.bench_settings`` (the test settings with DEBUG off and the bench's URLs). ``--raters``
simulated raters (threads, each with its own cookies, standard library HTTP only) enter a
Latin-square study through its crowd URL and rate ``--judgments-per-rater`` items each. One
sample is one submit-and-next round trip: the POST of the answers plus the GET of the page it
redirects to (the next item, or the end page). Throughput is items judged per second over the
timed phase, which starts when every rater stands on their first target item (entry and the
practice item come before it, untimed) and ends when the last rater is done.

About ``--double-rate`` (default 10 %) of the submissions are sent twice: half as a sequential
retry (the same POST again after the first answer), half as a concurrent double submit (both
POSTs on two connections before either answer is read). Both copies must succeed and store one
judgment. Those samples are reported on their own line, not in the main percentiles.

Why a reference
---------------
Seconds depend on the machine, so the same run first measures a bare endpoint
(``/bench/insert/``, in ``bench.bench_urls``, never in the product's URLs) that does exactly one
``INSERT INTO bench_insert`` per POST: what any request to this app costs at least (WSGI,
middleware, a database connection, one write). The same threads POST to it as many times as
they will submit items, and the report gives the rater loop's throughput and median latency
relative to it. A rater sample is two requests (POST and GET) where a reference sample is one.

Checks
------
After the run the database is compared with what the clients saw: duplicates (judgments with the
same slot and criterion beyond the first; the unique constraint should make this 0), lost
submissions (a POST answered with a redirect whose answers are not stored for that rater and
slot), revisions (a repeated identical answer must not create one), raters that did not reach
the end page, and requests answered with 5xx or failing. The script exits 1 if any is not 0.

Run: ``.venv/bin/python bench/raters.py [--raters 100 --judgments-per-rater 20 --workers 4
--keep]``. DATABASE_URL defaults to ``postgres://postgres@127.0.0.1:5432/evalstudy_bench``; the
database is created if missing and migrated. The bench study (slug ``bench-raters``), its raters
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

from bench.common import setup_django  # noqa: E402

SETTINGS = "bench.bench_settings"
SLUG = "bench-raters"
PID_PREFIX = "BENCH-rater-"
# The answers every simulated rater gives; they match the criteria that make_study creates
# (severity 0 hides the conditional "note" question).
ANSWERS = {"severity": "0", "usable": "yes"}
REQUEST_TIMEOUT_S = 60
READY_TIMEOUT_S = 30

FORM_RE = re.compile(r'<form[^>]*\baction="(/s/[^/"]+/slots/(\d+)/)"')
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
        execute("DROP TABLE IF EXISTS bench_insert")


def create_study(n_raters: int, n_items: int):
    """An open Latin-square study of 2 systems with a seat for every rater (and a few more).

    Each seat holds every item once (n_items target slots) after one calibration item; no
    consent text, no instructions and no attention checks, so raters go straight to rating.
    """
    from evalstudy.models import Assignment, Study
    from tests.factories import make_study

    study = make_study(
        n_items=n_items, n_systems=2, design=Study.Design.LATIN_SQUARE,
        ratings_per_output=math.ceil(n_raters / 2), status=Study.Status.OPEN,
        slug=SLUG, title="Benchmark: raters", seed=20261121,
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
    """gunicorn serving config.wsgi with the bench settings on 127.0.0.1:<free port>."""

    def __init__(self, workers: int, url: str):
        self.workers = workers
        self.port = free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="bench-raters-gunicorn-", suffix=".log")[1])
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "DATABASE_URL": url}
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        command = [
            gunicorn_path(), "config.wsgi:application", "--chdir", str(ROOT),
            "--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers),
            "--threads", "1", "--worker-class", "sync", "--log-level", "warning",
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
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/bench/insert/")  # POST only: any answer means it is up
                conn.getresponse().read()
                conn.close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gunicorn did not answer within {READY_TIMEOUT_S} s:\n"
                           f"{self.log_tail()}")

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
    location: str
    text: str


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
    """One browser: its own cookies, a new connection per request (sync gunicorn closes them)."""

    def __init__(self, port: int, stats: Stats):
        self.port = port
        self.stats = stats
        self.cookies: dict[str, str] = {}

    def send(self, method: str, path: str, form: dict[str, str] | None = None):
        headers = {}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        conn.request(method, path, body=body, headers=headers)
        return conn

    def receive(self, conn: http.client.HTTPConnection) -> Response:
        try:
            answer = conn.getresponse()
            text = answer.read().decode("utf-8", errors="replace")
            for header in answer.msg.get_all("Set-Cookie") or []:
                name, _, rest = header.partition("=")
                value = rest.split(";", 1)[0]
                if value in ("", '""') or "max-age=0" in rest.lower():
                    self.cookies.pop(name.strip(), None)
                else:
                    self.cookies[name.strip()] = value
        finally:
            conn.close()
        self.stats.status(answer.status)
        location = answer.getheader("Location") or ""
        if location:
            parts = urlsplit(location)
            location = parts.path + (f"?{parts.query}" if parts.query else "")
        return Response(answer.status, location, text)

    def request(self, method: str, path: str, form: dict[str, str] | None = None) -> Response:
        return self.receive(self.send(method, path, form))

    def get_following(self, path: str) -> Response:
        for _ in range(5):
            response = self.request("GET", path)
            if response.status not in (301, 302, 303):
                return response
            path = response.location
        raise BenchError(f"too many redirects ending at {path}")


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
        """POST the answers to the current slot (once, or twice as `retry`/`double`), then GET
        the page it leads to; practice feedback is followed on to the next item."""
        action, slot_id, token = self.form()
        answers = {"csrfmiddlewaretoken": token, **ANSWERS}
        if mode == "double":  # both copies on the wire before either answer is read
            first, second = (self.client.send("POST", action, answers) for _ in range(2))
            responses = [self.client.receive(first), self.client.receive(second)]
        else:
            responses = [self.client.request("POST", action, answers)]
            if mode == "retry":
                responses.append(self.client.request("POST", action, answers))
        redirects = [r for r in responses if r.status in (302, 303)]
        if redirects:  # the rater was told it worked: it must be stored
            self.submitted.append((slot_id, mode))
        if len(redirects) != len(responses):
            codes = [r.status for r in responses]
            raise BenchError(f"{self.pid}: slot {slot_id} ({mode}) answered {codes}")
        page = self.client.get_following(redirects[-1].location)
        if "/feedback/" in redirects[-1].location:
            page = self.client.get_following(f"/s/{self.slug}/")
        self.page = page
        shown = FORM_RE.search(page.text)
        if shown is not None and int(shown.group(2)) == slot_id:
            raise BenchError(f"{self.pid}: slot {slot_id} was served again after it was stored")

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
    print(f"gunicorn:   {args.workers} sync workers x 1 thread on 127.0.0.1:{server.port}")
    if idle_check is not None:
        print(f"load:       {idle_check:.0%} of all cores busy in a second before the bench "
              f"started, load average {os.getloadavg()[0]:.2f}"
              + ("  (NOT IDLE: figures will be low and noisy)" if idle_check > 0.1 else ""))
    print(f"parameters: raters={args.raters} judgments_per_rater={args.judgments_per_rater} "
          f"double_rate={args.double_rate}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raters", type=int, default=100, help="concurrent simulated raters")
    parser.add_argument("--judgments-per-rater", type=int, default=20,
                        help="target items each rater judges (the study's item count)")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn sync workers")
    parser.add_argument("--double-rate", type=float, default=0.1,
                        help="share of submissions sent twice (retry or concurrent double)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the bench study, its raters and bench_insert at the end")
    args = parser.parse_args(argv)
    if min(args.raters, args.judgments_per_rater, args.workers) < 1:
        parser.error("--raters, --judgments-per-rater and --workers must be at least 1")
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
    study = create_study(args.raters, args.judgments_per_rater)
    print(f"setup:      study {SLUG}: {args.judgments_per_rater} items x 2 systems, "
          f"{study.assignments.count()} seats ({time.perf_counter() - started:.1f} s, untimed)")

    stats = Stats()
    server = Server(args.workers, url)
    raters = [
        SimulatedRater(pid=f"{PID_PREFIX}{n:05d}", slug=SLUG, client=Client(server.port, stats),
                       rng=random.Random(f"{study.seed}-{n}"), double_rate=args.double_rate)
        for n in range(args.raters)
    ]
    n = args.judgments_per_rater
    phases: dict[str, Phase] = {}
    requests: dict[str, int] = {}

    def phase(name: str, work: Callable[[SimulatedRater], None]) -> None:
        before = stats.requests()
        phases[name] = run_phase(raters, work, stats)
        requests[name] = stats.requests() - before

    try:
        server.start()
        print_environment(args, url, server, idle_check)
        phase("entry", SimulatedRater.enter)
        reset_insert_table()
        # The reference runs before and after the rater loop, so that a change in the
        # machine's load during the run shows as a difference between the two.
        for name, work in (("reference", lambda r: r.reference(n)),
                           ("rating", lambda r: r.rate(n + 5)),
                           ("reference after", lambda r: r.reference(n))):
            if not stats.failures:
                phase(name, work)
    except KeyboardInterrupt:
        server.stop()
        print(f"\ninterrupted: gunicorn stopped (its log: {server.log_path})", file=sys.stderr)
        if not args.keep:
            delete_bench_data(drop_table=True)
        return 130
    finally:
        server.stop()

    checks = check_database(study, raters)
    entry_ms = [ms for r in raters for ms in r.entry_ms]
    single_ms = [ms for r in raters for ms in r.single_ms]
    double_ms = [ms for r in raters for ms in r.double_ms]
    modes = Counter(mode for r in raters for _, mode in r.submitted)
    errors_5xx = sum(count for code, count in stats.statuses.items() if code >= 500)
    not_done = sum(1 for r in raters if not r.done)

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
        reference_ms = rows[0][3] + rows[2][3]
        reference_s = phases["reference"].seconds + phases["reference after"].seconds
        reference_rate = len(reference_ms) / reference_s
        rating_rate = judged / phases["rating"].seconds
        print(f"\nratio to the bare endpoint (before and after together): throughput "
              f"{rating_rate / reference_rate:.3f}x ({rating_rate:.1f} judgments/s vs "
              f"{reference_rate:.1f} inserts/s), p50 latency "
              f"{percentile(single_ms, 50) / percentile(reference_ms, 50):.1f}x "
              f"(sent-once samples only)")
    print(f"\njudgments:  {checks.judgments} stored ({len(ANSWERS)} answers per item)")
    print(f"duplicates: {checks.duplicates}")
    print(f"lost:       {checks.lost} (of {sum(len(r.submitted) for r in raters)} submissions "
          f"the clients saw succeed)")
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
    return 1 if failed else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops gunicorn too, as Ctrl-C does
    sys.exit(main())
