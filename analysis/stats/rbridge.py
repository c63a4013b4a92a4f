"""Lazy, process-wide access to R (through rpy2) for the statistical models.

Everything that touches R goes through :func:`r_session`, which

* starts R once per process (the first call costs about 1-3 s: R start-up plus loading
  ``ordinal`` and ``lme4``),
* holds a process-wide re-entrant lock, so two threads never enter the embedded R at once
  (R is single-threaded; rpy2 does not protect it),
* installs rpy2's default conversion rules for the current thread (rpy2 keeps them in a
  ``contextvars.ContextVar``; a fresh thread has none and every call would fail), and
* captures what R writes to its console, instead of letting it leak to stderr, and restores the
  console callbacks afterwards (pymer4 replaces them globally during ``fit``).

Nothing here imports Django. Nothing here raises at import time when R or rpy2 is missing:
:func:`r_available` answers ``False`` and the model functions fall back to statsmodels.

Set the environment variable ``EVALSTUDY_DISABLE_R=1`` to make :func:`r_available` answer
``False`` (e.g. to exercise the fallbacks in a whole process).

Factor conversion
-----------------
:func:`factor_levels` decides the level order of a categorical column: an explicit ``levels``
list first, else a pandas ``Categorical``'s category order, else the sorted distinct values
(numerically when all values are numbers, so rater ids 2 < 10). Unobserved levels are dropped
(an empty level would give an all-zero design column). ``reference`` moves one level to the
front. The first level is the reference level of R's treatment contrasts, so e.g. ``system``
coefficients are "level minus first level".
:func:`to_r_dataframe` converts a pandas frame to an R ``data.frame``: factor columns become R
factors with exactly that level order (``ordered=True`` for an ordinal response), numeric
columns stay numeric, ``NaN``/``None`` become ``NA``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "RSession",
    "RUnavailableError",
    "factor_levels",
    "from_r_dataframe",
    "level_label",
    "make_factors",
    "r_available",
    "r_function",
    "r_lock",
    "r_session",
    "r_unavailable_reason",
    "r_versions",
    "to_r_dataframe",
]

#: R packages that must load for :func:`r_available` to answer True.
REQUIRED_R_PACKAGES = ("ordinal", "lme4")

_R_LOCK = threading.RLock()
_STATE: dict[str, Any] = {"checked": False, "ok": False, "reason": None, "versions": None}
_FUNCTIONS: dict[str, Any] = {}


class RUnavailableError(RuntimeError):
    """R, rpy2 or a required R package cannot be used in this process."""


def r_lock() -> threading.RLock:
    """The process-wide lock that guards the embedded R (re-entrant)."""
    return _R_LOCK


def _disabled_by_env() -> bool:
    return os.environ.get("EVALSTUDY_DISABLE_R", "").strip().lower() in {"1", "true", "yes", "on"}


def _init_r() -> None:
    """Start R and load the required packages; record the outcome. Caller holds the lock."""
    if _STATE["checked"]:
        return
    _STATE["checked"] = True
    if _disabled_by_env():
        _STATE["reason"] = "disabled by EVALSTUDY_DISABLE_R"
        return
    try:
        import rpy2.robjects as ro
        from rpy2.rinterface_lib import callbacks
        from rpy2.robjects.conversion import localconverter
    except Exception as exc:  # R not installed, rpy2 missing or built against another R
        _STATE["reason"] = f"rpy2/R not usable: {type(exc).__name__}: {exc}"
        return
    # rpy2's atexit hook logs "Embedded R already ended." at INFO, after test runners / log
    # configurations may have closed their streams ("--- Logging error ---" at exit).
    logging.getLogger("rpy2.rinterface_lib.embedded").setLevel(logging.WARNING)
    console: list[str] = []
    old_warn, old_print = callbacks.consolewrite_warnerror, callbacks.consolewrite_print
    callbacks.consolewrite_warnerror = console.append
    callbacks.consolewrite_print = console.append
    try:
        with localconverter(ro.default_converter):
            pkgs = ", ".join(f'"{p}"' for p in REQUIRED_R_PACKAGES)
            ok = ro.r(
                "function(pkgs) vapply(pkgs, function(p) suppressWarnings("
                "suppressPackageStartupMessages(requireNamespace(p, quietly = TRUE))), "
                "logical(1))"
            )(ro.StrVector(REQUIRED_R_PACKAGES))
            missing = [p for p, good in zip(REQUIRED_R_PACKAGES, ok, strict=True) if not good]
            if missing:
                _STATE["reason"] = f"R packages not loadable: {', '.join(missing)}"
                return
            # Attach them too: formulas and pymer4 expect glmer/clmm on the search path.
            ro.r(f"suppressWarnings(suppressPackageStartupMessages(for (p in c({pkgs})) "
                 "library(p, character.only = TRUE)))")
        _STATE["ok"] = True
    except Exception as exc:
        _STATE["reason"] = f"R start-up failed: {type(exc).__name__}: {exc}"
    finally:
        callbacks.consolewrite_warnerror, callbacks.consolewrite_print = old_warn, old_print


def r_available() -> bool:
    """True when R starts, rpy2 imports and ``ordinal`` and ``lme4`` load. Never raises.

    The answer is computed once per process (the first call starts R) and cached.
    """
    try:
        with _R_LOCK:
            _init_r()
            return bool(_STATE["ok"])
    except Exception:  # the contract is "never raises" (KeyboardInterrupt still propagates)
        return False


def r_unavailable_reason() -> str | None:
    """Why :func:`r_available` is False (None when R is available or not yet checked)."""
    return None if _STATE["ok"] else _STATE["reason"]


class RSession:
    """Handle yielded by :func:`r_session`: ``ro`` is ``rpy2.robjects``; ``console`` collects
    the text R printed during the session."""

    def __init__(self, ro: Any) -> None:
        self.ro = ro
        self.console: list[str] = []

    def console_text(self) -> str:
        return "".join(self.console)


@contextlib.contextmanager
def r_session() -> Iterator[RSession]:
    """Enter the embedded R: lock, conversion rules, console capture.

    Raises :class:`RUnavailableError` when R cannot be used.
    """
    with _R_LOCK:
        _init_r()
        if not _STATE["ok"]:
            raise RUnavailableError(_STATE["reason"] or "R is not available")
        import rpy2.robjects as ro
        from rpy2.rinterface_lib import callbacks
        from rpy2.robjects.conversion import localconverter

        session = RSession(ro)
        old_warn, old_print = callbacks.consolewrite_warnerror, callbacks.consolewrite_print
        callbacks.consolewrite_warnerror = session.console.append
        callbacks.consolewrite_print = session.console.append
        try:
            with localconverter(ro.default_converter):
                yield session
        finally:
            callbacks.consolewrite_warnerror, callbacks.consolewrite_print = old_warn, old_print


def r_function(code: str) -> Any:
    """Evaluate R source ``code`` (a ``function(...) ...`` expression) once and cache it.

    Must be called inside :func:`r_session`.
    """
    fn = _FUNCTIONS.get(code)
    if fn is None:
        import rpy2.robjects as ro

        fn = ro.r(code)
        _FUNCTIONS[code] = fn
    return fn


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def r_versions() -> dict[str, str | None]:
    """Versions of R, the R packages used (ordinal, lme4, lmerTest, emmeans) and of the Python
    bridges (rpy2, pymer4). R-side entries are None when R is unavailable. Never raises.

    Package versions are the DESCRIPTION ``Version`` fields (e.g. ordinal "2022.11-16"),
    R is ``R.version$major.minor`` (e.g. "4.2.2"). Cached after the first successful call.
    """
    out: dict[str, str | None] = {
        "R": None,
        "ordinal": None,
        "lme4": None,
        "lmerTest": None,
        "emmeans": None,
        "rpy2": _dist_version("rpy2"),
        "pymer4": _dist_version("pymer4"),
        "pandas": _dist_version("pandas"),
        "statsmodels": _dist_version("statsmodels"),
    }
    if _STATE["versions"] is not None:
        out.update(_STATE["versions"])
        return out
    if not r_available():
        return out
    try:
        with r_session():
            fn = r_function(
                "function(pkgs) c(R = paste(R.version$major, R.version$minor, sep = '.'), "
                "vapply(pkgs, function(p) tryCatch(utils::packageDescription(p)$Version, "
                "error = function(e) NA_character_, warning = function(w) NA_character_), "
                "character(1)))"
            )
            res = fn(_str_vector(["ordinal", "lme4", "lmerTest", "emmeans"]))
            rv = {
                str(k): (None if v is None or str(v) == "NA" else str(v))
                for k, v in zip(res.names, res, strict=True)
            }
        _STATE["versions"] = rv
        out.update(rv)
    except Exception:  # noqa: BLE001 - versions are informative only
        pass
    return out


# --------------------------------------------------------------------------------------------
# factors and data frames


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
    seen: set[str] = set()
    order = [v for v in order if v in observed and not (v in seen or seen.add(v))]
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
        labels = df[col].map(lambda v: None if _is_missing(v) else level_label(v))
        out[col] = pd.Categorical(labels, categories=lv, ordered=col in ordered)
        result[col] = lv
    return out, result


def _is_missing(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _str_vector(values: Sequence[Any]) -> Any:
    import rpy2.robjects as ro

    return ro.StrVector([str(v) for v in values])


def to_r_dataframe(
    df: pd.DataFrame,
    levels: Mapping[str, Sequence[Any]] | None = None,
    ordered: Iterable[str] = (),
) -> Any:
    """Convert ``df`` to an R ``data.frame`` (call inside :func:`r_session`).

    ``levels`` maps column -> level order and makes that column a factor; pandas Categorical,
    object, string and bool columns become factors too (levels per :func:`factor_levels`);
    columns named in ``ordered`` become ordered factors. Numeric columns stay numeric.
    """
    import rpy2.rinterface as ri
    import rpy2.robjects as ro

    levels = dict(levels or {})
    ordered = set(ordered)
    cols: dict[str, Any] = {}
    for col in df.columns:
        s = df[col]
        is_factor = (
            col in levels
            or col in ordered
            or isinstance(s.dtype, pd.CategoricalDtype)
            or pd.api.types.is_object_dtype(s.dtype)
            or pd.api.types.is_string_dtype(s.dtype)
            or pd.api.types.is_bool_dtype(s.dtype)
        )
        if is_factor:
            lv = factor_levels(s, levels.get(col))
            vals = [ri.NA_Character if _is_missing(v) else level_label(v) for v in s]
            cols[str(col)] = ro.FactorVector(
                ro.StrVector(vals), levels=ro.StrVector(lv), ordered=col in ordered
            )
        elif pd.api.types.is_integer_dtype(s.dtype) and not s.isna().any():
            cols[str(col)] = ro.IntVector([int(v) for v in s])
        elif pd.api.types.is_numeric_dtype(s.dtype):
            arr = s.astype(float).to_numpy()
            cols[str(col)] = ro.FloatVector(
                [ri.NA_Real if np.isnan(v) else float(v) for v in arr]
            )
        else:
            raise TypeError(f"column {col!r}: cannot convert dtype {s.dtype} to R")
    make_df = r_function(
        "function(cols, names) { d <- as.data.frame(cols, stringsAsFactors = FALSE, "
        "optional = TRUE); names(d) <- names; d }"
    )
    return make_df(ro.ListVector(cols), ro.StrVector(list(cols)))


def from_r_dataframe(rdf: Any) -> pd.DataFrame:
    """Convert an R ``data.frame`` to pandas (factors become pandas Categoricals, ordered
    factors ordered ones). Call inside :func:`r_session`."""
    import rpy2.robjects as ro
    from rpy2.robjects import pandas2ri
    from rpy2.robjects.conversion import localconverter

    with localconverter(ro.default_converter + pandas2ri.converter):
        out = ro.conversion.get_conversion().rpy2py(rdf)
    return pd.DataFrame(out)
