"""Regression models for human-evaluation data: ordinal (Likert), binary and pairwise preference.

Input convention: a tidy pandas DataFrame, one row per judgment, with ``rating`` (ordinal) or
``y`` (binary 0/1), ``system``, ``rater``, ``item`` and possibly other factor columns (system
metadata such as ``temp``/``contact``). Formulas use a small subset of R / lme4 syntax (see
:mod:`analysis.stats.formula`): columns of ``df``, ``1``, ``a:b``, ``a*b`` and random terms
``(1|rater)``, ``(1 + x|g)``. Every formula is parsed against ``df``'s columns and the engines
receive only the text rebuilt from the parsed terms, never the caller's text: patsy and R
evaluate formulas as code, so this holds for direct calls too, not just user entry points.
Any column named in the formula is used; non-numeric columns and all grouping factors of
random terms become factors; numeric fixed-effect columns stay numeric (covariates). Rows with
a missing value in a used column are dropped (with a warning).

Reference levels: the first level of each factor is the reference of R's treatment contrasts,
so ``system`` coefficients read "level minus reference". Level order: ``levels={col: [...]}``
if given, else a pandas Categorical's order, else sorted values (numerically when numeric).
``reference="B"`` (or ``{"system": "B", "temp": "warm"}``) moves that level to the front.
Coefficient names follow R: factor name + level, e.g. ``systemB``, ``tempwarm``; the
statsmodels fallbacks are renamed to the same convention.

Engines (``ModelFit.engine`` always says which one ran, with versions read at run time):

* ``fit_clmm`` / ``fit_clm``: R ``ordinal::clmm`` / ``ordinal::clm`` (logit link), run in a
  separate R process (:mod:`analysis.stats.rbridge`; the R code is in ``analysis/stats/r/``).
  Without R (or ``engine="statsmodels"``): statsmodels ``OrderedModel(distr="logit")``
  fitted with BFGS, no constant -> the same model as R's ``clm``; random-effect terms are
  dropped and a warning says so.
* ``fit_binomial_glmm``: ``lme4::glmer`` (binomial, Laplace) in the same separate R process
  (``engine="auto"`` or ``"R"``; also accepts a ``cbind(successes, failures)`` response).
  ``engine="pymer4"`` goes through pymer4 ``Lmer(..., family="binomial")`` instead, only when
  the user has installed pymer4 (optional, not installed by default: it embeds R, GPL, in the
  Python process through rpy2). Without R (or ``engine="statsmodels"``): a plain
  logistic regression (statsmodels GLM Binomial/logit) with cluster-robust standard errors by
  the grouping factors of the random terms (two-way when there are two, e.g. rater and item).
  That is NOT glmer: estimates are population-averaged (marginal) log-odds, which are smaller
  in magnitude than glmer's conditional ones when the random-effect variance is large; no
  variances are estimated. The engine string and a warning say so.
* ``fit_lmm``: continuous scores (sliders): R ``lmerTest::lmer`` (REML, Satterthwaite df) in
  the same R process; without R, OLS with cluster-robust SEs (not a mixed model; said so).
* ``fit_binomial_penalised``: the same binomial model with a weakly informative normal prior
  on the fixed effects (R ``blme::bglmer``; ``brglm2::brglmFit`` without random terms), for
  data with separation, where glmer's estimates are infinite.

Separation (a factor level whose outcomes are all alike: a system at 100% "yes", or rated only
in the top category) is diagnosed on every fit (``extra["separation"]``, a warning naming the
level), and the fit's warnings travel with the numbers derived from it
(:func:`pairwise_contrasts`).

Results are plain dataclasses (:class:`Coefficient`, :class:`ModelFit`, ...).
Confidence intervals are Wald intervals (estimate +- z * SE) at ``conf_level``; p-values are
two-sided Wald z tests.

Modules: :mod:`.base` (result types, formula preparation, engine choice), :mod:`.ordinal`,
:mod:`.binomial`, :mod:`.gaussian`, :mod:`.separation`, :mod:`.contrasts`,
:mod:`.preference`. This package exports their public API; the R side is
``analysis/stats/r/models.R`` and ``separation.R``.
"""

from __future__ import annotations

from analysis.stats.models.base import (
    DEFAULT_CLM_FORMULA,
    DEFAULT_CLMM_FORMULA,
    DEFAULT_GLMM_FORMULA,
    RANDOM_EFFECTS_DROPPED,
    Coefficient,
    ModelFit,
    for_frame,
)
from analysis.stats.models.binomial import (
    PENALISED_COEF_SD,
    PENALISED_INTERCEPT_SD,
    PYMER4_MISSING,
    fit_binomial_glmm,
    fit_binomial_penalised,
)
from analysis.stats.models.contrasts import (
    Contrast,
    PairwiseContrasts,
    holm_adjust,
    pairwise_contrasts,
)
from analysis.stats.models.gaussian import DEFAULT_LMM_FORMULA, fit_lmm
from analysis.stats.models.ordinal import fit_clm, fit_clmm
from analysis.stats.models.preference import PreferenceResult, PreferenceShare, preference_model
from analysis.stats.models.separation import (
    SEPARATION_LIMIT,
    SEPARATION_OPTIONS,
    separation_report,
    wants_penalised,
)

__all__ = [
    "DEFAULT_CLMM_FORMULA",
    "DEFAULT_CLM_FORMULA",
    "DEFAULT_GLMM_FORMULA",
    "DEFAULT_LMM_FORMULA",
    "PENALISED_COEF_SD",
    "PENALISED_INTERCEPT_SD",
    "PYMER4_MISSING",
    "RANDOM_EFFECTS_DROPPED",
    "SEPARATION_LIMIT",
    "SEPARATION_OPTIONS",
    "Coefficient",
    "Contrast",
    "ModelFit",
    "PairwiseContrasts",
    "PreferenceResult",
    "PreferenceShare",
    "fit_binomial_glmm",
    "fit_binomial_penalised",
    "fit_clm",
    "fit_clmm",
    "fit_lmm",
    "for_frame",
    "holm_adjust",
    "pairwise_contrasts",
    "preference_model",
    "separation_report",
    "wants_penalised",
]
