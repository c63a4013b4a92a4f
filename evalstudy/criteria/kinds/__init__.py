"""The registry of answer kinds: one module of this package per kind, found by listing it.

Each module (other than `base` and names starting with "_") defines `KIND`, an instance of
`base.AnswerKind`. `kind_of(name)` gives a criterion's kind; `KINDS` lists the names in the
admin's order. Nothing outside this package names a kind: it asks the kind what it is
(tests/test_architecture.py fails on a kind's name written anywhere else in the product).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from .base import (
    LETTERS,
    ONE,
    PAIR,
    REFUSED_WHEN_UNUSED,
    SETTINGS,
    TUPLE,
    AnswerKind,
    ChoiceView,
    gettext_noop,
)


def _discover() -> dict[str, AnswerKind]:
    found: dict[str, AnswerKind] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base" or module.name.startswith("_"):
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if not isinstance(kind, AnswerKind):
            raise TypeError(f"{__name__}.{module.name} defines no KIND (an AnswerKind)")
        if kind.name in found:
            raise TypeError(f"two modules define the answer kind {kind.name!r}")
        unknown = set(kind.settings) - set(SETTINGS)
        if unknown:
            raise TypeError(f"answer kind {kind.name!r} names settings that are not criterion "
                            f"fields: {', '.join(sorted(unknown))}")
        found[kind.name] = kind
    return dict(sorted(found.items(), key=lambda pair: (pair[1].order, pair[0])))


_REGISTRY = _discover()

#: Every kind's name, in the admin's order.
KINDS: tuple[str, ...] = tuple(_REGISTRY)


def kind_of(name: str) -> AnswerKind:
    """The kind named `name`; ValueError naming the known kinds when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"kind {name!r} is not one of {', '.join(KINDS)}") from None


def all_kinds() -> tuple[AnswerKind, ...]:
    return tuple(_REGISTRY.values())


def kinds_where(test: Callable[[AnswerKind], object]) -> frozenset[str]:
    """The names of the kinds that pass `test` (for database filters: `kind__in=`)."""
    return frozenset(name for name, kind in _REGISTRY.items() if test(kind))


def kind_choices() -> list[tuple[str, str]]:
    """(name, label) of every kind, for the model field's choices and forms."""
    return [(kind.name, kind.label) for kind in _REGISTRY.values()]


def kinds_using(setting: str) -> list[str]:
    """The kinds that use a criterion field, in order."""
    return [kind.name for kind in _REGISTRY.values() if setting in kind.settings]


# The helpers of particular kinds that other code uses (a pairwise answer's orientation, a
# span answer's weights...), re-exported here so that nothing reaches into a kind's module.
from .best_worst import best_worst_of  # noqa: E402
from .likert import MAX_POINTS as LIKERT_MAX_POINTS  # noqa: E402
from .likert import MIN_POINTS as LIKERT_MIN_POINTS  # noqa: E402
from .pairwise import (  # noqa: E402
    BOTH_BAD,
    BOTH_GOOD,
    NO_PREFERENCE,
    TIE,
    pair_oriented,
    pairwise_choices,
)
from .ranking import ranking_of  # noqa: E402
from .severity import DEFAULT_LABELS as SEVERITY_DEFAULT_LABELS  # noqa: E402
from .slider import slider_range  # noqa: E402
from .span import MQM_DEFAULT_WEIGHTS, span_weights, text_sha256  # noqa: E402
from .text import MAX_LENGTH as TEXT_MAX_LENGTH  # noqa: E402

__all__ = ["BOTH_BAD", "BOTH_GOOD", "KINDS", "LETTERS", "LIKERT_MAX_POINTS",
           "LIKERT_MIN_POINTS", "MQM_DEFAULT_WEIGHTS", "NO_PREFERENCE", "ONE", "PAIR",
           "REFUSED_WHEN_UNUSED", "SETTINGS", "SEVERITY_DEFAULT_LABELS", "TEXT_MAX_LENGTH",
           "TIE", "TUPLE", "AnswerKind", "ChoiceView", "all_kinds", "best_worst_of",
           "gettext_noop", "kind_choices", "kind_of", "kinds_using", "kinds_where",
           "pair_oriented", "pairwise_choices", "ranking_of", "slider_range", "span_weights",
           "text_sha256"]
