"""Bounded per-process memories of the scorers, and one call that empties them all.

A study's batch repeats its texts: three systems share every reference, and WER, CER and H_eval
normalise the same texts, WER and H_eval align the same normalised words. The scorers remember
such results in bounded LRU memories registered here (`memoised`). A memory never changes a
result: it holds the value of a pure function of hashable arguments.

`memos_clear()` empties every memory, e.g. so that a benchmark times every run from cold.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_MEMOS: list[Any] = []


def memoised(maxsize: int) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """`functools.lru_cache(maxsize)`, registered for `memos_clear`.

    Precondition: the decorated function is pure, and its arguments are hashable and never
    mutated; callers must not mutate what it returns."""

    def wrap(function: Callable[..., T]) -> Callable[..., T]:
        cached = functools.lru_cache(maxsize=maxsize)(function)
        _MEMOS.append(cached)
        return cached

    return wrap


def memos_clear() -> None:
    """Empty every registered memory."""
    for memo in _MEMOS:
        memo.cache_clear()


def memo_stats() -> dict[str, tuple[int, int]]:
    """(hits, misses) of every registered memory by its function's qualified name."""
    stats = {}
    for memo in _MEMOS:
        info = memo.cache_info()
        stats[f"{memo.__module__}.{memo.__qualname__}"] = (info.hits, info.misses)
    return stats
