"""Live quality control of raters, on plain data (a Django-free core): speeding, straight-lining,
leave-one-out agreement with the other raters, and rater competence by MACE.

`annotation.rater_quality` reads the judgments of a study into the plain values
these functions take; the analysis (`analysis.selectors`) uses the MACE competences to leave
raters out. Nothing here knows about the database.

Rules and why:

- Speeding. A rater whose median seconds per item is below the study's threshold is flagged.
  The threshold is the study's own setting, or, left blank, `SPEEDER_FRACTION` (0.3) times the
  median seconds per item of every answered item of the study (all raters together). The
  survey literature's speeder rules are relative to the median completion time (e.g. Greszki,
  Meyer & Schoen 2015: faster than 30-40% of the median); a median is robust to the speeders
  themselves as long as they are a minority, and a study-relative rule needs no knowledge of how
  long an item takes to read or hear. The threshold is derived only once `SPEEDER_MIN_TIMINGS`
  items were timed, and a rater is judged only after `SPEEDER_MIN_ITEMS` items.
- Straight-lining. On a criterion with three or more answer points, a rater who gave the same
  answer to at least `STRAIGHT_SHARE` (90%) of at least `STRAIGHT_MIN_ANSWERS` (10) items is
  flagged, unless the other raters gave that same answer to nearly as many of theirs (within
  `STRAIGHT_MARGIN`): an output set that really is all "no errors" does not make everyone a
  straight-liner. The longest run of identical consecutive answers is reported beside it.
- Leave-one-out agreement. For each rater, each unit (an output, or a pair of outputs) and
  criterion they answered that at least one other rater answered too: for nominal criteria
  (binary, categorical, pairwise) the share of the other raters who gave the same answer (their
  pairwise agreement with the others: no tie rule for an even split is needed); for ordinal
  ones (likert, severity, slider) 1 - |answer - the others' mean| / the scale's range. The
  rater's agreement is the mean over those units, in 0..1 (1: always with the others). One
  number per rater, comparable across criteria; the analysis's agreement coefficients (alpha,
  kappa) remain the statistics to report.
- MACE (Hovy, Berg-Kirkpatrick, Vaswani & Hovy 2013, "Learning whom to trust with MACE"): each
  rater j answers an item correctly with probability theta_j (their competence) and otherwise
  "spams", drawing a label from their own distribution xi_j. EM with a small Beta prior on
  theta and a Dirichlet smoothing of xi, from several starts (the best likelihood is kept).
  Returns each rater's competence and each item's posterior over the true label.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# Whatever the caller names its raters and items by (ids, names): the results are keyed by it.
RaterT = TypeVar("RaterT", bound=Hashable)
ItemT = TypeVar("ItemT", bound=Hashable)

SPEEDER_FRACTION = 0.3
SPEEDER_MIN_TIMINGS = 10  # timed items in the study before a threshold is derived
SPEEDER_MIN_ITEMS = 3  # a rater's timed items before they are judged

STRAIGHT_MIN_ANSWERS = 10
STRAIGHT_SHARE = 0.9
STRAIGHT_MARGIN = 0.3
STRAIGHT_MIN_POINTS = 3

NOMINAL = "nominal"
ORDINAL = "ordinal"


# --- speeding -------------------------------------------------------------------------------
def speeder_threshold(seconds: Iterable[float], *, fixed: float | None = None) -> float | None:
    """Seconds per item below which a rater's median counts as speeding: `fixed` (the study's
    setting) when given, else SPEEDER_FRACTION x the median of `seconds` (every timed item of
    the study); None while fewer than SPEEDER_MIN_TIMINGS items were timed."""
    if fixed is not None:
        return float(fixed)
    values = [float(s) for s in seconds if s is not None and math.isfinite(s)]
    if len(values) < SPEEDER_MIN_TIMINGS:
        return None
    return SPEEDER_FRACTION * statistics.median(values)


def is_speeder(seconds: Sequence[float], threshold: float | None) -> bool:
    """Whether a rater with these seconds per item speeds: their median is below `threshold`
    (never with no threshold or fewer than SPEEDER_MIN_ITEMS timed items)."""
    if threshold is None or len(seconds) < SPEEDER_MIN_ITEMS:
        return False
    return statistics.median(seconds) < threshold


# --- straight-lining ------------------------------------------------------------------------
@dataclass(frozen=True)
class StraightLining:
    answers: int
    value: str | None  # the most frequent answer
    share: float  # its share of the answers
    longest_run: int  # identical consecutive answers, in the order given
    flagged: bool


def straightlining(values: Sequence[str], *, points: int,
                   others_share: float | None = None) -> StraightLining:
    """Straight-lining of one rater on one criterion. `values`: their answers in the order they
    gave them; `points`: how many answers the criterion offers; `others_share`: the share of
    the other raters' answers to this criterion that are the rater's most frequent answer
    (None when no one else answered)."""
    if not values:
        return StraightLining(0, None, 0.0, 0, False)
    value, count = Counter(values).most_common(1)[0]
    share = count / len(values)
    longest = run = 1
    for before, now in itertools.pairwise(values):
        run = run + 1 if now == before else 1
        longest = max(longest, run)
    flagged = (points >= STRAIGHT_MIN_POINTS and len(values) >= STRAIGHT_MIN_ANSWERS
               and share >= STRAIGHT_SHARE
               and (others_share is None or others_share <= share - STRAIGHT_MARGIN))
    return StraightLining(len(values), value, share, longest, flagged)


# --- leave-one-out agreement ----------------------------------------------------------------
@dataclass(frozen=True)
class Scale:
    """How a criterion's answers compare: NOMINAL (same or not) or ORDINAL (distance over the
    range low..high)."""

    kind: str
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class Answer(Generic[RaterT]):
    rater: RaterT
    unit: Hashable  # what several raters judge: an output or a pair of outputs
    criterion: str
    value: str
    number: float | None = None  # the ordinal value (None: nominal, or not a number)


@dataclass(frozen=True)
class Agreement:
    score: float | None  # mean agreement with the others, 0..1 (None: nothing shared)
    units: int  # unit x criterion pairs that someone else answered too


def leave_one_out_agreement(answers: Iterable[Answer[RaterT]], scales: Mapping[str, Scale]
                            ) -> dict[RaterT, Agreement]:
    """Each rater's agreement with the other raters of the same units (see the module's
    docstring). Answers to criteria not in `scales` are ignored; every rater who gave an
    answer gets an entry."""
    by_cell: dict[tuple[Hashable, str], list[Answer[RaterT]]] = defaultdict(list)
    raters: set[RaterT] = set()
    for answer in answers:
        if answer.criterion in scales:
            by_cell[(answer.unit, answer.criterion)].append(answer)
            raters.add(answer.rater)
    scores: dict[RaterT, list[float]] = defaultdict(list)
    for (_unit, criterion), cell in by_cell.items():
        if len({a.rater for a in cell}) < 2:
            continue
        scale = scales[criterion]
        for answer in cell:
            others = [a for a in cell if a.rater != answer.rater]
            if scale.kind == ORDINAL:
                numbers = [a.number for a in others if a.number is not None]
                span = scale.high - scale.low
                if answer.number is None or not numbers or span <= 0:
                    continue
                distance = abs(answer.number - statistics.fmean(numbers)) / span
                scores[answer.rater].append(1.0 - min(distance, 1.0))
            else:
                same = sum(1 for a in others if a.value == answer.value)
                scores[answer.rater].append(same / len(others))
    return {rater: Agreement(statistics.fmean(scores[rater]) if scores[rater] else None,
                             len(scores[rater]))
            for rater in raters}


# --- MACE -----------------------------------------------------------------------------------
@dataclass
class MaceResult(Generic[ItemT, RaterT]):
    competence: dict[RaterT, float]  # rater -> theta (probability of knowing the answer)
    spamming: dict[RaterT, dict[str, float]]  # rater -> xi (their labels when guessing)
    posteriors: dict[ItemT, dict[str, float]]  # item -> label -> P(true label)
    log_likelihood: float
    labels: list[str] = field(default_factory=list)

    def best_label(self, item: ItemT) -> str | None:
        posterior = self.posteriors.get(item)
        return max(posterior, key=lambda k: posterior[k]) if posterior else None


def mace(annotations: Iterable[tuple[ItemT, RaterT, str]], *,
         labels: Sequence[str] | None = None, iterations: int = 50, restarts: int = 10,
         theta_prior: tuple[float, float] = (2.0, 2.0), xi_smoothing: float = 1.0,
         tolerance: float = 1e-7, seed: int = 0) -> MaceResult[ItemT, RaterT]:
    """MACE by EM on (item, rater, label) triples; the last answer of a repeated (item, rater)
    counts. `labels`: the label set (default: every label seen). `theta_prior`: Beta(a, b) on
    each competence (MAP estimate; (1, 1) is plain maximum likelihood); `xi_smoothing`: the
    pseudo-count added to each label of a rater's spamming distribution. Deterministic for a
    given `seed`: the first start is theta = 0.8 for everyone (the majority vote's view), the
    others random."""
    cells: dict[tuple[ItemT, RaterT], str] = {}
    for item, rater, label in annotations:
        cells[(item, rater)] = str(label)
    names = list(labels) if labels is not None else sorted(set(cells.values()))
    index = {name: k for k, name in enumerate(names)}
    items = sorted({item for item, _ in cells}, key=repr)
    raters = sorted({rater for _, rater in cells}, key=repr)
    if not cells or not names:
        return MaceResult({}, {}, {}, 0.0, names)
    item_at = {item: k for k, item in enumerate(items)}
    rater_at = {rater: k for k, rater in enumerate(raters)}
    rows: list[list[tuple[int, int]]] = [[] for _ in items]  # item -> [(rater, label)]
    for (item, rater), label in cells.items():
        if label in index:
            rows[item_at[item]].append((rater_at[rater], index[label]))
    n_labels = len(names)
    generator = random.Random(seed)
    best: tuple[float, list[float], list[list[float]], list[list[float]]] | None = None
    for start in range(max(restarts, 1)):
        if start == 0:
            theta = [0.8] * len(raters)
            xi = [[1.0 / n_labels] * n_labels for _ in raters]
        else:
            theta = [generator.uniform(0.2, 0.95) for _ in raters]
            xi = []
            for _ in raters:
                weights = [generator.uniform(0.5, 1.5) for _ in range(n_labels)]
                total = sum(weights)
                xi.append([w / total for w in weights])
        found = _mace_em(rows, theta, xi, n_labels, iterations, theta_prior, xi_smoothing,
                         tolerance)
        if best is None or found[0] > best[0]:
            best = found
    assert best is not None
    log_likelihood, theta, xi, posterior = best
    return MaceResult(
        competence={rater: theta[k] for k, rater in enumerate(raters)},
        spamming={rater: dict(zip(names, xi[k], strict=True)) for k, rater in enumerate(raters)},
        posteriors={item: dict(zip(names, posterior[k], strict=True))
                    for k, item in enumerate(items)},
        log_likelihood=log_likelihood, labels=names)


def _mace_em(rows: list[list[tuple[int, int]]], theta: list[float], xi: list[list[float]],
             n_labels: int, iterations: int, theta_prior: tuple[float, float],
             xi_smoothing: float, tolerance: float
             ) -> tuple[float, list[float], list[list[float]], list[list[float]]]:
    """EM from one start: (log likelihood, theta, xi, posteriors of the items' labels)."""
    a, b = theta_prior
    previous = -math.inf
    posterior: list[list[float]] = []
    log_likelihood = -math.inf
    for _ in range(max(iterations, 1)):
        # E-step: each item's posterior over its true label (uniform prior over labels).
        posterior, log_likelihood = [], 0.0
        for row in rows:
            logs = [0.0] * n_labels
            for rater, label in row:
                spam = (1.0 - theta[rater]) * xi[rater][label]
                for truth in range(n_labels):
                    p = spam + (theta[rater] if truth == label else 0.0)
                    logs[truth] += math.log(max(p, 1e-300))
            top = max(logs)
            weights = [math.exp(v - top) for v in logs]
            total = sum(weights)
            posterior.append([w / total for w in weights])
            log_likelihood += top + math.log(total / n_labels)
        # M-step: expected "knew it" and "spammed label l" counts per rater.
        knew = [0.0] * len(theta)
        seen = [0.0] * len(theta)
        spammed = [[0.0] * n_labels for _ in theta]
        for row, p_truth in zip(rows, posterior, strict=True):
            for rater, label in row:
                spam = (1.0 - theta[rater]) * xi[rater][label]
                known = theta[rater] + spam
                k = p_truth[label] * theta[rater] / known if known > 0 else 0.0
                knew[rater] += k
                seen[rater] += 1.0
                spammed[rater][label] += 1.0 - k
        theta = [(knew[j] + a - 1.0) / (seen[j] + a + b - 2.0) if seen[j] + a + b > 2.0
                 else 0.5 for j in range(len(theta))]
        theta = [min(max(t, 1e-6), 1.0 - 1e-6) for t in theta]
        xi = []
        for counts in spammed:
            total = sum(counts) + xi_smoothing * n_labels
            xi.append([(c + xi_smoothing) / total for c in counts])
        if abs(log_likelihood - previous) < tolerance * max(1.0, abs(log_likelihood)):
            break
        previous = log_likelihood
    return log_likelihood, theta, xi, posterior
