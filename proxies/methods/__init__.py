"""The registry of proxy methods: one module of this package per method, found by listing it.

Each module (other than `base`, `learned_kinds` and names starting with "_") defines `METHOD`, a
`base.ProxyMethod`. `method_of(name)` gives a run's method; `METHODS` lists the names. Nothing
outside its own module names a method: the runs, the admin, the API and the analysis ask the
spec (tests/proxies/test_method_specs.py fails on a method's name written anywhere else).
Adding a method is one new module here (and its tests). The kinds of learned proxy (the
learned method's models) are declared once, in `learned_kinds`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from typing import Any

from .base import (
    CPU_QUEUE,
    DEFAULT_THRESHOLD,
    GPU_QUEUE,
    LLM_QUEUE,
    LLM_RATER,
    METRIC_RATER,
    THRESHOLD,
    Answer,
    Batch,
    ProxyMethod,
    decide,
    threshold_of,
)
from .learned import answers_pairs
from .learned_kinds import LEARNED_KINDS, LearnedKind, learned_kind, learned_kind_choices

# Modules of this package that declare no method.
_NOT_METHODS = frozenset({"base", "learned_kinds"})


def _discover() -> dict[str, ProxyMethod]:
    found: dict[str, ProxyMethod] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name in _NOT_METHODS or module.name.startswith("_"):
            continue
        method = getattr(importlib.import_module(f"{__name__}.{module.name}"), "METHOD", None)
        if not isinstance(method, ProxyMethod):
            raise TypeError(f"{__name__}.{module.name} defines no METHOD (a ProxyMethod)")
        if method.name != module.name:
            raise TypeError(f"{__name__}.{module.name} declares the method {method.name!r}: "
                            "a method lives in the module of its name")
        found[method.name] = method
    return found


_REGISTRY = _discover()

#: Every method's name, in menu order.
METHODS: tuple[str, ...] = tuple(sorted(_REGISTRY, key=lambda name: (_REGISTRY[name].order,
                                                                      name)))


def method_of(name: str) -> ProxyMethod:
    """The method named `name`; ValueError naming the known methods when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"method {name!r} is not one of {', '.join(METHODS)}") from None


def all_methods() -> tuple[ProxyMethod, ...]:
    return tuple(_REGISTRY[name] for name in METHODS)


def learned_method() -> ProxyMethod:
    """The method that answers with a trained learned proxy."""
    (method,) = (m for m in all_methods() if m.learned)
    return method


def method_choices(*, versioned: bool = False) -> list[tuple[str, str]]:
    """(name, label) of every method (of the versioned ones: `versioned`), for the model
    fields' choices, forms and the API."""
    return [(m.name, m.label) for m in all_methods() if m.versioned or not versioned]


#: Every method (ProxyRun.method), and those whose prompts can be versioned
#: (JudgePromptVersion.method).
METHOD_CHOICES = method_choices()
VERSIONED_METHOD_CHOICES = method_choices(versioned=True)


def fewshot_prefix(method: str, examples: Sequence[Any], *, template: str = "") -> str:
    """The block put before each prompt of a `method` judge ("" without examples).
    `template`: the LATTE template the examples are written with (default the paper's)."""
    spec = method_of(method) if method in _REGISTRY else None
    if spec is None or spec.fewshot is None:
        names = tuple(m.name for m in all_methods() if m.fewshot is not None)
        raise ValueError(f"method must be one of {names}, got {method!r}")
    if not examples:
        return ""
    return spec.fewshot(examples, template)


__all__ = [
    "CPU_QUEUE",
    "DEFAULT_THRESHOLD",
    "GPU_QUEUE",
    "LEARNED_KINDS",
    "LLM_QUEUE",
    "LLM_RATER",
    "METHODS",
    "METHOD_CHOICES",
    "METRIC_RATER",
    "THRESHOLD",
    "VERSIONED_METHOD_CHOICES",
    "Answer",
    "Batch",
    "LearnedKind",
    "ProxyMethod",
    "all_methods",
    "answers_pairs",
    "decide",
    "fewshot_prefix",
    "learned_kind",
    "learned_kind_choices",
    "learned_method",
    "method_choices",
    "method_of",
    "threshold_of",
]
