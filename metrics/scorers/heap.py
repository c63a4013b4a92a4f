"""How a metric worker keeps Python's cycle collector out of its way (no Django here).

Two costs, both measured by `bench/metrics.py` on a 2,000-pair suite:

- Importing torch and transformers and loading a model leave about half a million long-lived
  objects, and every full collection walks them all (about 0.15 s each; 0.27 s of the 1.0 s
  the suite spent beyond its encoder pass). They live as long as the worker: `heap_settle`
  collects once and freezes them out of later collections (`gc.freeze`, as CPython's
  documentation suggests for long-lived processes).
- The text metrics build many small short-lived objects (n-gram counters, alignments), and at
  the default threshold the youngest generation is collected every 700 of them; most die
  before the next collection anyway. `fewer_collections()` raises that threshold while a batch
  is scored (about 0.1 s of the text metrics' 0.6 s) and puts it back afterwards. Cycles are
  still collected, only less often, and the batch's garbage is bounded by the batch.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Objects allocated between two collections of the youngest generation while a batch is scored.
BATCH_THRESHOLD = 20_000

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None


def heap_settle() -> None:
    """Collect the garbage there is, then freeze every object that is left (see the module).

    Called when the first model loads, which is inside the first batch that needs it: that
    batch's own objects are frozen too. Frozen objects are still freed when nothing refers to
    them; only a reference cycle among them outlives its use, a bounded, one-time cost."""
    gc.collect()
    gc.freeze()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The youngest generation collected every `BATCH_THRESHOLD` allocations inside the block
    (never less often than the process's own setting); the process's thresholds afterwards.
    Nests, and is safe across threads: the last block to leave restores them."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if _saved[0]:  # 0: automatic collection is off, and stays off
                gc.set_threshold(max(_saved[0], BATCH_THRESHOLD), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
