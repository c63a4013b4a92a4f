"""Rater-level covariates in the default mixed models (the analysis option
`integrity_covariates`; `analysis.extras.integrity` adds the columns to the judgment table).

With the option on, each criterion that would be fitted with its default model (no formula of
the user's applies to it) gets the default formula with the covariate terms after `system`:
`y ~ system + rater.flagged + (1|rater) + (1|item)`. A term enters only where it varies among
that criterion's human judgments: a column that is 0 for everyone would be dropped by lme4
(rank deficient) and would fail the fixed-effects fallback. A user's own formula is kept as
written: it may name the columns itself (`rater.` columns are formula names like `item.` and
`system.` ones, see `pipeline.formula_columns`).

A rater-level covariate is estimated between raters, beside the rater random intercept: its
coefficient says how the flagged raters' answers differ on average, holding the system fixed,
and the system effects are then estimated net of that difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from evalstudy.criteria import KINDS, kind_of

from .models import DEFAULT_CLMM_FORMULA, DEFAULT_GLMM_FORMULA

OPTION = "integrity_covariates"
#: The covariates entered into the default models, in order (columns of the judgment table).
COVARIATES = ("rater.flagged",)
#: The default formulas that take the covariates, by the default model of a criterion's kind
#: (the linear model of sliders does not take them yet).
_DEFAULTS = {"clmm": DEFAULT_CLMM_FORMULA, "glmm": DEFAULT_GLMM_FORMULA}


def _default_formula(kind_name: str) -> str | None:
    model = kind_of(kind_name).model if kind_name in KINDS else None
    return _DEFAULTS.get(model or "")


def covariate_formula(default: str, terms: Sequence[str], *, one_system: bool) -> str:
    """`default` with `terms` added after its system term (or after `~ 1` with one system)."""
    response, rhs = (part.strip() for part in default.split("~", 1))
    parts = [p.strip() for p in rhs.split("+")]
    fixed = ["1"] if one_system else [p for p in parts if not p.startswith("(")]
    random = [p for p in parts if p.startswith("(")]
    return f"{response} ~ {' + '.join([*fixed, *terms, *random])}"


def with_covariates(options: Mapping[str, Any], criteria: Sequence[Mapping[str, Any]],
                    judgments: pd.DataFrame) -> dict[str, Any]:
    """`options` with a per-criterion formula for each default model that takes the
    covariates (see the module's docstring); unchanged without the option."""
    options = dict(options)
    if not options.get(OPTION) or judgments.empty:
        return options
    from .formulas import criterion_formula

    columns = [str(c) for c in judgments.columns]
    present = [c for c in COVARIATES if c in columns]
    if not present:
        return options
    formulas = dict(options.get("formulas") or {})
    humans = judgments[judgments["is_human"]]
    for criterion in criteria:
        key = str(criterion["key"])
        default = _default_formula(criterion["kind"])
        if default is None or key in formulas:
            continue
        if criterion_formula(options, criterion, columns) is not None:
            continue  # the user's global formula applies: kept as written
        rows = humans[humans["criterion"] == key]
        terms = [c for c in present if rows[c].nunique(dropna=True) > 1]
        if not terms:
            continue
        formulas[key] = covariate_formula(default, terms,
                                          one_system=rows["system"].nunique() < 2)
    options["formulas"] = formulas
    return options
