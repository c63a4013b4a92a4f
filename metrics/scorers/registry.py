"""Metric names -> their declarations and scorers, and `build(name, params)` to make one.

One registry, filled one way: every `ScorerSpec` of `metrics.scorers.specs.SPECS`. Reading the
declarations (`spec`, `value`, `direction`, `headline_values`, `count_values`,
`metric_direction`, `metric_storing`, `DEFAULT_METRICS`) imports no scorer module, so a page,
a command or the analysis asks them without loading torch, jiwer or nltk. A scorer's class is
imported when it is used (`scorer_class`, `build`, `available`): if its module cannot be
imported (missing, incomplete, or its libraries are) or a program it needs is missing (espeak-ng
for `per`), the metric is unavailable with the reason, and `build()` says so rather than
calling it unknown. What was found is remembered for the process (`forget` clears it).

A value name no scorer declares is refused (`UnknownValue`): a reader never guesses that a
value it does not know is higher-better.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from metrics.scorers.base import Direction, MetricValue, Scorer, ScorerSpec, ScorerUnavailable
from metrics.scorers.specs import SPECS as _DECLARED

logger = logging.getLogger(__name__)


class UnknownMetric(ValueError):
    """A metric name no scorer has."""


class UnknownValue(ValueError):
    """A stored value's name that no scorer declares."""


def _index(specs: Iterable[ScorerSpec]) -> dict[str, ScorerSpec]:
    """Metric name -> spec, refusing two scorers of one name."""
    index: dict[str, ScorerSpec] = {}
    for spec in specs:
        if spec.name in index:
            raise RuntimeError(f"two scorers are named {spec.name!r}: {index[spec.name].target}, "
                               f"{spec.target}")
        index[spec.name] = spec
    return index


def _values(specs: Iterable[ScorerSpec]) -> dict[str, tuple[MetricValue, str]]:
    """Value name -> (its declaration, the first metric storing it), refusing a value that two
    scorers declare differently (one name, one meaning)."""
    values: dict[str, tuple[MetricValue, str]] = {}
    for spec in specs:
        for value in spec.values:
            known = values.get(value.name)
            if known is None:
                values[value.name] = (value, spec.name)
            elif known[0] != value:
                raise RuntimeError(f"value {value.name!r} is declared differently by {known[1]} "
                                   f"({known[0]}) and {spec.name} ({value})")
    return values


# Every scorer, in display order (WER first), and every value any of them stores.
SPECS: Mapping[str, ScorerSpec] = MappingProxyType(_index(_DECLARED))
_VALUES: dict[str, tuple[MetricValue, str]] = _values(SPECS.values())
# Metrics computed for a study when it names none, in display order.
DEFAULT_METRICS: tuple[str, ...] = tuple(name for name, s in SPECS.items() if s.default)


def spec(name: str) -> ScorerSpec:
    """The declaration of metric `name`; UnknownMetric when no scorer has that name."""
    found = SPECS.get(name)
    if found is None:
        raise UnknownMetric(f"unknown metric '{name}'; known: {', '.join(sorted(SPECS))}")
    return found


def value(name: str) -> MetricValue:
    """The declaration of the stored value `name` (e.g. "wer", "substitutions", "sd")."""
    found = _VALUES.get(name)
    if found is None:
        raise UnknownValue(
            f"no metric stores a value named {name!r}, so its direction is unknown; declare it "
            f"on its scorer's spec (metrics/scorers/specs.py); known: {', '.join(sorted(_VALUES))}")
    return found[0]


def direction(name: str) -> Direction | None:
    """Which way stored value `name` is better (None: neither); UnknownValue if undeclared."""
    return value(name).direction


def higher_is_better(name: str) -> bool:
    """True when a higher `name` is better; ValueError for a value without a direction (a
    reader asking this would otherwise read "no direction" as one of the two)."""
    found = value(name)
    if found.direction is None:
        raise ValueError(f"value {name!r} has no direction (it is a count of the reference)")
    return found.direction == "higher"


def values() -> tuple[MetricValue, ...]:
    """Every value any scorer stores, each once, in display order."""
    return tuple(found for found, _ in _VALUES.values())


def headline_values() -> tuple[str, ...]:
    """The headline scores (each metric's main values), in display order."""
    return tuple(v.name for v in values() if v.headline)


def count_values() -> frozenset[str]:
    """The values that are raw counts (see `MetricValue.count`)."""
    return frozenset(v.name for v in values() if v.count)


def metric_storing(name: str) -> str:
    """The metric that stores value `name` (the first, for a value two store: "sd" is
    semantic_distance's); UnknownValue if none does."""
    value(name)
    return _VALUES[name][1]


def metric_direction(metric: str) -> Direction:
    """The direction of metric `metric`'s headline value."""
    return spec(metric).direction


# --- the scorer classes, imported when used -----------------------------------------------------

_lock = threading.Lock()
_classes: dict[str, type[Scorer]] = {}
# Metric name -> why it cannot be built here.
_reasons: dict[str, str] = {}


def _load(target: str) -> Any:
    """The object named "module:attribute" (an ImportError or AttributeError propagates)."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _import_problem(module_name: str, exc: ImportError) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
        return f"{module_name} does not exist"
    # The module exists but fails to import (e.g. a missing dependency): worth a warning,
    # since metrics silently disappearing would be hard to notice.
    problem = f"{module_name} failed to import: {exc}"
    logger.warning("metrics may be unavailable: %s", problem)
    return problem


def _resolve(found: ScorerSpec) -> None:
    """Import `found`'s class (and run its requirement check) once, recording the class or
    the reason it is unavailable."""
    module_name, _, class_name = found.target.partition(":")
    try:
        cls = _load(found.target)
    except ImportError as exc:
        _reasons[found.name] = f"{class_name} cannot be loaded: {_import_problem(module_name, exc)}"
        return
    except AttributeError:
        _reasons[found.name] = f"no class {class_name} in {module_name}"
        return
    if cls.__dict__.get("spec") is not found:
        raise RuntimeError(f"{found.target} does not declare spec {found.name!r} (its class must "
                           f"say `spec = specs.{found.name.upper()}`)")
    if found.requires is not None:
        reason = _load(found.requires)()
        if reason is not None:
            _reasons[found.name] = reason
            return
    _classes[found.name] = cls


def _resolved(name: str) -> None:
    found = spec(name)
    with _lock:
        if name not in _classes and name not in _reasons:
            _resolve(found)


def unavailable_reason(name: str) -> str | None:
    """Why metric `name` cannot be built here (a sentence), or None when it can; imports its
    scorer's module."""
    _resolved(name)
    return _reasons.get(name)


def scorer_class(name: str) -> type[Scorer]:
    """The scorer class of metric `name`, imported now. ValueError: "unknown metric 'x'; known:
    ..." or "metric 'x' is unavailable: <why>"."""
    reason = unavailable_reason(name)
    if reason is not None:
        raise ValueError(f"metric '{name}' is unavailable: {reason}")
    return _classes[name]


def available() -> dict[str, type[Scorer]]:
    """Every scorer that can be built here, by name (imports every scorer module)."""
    return {name: _classes[name] for name in SPECS if unavailable_reason(name) is None}


def unavailable() -> dict[str, str]:
    """Metric name -> why it cannot be built here (imports every scorer module)."""
    return {name: reason for name in SPECS if (reason := unavailable_reason(name)) is not None}


def forget() -> None:
    """Forget which scorers were found (the next use imports and checks again)."""
    with _lock:
        _classes.clear()
        _reasons.clear()


def _check_params(name: str, cls: type[Scorer], params: Mapping[str, Any]) -> None:
    # Rejecting unknown parameter names here turns a TypeError deep in a worker into a clear
    # configuration error; scorers that take **params accept anything.
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]  # skip self
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    unknown = sorted(set(params) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "no parameters"
        raise ValueError(
            f"metric {name!r} does not take parameter(s) {', '.join(unknown)}; it takes: {takes}"
        )


def build(name: str, params: Mapping[str, Any] | None = None) -> Scorer:
    """A scorer for metric `name` configured with `params` (None means the defaults).

    Raises ValueError for an unknown name ("unknown metric 'x'; known: ..."), for a known
    name that is unavailable here ("metric 'x' is unavailable: <why>": its module or program is
    missing), for parameters the scorer does not take, and for invalid parameter values (the
    scorers validate them in their constructors).
    """
    cls = scorer_class(name)
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ValueError(f"parameters of metric '{name}' must be a mapping, got {params!r}")
    _check_params(name, cls, params)
    try:
        return cls(**params)
    except ScorerUnavailable as exc:
        raise ValueError(f"metric '{name}' is unavailable: {exc}") from exc
