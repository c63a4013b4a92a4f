"""Django-free statistics for evaluation studies: agreement among raters, validity of proxies.

Modules (among others)
----------------------
- `analysis.stats.agreement`: percent agreement, Cohen's/Fleiss' kappa, Krippendorff's alpha,
  Gwet's AC1, the six Shrout-Fleiss ICCs, a cluster bootstrap and the human ceiling
  (leave-one-rater-out agreement) that proxies are compared against.
- `analysis.stats.validity`: humans vs proxies: AUC-ROC with DeLong or bootstrap CIs (overall and
  per slice), DeLong's test for two correlated AUCs, correlations with bootstrap CIs, Williams'
  test, Bland-Altman, a threshold picked for a target precision, LATTEScore and the LATTE
  deployment table.

Input convention: a tidy `pandas.DataFrame` with one row per rating and the columns `unit` (what
is rated: an output or slot key), `rater` and `value` (numeric or category), optionally `item`
(the source item a unit belongs to, the cluster for item-level bootstraps) and other columns.
Proxies (metrics, LLM judges) are raters like humans, so the same code compares both.

Results are plain dataclasses (`Estimate` and friends) so that callers can render or serialise
them without knowing how they were computed. Nothing here imports Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Estimate"]


@dataclass
class Estimate:
    """A point estimate with an optional confidence interval.

    `n` counts what the estimate is based on (units, cases, pairs: the function says which);
    `method` names the estimator and the CI method in words fit for a report. `ci_low` and
    `ci_high` are None where no interval was computed. `p_value` is set by tests; `details`
    holds extra numbers a report may show (observed/chance agreement, F statistics, ...).
    """

    value: float
    ci_low: float | None
    ci_high: float | None
    n: int
    method: str
    p_value: float | None = None
    details: dict[str, float] = field(default_factory=dict)
