"""Truth inference without gold labels: Dawid-Skene, and soft labels from it and from MACE.

Dawid & Skene (1979, "Maximum likelihood estimation of observer error-rates using the EM
algorithm"): each unit has one true label k, drawn with probability p_k (the class prior);
rater j, shown a unit whose true label is k, answers l with probability pi_j[k, l] (their
confusion matrix). EM alternates the posterior of each unit's label given the answers
(E-step) and the prior and confusion matrices given those posteriors (M-step).

Choices, and why:
- Start: each unit's posterior is its share of votes (the soft majority vote), as in the
  paper: the first M-step then reads every rater against the crowd, which fixes which label
  is which (EM from a random start may return the labels permuted).
- Smoothing (a MAP estimate, not plain maximum likelihood): `smoothing` pseudo-counts are added
  to every cell of every confusion row and `prior_smoothing` to every class of the prior
  (a symmetric Dirichlet(1 + alpha) prior). Without them a rater who never saw a unit of
  class k has an undefined row k, and a rater who agreed with the crowd on all of their
  few units gets pi = 1 on the diagonal, so one answer of theirs overrules any number of
  others (log 0). The default 0.5 per cell (Jeffreys-like) is small beside a rater's
  dozens of units and keeps every probability positive.
- A prior that raters are better than chance: `diagonal` more pseudo-counts (default 1) on
  each diagonal cell (Dirichlet(1 + alpha + diagonal) there). Dawid-Skene is not identified
  on its own: on a small study where nearly every answer is "yes" (four units, two or three
  raters), EM without it settles where both classes make raters say "yes" alike, and every
  posterior is the prior (0.5 for a unanimous "yes"); with it, 0.98. On a study of hundreds
  of units per rater the pseudo-count is lost in the data (the simulation tests recover
  known confusion matrices to within 0.04).
- Units answered by one rater only still get a posterior (their rater's row given the
  prior); they add nothing to any confusion matrix beyond what the prior says.
- A repeated (unit, rater) answer: the last one counts (as in `annotation.quality.mace`).

`soft_labels` puts Dawid-Skene's posteriors beside MACE's (annotation.quality.mace, Hovy et al.
2013) and the plain vote shares, one row per unit: the per-option distributions a downstream
model can train on instead of a hard majority label.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from annotation.quality import mace


@dataclass
class DawidSkeneResult:
    labels: list[str]
    priors: dict[str, float]
    # rater -> true label -> answered label -> probability (each row sums to 1)
    confusion: dict[Hashable, dict[str, dict[str, float]]]
    posteriors: dict[Hashable, dict[str, float]]  # unit -> label -> P(true label)
    log_likelihood: float
    iterations: int
    converged: bool
    smoothing: float = 0.5
    prior_smoothing: float = 0.5
    diagonal: float = 1.0

    def best_label(self, unit: Hashable) -> str | None:
        posterior = self.posteriors.get(unit)
        return max(posterior, key=lambda k: posterior[k]) if posterior else None


def dawid_skene(annotations: Iterable[tuple[Hashable, Hashable, str]], *,
                labels: Sequence[str] | None = None, iterations: int = 200,
                smoothing: float = 0.5, prior_smoothing: float = 0.5, diagonal: float = 1.0,
                tolerance: float = 1e-8) -> DawidSkeneResult:
    """Dawid-Skene by EM on (unit, rater, label) triples. `labels`: the label set (default:
    every label seen; answers outside it are ignored). `smoothing`, `prior_smoothing` and
    `diagonal`: the pseudo-counts described in the module's docstring (all 0: plain maximum
    likelihood, with its zeros). Stops when the log likelihood changes by less than
    `tolerance` (relative)."""
    if smoothing < 0 or prior_smoothing < 0 or diagonal < 0:
        raise ValueError("smoothing pseudo-counts must not be negative")
    cells: dict[tuple[Hashable, Hashable], str] = {}
    for unit, rater, label in annotations:
        cells[(unit, rater)] = str(label)
    names = list(labels) if labels is not None else sorted(set(cells.values()))
    index = {name: k for k, name in enumerate(names)}
    cells = {key: label for key, label in cells.items() if label in index}
    units = sorted({unit for unit, _ in cells}, key=repr)
    raters = sorted({rater for _, rater in cells}, key=repr)
    if not cells:
        return DawidSkeneResult(names, {}, {}, {}, 0.0, 0, True, smoothing, prior_smoothing,
                                diagonal)
    n_units, n_raters, n_labels = len(units), len(raters), len(names)
    unit_at = {unit: i for i, unit in enumerate(units)}
    rater_at = {rater: j for j, rater in enumerate(raters)}
    # counts[i, j, l]: 1 where rater j answered l on unit i (one answer per cell).
    counts = np.zeros((n_units, n_raters, n_labels))
    for (unit, rater), label in cells.items():
        counts[unit_at[unit], rater_at[rater], index[label]] = 1.0
    votes = counts.sum(axis=1)
    posterior = votes / votes.sum(axis=1, keepdims=True)
    log_likelihood, previous, converged, done = -math.inf, -math.inf, False, 0
    while done < max(iterations, 1):
        done += 1
        priors, confusion = _m_step(posterior, counts, smoothing, prior_smoothing, diagonal)
        posterior, log_likelihood = _e_step(counts, priors, confusion)
        if abs(log_likelihood - previous) < tolerance * max(1.0, abs(log_likelihood)):
            converged = True
            break
        previous = log_likelihood
    priors, confusion = _m_step(posterior, counts, smoothing, prior_smoothing, diagonal)
    return DawidSkeneResult(
        labels=names,
        priors={name: float(priors[k]) for k, name in enumerate(names)},
        confusion={rater: {truth: {given: float(confusion[j, k, m])
                                   for m, given in enumerate(names)}
                           for k, truth in enumerate(names)}
                   for j, rater in enumerate(raters)},
        posteriors={unit: {name: float(posterior[i, k]) for k, name in enumerate(names)}
                    for i, unit in enumerate(units)},
        log_likelihood=float(log_likelihood), iterations=done, converged=converged,
        smoothing=smoothing, prior_smoothing=prior_smoothing, diagonal=diagonal)


def _m_step(posterior: np.ndarray, counts: np.ndarray, smoothing: float,
            prior_smoothing: float, diagonal: float) -> tuple[np.ndarray, np.ndarray]:
    n_labels = posterior.shape[1]
    priors = posterior.sum(axis=0) + prior_smoothing
    priors = priors / priors.sum()
    # expected[j, k, l] = sum_i P(unit i is k) * [rater j answered l on unit i]
    expected = np.einsum("ik,ijl->jkl", posterior, counts) + smoothing
    expected += diagonal * np.eye(n_labels)[None, :, :]
    totals = expected.sum(axis=2, keepdims=True)
    # A row with no evidence and no smoothing: uniform rather than 0/0.
    confusion = np.where(totals > 0, expected / np.where(totals > 0, totals, 1.0),
                         1.0 / n_labels)
    return priors, confusion


def _e_step(counts: np.ndarray, priors: np.ndarray, confusion: np.ndarray
            ) -> tuple[np.ndarray, float]:
    with np.errstate(divide="ignore"):
        log_confusion = np.log(confusion)
        log_priors = np.log(priors)
    # logs[i, k] = log p_k + sum_j sum_l counts[i, j, l] * log pi_j[k, l]
    contributions = np.einsum("ijl,jkl->ik", counts, np.where(np.isfinite(log_confusion),
                                                             log_confusion, -1e300))
    logs = log_priors[None, :] + contributions
    top = logs.max(axis=1, keepdims=True)
    weights = np.exp(logs - top)
    totals = weights.sum(axis=1, keepdims=True)
    return weights / totals, float((top[:, 0] + np.log(totals[:, 0])).sum())


@dataclass
class SoftLabel:
    """One unit's label distributions: Dawid-Skene's and MACE's posteriors and the vote
    shares, each over `labels` (every option of the criterion, in its order; each sums to 1)."""

    unit: Hashable
    n_judgments: int
    votes: dict[str, float]
    dawid_skene: dict[str, float]
    mace: dict[str, float]
    labels: list[str] = field(default_factory=list)


def soft_labels(annotations: Iterable[tuple[Hashable, Hashable, str]], labels: Sequence[str],
                *, smoothing: float = 0.5) -> list[SoftLabel]:
    """Per unit, the posterior over `labels` from Dawid-Skene and from MACE (both fitted on
    every unit of the criterion at once), and the plain vote shares."""
    cells: dict[tuple[Hashable, Hashable], str] = {}
    for unit, rater, label in annotations:
        if str(label) in labels:
            cells[(unit, rater)] = str(label)
    triples = [(unit, rater, label) for (unit, rater), label in cells.items()]
    if not triples:
        return []
    names = list(labels)
    ds = dawid_skene(triples, labels=names, smoothing=smoothing)
    competence = mace(triples, labels=names)
    given: dict[Hashable, list[str]] = {}
    for unit, _rater, label in triples:
        given.setdefault(unit, []).append(label)
    rows = []
    for unit in sorted(given, key=repr):
        answers = given[unit]
        rows.append(SoftLabel(
            unit=unit, n_judgments=len(answers),
            votes={name: answers.count(name) / len(answers) for name in names},
            dawid_skene=dict(ds.posteriors[unit]), mace=dict(competence.posteriors[unit]),
            labels=names))
    return rows
