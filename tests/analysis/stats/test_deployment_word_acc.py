"""LATTE's WordAcc in the deployment table is one per speaker: 100 - min(corpus WER, 100),
the corpus WER being the group's errors over its reference words (Tomanek et al., Table 5;
METHODS.md: "Corpus WER sums errors; it is not the mean of per-sentence WERs"). And a
WER-only figure never depends on the human labels: an output whose human majority is tied
still counts for WordAcc; only the human % leaves it out, and each figure says on how many
outputs it rests.

Hand-computed group (one speaker, one system):
    output  reference words  errors (S + D + I)  WER   WordAcc  human answers
    0       2                1 (1 S)             0.5   50       yes
    1       18               0                   0     100      yes
    2       10               2 (1 S, 1 I)        0.2   80       yes, no (a tie)
Mean of per-output WordAcc over 0 and 1 (today's figure: the tie dropped) = 75; over all three
= 76.67. Corpus WER over all three = 3 / 30 = 0.1, WordAcc = 90. Human % = 100 over the 2
outputs with a majority.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.stats.pipeline import proxy_validity
from kit.jsonable import to_jsonable
from tests.analysis.stats.test_validity_direction import USABLE, judgments_frame

COUNTS = {  # output: (hits, substitutions, deletions, insertions)
    0: (1, 1, 0, 0),
    1: (18, 0, 0, 0),
    2: (9, 1, 0, 1),
}


def wer_values() -> pd.DataFrame:
    """The values the WER scorer stores per output (metrics.scorers.text.WordErrorScorer)."""
    rows = []
    for output, (hits, subs, dels, ins) in COUNTS.items():
        words = hits + subs + dels
        wer = (subs + dels + ins) / words
        rows.append({"output": output, "wer": wer, "hits": hits, "substitutions": subs,
                     "deletions": dels, "insertions": ins, "ref_words": words,
                     "word_acc": 100 - min(100 * wer, 100)})
    return pd.DataFrame(rows)


def deployment_row(labels: dict[int, list[str]]) -> dict:
    frame = judgments_frame(labels, speakers=dict.fromkeys(COUNTS, "s1"))
    out = to_jsonable(proxy_validity(frame, USABLE, wer_values(), {}, []))
    deployment = out["deployment"]
    assert "error" not in deployment, deployment
    (row,) = deployment["rows"]
    return row | {"deciders": deployment["deciders"]}


TIED = {0: ["yes"], 1: ["yes"], 2: ["yes", "no"]}


def test_word_acc_per_speaker_is_one_minus_the_corpus_wer_over_unequal_references():
    row = deployment_row(TIED)
    # Not the mean of per-output WordAcc (75 without the tie, 76.67 with it).
    assert row["word_acc"] == pytest.approx(90.0)
    assert row["word_acc_n"] == 3
    assert row["human_mp"] == pytest.approx(100.0) and row["human_n"] == 2
    rule = next(d["rule"] for d in row["deciders"] if d["decider"] == "word_acc")
    assert "corpus WER" in rule and "mean" not in rule


def test_a_tied_human_majority_does_not_change_word_acc():
    decided = deployment_row({0: ["yes"], 1: ["yes"], 2: ["yes", "yes"]})
    tied = deployment_row(TIED)
    assert tied["word_acc"] == pytest.approx(decided["word_acc"])
    assert tied["word_acc_n"] == decided["word_acc_n"] == 3
    assert (tied["human_n"], decided["human_n"]) == (2, 3)
