"""Criteria: what each kind of question accepts and means, as plain data (no Django).

- `kinds/`: one module per answer kind (likert, binary, severity, pairwise, ranking,
  best-worst, slider, categorical, span, free text, ...), each an `AnswerKind` that says
  everything about its kind; `kind_of(name)` finds it. Nothing outside `kinds/` names a kind.
- `rule`: a criterion's settings as a `CriterionRule`, the checks of a criterion's
  configuration (`check_rule`, `criterion_problems`: the one rule of the admin, the API, study
  files and opening a study) and the helpers every kind shares.

The names below are the package's public face; import them from `evalstudy.criteria`.
"""

from __future__ import annotations

from .kinds import (
    BOTH_BAD,
    BOTH_GOOD,
    KINDS,
    LETTERS,
    LIKERT_MAX_POINTS,
    LIKERT_MIN_POINTS,
    MQM_DEFAULT_WEIGHTS,
    NO_PREFERENCE,
    ONE,
    PAIR,
    SETTINGS,
    SEVERITY_DEFAULT_LABELS,
    TEXT_MAX_LENGTH,
    TIE,
    TUPLE,
    AnswerKind,
    ChoiceView,
    all_kinds,
    best_worst_of,
    gettext_noop,
    kind_choices,
    kind_of,
    kinds_using,
    kinds_where,
    pair_oriented,
    pairwise_choices,
    ranking_of,
    slider_range,
    span_weights,
    text_sha256,
)
from .rule import (
    RULE_FIELDS,
    CriterionRule,
    ShownText,
    attention_repeats,
    binary_label,
    check_rule,
    criterion_problems,
    expected_met,
    rule_of,
    strict_majority,
)

#: The kinds whose answers read as a binary decision ("meaning preserved" or not), for
#: database filters (`kind__in=`); elsewhere ask the kind (`kind_of(name).binary_reading`).
BINARY_KINDS = kinds_where(lambda kind: kind.binary_reading)

__all__ = [
    "BINARY_KINDS", "BOTH_BAD", "BOTH_GOOD", "KINDS", "LETTERS", "LIKERT_MAX_POINTS",
    "LIKERT_MIN_POINTS", "MQM_DEFAULT_WEIGHTS", "NO_PREFERENCE", "ONE", "PAIR",
    "RULE_FIELDS", "SETTINGS", "SEVERITY_DEFAULT_LABELS", "TEXT_MAX_LENGTH", "TIE", "TUPLE",
    "AnswerKind", "ChoiceView", "CriterionRule", "ShownText", "all_kinds",
    "attention_repeats", "best_worst_of", "binary_label", "check_rule", "criterion_problems",
    "expected_met", "gettext_noop", "kind_choices", "kind_of", "kinds_using", "kinds_where",
    "pair_oriented", "pairwise_choices", "ranking_of", "rule_of", "slider_range",
    "span_weights", "strict_majority", "text_sha256",
]
