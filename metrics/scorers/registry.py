"""Metric names -> scorer classes, and `build(name, params)` to make a configured scorer.

`SCORERS` holds every scorer that can be built in this process. The text scorers (`text.py`) are
always there. The model-backed scorers live in `semantic.py` and `heval.py`; if one of them
cannot be imported (the module is missing, incomplete, or its libraries are), its name goes to
`UNAVAILABLE` with the reason instead, and `build()` says so rather than calling it unknown.
The phoneme error rate (`per`, `phoneme.py`) runs the espeak-ng program: without it, "per" is
likewise in `UNAVAILABLE` (checked once, when this module is imported).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from metrics.scorers.base import Scorer, ScorerUnavailable
from metrics.scorers.phoneme import PhonemeErrorScorer, espeak_unavailable_reason
from metrics.scorers.text import TEXT_SCORERS

logger = logging.getLogger(__name__)

# Metrics computed for a study when it names none, in display order.
DEFAULT_METRICS: tuple[str, ...] = (
    "wer",
    "cer",
    "bleu",
    "chrf",
    "rouge",
    "bertscore",
    "semantic_distance",
    "embedding_cosine",
    "heval",
)

# Where the model-backed scorers live: written separately from this file, and heavy (torch).
# Each class is looked up in these modules in order (H_eval lives in its own module, which
# imports semantic.py, so semantic.py cannot re-export it without an import cycle).
_MODEL_MODULES: tuple[str, ...] = ("metrics.scorers.semantic", "metrics.scorers.heval")
# Metric name -> class name.
_MODEL_CLASSES: dict[str, str] = {
    "bertscore": "BertScoreScorer",
    "semantic_distance": "SemanticDistanceScorer",
    "embedding_cosine": "EmbeddingCosineScorer",
    "heval": "HevalScorer",
}

# Metric name -> why it cannot be built here.
UNAVAILABLE: dict[str, str] = {}


def _model_scorers() -> list[type[Scorer]]:
    """The model-backed scorer classes that import, recording the others in UNAVAILABLE.

    The imports are guarded because those modules are written separately and may be absent or
    incomplete (or their model libraries missing): the text metrics must stay usable regardless.
    """
    modules: list[Any] = []
    problems: list[str] = []
    for module_name in _MODEL_MODULES:
        try:
            modules.append(importlib.import_module(module_name))
        except ImportError as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
                problems.append(f"{module_name} does not exist yet")
            else:
                # The module exists but fails to import (e.g. a missing dependency): worth a
                # warning, since metrics silently disappearing would be hard to notice.
                problems.append(f"{module_name} failed to import: {exc}")
                logger.warning("model-backed metrics may be unavailable: %s", problems[-1])
    classes: list[type[Scorer]] = []
    for metric, class_name in _MODEL_CLASSES.items():
        cls = next((getattr(m, class_name) for m in modules if hasattr(m, class_name)), None)
        if cls is None:
            reason = f"no class {class_name} in {' or '.join(_MODEL_MODULES)}"
            UNAVAILABLE[metric] = "; ".join([reason, *problems])
        else:
            classes.append(cls)
    return classes


def _program_scorers() -> list[type[Scorer]]:
    """The scorers that run an outside program, if the program is here; the others go to
    UNAVAILABLE with the reason."""
    reason = espeak_unavailable_reason()
    if reason is not None:
        UNAVAILABLE[PhonemeErrorScorer.name] = reason
        return []
    return [PhonemeErrorScorer]


def _index(classes: list[type[Scorer]]) -> dict[str, type[Scorer]]:
    index: dict[str, type[Scorer]] = {}
    for cls in classes:
        if cls.name in index:
            raise RuntimeError(
                f"two scorers are named {cls.name!r}: {index[cls.name].__name__}, {cls.__name__}"
            )
        index[cls.name] = cls
    return index


SCORERS: dict[str, type[Scorer]] = _index(
    [*TEXT_SCORERS, *_program_scorers(), *_model_scorers()]
)


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
    cls = SCORERS.get(name)
    if cls is None:
        if name in UNAVAILABLE:
            raise ValueError(f"metric '{name}' is unavailable: {UNAVAILABLE[name]}")
        raise ValueError(f"unknown metric '{name}'; known: {', '.join(sorted(SCORERS))}")
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ValueError(f"parameters of metric '{name}' must be a mapping, got {params!r}")
    _check_params(name, cls, params)
    try:
        return cls(**params)
    except ScorerUnavailable as exc:
        raise ValueError(f"metric '{name}' is unavailable: {exc}") from exc
