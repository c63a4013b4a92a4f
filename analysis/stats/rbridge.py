"""R for the statistical models, run as a separate process (``Rscript``) over pipes.

Why a separate process
----------------------
R and the R packages used here (ordinal, lme4) are GPL; evalstudy is Apache-2.0 and imports no
GPL code into its own process (so no Python package that embeds R, themselves GPL). R runs as an
ordinary program, ``Rscript analysis/stats/r/server.R``, and exchanges data with Python through
pipes and files. A side benefit: R's crashes, memory and console stay out of the Python process.

The worker
----------
One persistent R worker per Python process, started lazily (the first :func:`r_available` or
:func:`r_call` pays R's start-up with ``ordinal`` and ``lme4``, about 1-2 s), restarted on the
next call if it has died, stopped at exit (and when Python goes away without exiting cleanly,
e.g. ``os._exit`` in a Celery child, the worker sees EOF on its stdin, removes its private
directory and ends). Requests run one at a time under a process-wide lock (:func:`r_lock`). A
request that runs past its time limit (``timeout=``, default ``EVALSTUDY_R_TIMEOUT`` seconds,
3600) or is interrupted (Ctrl-C, Celery's soft time limit) kills the worker and raises; the next
call starts a fresh one. After ``fork()`` the child forgets its parent's worker (without
touching it) and starts its own. ``EVALSTUDY_RSCRIPT`` names the Rscript program (default:
``Rscript`` on ``PATH``); ``EVALSTUDY_DISABLE_R=1`` makes :func:`r_available` answer ``False``,
so that the models use their statsmodels fallbacks (checked on every call, cheaply).

Nothing here imports Django, and nothing raises at import time when R is missing.

Protocol (one request at a time)
--------------------------------
* Start-up: the worker writes one reply with ``"id": 0`` whose value is
  ``{"R": "4.2.2", "pid": [...], "packages": {"ordinal": ["2022.11-16"], ...},
  "loaded": {"ordinal": [true], "lme4": [true]}}``.
* Request: one line of JSON (ASCII, ``\\u`` escapes) on the worker's stdin::

      {"id": 7, "fn": "evalstudy_glmer", "args": ["y ~ system + (1|rater)",
       {"__frame__": {...}}], "kwargs": {}}

  ``fn`` names a function defined by an ``.R`` file in ``analysis/stats/r/`` (nothing else can
  be called); ``"code": "function(...) ..."`` instead of ``fn`` is R source of exactly one
  function definition (refused otherwise, before anything is evaluated), built once and cached
  by its text: for tests and benchmarks, never for user input. Arguments: strings, numbers,
  booleans, null (R ``NULL``), arrays (an array of scalars of one kind becomes an R vector, with
  null as ``NA``; any other array a list), objects (named lists) and data frames (below).
  Non-finite floats travel only inside data frames.
* Reply: one line of JSON on the worker's stdout::

      {"id": 7, "ok": true, "value": ..., "error": null, "warnings": ["..."],
       "messages": ["..."], "output": "what R printed", "elapsed": 0.42}

  or ``"ok": false`` with ``"error": {"message": [...], "call": [...], "class": [...]}``.
  Values: R vectors are always JSON arrays (length 1 included; names of atomic vectors are
  dropped: return them as a vector of their own); doubles carry 17 significant digits (they read
  back bit for bit) and always a decimal point or exponent, so they decode as Python floats;
  ``NA``/``NaN`` of a double -> ``NaN``, ``Inf`` -> ``Infinity`` (tokens Python's ``json`` reads);
  ``NA`` of an integer/logical/character -> ``null``; factors -> their labels; a matrix -> a list
  of rows; a data.frame -> an object of columns; a named list -> an object. R's warnings that the
  function did not handle itself are re-emitted in Python as :class:`RWarning`; an R error
  raises :class:`RError` with R's message. Everything R prints is captured (``output``), never
  written to the terminal; the worker's own stderr goes to a log file in its private directory.

Data frames
-----------
A :class:`RFrame` (or a plain ``DataFrame``) argument is written as a binary file into the
worker's private temporary directory (mode 0700, removed at exit; each file is deleted after its
request) and travels as ``{"__frame__": {"path", "nrow", "columns": [{"name", "type", "levels",
"ordered"}]}}``. The file holds the columns one after the other, each ``nrow`` little-endian
values; R reads them with ``readBin`` (no text is written or parsed: a 100,000-row frame costs
milliseconds, where CSV text cost about 100 ms in Python and 20 ms in R):

* ``factor``: 32-bit 1-based codes of each value in the request's ``levels``, which are exactly
  the level order :func:`make_factors` / :func:`factor_levels` decide; R rebuilds the factor
  from codes and levels (``ordered`` -> an ordered factor), so level text never passes through
  the file and the order cannot change. Columns named in ``levels``/``ordered``, Categorical,
  object, string and bool columns are factors.
* ``double``: IEEE 754 64-bit values, so every double (``-0.0``, subnormals, ``Inf``) arrives
  bit for bit; R's decimal reader (``read.csv``, ``scan``, ``as.numeric``) is not correctly
  rounded: with ``repr`` text about 1 value in 5,000 came back one ulp off.
* ``integer``: 32-bit; integer columns without missing values (and nullable ``Int64`` with
  them) within R's 32-bit range; larger integers are sent as doubles (exact up to 2**53).
* Missing values (``NaN``, ``None``, ``pd.NA``) are written as R's own ``NA`` (``INT_MIN``;
  the double NaN with payload 1954), so R reads ``NA``, not ``NaN``.

Factor levels
-------------
:func:`factor_levels` decides the level order of a categorical column: an explicit ``levels``
list first, else a pandas ``Categorical``'s category order, else the sorted distinct values
(numerically when all values are numbers, so rater ids 2 < 10). Unobserved levels are dropped
(an empty level would give an all-zero design column). ``reference`` moves one level to the
front. The first level is the reference level of R's treatment contrasts, so e.g. ``system``
coefficients are "level minus first level".
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.metadata
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

__all__ = [
    "RError",
    "RFrame",
    "RProcessError",
    "RReply",
    "RTimeoutError",
    "RUnavailableError",
    "RWarning",
    "factor_levels",
    "level_label",
    "make_factors",
    "r_available",
    "r_call",
    "r_function",
    "r_lock",
    "r_request",
    "r_shutdown",
    "r_unavailable_reason",
    "r_versions",
    "r_worker_pid",
]

#: The R sources: server.R (the worker) and the functions requests may name.
R_DIR = Path(__file__).resolve().parent / "r"
#: R packages that must load for :func:`r_available` to answer True.
REQUIRED_R_PACKAGES = ("ordinal", "lme4")
#: Seconds R may take to start and load its packages.
START_TIMEOUT = 120.0


def _default_timeout() -> float:
    try:
        return float(os.environ.get("EVALSTUDY_R_TIMEOUT", "3600"))
    except ValueError:
        return 3600.0


class RUnavailableError(RuntimeError):
    """R, Rscript or a required R package cannot be used in this process."""


class RError(RuntimeError):
    """R signalled an error while running a request (the R worker stays usable).

    ``r_message`` is R's message, ``r_call`` the call it came from (shortened), ``r_class`` the
    condition's classes, ``warnings``/``output`` what R said before failing.
    """

    def __init__(self, message: str, *, r_call: str | None = None,
                 r_class: Sequence[str] = (), warnings: Sequence[str] = (),
                 output: str = "") -> None:
        super().__init__(message)
        self.r_message = message
        self.r_call = r_call
        self.r_class = list(r_class)
        self.warnings = list(warnings)
        self.output = output


class RProcessError(RuntimeError):
    """The R worker died or broke the protocol; the next call starts a fresh one."""


class RTimeoutError(RProcessError, TimeoutError):
    """A request ran past its time limit; the R worker was killed."""


class RWarning(UserWarning):
    """A warning R signalled (and the called R function did not handle itself)."""


@dataclass
class RReply:
    """A successful reply: the function's ``value`` (decoded JSON, see the module docstring),
    R's unhandled ``warnings``, its ``messages``, what it printed (``output``) and ``elapsed``
    seconds inside R (reading the frames, the call, encoding the result)."""

    value: Any
    warnings: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    output: str = ""
    elapsed: float = 0.0


# --------------------------------------------------------------------------------------------
# state

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {"checked": False, "ok": False, "reason": None, "versions": None}
_WORKER: _Worker | None = None


def r_lock() -> threading.RLock:
    """The process-wide lock that serialises requests to the R worker (re-entrant)."""
    return _LOCK


def _disabled_by_env() -> bool:
    return os.environ.get("EVALSTUDY_DISABLE_R", "").strip().lower() in {"1", "true", "yes", "on"}


def _rscript() -> str | None:
    return os.environ.get("EVALSTUDY_RSCRIPT") or shutil.which("Rscript")


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """A pipe of the R worker (``Popen`` is given ``PIPE`` for both, so neither is None)."""
    if stream is None:
        raise RProcessError("the R worker has no pipe to talk through")
    return stream


class _Worker:
    """One ``Rscript server.R`` process. Callers hold :data:`_LOCK`."""

    def __init__(self) -> None:
        rscript = _rscript()
        if not rscript:
            raise RUnavailableError("Rscript not found on PATH (install R, e.g. Debian's "
                                    "r-base-core, or set EVALSTUDY_RSCRIPT)")
        self.dir = Path(tempfile.mkdtemp(prefix="evalstudy-r-"))  # mode 0700
        self.owner = os.getpid()
        self.next_id = 1
        self.buffer = bytearray()
        self.stray: list[str] = []
        env = dict(os.environ)
        # English messages whatever the user's locale (tests and logs quote them); UTF-8 I/O.
        env["LANGUAGE"] = "en"
        if sys.platform.startswith("linux"):
            env["LC_ALL"] = "C.UTF-8"
        self.log = open(self.dir / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        try:
            # --vanilla: no user profile, which could print to stdout (our reply channel).
            # A new session: Ctrl-C in a terminal reaches Python only, which then kills R.
            self.proc = subprocess.Popen(
                [rscript, "--vanilla", str(R_DIR / "server.R"), str(R_DIR), str(self.dir)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                cwd=self.dir, env=env, start_new_session=True,
            )
        except OSError as exc:
            self.close()
            raise RUnavailableError(f"cannot start {rscript}: {exc}") from exc
        try:
            hello = self._read_reply(0, time.monotonic() + START_TIMEOUT, "start-up")
        except RProcessError as exc:
            self.close()
            raise RUnavailableError(f"R worker did not start: {exc}") from exc
        except BaseException:
            self.kill()
            self.close()
            raise
        if not hello.get("ok"):
            self.close()
            raise RUnavailableError(_error_text(hello.get("error")))
        self.info = hello.get("value") or {}

    # -- process --------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdin(self) -> IO[bytes]:
        return _pipe(self.proc.stdin)

    @property
    def stdout(self) -> IO[bytes]:
        return _pipe(self.proc.stdout)

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            self.log.flush()
            text = (self.dir / "stderr.log").read_bytes()[-limit:]
        except OSError:
            return ""
        return text.decode("utf-8", "replace").strip()

    def kill(self) -> None:
        """Kill R (and anything it started) at once."""
        if self.owner != os.getpid():
            return
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(5)

    def close(self) -> None:
        """Stop the worker: EOF on its stdin ends it; kill it if it does not go."""
        if self.owner == os.getpid() and getattr(self, "proc", None) is not None:
            with contextlib.suppress(OSError, ValueError):
                self.stdin.close()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.kill()
            for stream in (self.stdout,):
                with contextlib.suppress(OSError, ValueError):
                    stream.close()
        with contextlib.suppress(OSError, ValueError):
            self.log.close()
        if self.owner == os.getpid():
            shutil.rmtree(self.dir, ignore_errors=True)

    def abandon(self) -> None:
        """After fork(): drop the parent's worker in the child without touching it."""
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        with contextlib.suppress(OSError, ValueError):
            self.log.close()

    # -- requests -------------------------------------------------------------------------

    def request(self, payload: dict[str, Any], timeout: float, what: str) -> dict[str, Any]:
        request_id = self.next_id
        self.next_id += 1
        line = json.dumps({"id": request_id, **payload}, allow_nan=False, ensure_ascii=True)
        deadline = time.monotonic() + timeout
        try:
            self.stdin.write(line.encode("ascii") + b"\n")
            self.stdin.flush()
            return self._read_reply(request_id, deadline, what)
        except BrokenPipeError as exc:
            self.kill()
            raise RProcessError(f"R worker died before {what}: {self.stderr_tail()}") from exc
        except BaseException:
            # A timeout, Ctrl-C or Celery's soft time limit in the middle of a request: R's
            # state is unknown and it may run for hours, so it goes.
            self.kill()
            raise

    def _read_reply(self, request_id: int, deadline: float, what: str) -> dict[str, Any]:
        fd = self.stdout.fileno()
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                raw = bytes(self.buffer[:newline])
                del self.buffer[:newline + 1]
                reply = self._parse(raw)
                if reply is not None and reply.get("id") in (request_id, -1):
                    return reply
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RTimeoutError(f"R {what} ran past its time limit; the R process "
                                    "was killed")
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.kill()
                status = self.proc.poll()
                raise RProcessError(f"R worker exited (status {status}) during {what}: "
                                    f"{self.stderr_tail() or 'no message'}")
            self.buffer += chunk

    def _parse(self, raw: bytes) -> dict[str, Any] | None:
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            return None
        if text.startswith('{"id":'):
            with contextlib.suppress(ValueError):
                reply = json.loads(text)
                if isinstance(reply, dict):
                    return reply
        # Output that bypassed R's connections (printf in compiled code): keep it as output.
        self.stray.append(text)
        return None


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return "unknown R error"
    message = error.get("message")
    if isinstance(message, list):
        message = "\n".join(str(m) for m in message)
    return str(message or "unknown R error")


def _worker() -> _Worker:
    """The live worker, started (or restarted) if needed. Caller holds :data:`_LOCK`."""
    global _WORKER
    if _WORKER is not None and not _WORKER.alive():
        if _WORKER.owner != os.getpid():
            _WORKER.abandon()
        else:
            _WORKER.close()
        _WORKER = None
    if _WORKER is None:
        _WORKER = _Worker()
        missing = [p for p in REQUIRED_R_PACKAGES
                   if not _first(_WORKER.info.get("loaded", {}).get(p))]
        if missing:
            _WORKER.close()
            _WORKER = None
            raise RUnavailableError(f"R packages not loadable: {', '.join(missing)}")
        _STATE["versions"] = _versions_from(_WORKER.info)
    return _WORKER


def r_shutdown() -> None:
    """Stop the R worker now (the next call starts a new one). Registered with ``atexit``."""
    global _WORKER
    with _LOCK:
        if _WORKER is not None:
            if _WORKER.owner == os.getpid():
                _WORKER.close()
            else:
                _WORKER.abandon()
            _WORKER = None


def r_worker_pid() -> int | None:
    """The process id of the running R worker (None when there is none)."""
    with _LOCK:
        return _WORKER.pid if _WORKER is not None and _WORKER.alive() else None


def _after_fork_in_child() -> None:
    global _LOCK, _WORKER
    # The parent's lock may have been held by another thread at fork time; its worker's pipes
    # belong to the parent. Start afresh (the worker is dropped on first use: owner differs).
    _LOCK = threading.RLock()
    if _WORKER is not None:
        _WORKER.abandon()
        _WORKER = None


atexit.register(r_shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --------------------------------------------------------------------------------------------
# availability and versions


def _check() -> None:
    """Start the worker once and record whether R is usable. Caller holds the lock."""
    if _STATE["checked"]:
        return
    try:
        _worker()
        _STATE["ok"], _STATE["reason"] = True, None
    except RUnavailableError as exc:
        _STATE["ok"], _STATE["reason"] = False, str(exc)
    except Exception as exc:  # noqa: BLE001 - the check reports, it does not raise
        _STATE["ok"], _STATE["reason"] = False, f"R start-up failed: {type(exc).__name__}: {exc}"
    _STATE["checked"] = True


def r_available() -> bool:
    """True when Rscript runs and ``ordinal`` and ``lme4`` load in it. Never raises.

    The first call starts the R worker (1-2 s) and the answer is cached: later calls cost a
    dictionary lookup (and the ``EVALSTUDY_DISABLE_R`` check).
    """
    if _disabled_by_env():
        return False
    if _STATE["checked"]:
        return bool(_STATE["ok"])
    try:
        with _LOCK:
            _check()
            return bool(_STATE["ok"])
    except Exception:  # noqa: BLE001 - the contract is "never raises"
        return False


def r_unavailable_reason() -> str | None:
    """Why :func:`r_available` is False (None when R is available or not yet checked)."""
    if _disabled_by_env():
        return "disabled by EVALSTUDY_DISABLE_R"
    return None if _STATE["ok"] else _STATE["reason"]


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _versions_from(info: Mapping[str, Any]) -> dict[str, str | None]:
    packages = info.get("packages") or {}
    out: dict[str, str | None] = {"R": _first(info.get("R"))}
    for name in ("ordinal", "lme4", "lmerTest", "emmeans", "jsonlite"):
        value = _first(packages.get(name))
        out[name] = None if value is None else str(value)
    return out


@functools.cache  # installed distributions do not change under a running process
def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def r_versions() -> dict[str, str | None]:
    """Versions of R and the R packages used (ordinal, lme4, lmerTest, emmeans, jsonlite), how R
    is reached (``bridge``), and pandas/statsmodels; ``pymer4`` only when it is installed (the
    optional engine). R-side entries are None when R is unavailable. Never raises.

    Package versions are DESCRIPTION ``Version`` fields (e.g. ordinal "2022.11-16"), R is
    ``R.version$major.minor`` (e.g. "4.2.2"); read once, when the worker starts.
    """
    out: dict[str, str | None] = {
        "R": None, "ordinal": None, "lme4": None, "lmerTest": None, "emmeans": None,
        "jsonlite": None, "bridge": "Rscript (separate process)",
        "pandas": _dist_version("pandas"), "statsmodels": _dist_version("statsmodels"),
    }
    pymer4 = _dist_version("pymer4")
    if pymer4:
        out["pymer4"] = pymer4
    if r_available() and _STATE["versions"]:
        out.update(_STATE["versions"])
    return out


# --------------------------------------------------------------------------------------------
# calls


@dataclass(eq=False)
class RFrame:
    """A data frame argument with its factor description: ``levels`` maps column -> level order
    (that column becomes a factor), ``ordered`` names ordered factors. Categorical, object,
    string and bool columns are factors too (levels per :func:`factor_levels`)."""

    df: pd.DataFrame
    levels: Mapping[str, Sequence[Any] | None] | None = None
    ordered: Iterable[str] = ()


def r_request(function: str, *args: Any, timeout: float | None = None,
              **kwargs: Any) -> RReply:
    """Call R function ``function`` (a name defined in ``analysis/stats/r/*.R``, or R source
    ``function(...) ...`` for tests and benchmarks) with ``args``/``kwargs``; see the module
    docstring for what may be passed and what comes back.

    Raises :class:`RUnavailableError` (no R), :class:`RError` (R signalled an error),
    :class:`RTimeoutError` (past ``timeout`` seconds: R was killed) or :class:`RProcessError`
    (R died). Does not emit R's warnings: :func:`r_call` does.
    """
    if not r_available():
        raise RUnavailableError(r_unavailable_reason() or "R is not available")
    limit = _default_timeout() if timeout is None else float(timeout)
    with _LOCK:
        worker = _worker()
        files: list[Path] = []
        try:
            payload: dict[str, Any] = (
                {"fn": function} if _is_name(function) else {"code": function})
            payload["args"] = [_encode(a, worker, files) for a in args]
            payload["kwargs"] = {str(k): _encode(v, worker, files) for k, v in kwargs.items()}
            what = f"request {function if _is_name(function) else 'code'}"
            reply = worker.request(payload, limit, what)
            stray = "\n".join(worker.stray)
            worker.stray.clear()
        finally:
            for path in files:
                with contextlib.suppress(OSError):
                    path.unlink()
    output = "\n".join(x for x in (_first(reply.get("output")) or "", stray) if x)
    if not reply.get("ok"):
        error = reply.get("error") or {}
        raise RError(_error_text(error), r_call=_first(error.get("call")),
                     r_class=error.get("class") or [], warnings=reply.get("warnings") or [],
                     output=output)
    return RReply(value=reply.get("value"), warnings=list(reply.get("warnings") or []),
                  messages=list(reply.get("messages") or []), output=output,
                  elapsed=float(reply.get("elapsed") or 0.0))


def r_call(function: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
    """:func:`r_request` returning the value; R's unhandled warnings become :class:`RWarning`."""
    reply = r_request(function, *args, timeout=timeout, **kwargs)
    for message in reply.warnings:
        warnings.warn(f"R: {message}", RWarning, stacklevel=2)
    return reply.value


def r_function(function: str) -> Callable[..., Any]:
    """A Python callable for R function ``function`` (as :func:`r_call`): the models call R
    through this, so tests can watch what reaches R."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return r_call(function, *args, **kwargs)

    call.__name__ = function if _is_name(function) else "r_code"
    return call


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._]*")


def _is_name(function: str) -> bool:
    return bool(_NAME.fullmatch(function))


def _encode(value: Any, worker: _Worker, files: list[Path]) -> Any:
    """A Python argument -> JSON-able request value (frames written to files)."""
    if isinstance(value, pd.DataFrame):
        value = RFrame(value)
    if isinstance(value, RFrame):
        return {"__frame__": _write_frame(value, worker, files)}
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise ValueError("non-finite floats can only be sent inside a data frame")
        return float(value)
    if isinstance(value, Mapping):
        if "__frame__" in value:
            raise ValueError("'__frame__' is a reserved key")
        return {str(k): _encode(v, worker, files) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray, pd.Series, pd.Index)):
        return [_encode(v, worker, files) for v in list(value)]
    raise TypeError(f"cannot send a {type(value).__name__} to R")


def _write_frame(frame: RFrame, worker: _Worker, files: list[Path]) -> dict[str, Any]:
    """Write `frame` as one binary file of column blocks (see the module docstring) and return
    its description for the request. Every column is converted in one vectorised step: a
    frame of 100,000 rows goes in a few milliseconds, where CSV text cost about 100 ms on
    each side of the pipe (the bench's GLMM comparison counts it as the bridge's overhead)."""
    df = frame.df
    levels = dict(frame.levels or {})
    ordered = set(frame.ordered)
    columns: list[dict[str, Any]] = []
    blocks: list[bytes] = []
    for col in df.columns:
        s = df[col]
        spec: dict[str, Any] = {"name": str(col)}
        if (col in levels or col in ordered or isinstance(s.dtype, pd.CategoricalDtype)
                or pd.api.types.is_object_dtype(s.dtype)
                or pd.api.types.is_string_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype)):
            lv = factor_levels(s, levels.get(col))
            if isinstance(s.dtype, pd.CategoricalDtype) and list(s.cat.categories) == lv:
                # make_factors' output (the models' case): its codes are already the answer.
                codes = s.cat.codes.to_numpy().astype(np.int64)
            else:
                codes = _codes_in(s, lv)
            spec.update(type="factor", levels=lv, ordered=col in ordered)
            # 1-based codes; -1 (missing) becomes R's NA_integer_.
            block = np.where(codes >= 0, codes + 1, _R_NA_INTEGER).astype("<i4")
        elif pd.api.types.is_integer_dtype(s.dtype) and _fits_r_integer(s):
            spec["type"] = "integer"
            missing = s.isna().to_numpy()
            values = s.to_numpy(dtype=np.int64, na_value=0)
            block = np.where(missing, _R_NA_INTEGER, values).astype("<i4")
        elif pd.api.types.is_numeric_dtype(s.dtype):
            values = s.to_numpy(dtype=float, na_value=np.nan)
            if (pd.api.types.is_integer_dtype(s.dtype) and values.size
                    and np.nanmax(np.abs(values)) > 2**53):
                raise ValueError(f"column {col!r}: integers beyond 2**53 cannot go to R exactly")
            spec["type"] = "double"
            bits = values.astype("<f8").view("<u8").copy()
            bits[np.isnan(values)] = _R_NA_REAL_BITS  # R's NA, not a plain NaN
            block = bits
        else:
            raise TypeError(f"column {col!r}: cannot send dtype {s.dtype} to R")
        columns.append(spec)
        blocks.append(np.ascontiguousarray(block).tobytes())
    path = worker.dir / f"frame-{worker.next_id}-{len(files)}.bin"
    files.append(path)
    with open(path, "wb") as handle:
        for block_bytes in blocks:
            handle.write(block_bytes)
    return {"path": str(path), "nrow": int(len(df)), "columns": columns}


#: R's NA of an integer (INT_MIN) and the bit pattern of its NA of a double (a NaN whose
#: payload is 1954): written as such, R reads them as NA without any conversion.
_R_NA_INTEGER = -(2**31)
_R_NA_REAL_BITS = np.uint64(0x7FF00000000007A2)


def _codes_in(series: pd.Series, levels: Sequence[str]) -> np.ndarray:
    """0-based position of each value's label (`level_label`) in `levels`; -1 where missing
    or not a level. Labels are computed once per distinct value, not once per row."""
    codes, uniques = pd.factorize(series)  # missing values (None, NaN, pd.NA) -> -1
    if not len(uniques):
        return codes.astype(np.int64)
    labels = [level_label(v) for v in np.asarray(uniques, dtype=object)]
    position = pd.Index(list(levels), dtype=object).get_indexer(labels)
    return np.where(codes >= 0, position[np.maximum(codes, 0)], -1).astype(np.int64)


def _fits_r_integer(s: pd.Series) -> bool:
    values = s.dropna()
    # R's integers are 32-bit and -2**31 is its NA.
    return values.empty or (int(values.min()) > -(2**31) and int(values.max()) < 2**31)


# --------------------------------------------------------------------------------------------
# factors


def level_label(value: Any) -> str:
    """The string used for a factor level: integral floats lose their ``.0`` (4.0 -> "4")."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _sort_key_values(values: Iterable[Any]) -> list[Any]:
    vals = list(values)
    try:
        nums = [float(v) for v in vals]
    except (TypeError, ValueError):
        return sorted(vals, key=level_label)
    return [v for _, v in sorted(zip(nums, vals, strict=True), key=lambda t: t[0])]


def factor_levels(
    series: pd.Series,
    levels: Sequence[Any] | None = None,
    reference: Any | None = None,
) -> list[str]:
    """Level order (as strings) for a categorical column; see the module docstring."""
    observed_raw = pd.unique(series.dropna())
    observed = {level_label(v) for v in observed_raw}
    if levels is not None:
        order = [level_label(v) for v in levels]
        unknown = observed - set(order)
        if unknown:
            raise ValueError(
                f"column {series.name!r}: values {sorted(unknown)} not among the given levels"
            )
    elif isinstance(series.dtype, pd.CategoricalDtype):
        order = [level_label(v) for v in series.cat.categories]
    else:
        order = [level_label(v) for v in _sort_key_values(observed_raw)]
    order = list(dict.fromkeys(v for v in order if v in observed))
    if reference is not None:
        ref = level_label(reference)
        if ref not in order:
            raise ValueError(f"reference level {ref!r} not observed in column {series.name!r}")
        order = [ref] + [v for v in order if v != ref]
    return order


def make_factors(
    df: pd.DataFrame,
    columns: Iterable[str],
    levels: Mapping[str, Sequence[Any]] | None = None,
    reference: Mapping[str, Any] | None = None,
    ordered: Iterable[str] = (),
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Copy of ``df`` where each of ``columns`` is a pandas Categorical of strings with the
    level order of :func:`factor_levels`; returns ``(frame, {column: levels})``."""
    levels = dict(levels or {})
    reference = dict(reference or {})
    ordered = set(ordered)
    out = df.copy()
    result: dict[str, list[str]] = {}
    for col in columns:
        lv = factor_levels(df[col], levels.get(col), reference.get(col))
        # Labels per distinct value, then codes: a per-row map cost 0.1 s per 50,000 rows.
        out[col] = pd.Categorical.from_codes(_codes_in(df[col], lv), categories=lv,
                                             ordered=col in ordered)
        result[col] = lv
    return out, result
