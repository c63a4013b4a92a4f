"""BERTScore equals the bert-score package (0.3.13) on the same local model, to 1e-4.

bert-score is a TEST-ONLY dependency. It loads a local directory when `model_type` is the path
as a str (it calls `model_type.startswith`) and `num_layers` is given (its layer table only
knows hub names); a custom rescale baseline needs `lang` plus `baseline_path`. Its
`sent_encode` of an empty string fails with transformers 5 (the tokenizer lacks
`build_inputs_with_special_tokens`), so the empty cases are checked against its documented
behaviour (P = R = F = 0) instead.

bert-score floors a best match at 0 wherever its padded batches pad (see the note in
`semantic.py`); `bert_score_batch_size=8` reproduces the batches of `batch_size=8` exactly, the
default floors every pair (batch-independent) and equals bert-score on every padded pair.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.semantic import BertScoreScorer, read_baseline_file  # noqa: E402

LONG = (
    "In the first quarter of 2024 the committee met on the 3rd, 14th and 27th of March to "
    "review the budget of $1,250,000, the hiring plan for twelve engineers, the relocation of "
    "the Bengaluru office, and the proposal, submitted by Dr. O'Neil, to replace the ageing "
    "speech-recognition pipeline with a self-hosted model fine-tuned on dysarthric speech."
)
PAIRS = [
    ("The flight is about to land", "The fite is about to lamt"),
    ("The flight is about to land", "Te flight s about to land"),
    ("Data set needs to be cleaned", "Dataset needs to be cleaned"),
    ("Whomsoever it is concerned", "hm so er it is concerned"),
    ("I am in love with the nature in Ontario", "m n love vid de nature n Ontario"),
    ("I am too shy to speak to that many people.", "I am too shy to speak to that many ppal."),
    ("He had a ridiculous idea and I was very upset by it.",
     "Hi hada ridiculous idea nd ivas wery upset buy itt."),
    ("This is your captain speaking", "des s ur captain speaking"),
    ("This is your captain speaking", "This is your captain speaking"),  # identical
    ("Call me at 555-0134 before 9:30 a.m., please!", "call me at five five five oh one three"),
    ("It costs $12.50 (plus 20% tax).", "it costs twelve fifty plus twenty percent tax"),
    ("Morale is raised", "Moral is raised"),
    ("Morale is raised", "Morale is razed"),
    ("How large is that file?", "How large is a funnel?"),
    ("Yeah I have one basically every day.", "Yeah I have I'm basically every day."),
    ("I would be fascinated to know your answers.", "I will be fascinated to know your answers."),
    ("Turn left at the second traffic light", "turn left at the 2nd traffic light"),
    ("Don't forget the keys", "do not forget the keys"),
    ("Hello", "Hello hello hello hello"),
    ("a", "the"),
    ("The quick brown fox jumps over the lazy dog", "dog lazy the over jumps fox brown quick"),
    ("She sells sea shells by the sea shore", "sea shells"),
    ("Good morning everyone", "Good morning everyone, and welcome to today's meeting about ..."),
    (LONG, LONG.replace("twelve", "twelfth").replace("Bengaluru", "Bangalore")),
    (LONG, "the committee met in march"),
    ("मैं घर जा रहा हूँ", "मैं घर जा रही हूँ"),
    ("我们明天去北京", "我们明天去上海"),
    ("Café au lait, s'il vous plaît", "cafe au lait sil vous plait"),
    ("word " * 600, "word " * 590 + "different"),  # both truncated to 512 tokens
    ("!!!", "???"),
]
CANDS = [h for _, h in PAIRS]
REFS = [r for r, _ in PAIRS]
BASELINE = (0.21, 0.23, 0.22)


@pytest.fixture(scope="module")
def path(cpu_encoder):
    return cpu_encoder.model_path


@pytest.fixture(scope="module")
def baseline_file(tmp_path_factory):
    # bert-score's rescale files: CSV with header LAYER,P,R,F; the row at position num_layers.
    path = tmp_path_factory.mktemp("baseline") / "custom.tsv"
    rows = ["LAYER,P,R,F"] + [f"{i},0.1,0.1,0.1" for i in range(4)]
    rows += ["4,{},{},{}".format(*BASELINE), "5,0.5,0.5,0.5", "6,0.6,0.6,0.6"]
    path.write_text("\n".join(rows) + "\n")
    return path


def as_pairs():
    return [Pair(i, r, h) for i, (r, h) in enumerate(PAIRS)]


def reference_scores(path, **kwargs):
    import bert_score

    p, r, f = bert_score.score(CANDS, REFS, model_type=str(path), batch_size=8, nthreads=0,
                               device="cpu", **kwargs)
    return p.tolist(), r.tolist(), f.tolist()


@pytest.fixture(scope="module")
def plain_reference(path):
    return reference_scores(path, num_layers=6)


def assert_equal_to_bert_score(ours, theirs):
    p, r, f = theirs
    assert all(s.error is None for s in ours)
    diffs = []
    for score, tp, tr, tf in zip(ours, p, r, f, strict=True):
        diffs += [abs(score.values["bertscore_p"] - tp), abs(score.values["bertscore_r"] - tr),
                  abs(score.values["bertscore_f"] - tf)]
    assert max(diffs) < 1e-4, max(diffs)


def test_equals_bert_score_last_layer(plain_reference, cpu_encoder):
    ours = BertScoreScorer(bert_score_batch_size=8).score(as_pairs(), encoder=cpu_encoder)
    assert_equal_to_bert_score(ours, plain_reference)
    identical = ours[8].values
    assert identical["bertscore_f"] == pytest.approx(1.0, abs=1e-5)


def test_default_equals_bert_score_on_padded_pairs_and_ignores_neighbours(
    plain_reference, cpu_encoder
):
    scorer = BertScoreScorer()
    pairs = as_pairs()
    ours = scorer.score(pairs, encoder=cpu_encoder)
    records = cpu_encoder.encode(REFS + CANDS)
    floor_p, floor_r = BertScoreScorer(bert_score_batch_size=8)._floors(
        records[: len(PAIRS)], records[len(PAIRS):]
    )
    padded = [i for i in range(len(PAIRS)) if floor_p[i] and floor_r[i]]
    assert len(padded) >= 15
    assert_equal_to_bert_score([ours[i] for i in padded],
                               [[column[i] for i in padded] for column in plain_reference])
    # "fite ... lamt": one best match below 0, floored (bert-score pads this pair in its batch)
    assert ours[0].values["bertscore_p"] == pytest.approx(plain_reference[0][0], abs=1e-4)
    for pair, together in zip(pairs[:6], ours[:6], strict=True):
        # equal up to float rounding: the batched product may sum in another order
        assert scorer.score([pair], encoder=cpu_encoder)[0].values == pytest.approx(
            together.values, abs=1e-6)


def test_unpadded_bert_score_keeps_negative_best_matches(path, cpu_encoder):
    """Alone in its batch, "fite ... lamt" is not padded: bert-score keeps a match below 0."""
    import bert_score

    pair = as_pairs()[0]
    (p,), (r,), (f,) = bert_score.score([pair.hypothesis], [pair.reference],
                                        model_type=str(path), num_layers=6, device="cpu")
    exact = BertScoreScorer(bert_score_batch_size=64).score([pair], encoder=cpu_encoder)[0]
    assert_equal_to_bert_score([exact], ([p.item()], [r.item()], [f.item()]))
    floored = BertScoreScorer().score([pair], encoder=cpu_encoder)[0]
    assert floored.values["bertscore_p"] > exact.values["bertscore_p"] + 1e-3


def test_equals_bert_score_with_idf(path, cpu_encoder):
    theirs = reference_scores(path, num_layers=6, idf=True)
    # bert-score computes idf over the references as passed (with repeats): do the same
    scorer = BertScoreScorer(idf=True, idf_sentences=REFS, bert_score_batch_size=8)
    ours = scorer.score(as_pairs(), encoder=cpu_encoder)
    assert_equal_to_bert_score(ours, theirs)


def test_equals_bert_score_rescaled_at_another_layer(path, cpu_encoder, baseline_file):
    theirs = reference_scores(path, num_layers=4, lang="en", rescale_with_baseline=True,
                              baseline_path=str(baseline_file))
    baseline = read_baseline_file(baseline_file, 4)
    assert baseline == BASELINE
    scorer = BertScoreScorer(layer=4, baseline=baseline, bert_score_batch_size=8)
    ours = scorer.score(as_pairs(), encoder=cpu_encoder)
    assert_equal_to_bert_score(ours, theirs)


def test_truncation_is_reported(cpu_encoder):
    scores = BertScoreScorer().score(as_pairs(), encoder=cpu_encoder)
    assert [i for i, s in enumerate(scores) if s.details.get("truncated")] == [28]


def test_empty_hypothesis_scores_zero_and_empty_reference_is_an_error(cpu_encoder):
    pairs = [Pair(1, "a reference", ""), Pair(2, "a reference", "  \n"), Pair(3, "", "text"),
             Pair(4, "   ", ""), Pair(5, "a reference", "a reference")]
    plain = BertScoreScorer().score(pairs, encoder=cpu_encoder)
    for score in plain[:2]:
        assert score.values == {"bertscore_f": 0.0, "bertscore_p": 0.0, "bertscore_r": 0.0}
        assert score.details == {"empty_hypothesis": True}
    assert plain[2].error.startswith("empty reference") and not plain[2].values
    assert plain[3].error.startswith("empty reference")
    assert plain[4].values["bertscore_f"] == pytest.approx(1.0, abs=1e-5)
    rescaled = BertScoreScorer(baseline=BASELINE).score(pairs[:1], encoder=cpu_encoder)[0]
    assert rescaled.values["bertscore_p"] == pytest.approx(-0.21 / 0.79)
    assert rescaled.values["bertscore_f"] == pytest.approx(-0.22 / 0.78)


def test_idf_weights_match_bert_score_definition(cpu_encoder):
    import math

    scorer = BertScoreScorer(idf=True, idf_sentences=["the cat", "the dog", "a bird"])
    table = scorer._weight_table(cpu_encoder)
    tok = cpu_encoder.tokenizer
    the, cat, unseen = tok.convert_tokens_to_ids(["the", "cat", "zebra"])
    assert table[the].item() == pytest.approx(math.log(4 / 3))
    assert table[cat].item() == pytest.approx(math.log(4 / 2))
    assert table[unseen].item() == pytest.approx(math.log(4))
    assert table[tok.cls_token_id].item() == 0 and table[tok.sep_token_id].item() == 0
    plain = BertScoreScorer()._weight_table(cpu_encoder)
    assert plain[tok.cls_token_id] == 0 and plain[tok.sep_token_id] == 0 and plain[the] == 1


def test_params_are_validated_and_signature_is_compact(cpu_encoder):
    with pytest.raises(ValueError):
        BertScoreScorer(idf=True)
    with pytest.raises(ValueError):
        BertScoreScorer(baseline=(0.1, 0.2))
    sig = BertScoreScorer(idf=True, idf_sentences=REFS).signature(cpu_encoder)
    assert sig["metric"] == "bertscore" and sig["params"]["layer"] == 6
    assert sig["params"]["idf_sentences"]["n"] == len(REFS)
    given = BertScoreScorer(idf=True, idf_sentences=REFS, idf_digest="abc").signature(cpu_encoder)
    assert given["params"]["idf_sentences"] == {"n": len(REFS), "sha256": "abc"}
    assert BertScoreScorer(model_path=cpu_encoder.model_path).signature(cpu_encoder)["params"][
        "model_path"] == cpu_encoder.model_path
    assert sig["encoder"] == cpu_encoder.signature()
    scorer = BertScoreScorer()
    assert scorer.needs_encoder and scorer.direction == "higher"
    assert scorer.outputs[0] == "bertscore_f"
