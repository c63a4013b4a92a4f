"""The pairwise learned proxy's Django-free core: symmetric logistic regression on stored
metric differences, cross-validated by reference, with out-of-fold predictions for every pair
and accuracy counted as the analysis counts it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from proxies.learned import PairExample, load_artifact, save_artifact, train_pairwise
from proxies.learned.pairwise import (
    OUT_OF_FOLD_FILE,
    PairwiseLogisticProxy,
    answer,
    differences,
    preference_accuracy,
)


def synthetic_pairs(n_references: int = 80, *, seed: int = 0, voters: int = 6,
                    with_ties: bool = True) -> list[PairExample]:
    """Three outputs per reference, every pair of them judged by `voters` people whose
    preference follows a known rule: lower CER and higher BERTScore are preferred, WER is
    noise (so WER alone is a poor guide and the model must weigh CER and BERTScore)."""
    rng = np.random.default_rng(seed)
    pairs = []
    output = 0
    for reference in range(n_references):
        values = []
        for _ in range(3):
            values.append({"wer": float(rng.uniform(0, 1)), "cer": float(rng.uniform(0, 0.6)),
                           "bertscore_f": float(rng.uniform(0.6, 1.0))})
        ids = [output, output + 1, output + 2]
        output += 3
        for i, j in ((0, 1), (0, 2), (1, 2)):
            logit = (-6 * (values[i]["cer"] - values[j]["cer"])
                     + 8 * (values[i]["bertscore_f"] - values[j]["bertscore_f"]))
            p = 1 / (1 + np.exp(-logit))
            a = int(rng.binomial(voters, p))
            tie = int(with_ties and rng.random() < 0.05)
            pairs.append(PairExample(output=ids[i], output_b=ids[j], group=f"ref {reference}",
                                     features_a=values[i], features_b=values[j],
                                     a=a, b=voters - a, tie=tie))
    return pairs


@pytest.fixture(scope="module")
def pairs():
    return synthetic_pairs()


@pytest.fixture(scope="module")
def fitted(pairs):
    return train_pairwise(pairs, params={"features": ["wer", "cer", "bertscore_f"]}, seed=0)


def test_learns_the_preference_rule_and_beats_each_metric_alone(fitted):
    metrics = fitted.metrics
    coefficients = metrics["coefficients"]
    assert coefficients["cer"] < 0 < coefficients["bertscore_f"]
    assert abs(coefficients["wer"]) < min(abs(coefficients["cer"]),
                                          abs(coefficients["bertscore_f"]))
    cv = metrics["cv_accuracy"]
    assert cv["ties_excluded"] > 0.75
    alone = metrics["features_alone"]
    assert cv["ties_wrong"] > max(row["ties_wrong"]["accuracy"] for row in alone.values())
    assert alone["wer"]["ties_excluded"]["accuracy"] < 0.6  # noise
    low, high = metrics["accuracy"]["ties_wrong"]["all"]["ci"]
    assert low < cv["ties_wrong"] < high
    assert metrics["features"] == ["wer", "cer", "bertscore_f"]
    assert len(metrics["per_fold"]) == metrics["folds"] == 5
    for fold in metrics["per_fold"]:
        assert set(fold["coefficients"]) == {"wer", "cer", "bertscore_f"}
        assert 0 <= fold["accuracy"]["ties_wrong"] <= 1


def test_every_prediction_is_out_of_fold_and_no_reference_is_in_two_folds(pairs, fitted):
    proxy = fitted.proxy
    records = proxy.out_of_fold
    assert len(records) == len(pairs) and all(r["p_a"] is not None for r in records)
    folds_of_group: dict[str, set[int]] = {}
    for record in records:
        folds_of_group.setdefault(record["group"], set()).add(record["fold"])
    assert all(len(folds) == 1 for folds in folds_of_group.values())
    # Each fold's predictions come from a model fitted on the OTHER folds' labelled pairs.
    from proxies.learned.pairwise import _fit, _probability

    names = proxy.feature_names()
    x = differences(pairs, names)
    fold = np.array([r["fold"] for r in records])
    labelled = np.array([p.majority not in (None, 0) for p in pairs])
    for number in set(fold.tolist()):
        train = labelled & (fold != number)
        y = np.array([p.majority == 1 for p in pairs])[train].astype(int)
        scale, coef = _fit(x[train], y, 1.0)
        expected = _probability(x[fold == number], scale, coef)
        stored = np.array([r["p_a"] for r in records])[fold == number]
        np.testing.assert_allclose(stored, expected, rtol=1e-12)
    # The kept model is fitted on every labelled pair: it differs from the fold models.
    assert fitted.split_keys["out_of_fold"][0] == [pairs[0].output, pairs[0].output_b]


def test_human_ties_are_left_out_of_training_but_predicted(pairs, fitted):
    ties = [i for i, p in enumerate(pairs) if p.majority == 0]
    assert ties, "the synthetic study has human ties"
    assert fitted.metrics["human_ties_left_out"] == len(ties)
    assert fitted.metrics["labelled_pairs"] == len(pairs) - len(ties)
    assert fitted.report.n_train == len(pairs) - len(ties)
    assert all(fitted.proxy.out_of_fold[i]["p_a"] is not None for i in ties)


def test_p_a_is_antisymmetric(pairs, fitted):
    proxy = fitted.proxy
    swapped = [PairExample(p.output_b, p.output, p.group, p.features_b, p.features_a)
               for p in pairs[:30]]
    np.testing.assert_allclose(proxy.predict_pairs(pairs[:30]),
                               1 - proxy.predict_pairs(swapped), atol=1e-12)
    same = PairExample(1, 2, "g", {"wer": 0.2, "cer": 0.1, "bertscore_f": 0.9},
                       {"wer": 0.2, "cer": 0.1, "bertscore_f": 0.9})
    assert proxy.predict_pairs([same])[0] == 0.5
    assert proxy.answer(0.5) == "tie" and proxy.answer(0.5, allow_tie=False) == "A"


def test_answers_follow_the_tie_band():
    assert answer(0.56, tie_band=0.05) == "A"
    assert answer(0.54, tie_band=0.05) == "tie"
    assert answer(0.46, tie_band=0.05) == "tie"
    assert answer(0.44, tie_band=0.05) == "B"
    assert answer(0.54, tie_band=0.05, allow_tie=False) == "A"


def test_accuracy_is_counted_as_the_analysis_counts_it(pairs, fitted):
    """Same picks, same units: the proxy's own figures equal analysis.stats.pairwise_validity's
    (both tie rules, every stratum)."""
    from analysis.stats.pairwise_validity import pairwise_validity

    records = fitted.proxy.out_of_fold
    picks = np.array([{"A": 1, "B": -1, "tie": 0}[answer(r["p_a"])] for r in records],
                     dtype=float)
    picks[:7] = np.nan  # a few pairs without an answer
    units = pd.DataFrame({"output": [p.output for p in pairs],
                          "output_b": [p.output_b for p in pairs],
                          "item": [p.group for p in pairs], "a": [p.a for p in pairs],
                          "b": [p.b for p in pairs], "tie": [p.tie for p in pairs]})
    theirs = pairwise_validity(units, pd.DataFrame(), {}, {"proxy": pd.Series(picks)},
                               n_boot=200)
    row = next(r for r in theirs.rows if r.proxy == "proxy")
    ours = preference_accuracy(picks, units["a"], units["b"], units["tie"], units["item"],
                               n_boot=200)
    for rule in ("ties_wrong", "ties_excluded"):
        for stratum, cell in row.cells[rule].items():
            assert ours[rule][stratum]["n"] == cell.n
            assert ours[rule][stratum]["accuracy"] == pytest.approx(cell.accuracy)
    assert ours["n_missing"] == 7


def test_a_feature_nothing_stores_is_refused_by_name_and_metric(pairs):
    with pytest.raises(ValueError, match=r"per \(metric per\).*compute_metrics --metrics per"):
        train_pairwise(pairs, params={"features": ["cer", "per"]})
    # By default: the default features that are stored, the others recorded as left out.
    fitted = train_pairwise(pairs, n_boot=0)
    assert fitted.metrics["features"] == ["wer", "cer", "bertscore_f"]
    assert "per" in fitted.metrics["features_left_out"]
    with pytest.raises(ValueError, match="no stored metric results"):
        train_pairwise([PairExample(1, 2, "g", {}, {}, a=3)])


def test_too_few_references_and_bad_parameters_are_refused(pairs):
    one_reference = [p for p in pairs if p.group == "ref 0"]
    with pytest.raises(ValueError, match="at least 2 references"):
        train_pairwise(one_reference, params={"features": ["cer"]})
    for params, message in (({"folds": 1}, "folds"), ({"C": 0}, "C must"),
                            ({"tie_band": 0.5}, "tie_band"), ({"features": []}, "features"),
                            ({"bogus": 1}, "unknown parameter")):
        with pytest.raises(ValueError, match=message):
            train_pairwise(pairs, params=params)
    with pytest.raises(TypeError, match="pairs"):
        PairwiseLogisticProxy().predict_proba([])


def test_pairs_missing_a_value_get_no_prediction(pairs):
    broken = list(pairs)
    broken[0] = PairExample(broken[0].output, broken[0].output_b, broken[0].group,
                            {"cer": None}, broken[0].features_b, a=5)
    fitted = train_pairwise(broken, params={"features": ["cer"]}, n_boot=0)
    assert fitted.proxy.out_of_fold[0]["p_a"] is None
    assert fitted.metrics["pairs_missing_features"] == 1
    assert fitted.metrics["accuracy"]["n_missing"] == 1


def test_artifact_round_trip_keeps_the_model_and_the_out_of_fold_predictions(
        pairs, fitted, tmp_path):
    directory = save_artifact(fitted, tmp_path, "pairwise")
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["kind"] == "pairwise_logistic"
    assert manifest["target_precision"] is None
    assert manifest["encoder"] == {"model": None, "model_sha": None, "external": False}
    assert OUT_OF_FOLD_FILE in manifest["files"]
    assert manifest["metrics"]["cv_accuracy"] == fitted.metrics["cv_accuracy"]
    loaded = load_artifact(directory)
    assert loaded.target_precision is None and loaded.feature_names() == fitted.feature_names()
    np.testing.assert_array_equal(loaded.proxy.predict_pairs(pairs),
                                  fitted.proxy.predict_pairs(pairs))
    assert loaded.proxy.out_of_fold == json.loads(json.dumps(fitted.proxy.out_of_fold))
    table = loaded.proxy.out_of_fold_table()
    first = loaded.proxy.out_of_fold[0]
    assert table[(first["output_b"], first["output"])] == pytest.approx(1 - first["p_a"])


def test_an_error_count_and_nker_alone_prefer_the_output_with_fewer_errors():
    """Each feature alone reads the direction its scorer declares. Before, this module's own
    lower-is-better list lacked `substitutions` (and `nker`, `deletions`, `insertions`), so
    those features got no baseline at all ("direction unknown")."""
    rng = np.random.default_rng(3)
    pairs = []
    for reference in range(40):
        values = [{"substitutions": float(errors), "nker": errors / 10}
                  for errors in rng.choice(10, size=2, replace=False)]
        fewer_a = values[0]["substitutions"] < values[1]["substitutions"]
        pairs.append(PairExample(output=2 * reference, output_b=2 * reference + 1,
                                 group=f"ref {reference}", features_a=values[0],
                                 features_b=values[1], a=5 if fewer_a else 0,
                                 b=0 if fewer_a else 5, tie=0))
    fitted = train_pairwise(pairs, params={"features": ["substitutions", "nker"]}, seed=0,
                             n_boot=0)
    alone = fitted.metrics["features_alone"]
    for name in ("substitutions", "nker"):
        assert alone[name]["ties_excluded"]["accuracy"] == 1.0, name
