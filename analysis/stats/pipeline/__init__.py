"""The whole analysis of a study, from tidy tables to one JSON-able result (no Django here).

Input
-----
- `judgments`: one row per judgment with at least `rater`, `is_human`, `output`, `item`,
  `system`, `system_b` (pairwise), `criterion`, `criterion_kind`, `value`, `numeric`,
  `seconds`, and item/system metadata as `item.<field>` / `system.<field>` columns.
- `criteria`: [{"key", "kind", "scale_points", "options"}] in display order.
- `metrics`: one row per output (`output`, `item`, `system`) with a column per metric value
  (e.g. `wer`, `bertscore_f`, `sd`), or None.

Every section is computed on its own: a section that fails records its error and the rest of
the analysis goes on (a report with one failed model is better than no report). A user's model
formula is the exception: one outside the grammar of `formula.py` is refused (FormulaError)
before anything is computed, since it is a mistake (or an attack), not a property of the data.

Modules, by step:

- `sections`: how one section runs (timed, its failure recorded);
- `analysis.stats.formulas` (beside the package, so that the web request checking a run's
  formulas loads no statistics library): the user's model formulas and the frame a model is
  fitted on;
- `rater_agreement`: agreement on the declared scale and the human ceiling;
- `families`: the registry of analysis families; a criterion's kind lists those that
  analyse it (`AnswerKind.analysis`), and `analyse_criterion` runs them;
- `proxy_validity`: proxies against the human binary label, Williams' tests, deployment;
- `run`: `analyse`, the whole study.

The names below are the package's public face: import them from `analysis.stats.pipeline`.
"""

from __future__ import annotations

from ..formulas import (
    ADDED_COLUMNS,
    FORMULA_BASE_COLUMNS,
    check_formulas,
    criterion_formula,
    formula_columns,
    formula_response,
    metadata_aliases,
    model_frame,
)
from ..options import DEPLOYMENT_DEFAULT_GROUPS, deployment_group_column
from .families import (
    FAMILIES,
    CriterionAnalysis,
    Family,
    ValidityAnalysis,
    analyse_criterion,
    analyse_validity,
    families_of,
    family,
)
from .proxy_validity import (
    deployment_tables,
    human_majority,
    outputs_evaluated_on,
    proxy_scores,
    proxy_validity,
    williams_tests,
)
from .rater_agreement import (
    AGREEMENT_N_BOOT,
    AGREEMENT_SEED,
    MAX_PAIRS_COMPUTED,
    MAX_RATER_PAIRS,
    MIN_SHARED_UNITS,
    Weighting,
    cohen_pairs,
    declared_categories,
    human_ceiling,
    interval_agreement,
    on_declared_scale,
    rater_agreement,
    rater_keys,
    unit_keys,
)
from .run import analyse
from .sections import Progress, SectionRunner, run_section, silent

__all__ = [
    "ADDED_COLUMNS", "AGREEMENT_N_BOOT", "AGREEMENT_SEED", "DEPLOYMENT_DEFAULT_GROUPS",
    "FAMILIES", "FORMULA_BASE_COLUMNS", "MAX_PAIRS_COMPUTED", "MAX_RATER_PAIRS",
    "MIN_SHARED_UNITS", "CriterionAnalysis", "Family", "Progress", "SectionRunner",
    "ValidityAnalysis", "Weighting", "analyse", "analyse_criterion", "analyse_validity",
    "check_formulas", "cohen_pairs", "criterion_formula", "declared_categories",
    "deployment_group_column", "deployment_tables", "families_of", "family",
    "formula_columns", "formula_response", "human_ceiling", "human_majority",
    "interval_agreement", "metadata_aliases", "model_frame", "on_declared_scale",
    "outputs_evaluated_on", "proxy_scores", "proxy_validity", "rater_agreement", "rater_keys",
    "run_section", "silent", "unit_keys", "williams_tests",
]
