"""The R bridge: R as a separate process (Rscript analysis/stats/r/server.R) over pipes.

What these pin: the request/reply codec (types, NA, factor level order, bit-exact doubles in
both directions), errors and warnings coming back as Python exceptions/warnings with R's
message, R's output captured instead of printed, the worker's life cycle (restart after death,
timeouts and interrupts kill it, a forked child gets its own), one request at a time across
threads, and EVALSTUDY_DISABLE_R.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.stats import models as M
from analysis.stats import rbridge as rb

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not rb.r_available(),
                                reason=f"R unavailable: {rb.r_unavailable_reason()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child that its parent has not reaped yet is a zombie: dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


# --------------------------------------------------------------------------------------------
# the codec


def test_reply_types_round_trip():
    value = rb.r_call(
        "function() list(d = c(1, 2.5, NA, NaN, Inf, -Inf), i = c(3L, NA), b = c(TRUE, NA),"
        " s = c('a', NA, 'é\"\\n'), f = factor(c('lo', 'hi'), levels = c('lo', 'hi')),"
        " m = matrix(c(1, 2, 3, 4, 5, 6), nrow = 2), empty = character(), null = NULL,"
        " df = data.frame(x = 1:2, y = c('u', 'v')), nested = list(list(1L), 'x'))")
    d = value["d"]
    assert d[:2] == [1.0, 2.5] and all(isinstance(x, float) for x in d)  # 1 stays a float
    assert math.isnan(d[2]) and math.isnan(d[3]) and d[4:] == [math.inf, -math.inf]
    assert value["i"] == [3, None] and isinstance(value["i"][0], int)
    assert value["b"] == [True, None]
    assert value["s"] == ["a", None, 'é"\n']
    assert value["f"] == ["lo", "hi"]
    assert value["m"] == [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]  # rows
    assert value["empty"] == [] and value["null"] is None
    assert value["df"] == {"x": [1, 2], "y": ["u", "v"]}
    assert value["nested"] == [[[1]], ["x"]]


def test_arguments_arrive_with_r_types():
    info = rb.r_call(
        "function(...) lapply(list(...), function(a) list(class = class(a), length = length(a),"
        " na = if (is.atomic(a)) sum(is.na(a)) else NA))",
        s="text", i=3, f=0.5, b=True, n=None, v=["a", None, "c"], nums=[1, 2.5, None],
        mixed=["a", 1], obj={"k": [1, 2]}, empty=[])
    assert info["s"]["class"] == ["character"]
    assert info["i"]["class"] == ["integer"] and info["f"]["class"] == ["numeric"]
    assert info["b"]["class"] == ["logical"]
    assert info["n"]["class"] == ["NULL"]
    assert info["v"]["class"] == ["character"] and info["v"]["na"] == [1]
    assert info["nums"]["class"] == ["numeric"] and info["nums"]["na"] == [1]
    assert info["mixed"]["class"] == ["list"]  # no silent coercion to character
    assert info["obj"]["class"] == ["list"] and info["empty"]["length"] == [0]
    with pytest.raises(ValueError, match="non-finite"):
        rb.r_call("function(x) x", math.nan)


def test_factor_level_order_is_exactly_pythons():
    tricky = ["z", "NA", "a,b", 'say "hi"', "line\nbreak", "é", " padded "]
    df = pd.DataFrame({
        "rating": [3, 1, 2, 5, 2, 1, 4],
        "system": ["b", "a", "c", "a", "b", "c", "a"],
        "rater": [10, 2, 3, 2, 10, 3, 2],  # numeric order: 2 < 3 < 10, not "10" < "2"
        "cat": pd.Categorical(["y", "x", "y", "x", "y", "x", "y"], categories=["y", "x", "w"]),
        "text": tricky,
    })
    data, levels = rb.make_factors(df, ["rating", "system", "rater", "cat", "text"],
                                   levels={"system": ["c", "a", "b"]},
                                   reference={"rater": 3}, ordered=["rating"])
    assert levels["rater"] == ["3", "2", "10"] and levels["cat"] == ["y", "x"]
    out = rb.r_call(
        "function(d) lapply(d, function(c) list(levels = levels(c), ordered = is.ordered(c),"
        " values = as.character(c), codes = as.integer(c), na = sum(is.na(c))))",
        rb.RFrame(data, levels=levels, ordered=["rating"]))
    for col, order in levels.items():
        assert out[col]["levels"] == order, col  # the first level is R's reference level
        assert out[col]["values"] == [rb.level_label(v) for v in df[col]], col
        assert out[col]["na"] == [0]
    assert out["rating"]["ordered"] == [True] and out["system"]["ordered"] == [False]
    assert out["text"]["levels"] == sorted(tricky)  # "NA" is a level, not a missing value


def test_na_round_trip():
    df = pd.DataFrame({
        "x": [0.5, np.nan, 2.0, None],
        "g": ["a", None, "b", np.nan],
        "n": pd.array([1, None, 3, 4], dtype="Int64"),
        "k": [1, 2, 3, 4],
    })
    out = rb.r_call("function(d) list(na = lapply(d, function(c) which(is.na(c))),"
                    " class = lapply(d, class), back = d)", df)
    assert out["na"] == {"x": [2, 4], "g": [2, 4], "n": [2], "k": []}
    assert out["class"] == {"x": ["numeric"], "g": ["factor"], "n": ["integer"],
                            "k": ["integer"]}
    back = out["back"]
    assert back["x"][0] == 0.5 and math.isnan(back["x"][1]) and math.isnan(back["x"][3])
    assert back["g"] == ["a", None, "b", None] and back["n"] == [1, None, 3, 4]


def test_doubles_cross_bit_for_bit_in_both_directions():
    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.normal(size=3000), rng.lognormal(0, 30, 1000) * rng.choice([-1, 1], 1000),
        [0.1, 1 / 3, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
         -0.26353154783413407, 1.5283307178035621],  # the last two: R's decimal reader is off
    ])
    hexes = [float(v).hex() for v in values]
    # Python -> R: the frame's doubles equal R's own parse of C99 hex literals, bit for bit.
    out = rb.r_call(
        "function(d, hex) list(same = identical(d$x, as.numeric(hex)), x = d$x,"
        " hex = sprintf('%a', d$x), third = 1 / 3, e = exp(1), tiny = 2^-1074)",
        pd.DataFrame({"x": values}), hexes)
    assert out["same"] == [True]
    # R -> Python: the decoded doubles equal R's own hex printing of them, bit for bit.
    back = np.array(out["x"])
    assert back.tobytes() == values.tobytes()
    assert [float.fromhex(h) for h in out["hex"]] == list(back)
    assert out["third"] == [1 / 3] and out["e"] == [math.e] and out["tiny"] == [5e-324]
    assert math.copysign(1, back[3000 + 1000 + 2]) == -1  # -0.0 keeps its sign


def test_empty_and_wide_frames():
    empty = pd.DataFrame({"x": pd.Series([], dtype=float), "g": pd.Series([], dtype=object)})
    assert rb.r_call("function(d) c(nrow(d), ncol(d))", empty) == [0, 2]
    assert rb.r_call("function(d) dim(d)", pd.DataFrame(index=range(3))) == [3, 0]


# --------------------------------------------------------------------------------------------
# errors, warnings, output


def test_r_error_is_a_python_exception_with_rs_message():
    pid = rb.r_worker_pid()
    with pytest.raises(rb.RError, match="boom: 42") as caught:
        rb.r_call("function(x) { warning('first this'); stop('boom: ', x) }", 42)
    assert caught.value.r_message == "boom: 42"
    assert "simpleError" in caught.value.r_class
    assert caught.value.warnings == ["first this"]
    assert rb.r_worker_pid() == pid  # an R error leaves the worker usable
    with pytest.raises(rb.RError, match="no R function named evalstudy_nope"):
        rb.r_call("evalstudy_nope")


def test_r_warning_is_a_python_warning():
    with pytest.warns(rb.RWarning, match="R: careful, x = 2"):
        assert rb.r_call("function(x) { warning('careful, x = ', x); x + 1L }", 2) == [3]
    reply = rb.r_request("function() { warning('kept'); message('note'); 1 }")
    assert reply.warnings == ["kept"] and reply.messages == ["note"]


def test_only_function_definitions_are_evaluated(tmp_path):
    canary = tmp_path / "canary"
    with pytest.raises(rb.RError, match="one function definition"):
        rb.r_call(f"system('touch {canary}')")
    with pytest.raises(rb.RError, match="one function definition"):
        rb.r_call(f"function() 1; system('touch {canary}')")
    assert not canary.exists()


def test_nothing_reaches_the_terminal(capfd):
    rb.r_shutdown()  # start-up output (package loading) must not leak either
    reply = rb.r_request(
        "function() { print(summary(c(1, 2, 3))); cat('to stdout\\n'); cat('partial');"
        " cat('to stderr\\n', file = stderr()); message('a message'); warning('a warning');"
        " system('echo from a child process'); system('echo child stderr >&2');"
        " invisible(NULL) }")
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""
    assert "Median" in reply.output and "to stdout" in reply.output
    assert "partial" in reply.output and "to stderr" in reply.output
    assert "from a child process" in reply.output  # printed past R's connections
    assert reply.messages == ["a message"] and reply.warnings == ["a warning"]
    # the fits' own R warnings stay on the fit; still nothing printed
    df = pd.DataFrame({"y": [0, 1] * 10, "g": ["a"] * 10 + ["b"] * 10, "s": ["x", "y"] * 10})
    fit = M.fit_binomial_glmm(df, "y ~ s + (1|g)", engine="R")
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""
    assert fit.warnings  # perfect separation / singular fit warnings from R


# --------------------------------------------------------------------------------------------
# the worker's life cycle


def test_worker_restarts_after_being_killed():
    rb.r_call("function() 1")
    pid = rb.r_worker_pid()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rb.r_call("function() Sys.getpid()") != [pid]
    assert rb.r_worker_pid() not in (None, pid)


def test_worker_dying_mid_request_raises_and_recovers():
    with pytest.raises(rb.RProcessError, match="exited"):
        rb.r_call("function() quit(save = 'no', status = 7)")
    assert rb.r_call("function() 2L") == [2]


def test_timeout_kills_a_runaway_request():
    rb.r_call("function() 1")
    pid = rb.r_worker_pid()
    started = time.monotonic()
    with pytest.raises(rb.RTimeoutError, match="time limit"):
        rb.r_call("function() { Sys.sleep(60); 1 }", timeout=1)
    assert time.monotonic() - started < 10
    assert not _alive(pid)
    assert rb.r_call("function() 3L") == [3]


class _Interrupted(BaseException):
    pass


def test_an_interrupt_mid_request_kills_the_worker():
    """Ctrl-C or Celery's soft time limit arrive as an exception in the waiting thread: R is
    killed, not left running the abandoned request."""
    rb.r_call("function() 1")
    pid = rb.r_worker_pid()

    def interrupt(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.alarm(1)
        with pytest.raises(_Interrupted):
            rb.r_call("function() { Sys.sleep(60); 1 }")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert rb.r_call("function() 4L") == [4]


def test_threads_are_served_one_at_a_time():
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def work():
        try:
            spans.append(tuple(rb.r_call(
                "function() { t0 <- as.numeric(Sys.time()); Sys.sleep(0.2);"
                " c(t0, as.numeric(Sys.time())) }")))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(spans) == 4
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # no overlap inside R

    # and a thread waits while another holds the lock
    done = threading.Event()
    with rb.r_lock():
        t = threading.Thread(target=lambda: (rb.r_call("function() 1"), done.set()))
        t.start()
        time.sleep(0.3)
        assert not done.is_set()
    t.join(10)
    assert done.is_set()


def _child_worker_pid(queue) -> None:
    from analysis.stats import rbridge

    queue.put((rbridge.r_call("function() Sys.getpid()")[0], os.getpid()))


def test_a_forked_child_starts_its_own_worker():
    rb.r_call("function() 1")
    parent_pid = rb.r_worker_pid()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_worker_pid, args=(queue,))
    child.start()
    child_r, child_pid = queue.get(timeout=60)
    child.join(30)
    assert child.exitcode == 0 and child_pid != os.getpid()
    assert child_r != parent_pid
    assert rb.r_worker_pid() == parent_pid and rb.r_call("function() 5L") == [5]


def test_missing_rscript_means_unavailable_with_a_reason(monkeypatch, tmp_path):
    rb.r_shutdown()
    monkeypatch.setattr(rb, "_STATE", {"checked": False, "ok": False, "reason": None,
                                       "versions": None})
    monkeypatch.setenv("EVALSTUDY_RSCRIPT", str(tmp_path / "no-such-Rscript"))
    assert not rb.r_available()
    assert "cannot start" in rb.r_unavailable_reason()
    with pytest.raises(rb.RUnavailableError):
        rb.r_call("function() 1")
    fake = tmp_path / "Rscript"  # starts, but is not R: says something and exits
    fake.write_text("#!/bin/sh\necho 'not R'\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setattr(rb, "_STATE", {"checked": False, "ok": False, "reason": None,
                                       "versions": None})
    monkeypatch.setenv("EVALSTUDY_RSCRIPT", str(fake))
    assert not rb.r_available()
    assert "did not start" in rb.r_unavailable_reason()
    fit = M.fit_clm(pd.DataFrame({"rating": [1, 2, 3, 2, 3, 1], "s": ["a", "b"] * 3}),
                    "rating ~ s")
    assert fit.extra["fallback"]


def test_r_available_is_cheap_once_checked():
    assert rb.r_available()
    started = time.perf_counter()
    for _ in range(1000):
        rb.r_available()
    assert time.perf_counter() - started < 0.1  # no process started, nothing sent to R


# --------------------------------------------------------------------------------------------
# EVALSTUDY_DISABLE_R


def test_disable_r_falls_back_to_statsmodels(monkeypatch):
    monkeypatch.setenv("EVALSTUDY_DISABLE_R", "1")
    assert not rb.r_available()
    assert rb.r_unavailable_reason() == "disabled by EVALSTUDY_DISABLE_R"
    with pytest.raises(rb.RUnavailableError):
        rb.r_call("function() 1")
    df = pd.DataFrame({"rating": [1, 2, 3, 2, 3, 4, 3, 4, 5, 1, 2, 5],
                       "system": ["a", "b"] * 6, "rater": ["r1", "r2", "r3"] * 4})
    fit = M.fit_clmm(df, "rating ~ system + (1|rater)")
    assert fit.extra["fallback"] and "statsmodels" in fit.engine


def test_disable_r_in_a_fresh_process_never_starts_r():
    code = (
        "import pandas as pd\n"
        "from analysis.stats import models, rbridge\n"
        "df = pd.DataFrame({'y': [0, 1, 1, 0, 1, 1], 's': ['a', 'b'] * 3,"
        " 'r': ['r1', 'r1', 'r2', 'r2', 'r3', 'r3']})\n"
        "fit = models.fit_binomial_glmm(df, 'y ~ s + (1|r)')\n"
        "print(rbridge.r_available(), rbridge.r_worker_pid(), 'NOT glmer' in fit.engine)\n"
    )
    env = {**os.environ, "EVALSTUDY_DISABLE_R": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "None", "True"]
