"""Dawid-Skene on simulated raters with known confusion matrices: it recovers them, the class
prior and the true labels, and beats the majority vote where spammers are among the raters;
soft labels from it and MACE are distributions over every option."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from analysis.stats.truth import dawid_skene, soft_labels

LABELS = ["good", "fair", "bad"]
PRIOR = {"good": 0.5, "fair": 0.3, "bad": 0.2}
# Known confusion matrices: true label -> probability of each answer.
CONFUSION = {
    "careful": {"good": [0.9, 0.08, 0.02], "fair": [0.1, 0.8, 0.1], "bad": [0.02, 0.08, 0.9]},
    "lenient": {"good": [0.95, 0.05, 0.0], "fair": [0.4, 0.6, 0.0], "bad": [0.1, 0.3, 0.6]},
    "harsh": {"good": [0.6, 0.3, 0.1], "fair": [0.0, 0.6, 0.4], "bad": [0.0, 0.05, 0.95]},
    # Spammers: the same answer whatever the truth.
    "spam-good": {"good": [1.0, 0.0, 0.0], "fair": [1.0, 0.0, 0.0], "bad": [1.0, 0.0, 0.0]},
    "spam-good-2": {"good": [0.9, 0.1, 0.0], "fair": [0.9, 0.1, 0.0], "bad": [0.9, 0.1, 0.0]},
}


def simulate(n_units: int, seed: int = 7):
    rng = random.Random(seed)
    truth = {unit: rng.choices(LABELS, weights=[PRIOR[k] for k in LABELS])[0]
             for unit in range(n_units)}
    answers = [(unit, rater, rng.choices(LABELS, weights=rows[truth[unit]])[0])
               for unit in truth for rater, rows in CONFUSION.items()]
    return truth, answers


def majority_vote(answers, seed: int = 0):
    """The plain majority, ties broken at random (the fairest majority vote)."""
    rng = random.Random(seed)
    by_unit: dict[int, list[str]] = {}
    for unit, _rater, label in answers:
        by_unit.setdefault(unit, []).append(label)
    chosen = {}
    for unit, labels in by_unit.items():
        counts = Counter(labels)
        top = max(counts.values())
        chosen[unit] = rng.choice(sorted(k for k, v in counts.items() if v == top))
    return chosen


def test_recovers_known_confusion_matrices_and_prior():
    _truth, answers = simulate(3000)
    result = dawid_skene(answers, labels=LABELS)
    assert result.converged
    for rater, rows in CONFUSION.items():
        for true_label, probabilities in rows.items():
            for given, p in zip(LABELS, probabilities, strict=True):
                assert result.confusion[rater][true_label][given] == pytest.approx(p, abs=0.04), (
                    rater, true_label, given)
    for label, p in PRIOR.items():
        assert result.priors[label] == pytest.approx(p, abs=0.03)


def test_beats_the_majority_vote_when_spammers_rate():
    truth, answers = simulate(600, seed=11)
    result = dawid_skene(answers, labels=LABELS)
    ds = sum(result.best_label(unit) == label for unit, label in truth.items()) / len(truth)
    votes = majority_vote(answers)
    mv = sum(votes[unit] == label for unit, label in truth.items()) / len(truth)
    # Two of five raters answer "good" (nearly) always: the vote drifts to "good".
    assert mv < 0.8
    assert ds > 0.9
    assert ds - mv > 0.1


def test_posteriors_are_distributions_over_every_label():
    _truth, answers = simulate(200, seed=3)
    result = dawid_skene(answers, labels=[*LABELS, "unused"])
    for posterior in result.posteriors.values():
        assert set(posterior) == {*LABELS, "unused"}
        assert math.fsum(posterior.values()) == pytest.approx(1.0, abs=1e-12)
        assert all(0.0 <= p <= 1.0 for p in posterior.values())
    for rows in result.confusion.values():
        for row in rows.values():
            assert math.fsum(row.values()) == pytest.approx(1.0, abs=1e-12)
    # An option nobody chose is improbable but, thanks to the smoothing, not impossible.
    assert 0.0 < result.priors["unused"] < 0.01


def test_is_deterministic_and_reads_the_last_answer_of_a_repeated_cell():
    _truth, answers = simulate(100, seed=5)
    first = dawid_skene(answers, labels=LABELS)
    again = dawid_skene(list(answers), labels=LABELS)
    assert first.posteriors == again.posteriors
    # A later answer of the same rater on the same unit replaces the earlier one.
    replaced = [(u, r, "bad" if (u, r) == (0, "careful") else label) for u, r, label in answers]
    repeated = dawid_skene([*answers, (0, "careful", "bad")], labels=LABELS)
    assert repeated.posteriors == dawid_skene(replaced, labels=LABELS).posteriors


def test_unanimous_data_and_a_unit_with_one_answer():
    answers = [(u, r, "yes") for u in range(5) for r in ("a", "b")] + [(9, "a", "no")]
    result = dawid_skene(answers, labels=["yes", "no"], smoothing=0.0, prior_smoothing=0.0,
                         diagonal=0.0)
    assert result.best_label(0) == "yes"
    assert result.best_label(9) == "no"
    assert result.posteriors[9]["no"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="negative"):
        dawid_skene(answers, smoothing=-1)
    assert dawid_skene([]).posteriors == {}


def test_the_better_than_chance_prior_keeps_a_small_lopsided_study_identified():
    """Four units, nearly every answer "yes": without the diagonal prior EM settles where
    both classes make raters say "yes" alike and every posterior is about the prior."""
    answers = [(1, "r1", "yes"), (1, "r2", "no"), (2, "r1", "yes"), (2, "r2", "yes"),
               (2, "r3", "yes"), (3, "r1", "yes"), (3, "r2", "yes"), (4, "r1", "yes"),
               (4, "r2", "yes"), (4, "r3", "no")]
    flat = dawid_skene(answers, labels=["yes", "no"], diagonal=0.0)
    assert flat.posteriors[3]["yes"] == pytest.approx(0.5, abs=0.02)
    result = dawid_skene(answers, labels=["yes", "no"])
    assert result.posteriors[3]["yes"] > 0.95
    assert result.posteriors[2]["yes"] > 0.95


def test_soft_labels_put_dawid_skene_beside_mace_and_the_votes():
    truth, answers = simulate(300, seed=2)
    rows = soft_labels(answers, LABELS)
    assert len(rows) == 300
    for row in rows:
        for distribution in (row.votes, row.dawid_skene, row.mace):
            assert list(distribution) == LABELS
            assert math.fsum(distribution.values()) == pytest.approx(1.0, abs=1e-9)
        assert row.n_judgments == len(CONFUSION)
    right = {name: sum(max(getattr(r, name), key=getattr(r, name).get) == truth[r.unit]
                       for r in rows) / len(rows) for name in ("votes", "dawid_skene", "mace")}
    assert right["dawid_skene"] > right["votes"]
    assert right["mace"] > right["votes"]
