"""The contract every scorer follows (no Django here).

A scorer turns (reference, hypothesis) pairs into one `Score` per pair. What it is (its metric
name, the values it stores and how each reads, whether it needs the encoder) is declared once,
in its `ScorerSpec` (`metrics.scorers.specs`), which the class names as `spec`. Scorers are
built from a name and parameters by `metrics.scorers.registry.build`, carry a `version` (bumped
when results would change) and a `signature()` naming everything a result depends on (library
versions, model, layer, normaliser), so stored results can say exactly how they were produced.

Model-backed scorers (`needs_encoder = True`) receive a shared `Encoder` whose per-text cache
already holds every text of the batch: the caller encodes each distinct text once for all such
scorers (see `metrics.scorers.encoder`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kit.params import Param

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class MetricValue:
    """One value a scorer stores per output (a key of `Score.values`) and how it reads.

    `direction`: which way is better, or None for a value that says nothing of quality (a
    count of the reference alone). `headline`: one of its metric's main values (the analysis
    compares it with every binary criterion and lists it first). `count`: a raw count, which
    grows with the reference's length, so comparing it across items measures lengths (see
    `metrics.scorers.specs` for each decision).
    """

    name: str
    direction: Direction | None
    headline: bool = False
    count: bool = False

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower", None):
            raise ValueError(f"value {self.name!r}: direction must be 'higher', 'lower' or None, "
                             f"not {self.direction!r}")
        if self.headline and self.direction is None:
            raise ValueError(f"value {self.name!r}: a headline score needs a direction")


@dataclass(frozen=True)
class ScorerSpec:
    """A metric as the registry lists it, without importing its scorer.

    `target`: "module:Class" of the scorer (imported when one is built); `values`: what each
    result stores, the first being the result's headline (`MetricResult.headline`);
    `requires`: "module:function" returning why the scorer cannot run here (a program it needs
    is missing) or None; `default`: computed when a study names no metric;
    `study_language_param`: the parameter a metric run fills with the study's language when
    the run does not set it (None: the scorer has no language parameter); `params`: the
    parameters a researcher may set, typed (the metrics page builds its inputs from them; the
    API and the command line take any the constructor accepts).
    """

    name: str
    target: str
    values: tuple[MetricValue, ...]
    needs_encoder: bool = False
    requires: str | None = None
    default: bool = False
    study_language_param: str | None = None
    params: tuple[Param, ...] = ()

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"scorer {self.name!r} stores no value")
        names = [value.name for value in self.values]
        if len(set(names)) != len(names):
            raise ValueError(f"scorer {self.name!r} declares a value twice: {names}")
        if self.values[0].direction is None:
            raise ValueError(f"scorer {self.name!r}: its first value (the headline) needs a "
                             "direction")

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the values it stores, the headline first."""
        return tuple(value.name for value in self.values)

    @property
    def direction(self) -> Direction:
        """The direction of its headline value."""
        direction = self.values[0].direction
        assert direction is not None  # checked in __post_init__
        return direction


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
    # The declaration (`metrics.scorers.specs`); a concrete scorer names its own, and the five
    # attributes below are taken from it (never declared again on the class).
    spec: ClassVar[ScorerSpec]
    name: ClassVar[str]
    version: ClassVar[str]
    direction: ClassVar[Direction]
    needs_encoder: ClassVar[bool] = False
    # The value names this scorer produces; the first is the headline value.
    outputs: ClassVar[tuple[str, ...]]
    study_language_param: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:
            cls.name = spec.name
            cls.outputs = spec.outputs
            cls.direction = spec.direction
            cls.needs_encoder = spec.needs_encoder
            cls.study_language_param = spec.study_language_param

    def __init__(self, **params: Any):
        self.params = params

    def signature(self) -> dict[str, Any]:
        """Everything the results depend on, JSON-serialisable."""
        return {"metric": self.name, "version": self.version, "params": self.params}

    @abstractmethod
    def score(self, pairs: Sequence[Pair], *, encoder: Any = None) -> list[Score]:
        """One Score per pair, in order."""
