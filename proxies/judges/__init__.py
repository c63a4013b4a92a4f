"""LLM judges without Django: backends (OpenAI-compatible HTTP, local Hugging Face models) and
judging methods (LATTE P(yes), rubric/G-Eval expected scores, DRPE role-player votes).

The Django side (runs, Judgments of `llm` raters, Celery tasks) lives in `proxies.runs` and
`proxies.tasks`; this package only turns prompts into `Completion`s and those into scores.
"""

from proxies.judges.backends.base import (
    Completion,
    JudgeBackend,
    JudgeError,
    MemoryCache,
    ResponseCache,
    Usage,
    cache_key,
)
from proxies.judges.backends.local_hf import LocalHFBackend
from proxies.judges.backends.openai import OpenAICompatibleBackend
from proxies.judges.backends.registry import build_backend
from proxies.judges.network import NetworkPolicy, NetworkRefused

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
