"""The analysis reads every metric value's direction and headline status from its scorer's
declaration (`metrics.scorers.registry`), not from lists of its own.

Before, `analysis.stats.pipeline` kept LOWER_IS_BETTER and HEADLINE_SCORES, `analysis.stats.votes`
a COUNT_VALUES list, and `proxies.learned.pairwise` a second LOWER_IS_BETTER lacking `nker`,
`substitutions`, `deletions` and `insertions`. No reader turned one of those four the wrong way
round (each either knew it or left it out), but the lists had drifted from the scorers: PER,
added later, was missing from the headline scores, so a binary criterion's validity never
compared it with the people; `nker`, a rate, was filed with the counts and never compared; and a
value no list knew was read as higher-better without a word.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats.pipeline import analyse, proxy_validity
from tests.analysis.stats.test_validity_direction import USABLE, judgments_frame


def binary_study(n: int = 80, seed: int = 4) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    quality = rng.uniform(size=n)
    labels = {o: ["yes" if rng.uniform() < q else "no" for _ in range(3)]
              for o, q in enumerate(quality)}
    return judgments_frame(labels), quality


def test_a_binary_criterion_compares_per_as_a_lower_is_better_headline():
    frame, quality = binary_study()
    metrics = pd.DataFrame({"output": range(len(quality)), "wer": 1 - quality,
                            "per": 1 - quality})
    out = proxy_validity(frame, USABLE, metrics, {}, [])
    by_name = {p["proxy"]: p for p in out["proxies"]}
    assert by_name["per"]["higher_is_positive"] is False
    assert by_name["per"]["auc"]["auc"]["value"] > 0.7
    assert by_name["per"]["auc"]["auc"]["value"] == by_name["wer"]["auc"]["auc"]["value"]


def likert_result(metrics_columns: dict[str, np.ndarray], quality: np.ndarray,
                  rng: np.random.Generator) -> dict:
    n = len(quality)
    rows = []
    for output in range(n):
        for rater in range(4):
            rating = int(np.clip(np.round(3 + quality[output] + rng.normal(0, 0.6)), 1, 5))
            rows.append({"rater": f"r{rater}", "rater_kind": "expert", "is_human": True,
                         "output": output, "item": f"i{output // 2}",
                         "system": f"s{output % 2}", "system_b": None, "criterion": "fluency",
                         "value": str(rating), "numeric": float(rating), "seconds": 4.0})
    metrics = pd.DataFrame({"output": range(n), "item": [f"i{o // 2}" for o in range(n)],
                            "system": [f"s{o % 2}" for o in range(n)], **metrics_columns})
    criterion = {"key": "fluency", "kind": "likert", "scale_points": 5}
    return analyse(pd.DataFrame(rows), [criterion], metrics, {"engine": "statsmodels"})


def test_a_likert_criterion_compares_nker_as_a_rate_and_leaves_the_counts_out():
    rng = np.random.default_rng(11)
    quality = rng.normal(size=40)
    nker = np.clip(0.5 - 0.2 * quality + rng.normal(0, 0.05, 40), 0, 1)
    result = likert_result({"heval": nker, "nker": nker, "n_keywords": np.full(40, 3.0),
                            "wrong_keywords": np.round(nker * 3),
                            "substitutions": np.round(nker * 10)}, quality, rng)
    entry = result["validity"][0]
    by_name = {p["proxy"]: p for p in entry["proxies"]}
    assert set(by_name) == {"heval", "nker"}  # the counts are not compared over outputs
    assert by_name["nker"]["higher_is_better"] is False
    assert by_name["nker"]["correlations"]["spearman"]["value"] < -0.8
    assert [p["proxy"] for p in entry["proxies"]] == ["heval", "nker"]  # headline first


def test_a_metric_value_no_scorer_declares_is_refused_not_read_as_higher_is_better():
    rng = np.random.default_rng(11)
    quality = rng.normal(size=40)
    result = likert_result({"wer": 0.5 - 0.2 * quality, "mystery": quality}, quality, rng)
    entry = result["validity"][0]
    assert "no metric stores a value named 'mystery'" in entry["error"]
    assert any("mystery" in warning for warning in result["warnings"])
