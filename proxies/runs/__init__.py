"""Proxy runs: a proxy judge (an LLM judge or a learned proxy, proxies.methods) answering a
study's criteria on its units as a non-human rater. `services` starts, dispatches, judges and
refreshes runs; `answers` judges one batch through the run's method; `backends` checks and
builds the judge backends (network policy, keys, limits, the response cache, where soft
prompts may be loaded from); `prompts` is what a run of a prompt version sends; `thresholds`
turns scores into decisions and LATTEScores; `tasks` are the workers' entry points.

Imports go one way: proxies.training and proxies.versions use the runs, never the reverse.
"""

from __future__ import annotations

from proxies.runs.answers import (
    batch_answers,
    stored_values,
    unit_texts,
)
from proxies.runs.backends import (
    BACKEND_LIMITS,
    PARAM_LIMITS,
    SOFT_PROMPT_DIR,
    SOFT_PROMPT_LIMITS,
    SOFT_PROMPT_NAME,
    DatabaseResponseCache,
    backend_build,
    backend_clean,
    base_url_check,
    default_backend,
    judge_key_origins,
    judge_network_policy,
    key_env_check,
    limits_check,
    soft_prompt_check,
    soft_prompt_root,
)
from proxies.runs.prompts import (
    version_prefix,
    version_signature,
)
from proxies.runs.services import (
    JUDGE_VERSION,
    default_template,
    proxy_batch_judge,
    proxy_judgments,
    proxy_rater_for,
    proxy_run_dispatch,
    proxy_run_fail,
    proxy_run_prepare,
    proxy_run_refresh,
    proxy_run_resume,
    proxy_run_start,
    proxy_seat_prepare,
    proxy_signature,
    proxy_units,
    shows_pair,
    template_check,
)
from proxies.runs.thresholds import (
    decision_identity,
    latte_scores,
    proxy_scores_with_labels,
    proxy_threshold_choose,
    threshold_choice_record,
)

__all__ = [
    "BACKEND_LIMITS",
    "JUDGE_VERSION",
    "PARAM_LIMITS",
    "SOFT_PROMPT_DIR",
    "SOFT_PROMPT_LIMITS",
    "SOFT_PROMPT_NAME",
    "DatabaseResponseCache",
    "backend_build",
    "backend_clean",
    "base_url_check",
    "batch_answers",
    "decision_identity",
    "default_backend",
    "default_template",
    "judge_key_origins",
    "judge_network_policy",
    "key_env_check",
    "latte_scores",
    "limits_check",
    "proxy_batch_judge",
    "proxy_judgments",
    "proxy_rater_for",
    "proxy_run_dispatch",
    "proxy_run_fail",
    "proxy_run_prepare",
    "proxy_run_refresh",
    "proxy_run_resume",
    "proxy_run_start",
    "proxy_scores_with_labels",
    "proxy_seat_prepare",
    "proxy_signature",
    "proxy_threshold_choose",
    "proxy_units",
    "shows_pair",
    "soft_prompt_check",
    "soft_prompt_root",
    "stored_values",
    "template_check",
    "threshold_choice_record",
    "unit_texts",
    "version_prefix",
    "version_signature",
]
