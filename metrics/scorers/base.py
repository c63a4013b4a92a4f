"""The contract every scorer follows (no Django here).

A scorer turns (reference, hypothesis) pairs into one `Score` per pair. Scorers are built from a
name and parameters by `metrics.scorers.registry.build`, carry a `version` (bumped when results
would change) and a `signature()` naming everything a result depends on (library versions,
model, layer, normaliser), so stored results can say exactly how they were produced.

Model-backed scorers (`needs_encoder = True`) receive a shared `Encoder` whose per-text cache
already holds every text of the batch: the caller encodes each distinct text once for all such
scorers (see `metrics.scorers.encoder`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

Direction = Literal["higher", "lower"]


class ScorerUnavailable(RuntimeError):
    """Raised by a scorer's constructor when something it needs outside Python (a program such
    as espeak-ng) is missing here; the message says what and how to install it. The registry
    turns it into "metric 'x' is unavailable: ..."."""


@dataclass(frozen=True)
class Pair:
    key: Hashable  # the caller's id for the pair (e.g. an output id)
    reference: str
    hypothesis: str


@dataclass
class Score:
    """Named values for one pair, optional details (e.g. the word alignment), or an error.

    A pair that cannot be scored gets `error` (a sentence saying why) and no values; it never
    fails the other pairs of the batch.
    """

    values: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class Scorer(ABC):
    name: ClassVar[str]
    version: ClassVar[str]
    direction: ClassVar[Direction]
    needs_encoder: ClassVar[bool] = False
    # The value names this scorer produces; the first is the headline value.
    outputs: ClassVar[tuple[str, ...]]
    # The parameter that a metric run fills with the study's language when the run does not
    # set it (None: the scorer has no language parameter).
    study_language_param: ClassVar[str | None] = None

    def __init__(self, **params: Any):
        self.params = params

    def signature(self) -> dict[str, Any]:
        """Everything the results depend on, JSON-serialisable."""
        return {"metric": self.name, "version": self.version, "params": self.params}

    @abstractmethod
    def score(self, pairs: Sequence[Pair], *, encoder: Any = None) -> list[Score]:
        """One Score per pair, in order."""
