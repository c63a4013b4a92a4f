"""Work the scorers share or remember within a batch gives the libraries' own values.

Three systems share every reference; WER, CER and H_eval normalise the same texts; WER and
H_eval align the same normalised words. The scorers remember such results (`memo`), and the
sacrebleu and ROUGE scorers count each distinct reference and stem each distinct word once.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import jiwer  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rouge_score import rouge_scorer  # noqa: E402
from rouge_score.tokenize import tokenize  # noqa: E402
from sacrebleu.metrics import BLEU, CHRF  # noqa: E402

from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.heval import HevalScorer  # noqa: E402
from metrics.scorers.memo import memo_stats, memos_clear  # noqa: E402
from metrics.scorers.normalise import Normaliser  # noqa: E402
from metrics.scorers.semantic import SemanticDistanceScorer  # noqa: E402
from metrics.scorers.text import (  # noqa: E402
    BleuScorer,
    ChrfScorer,
    RougeScorer,
    WordErrorScorer,
)

WORDS = ["the", "flights", "is", "running", "landed", "call", "Anna", "minutes", "cheese", "a",
         "generously", "relational", "don't", "12", "uh", "Cafés"]
sentences = st.lists(st.sampled_from(WORDS), min_size=0, max_size=9).map(" ".join)
punctuated = st.tuples(sentences, st.sampled_from(["", ".", "?", "!", ","])).map("".join)
# a few references, each transcribed by several systems
batches = st.lists(st.tuples(punctuated, st.lists(punctuated, min_size=1, max_size=3)),
                   min_size=1, max_size=5)


def as_pairs(batch):
    return [Pair((i, k), ref, hyp) for i, (ref, hyps) in enumerate(batch)
            for k, hyp in enumerate(hyps)]


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), st.sampled_from([Normaliser(), Normaliser(lowercase=False),
                                              Normaliser(numbers="digits_to_words")]))
def test_remembered_normalisation_equals_computing_it(text, normaliser):
    memos_clear()
    assert normaliser(text) == normaliser._normalise(text) == normaliser(text)


def test_memos_clear_empties_every_memory():
    Normaliser()("Some text.")
    Normaliser()("Some text.")
    assert any(hits or misses for hits, misses in memo_stats().values())
    memos_clear()
    assert all(stats == (0, 0) for stats in memo_stats().values())


@settings(max_examples=60, deadline=None)
@given(batches, st.sampled_from([0, 2]))
def test_sacrebleu_scorers_equal_sacrebleu_with_shared_references(batch, word_order):
    pairs = as_pairs(batch)
    bleu, chrf = BleuScorer(), ChrfScorer(word_order=word_order)
    ours_bleu, ours_chrf = bleu.score(pairs), chrf.score(pairs)
    for pair, b, c in zip(pairs, ours_bleu, ours_chrf, strict=True):
        if not pair.reference.strip() and not pair.hypothesis.strip():
            continue  # both empty: a perfect match by our documented rule
        fresh_bleu = BLEU(effective_order=True).sentence_score(pair.hypothesis, [pair.reference])
        fresh_chrf = CHRF(word_order=word_order).sentence_score(pair.hypothesis,
                                                                [pair.reference])
        assert b.values["bleu"] == pytest.approx(min(max(fresh_bleu.score, 0.0), 100.0))
        assert b.details["precisions"] == pytest.approx(fresh_bleu.precisions)
        assert c.values["chrf"] == pytest.approx(min(max(fresh_chrf.score, 0.0), 100.0))


@settings(max_examples=60, deadline=None)
@given(batches)
def test_rouge_with_remembered_stems_equals_rouge_score(batch):
    pairs = as_pairs(batch)
    theirs = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for pair, ours in zip(pairs, RougeScorer().score(pairs), strict=True):
        if not tokenize(pair.reference, None) and not tokenize(pair.hypothesis, None):
            assert ours.values["rouge1_f"] == 1.0  # both empty: 1.0 by our documented rule
            continue
        result = theirs.score(pair.reference, pair.hypothesis)
        for kind in ("rouge1", "rouge2", "rougeL"):
            assert ours.values[f"{kind}_p"] == pytest.approx(result[kind].precision)
            assert ours.values[f"{kind}_r"] == pytest.approx(result[kind].recall)
            assert ours.values[f"{kind}_f"] == pytest.approx(result[kind].fmeasure)


def test_wer_and_heval_align_each_pair_once(cpu_encoder, monkeypatch):
    calls = []
    original = jiwer.process_words

    def counting(reference, hypothesis, *args, **kwargs):
        calls.append((reference, hypothesis))
        return original(reference, hypothesis, *args, **kwargs)

    monkeypatch.setattr(jiwer, "process_words", counting)
    pairs = [Pair(1, "The flight is about to land.", "the fight is about to land"),
             Pair(2, "The flight is about to land.", "flight about land"),
             Pair(3, "Call Anna on speaker", "call hannah on speaker please")]
    memos_clear()
    wer = WordErrorScorer().score(pairs)
    heval = HevalScorer().score(pairs, encoder=cpu_encoder)
    assert len(calls) == len(pairs)  # H_eval reused WER's alignments
    assert [s.values["substitutions"] + s.values["deletions"] for s in wer] == [
        s.values["wrong_keywords"] + s.values["wrong_nonkeywords"] for s in heval]


def test_heval_sd_and_keywords_are_shared_per_reference(cpu_encoder):
    pairs = [Pair(1, "He had a ridiculous idea", "He had a ridiculous idea"),
             Pair(2, "He had a ridiculous idea", "hi hada ridiculous idea"),
             Pair(3, "He had a ridiculous idea", ""),
             Pair(4, "Morale is raised", "Moral is raised")]
    heval = HevalScorer().score(pairs, encoder=cpu_encoder)
    sd = SemanticDistanceScorer().score(pairs, encoder=cpu_encoder)
    for h, s in zip(heval, sd, strict=True):
        assert h.values["sd"] == pytest.approx(s.values["sd"], abs=1e-6)
    assert heval[0].details["keywords"] == heval[1].details["keywords"] == heval[2].details[
        "keywords"]
    assert heval[2].details["empty_hypothesis"] and heval[2].values["sd"] == 1.0
    for pair, score in zip(pairs, heval, strict=True):  # each alone: the same values
        (alone,) = HevalScorer().score([pair], encoder=cpu_encoder)
        assert alone.values == pytest.approx(score.values, abs=1e-6)
