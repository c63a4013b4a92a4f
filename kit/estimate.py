"""`Estimate`: a point estimate with its confidence interval, the result type of every
statistic (no Django here). Shared by the analysis and the proxies' quality figures
(`proxies.quality`), which the analysis builds on, so it lives below both."""

from __future__ import annotations

from dataclasses import dataclass, field


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
