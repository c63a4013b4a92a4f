"""The Django-free quality-control core (annotation.quality) on simulated raters: MACE recovers
known competences, speeders and straight-liners are flagged, and careful raters are not."""

from __future__ import annotations

import random
import statistics

import pytest

from annotation import quality as q


def _simulate(competences: list[float], *, items: int = 300, labels: str = "abc", seed: int = 7,
              spam_label: dict[int, str] | None = None) -> list[tuple[int, int, str]]:
    """Every rater answers every item: right with probability `competence`, else a guess
    (uniform, or always `spam_label[rater]`)."""
    generator = random.Random(seed)
    truth = [generator.choice(labels) for _ in range(items)]
    triples = []
    for item, true in enumerate(truth):
        for rater, competence in enumerate(competences):
            if generator.random() < competence:
                label = true
            elif spam_label and rater in spam_label:
                label = spam_label[rater]
            else:
                label = generator.choice(labels)
            triples.append((item, rater, label))
    return triples


def _pearson(x: list[float], y: list[float]) -> float:
    mx, my = statistics.fmean(x), statistics.fmean(y)
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    return cov / (sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)) ** 0.5


def test_mace_recovers_known_competences_and_ranks_the_spammers_lowest():
    competences = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    result = q.mace(_simulate(competences), labels=list("abc"))
    found = [result.competence[rater] for rater in range(len(competences))]
    assert _pearson(competences, found) > 0.9
    ranked = sorted(range(len(competences)), key=lambda r: result.competence[r])
    assert set(ranked[:2]) == {8, 9}  # the two spammers are the two least competent
    for true, estimate in zip(competences, found, strict=True):
        assert abs(true - estimate) < 0.12


def test_mace_sees_through_a_rater_who_always_gives_the_same_label():
    competences = [0.9, 0.85, 0.8, 0.75, 0.05]
    triples = _simulate(competences, spam_label={4: "a"}, seed=3)
    result = q.mace(triples, labels=list("abc"))
    assert result.competence[4] < 0.2 < min(result.competence[r] for r in range(4))
    assert result.spamming[4]["a"] > 0.8
    # The posteriors recover the truth better than the constant rater would.
    generator = random.Random(3)
    truth = [generator.choice("abc") for _ in range(300)]
    right = sum(result.best_label(i) == t for i, t in enumerate(truth))
    assert right / 300 > 0.95


def test_mace_on_nothing_and_posteriors_sum_to_one():
    assert q.mace([]).competence == {}
    result = q.mace([(1, "r1", "yes"), (1, "r2", "yes"), (2, "r1", "no"), (2, "r2", "yes")])
    for posterior in result.posteriors.values():
        assert sum(posterior.values()) == pytest.approx(1.0)
    assert set(result.labels) == {"no", "yes"}


def test_the_speeder_threshold_is_derived_from_the_studys_own_median():
    careful = [random.Random(s).uniform(8, 20) for s in range(60)]
    speeder = [1.0, 1.2, 0.8, 1.1, 0.9, 1.0]
    threshold = q.speeder_threshold(careful + speeder)
    assert threshold == pytest.approx(q.SPEEDER_FRACTION * statistics.median(careful + speeder))
    assert q.is_speeder(speeder, threshold)
    assert not q.is_speeder(careful[:10], threshold)
    assert q.speeder_threshold([5.0] * 3) is None  # too few timings to derive one
    assert q.speeder_threshold([5.0] * 3, fixed=2.0) == 2.0  # the study's own setting wins
    assert not q.is_speeder([0.5, 0.5], 2.0)  # too few items to judge


def test_straight_lining_is_flagged_on_a_three_point_scale_unless_everyone_answers_so():
    liner = ["1"] * 19 + ["2"]
    found = q.straightlining(liner, points=3, others_share=0.3)
    assert found.flagged and found.value == "1" and found.longest_run == 19
    assert found.share == pytest.approx(0.95)
    # The outputs really are all the same: the others answered so too.
    assert not q.straightlining(liner, points=3, others_share=0.9).flagged
    # Too few answers, or a two-point scale, is no evidence.
    assert not q.straightlining(["1"] * 5, points=3).flagged
    assert not q.straightlining(["yes"] * 30, points=2).flagged
    generator = random.Random(1)
    varied = [generator.choice("012") for _ in range(30)]
    assert not q.straightlining(varied, points=3, others_share=0.3).flagged


def test_leave_one_out_agreement_of_a_contrarian_is_lowest():
    scales = {"usable": q.Scale(q.NOMINAL), "severity": q.Scale(q.ORDINAL, 0, 2)}
    answers = []
    for unit in range(20):
        for rater in ("a", "b", "c"):
            answers.append(q.Answer(rater, unit, "usable", "yes"))
            answers.append(q.Answer(rater, unit, "severity", "0", 0.0))
        answers.append(q.Answer("contrarian", unit, "usable", "no"))
        answers.append(q.Answer("contrarian", unit, "severity", "2", 2.0))
    answers.append(q.Answer("alone", 99, "usable", "yes"))
    found = q.leave_one_out_agreement(answers, scales)
    assert found["contrarian"].score == pytest.approx(0.0)
    assert found["a"].score == pytest.approx(0.5 * (2 / 3) + 0.5 * (1 - (2 / 3) / 2))
    assert found["a"].units == 40
    assert found["alone"] == q.Agreement(None, 0)
