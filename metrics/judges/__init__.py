"""LLM judges without Django: backends (OpenAI-compatible HTTP, local Hugging Face models) and
judging methods (LATTE P(yes), rubric/G-Eval expected scores, DRPE role-player votes).

The Django side (runs, Judgments of `llm` raters, Celery tasks) lives in `metrics.services` and
`metrics.tasks`; this package only turns prompts into `Completion`s and those into scores.
"""

from metrics.judges.backends import (
    Completion,
    JudgeBackend,
    JudgeError,
    LocalHFBackend,
    MemoryCache,
    OpenAICompatibleBackend,
    ResponseCache,
    Usage,
    build_backend,
    cache_key,
)
from metrics.judges.network import NetworkPolicy, NetworkRefused

__all__ = [
    "Completion",
    "JudgeBackend",
    "JudgeError",
    "LocalHFBackend",
    "MemoryCache",
    "NetworkPolicy",
    "NetworkRefused",
    "OpenAICompatibleBackend",
    "ResponseCache",
    "Usage",
    "build_backend",
    "cache_key",
]
