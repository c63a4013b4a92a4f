"""Judge prompt versions: each version of an LLM judge's prompt adds few-shot examples built
from human corrections on a development split (`services`). What a run of a version sends
is proxies.runs.prompts; versions use the runs, never the reverse."""

from __future__ import annotations

from proxies.versions.services import (
    DEFAULT_DEV_FRACTION,
    GUARD_SENTENCE,
    MAX_EXAMPLES,
    MAX_NOTE,
    VERSION_METHODS,
    base_version_template,
    corrections,
    examples_guard,
    excluded_items,
    held_out_outputs,
    human_answers,
    human_majority,
    judge_answers,
    judge_prompt_version_create,
    judge_prompt_versions,
    lineage,
    prompt_version_exclusions,
    root_settings_check,
    split_items,
)

__all__ = [
    "DEFAULT_DEV_FRACTION",
    "GUARD_SENTENCE",
    "MAX_EXAMPLES",
    "MAX_NOTE",
    "VERSION_METHODS",
    "base_version_template",
    "corrections",
    "examples_guard",
    "excluded_items",
    "held_out_outputs",
    "human_answers",
    "human_majority",
    "judge_answers",
    "judge_prompt_version_create",
    "judge_prompt_versions",
    "lineage",
    "prompt_version_exclusions",
    "root_settings_check",
    "split_items",
]
