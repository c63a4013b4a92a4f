"""What a power analysis simulates and what it returns: the designs (binary judgments,
Likert ratings), the tests, a result and a design search (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalstudy.criteria import KINDS, kind_of, kinds_where

BINARY_TESTS = ("glmm", "paired_t", "logit_cluster")
LIKERT_TESTS = ("clmm", "paired_t")
TESTS = tuple(dict.fromkeys(BINARY_TESTS + LIKERT_TESTS))
#: The default models a pilot criterion's fit can come from (the simulations model ordered
#: points and binary decisions), and the kinds fitted with them.
PILOT_MODELS = ("clmm", "glmm")
PILOT_KINDS = kinds_where(lambda kind: kind.model in PILOT_MODELS)


def pilot_model(kind_name: Any) -> str | None:
    """The model of a pilot criterion of this kind ("clmm" or "glmm"), None when it has none
    a simulation can use."""
    model = kind_of(kind_name).model if kind_name in KINDS else None
    return model if model in PILOT_MODELS else None


#: Tests that refit the analysis model in R (slow: about 0.05-0.2 s per glmer refit and
#: 1-1.5 s per clmm refit at pilot sizes, on one core).
MODEL_TESTS = ("glmm", "clmm")
#: Studies refitted per R request: large enough that the request's overhead (writing and
#: reading the chunk, about 20 ms) is small, small enough for frequent progress reports.
DEFAULT_CHUNK_SIZE = 25
#: What a failed refit counts as.
FAILED_POLICY = "counted as not significant"
Progress = Callable[[int, int], None]


@dataclass
class BinaryDesign:
    """A planned two-system binary-judgment study (see the module docstring)."""

    n_raters: int
    n_items: int
    ratings_per_output: int
    effect: float
    rater_sd: float = 0.0
    item_sd: float = 0.0
    baseline: float = 0.0
    n_systems: int = 2

    def __post_init__(self) -> None:
        if self.n_systems != 2:
            raise ValueError("only two-system designs are supported")
        if self.n_items < 2:
            raise ValueError("need at least 2 items")
        if self.n_raters < 1 or self.ratings_per_output < 1:
            raise ValueError("need at least 1 rater and 1 rating per output")
        if self.rater_sd < 0 or self.item_sd < 0:
            raise ValueError("SDs must be >= 0")

    @property
    def n_judgments(self) -> int:
        return self.n_items * self.n_systems * self.ratings_per_output

    @property
    def latin_square(self) -> bool:
        """True when every item can get distinct raters for all its judgments."""
        return self.n_raters >= self.ratings_per_output * self.n_systems


@dataclass
class LikertDesign(BinaryDesign):
    """A planned two-system Likert study: ``thresholds`` are the K-1 increasing cut points of
    the cumulative logit model (ratings 1..K; a pilot's ``fit_clmm`` thresholds), ``effect``
    the latent-scale difference B - A. ``baseline`` is unused (the thresholds place the scale)."""

    thresholds: tuple[float, ...] = (-1.5, -0.5, 0.5, 1.5)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.thresholds = tuple(float(t) for t in self.thresholds)
        if len(self.thresholds) < 1 or any(
                b <= a for a, b in zip(self.thresholds, self.thresholds[1:], strict=False)):
            raise ValueError("thresholds must be at least one increasing cut point")


@dataclass
class PowerResult:
    """Estimated power of one design.

    ``power`` = ``rejections`` / ``n_sim`` (failed refits count as not significant, see
    ``failed_policy``), Wilson CI ``ci_low``-``ci_high`` at ``conf_level``; ``power_converged``
    the share among refits that did not fail (None when all failed or for tests without a
    refit). ``test``: ``"glmm"``, ``"clmm"``, ``"paired_t"`` or ``"logit_cluster"``; ``model``
    says in words what was simulated and what was refitted or tested, ``engine`` what ran it.
    ``design``: the design's fields plus ``"outcome"`` (``"binary"`` or ``"likert"``).
    ``seed``: the seed used (drawn and reported when none was given). ``mean_difference``:
    the mean over simulations of the observed difference B - A (proportions of "yes" or mean
    ratings); ``mean_estimate``: the mean ``systemB`` estimate of the refits that did not fail.
    ``n_failed``, ``n_singular``: refits that failed / had a random-effect variance of ~0;
    ``failure_messages``: up to 5 distinct reasons. ``chunk_size``, ``n_chunks``: how the
    refits were sent to R (chunks run by this call); ``elapsed_s`` wall time,
    ``seconds_per_simulation``. ``stopped_early``: a design-search step that stopped once its
    CI lay on one side of the target (``n_sim`` is then the number run).
    ``pilot``: where the variance components came from (see :func:`pilot_from_fit`), with
    the pilot fit's warnings, or None. ``simulations``: per simulation ``{"sim", "p",
    "estimate", "se", "failed", "singular"}`` only with ``keep_simulations=True``.
    """

    power: float
    ci_low: float
    ci_high: float
    n_sim: int
    rejections: int
    alpha: float
    test: str
    design: dict[str, Any]
    seed: int | None
    mean_difference: float
    elapsed_s: float
    warnings: list[str] = field(default_factory=list)
    model: str = ""
    engine: str = ""
    conf_level: float = 0.95
    ci_method: str = "Wilson score interval"
    n_failed: int = 0
    failed_policy: str = FAILED_POLICY
    power_converged: float | None = None
    n_singular: int = 0
    failure_messages: list[str] = field(default_factory=list)
    mean_estimate: float | None = None
    chunk_size: int | None = None
    n_chunks: int = 1
    seconds_per_simulation: float = 0.0
    stopped_early: bool = False
    pilot: dict[str, Any] | None = None
    simulations: list[dict[str, Any]] | None = None


@dataclass
class DesignSearch:
    """Result of :func:`smallest_design`.

    ``value``: the smallest ``vary`` value found whose power meets the target (None if even
    ``hi`` does not), within ``resolution``: the search stops when the passing value and the
    largest failing value evaluated are at most ``max(1, resolution * value)`` apart
    (``failing_below``: that failing value, or None). ``evaluated``: every step of the search,
    by value, each with at most ``n_sim_per_step`` simulations (fewer when it stopped early,
    see ``PowerResult.stopped_early``; the ``start`` value with ``n_sim``); ``result``: the
    chosen value evaluated with ``n_sim`` simulations (the figure to report; None when no
    value passed). ``search``: how the search went, in words. ``warnings`` (e.g. the final
    estimate falling below the target by Monte Carlo noise).
    """

    target_power: float
    vary: str
    criterion: str
    value: int | None
    result: PowerResult | None
    evaluated: dict[int, PowerResult]
    n_sim: int = 0
    n_sim_per_step: int = 0
    resolution: float = 0.0
    failing_below: int | None = None
    search: str = ""
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
