"""Power analysis by simulation for a planned two-system study, with the analysis's own model.

Data-generating model: the model the study will be analysed with (analysis/stats/models/).

* Binary judgments (:class:`BinaryDesign`): the binomial GLMM ::

      logit P(y = 1) = baseline + effect * [system == B] + u_rater + v_item
      u_rater ~ N(0, rater_sd^2),  v_item ~ N(0, item_sd^2)

* Likert ratings (:class:`LikertDesign`): the cumulative link mixed model (R ``ordinal``) ::

      logit P(rating <= j) = theta_j - (effect * [system == B] + u_rater + v_item)

  with the pilot's thresholds ``theta_1 < ... < theta_(K-1)`` (ratings 1..K).

``effect`` is the conditional difference system B minus system A on the model's scale (the
``systemB`` coefficient); ``rater_sd``/``item_sd`` are the random-intercept SDs, ``baseline``
the intercept, ``thresholds`` the cut points: a pilot's fit gives them (:func:`sds_from_fit`,
:func:`pilot_from_fit`).

Design: ``n_items`` items, each with one output per system; each output gets
``ratings_per_output`` judgments. For every item, ``2 * ratings_per_output`` distinct raters
are drawn at random, the first half judging system A's output, the second half system B's (a
between-rater Latin square: no rater sees the same item twice). With fewer raters than that,
raters are drawn with replacement (and a warning says that some raters then see an item in
both conditions).

Tests (``test=``):

* ``"glmm"`` (binary, default) / ``"clmm"`` (Likert, default): each simulated study is refitted
  with the analysis model, ``y ~ system + (1|rater) + (1|item)`` by ``lme4::glmer`` (binomial,
  Laplace) or ``rating ~ system + (1|rater) + (1|item)`` by ``ordinal::clmm``, and the
  ``systemB`` coefficient's Wald z test is the test (the p-value the report prints). The
  refits run in the R worker (:mod:`analysis.stats.rbridge`), one request per chunk of
  ``chunk_size`` studies. A refit that fails (an R error, a non-convergence message, a
  non-finite SE: the models' rule for ``ModelFit.converged``) counts as NOT
  significant: the analysis would not report a converged effect from it. ``n_failed`` says
  how many, and ``power_converged`` gives the share among the others.
* ``"paired_t"``: a fast screen, NOT the analysis model: per item, the mean of system B's
  judgments minus system A's; a one-sample t test of these differences (n_items - 1 df). No
  refit, no R; its power is close to (usually below) the model's.
* ``"logit_cluster"`` (binary only): logistic regression with cluster-robust SEs by item
  (statsmodels); anti-conservative with few items.

Reproducibility: simulation ``i`` draws from its own generator,
``numpy.random.default_rng(SeedSequence(seed, spawn_key=(i,)))``, so every study, hence the
result, depends only on ``seed`` and ``i``: not on the chunk size, the number of R processes,
nor R's random number generator (the data are simulated in Python; R only refits). The same
seed gives the same studies to every test (common random numbers). Without a seed one is
drawn and reported (``PowerResult.seed``).

Power is the share of simulations with p < ``alpha`` with a Wilson CI at ``conf_level``.
"""

from __future__ import annotations

from .designs import (
    BINARY_TESTS,
    DEFAULT_CHUNK_SIZE,
    FAILED_POLICY,
    LIKERT_TESTS,
    MODEL_TESTS,
    PILOT_KINDS,
    PILOT_MODELS,
    TESTS,
    BinaryDesign,
    DesignSearch,
    LikertDesign,
    PowerResult,
    Progress,
    pilot_model,
)
from .option import check_option, run_option
from .pilots import pilot_from_fit, sds_from_fit
from .search import power_binary, power_likert, smallest_design
from .simulate import simulate_binary_study, simulate_likert_study

__all__ = [
    "BINARY_TESTS",
    "DEFAULT_CHUNK_SIZE",
    "FAILED_POLICY",
    "LIKERT_TESTS",
    "MODEL_TESTS",
    "PILOT_KINDS",
    "PILOT_MODELS",
    "TESTS",
    "BinaryDesign",
    "DesignSearch",
    "LikertDesign",
    "PowerResult",
    "Progress",
    "check_option",
    "pilot_from_fit",
    "pilot_model",
    "power_binary",
    "power_likert",
    "run_option",
    "sds_from_fit",
    "simulate_binary_study",
    "simulate_likert_study",
    "smallest_design",
]
