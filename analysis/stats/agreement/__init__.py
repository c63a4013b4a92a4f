"""Agreement among raters (humans and proxies alike) on a tidy table of ratings.

Input: a `pandas.DataFrame` with one row per rating and the columns `unit` (what is rated),
`rater` and `value`; optionally `item` (the source item a unit belongs to, the cluster for
item-level bootstraps). Rules shared by every function here:

- Rows whose `value` is missing (NaN/None) are dropped first: a missing value is "not rated"
  (counted in `excluded["missing_values"]`).
- A rater may rate a unit at most once; a duplicate (unit, rater) pair raises `ValueError`
  (aggregate repeated judgments before calling).
- Categories are compared by equality. Pass the declared scale as `labels` (criterion scale
  1..n, severity 0..2, a categorical criterion's options, yes/no): AC1's chance term, AC2's and
  weighted kappa's weights depend on the category set, so a coefficient computed on the values
  observed changes when any rater uses a new category. Without `labels` the sorted observed
  values are used and the result says so (`categories_from`). Order matters for weighted
  kappa, AC2, ordinal alpha and tie-breaking: the order of `labels`, else numeric order.
- A coefficient that is undefined on the data (a single category, no unit with two ratings)
  comes back as NaN rather than raising, so that bootstrap replicates can skip it.

Results are `Agreement` objects: an `Estimate` plus the numbers a report must show beside the
value (units, raters, ratings, what was excluded and why, warnings as sentences, the level of
measurement, the category set, the weights, the SE, and B and the seed of a bootstrap CI).

Everything is implemented here on numpy/scipy: the `krippendorff` and `pingouin` packages
(GPL) are test-only oracles. Pinned against published values (Krippendorff 2011, Shrout &
Fleiss 1979, Gwet's irrCAC, R irr) and lme4 in `tests/analysis/stats/test_agreement*.py`.

Modules: `base` (the `Agreement` result, input validation and coding), `gwet` (percent
agreement, AC1/AC2, Fleiss' kappa), `kappa` (Cohen's kappa, pairwise kappas), `alpha`
(Krippendorff's alpha), `icc` (intraclass correlations, REML variance components),
`bootstrap` (cluster bootstraps), `ceiling` (the human ceiling), `pairs` (which rater pairs
share enough units, without a raters x raters table). This package exports their public API.
"""

from __future__ import annotations

from analysis.stats.agreement.alpha import krippendorff_alpha
from analysis.stats.agreement.base import (
    CONFLEV,
    LEVELS,
    N_BOOT,
    N_BOOT_ICC,
    Agreement,
    AgreementWeights,
    Cluster,
    KappaWeights,
    Level,
    TieBreak,
    category_order,
    ratings_frame,
)
from analysis.stats.agreement.bootstrap import bootstrap_ci
from analysis.stats.agreement.ceiling import (
    AgreementStatistic,
    HumanCeiling,
    RaterAgreement,
    human_ceiling,
)
from analysis.stats.agreement.gwet import (
    agreement_weights,
    fleiss_kappa,
    gwet_ac1,
    percent_agreement,
)
from analysis.stats.agreement.icc import (
    ICC_FORMS,
    IccMethod,
    VarianceComponents,
    icc,
    variance_components,
)
from analysis.stats.agreement.kappa import cohen_kappa, paired_ratings, pairwise_kappas
from analysis.stats.agreement.pairs import RaterPairs, rater_pair_overlaps

__all__ = [
    "CONFLEV",
    "ICC_FORMS",
    "LEVELS",
    "N_BOOT",
    "N_BOOT_ICC",
    "Agreement",
    "AgreementStatistic",
    "AgreementWeights",
    "Cluster",
    "HumanCeiling",
    "IccMethod",
    "KappaWeights",
    "Level",
    "RaterAgreement",
    "RaterPairs",
    "TieBreak",
    "VarianceComponents",
    "agreement_weights",
    "bootstrap_ci",
    "category_order",
    "cohen_kappa",
    "fleiss_kappa",
    "gwet_ac1",
    "human_ceiling",
    "icc",
    "krippendorff_alpha",
    "paired_ratings",
    "pairwise_kappas",
    "percent_agreement",
    "rater_pair_overlaps",
    "ratings_frame",
    "variance_components",
]
