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

Results are plain dataclasses (`kit.estimate.Estimate` and friends) so that callers can render
or serialise them without knowing how they were computed. Nothing here imports Django.
"""
