"""Training learned proxies on a study's human judgments, and soft prompts for a local judge.
`services` starts, trains and fails learned-proxy trainings (the process checks included);
`pairwise` is the pairwise learned proxy's data and its answers stored as a run;
`soft_prompts` is LATTE's prompt tuning of a local judge; `tasks` are the workers' entry
points. Training uses proxies.runs (a pairwise proxy stores its answers as a run); the runs
never import training."""

from __future__ import annotations

from proxies.training.pairwise import (
    MIN_LABELLED_PAIRS,
    features_check,
    human_units,
    labelled_pairs,
    pairwise_criterion,
    pairwise_examples,
    pairwise_store_answers,
    pairwise_train,
)
from proxies.training.services import (
    TRAINING_LIMITS,
    learned_examples,
    learned_proxies_fail_dead,
    learned_proxy_check,
    learned_proxy_fail,
    learned_proxy_start,
    learned_proxy_train,
    process_alive,
    process_identity,
)
from proxies.training.soft_prompts import (
    soft_prompt_train,
)

__all__ = [
    "MIN_LABELLED_PAIRS",
    "TRAINING_LIMITS",
    "features_check",
    "human_units",
    "labelled_pairs",
    "learned_examples",
    "learned_proxies_fail_dead",
    "learned_proxy_check",
    "learned_proxy_fail",
    "learned_proxy_start",
    "learned_proxy_train",
    "pairwise_criterion",
    "pairwise_examples",
    "pairwise_store_answers",
    "pairwise_train",
    "process_alive",
    "process_identity",
    "soft_prompt_train",
]
