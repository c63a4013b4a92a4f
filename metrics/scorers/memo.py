"""Bounded per-process memories of the scorers, and one call that empties them all.

A study's batch repeats its texts: three systems share every reference, and WER, CER and H_eval
normalise the same texts, WER and H_eval align the same normalised words. The scorers remember
such results in bounded LRU memories registered here (`memoised`). A memory never changes a
result: it holds the value of a pure function of hashable arguments.

`memos_clear()` empties every memory, e.g. so that a benchmark times every run from cold.

`BatchMemo` is the same kind of memory for results computed many at a time (PER asks espeak-ng
for every missing text of a batch in one call), which `functools.lru_cache` cannot fill.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

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


class _MemoInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class BatchMemo(Generic[K, V]):
    """A bounded LRU mapping, registered for `memos_clear` and `memo_stats` under `label`.

    Precondition, as for `memoised`: a key's value is a pure function of the key, and callers
    never mutate a value."""

    def __init__(self, label: str, maxsize: int):
        self.label = label
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._hits = 0
        self._misses = 0
        _MEMOS.append(self)

    def lookup(self, keys: Iterable[K]) -> dict[K, V]:
        """The remembered values of those keys that are remembered (each counted a hit or a
        miss once per call)."""
        found: dict[K, V] = {}
        for key in dict.fromkeys(keys):
            if key in self._data:
                self._data.move_to_end(key)
                found[key] = self._data[key]
                self._hits += 1
            else:
                self._misses += 1
        return found

    def store(self, values: dict[K, V]) -> None:
        for key, value in values.items():
            self._data[key] = value
            self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def cache_clear(self) -> None:
        self._data.clear()
        self._hits = self._misses = 0

    def cache_info(self) -> _MemoInfo:
        return _MemoInfo(self._hits, self._misses, self.maxsize, len(self._data))


def memos_clear() -> None:
    """Empty every registered memory."""
    for memo in _MEMOS:
        memo.cache_clear()


def memo_stats() -> dict[str, tuple[int, int]]:
    """(hits, misses) of every registered memory by its function's qualified name."""
    stats = {}
    for memo in _MEMOS:
        info = memo.cache_info()
        label = getattr(memo, "label", None) or f"{memo.__module__}.{memo.__qualname__}"
        stats[label] = (info.hits, info.misses)
    return stats
