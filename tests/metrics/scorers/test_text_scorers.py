"""Tests for the text scorers (metrics.scorers.text) and the registry (pure: no Django)."""

from __future__ import annotations

import importlib.metadata
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sacrebleu import corpus_bleu
from sacrebleu.metrics import CHRF

from metrics.scorers import registry, specs
from metrics.scorers.base import Pair, Score, Scorer
from metrics.scorers.normalise import Normaliser
from metrics.scorers.text import (
    BleuScorer,
    CharErrorScorer,
    ChrfScorer,
    RougeScorer,
    WordErrorScorer,
    corpus_cer,
    corpus_wer,
)

TEXT_SCORERS = (WordErrorScorer, CharErrorScorer, BleuScorer, ChrfScorer, RougeScorer)


def one(scorer: Scorer, reference: str, hypothesis: str) -> Score:
    [score] = scorer.score([Pair(key=0, reference=reference, hypothesis=hypothesis)])
    return score


# --- WER: known values ---------------------------------------------------------------------------


def test_wer_substitution_and_deletion():
    s = one(WordErrorScorer(), "the cat sat on the mat", "the cat sit on mat")
    v = s.values
    assert s.error is None
    assert (v["hits"], v["substitutions"], v["deletions"], v["insertions"]) == (4, 1, 1, 0)
    assert v["ref_words"] == 6
    assert v["wer"] == pytest.approx(2 / 6)
    assert v["sub_rate"] == pytest.approx(1 / 6)
    assert v["del_rate"] == pytest.approx(1 / 6)
    assert v["ins_rate"] == 0
    assert v["word_acc"] == pytest.approx(100 - 100 * 2 / 6)
    # mer = (S+D+I)/(H+S+D+I); wil = 1 - H^2 / (N * P) with P the hypothesis length.
    assert v["mer"] == pytest.approx(2 / 6)
    assert v["wil"] == pytest.approx(1 - 4**2 / (6 * 5))
    assert v["wip"] == pytest.approx(4**2 / (6 * 5))
    assert s.details["alignment"] == [
        {"op": "equal", "ref": ["the", "cat"], "hyp": ["the", "cat"]},
        {"op": "substitute", "ref": ["sat"], "hyp": ["sit"]},
        {"op": "equal", "ref": ["on"], "hyp": ["on"]},
        {"op": "delete", "ref": ["the"], "hyp": []},
        {"op": "equal", "ref": ["mat"], "hyp": ["mat"]},
    ]


def test_wer_insertion():
    s = one(WordErrorScorer(), "hello world", "hello big world")
    v = s.values
    assert (v["hits"], v["substitutions"], v["deletions"], v["insertions"]) == (2, 0, 0, 1)
    assert v["wer"] == pytest.approx(0.5)
    assert v["ins_rate"] == pytest.approx(0.5)
    assert v["ref_words"] == 2
    assert s.details["alignment"] == [
        {"op": "equal", "ref": ["hello"], "hyp": ["hello"]},
        {"op": "insert", "ref": [], "hyp": ["big"]},
        {"op": "equal", "ref": ["world"], "hyp": ["world"]},
    ]


def test_wer_latte_example_with_normalisation():
    # LATTE Table 3, severity 0: one substitution in eight words; case and punctuation differ.
    s = one(
        WordErrorScorer(),
        "I would be fascinated to know your answers.",
        "i will be fascinated to know your answers",
    )
    v = s.values
    assert v["ref_words"] == 8
    assert v["wer"] == pytest.approx(1 / 8)
    assert (v["sub_rate"], v["del_rate"], v["ins_rate"]) == pytest.approx((1 / 8, 0, 0))
    assert v["word_acc"] == pytest.approx(87.5)


def test_wer_above_one_and_word_acc_clamped():
    v = one(WordErrorScorer(), "yes", "no no no").values
    assert (v["substitutions"], v["insertions"]) == (1, 2)
    assert v["wer"] == pytest.approx(3.0)
    assert v["ins_rate"] == pytest.approx(2.0)
    assert v["word_acc"] == 0.0


def test_wer_rates_sum_to_wer():
    v = one(WordErrorScorer(), "a b c d e", "a x c e f g").values
    assert v["sub_rate"] + v["del_rate"] + v["ins_rate"] == pytest.approx(v["wer"])


def test_wer_uses_the_normaliser():
    assert one(WordErrorScorer(), "Hello, World!", "hello world").values["wer"] == 0
    raw = WordErrorScorer(normaliser=Normaliser(lowercase=False, strip_punctuation=False))
    s = one(raw, "Hello, World!", "hello world")
    assert s.values["substitutions"] == 2
    assert s.details["reference"] == "Hello, World!"


def test_wer_accepts_the_normaliser_as_a_dict():
    n = Normaliser(numbers="digits_to_words")
    scorer = WordErrorScorer(normaliser=n.to_dict())
    assert scorer.normaliser == n
    assert one(scorer, "three cats", "3 cats").values["wer"] == 0


# --- WER: edge cases ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference, hypothesis", [("", ""), ("  ", "\n"), ("...", "?!"), ("", "-")]
)
def test_wer_both_empty_is_perfect(reference, hypothesis):
    s = one(WordErrorScorer(), reference, hypothesis)
    assert s.error is None
    v = s.values
    assert v["wer"] == 0
    for key in ("hits", "substitutions", "deletions", "insertions", "ref_words"):
        assert v[key] == 0
    assert (v["sub_rate"], v["del_rate"], v["ins_rate"]) == (0, 0, 0)
    assert (v["mer"], v["wil"], v["wip"], v["word_acc"]) == (0, 0, 1, 100)
    assert s.details["alignment"] == []


@pytest.mark.parametrize("reference", ["", "   ", "¿...!"])
def test_wer_empty_reference_with_a_hypothesis_is_an_error_not_an_exception(reference):
    s = one(WordErrorScorer(), reference, "something was said")
    assert s.error == "reference is empty: WER is undefined"
    assert s.values == {}


@pytest.mark.parametrize("hypothesis", ["", "   ", "..."])
def test_wer_empty_hypothesis_is_all_deletions(hypothesis):
    s = one(WordErrorScorer(), "the cat sat", hypothesis)
    v = s.values
    assert (v["hits"], v["substitutions"], v["deletions"], v["insertions"]) == (0, 0, 3, 0)
    assert v["wer"] == 1.0
    assert v["del_rate"] == 1.0
    assert v["word_acc"] == 0.0
    assert s.details["alignment"] == [{"op": "delete", "ref": ["the", "cat", "sat"], "hyp": []}]


def test_one_bad_pair_does_not_fail_the_batch():
    pairs = [
        Pair("a", "the cat", "the cat"),
        Pair("b", None, "x"),  # type: ignore[arg-type]
        Pair("c", "", "x"),
        Pair("d", "the dog", "a dog"),
    ]
    scores = WordErrorScorer().score(pairs)
    assert len(scores) == 4
    assert scores[0].values["wer"] == 0
    assert scores[1].error == "reference is not text (got NoneType)"
    assert scores[2].error == "reference is empty: WER is undefined"
    assert scores[3].values["wer"] == pytest.approx(0.5)


def test_empty_batch():
    for cls in TEXT_SCORERS:
        assert cls().score([]) == []


# --- WER: properties ------------------------------------------------------------------------------

_WORDS = st.lists(st.sampled_from(["a", "b", "c", "the", "cat", "Dog", "x,"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(_WORDS, _WORDS)
def test_wer_properties(ref_words, hyp_words):
    s = one(WordErrorScorer(), " ".join(ref_words), " ".join(hyp_words))
    if not ref_words and hyp_words:
        assert s.error is not None
        return
    v = s.values
    assert set(v) == set(WordErrorScorer.outputs)
    assert v["wer"] >= 0
    assert 0 <= v["word_acc"] <= 100
    assert v["hits"] + v["substitutions"] + v["deletions"] == v["ref_words"] == len(ref_words)
    assert v["hits"] + v["substitutions"] + v["insertions"] == len(hyp_words)
    assert v["sub_rate"] + v["del_rate"] + v["ins_rate"] == pytest.approx(v["wer"])
    # The alignment spells out both texts, and "equal" ops really are equal.
    ops = s.details["alignment"]
    assert [w for op in ops for w in op["ref"]] == s.details["reference"].split()
    assert [w for op in ops for w in op["hyp"]] == s.details["hypothesis"].split()
    for op in ops:
        assert op["op"] in {"equal", "substitute", "delete", "insert"}
        if op["op"] == "equal":
            assert op["ref"] == op["hyp"]


# --- corpus WER ----------------------------------------------------------------------------------


def test_corpus_wer_is_not_the_mean_of_sentence_wers():
    nine = "one two three four five six seven eight nine"
    pairs = [
        Pair(1, "yes", "no"),  # 1 error in 1 word: WER 1.0
        Pair(2, nine, nine),  # 0 errors in 9 words: WER 0.0
    ]
    scores = WordErrorScorer().score(pairs)
    mean = sum(s.values["wer"] for s in scores) / len(scores)
    assert mean == pytest.approx(0.5)
    assert corpus_wer(scores) == pytest.approx(1 / 10)


def test_corpus_wer_skips_error_scores_and_validates():
    scores = WordErrorScorer().score([Pair(1, "a b", "a c"), Pair(2, "", "x"), Pair(3, "", "")])
    assert corpus_wer(scores) == pytest.approx(1 / 2)
    assert corpus_wer(WordErrorScorer().score([Pair(1, "", "")])) == 0.0
    with pytest.raises(ValueError, match="at least one"):
        corpus_wer([])
    with pytest.raises(ValueError, match="at least one"):
        corpus_wer(WordErrorScorer().score([Pair(1, "", "x")]))
    with pytest.raises(ValueError, match="not a WER score"):
        corpus_wer(BleuScorer().score([Pair(1, "a", "a")]))


def test_corpus_cer():
    scores = CharErrorScorer().score([Pair(1, "ab", "xb"), Pair(2, "abcdefgh", "abcdefgh")])
    assert corpus_cer(scores) == pytest.approx(1 / 10)


# --- CER -----------------------------------------------------------------------------------------


def test_cer_known_values():
    v = one(CharErrorScorer(), "Hello world", "helo world").values
    # One deleted "l" out of 11 characters (the space counts).
    assert (v["char_hits"], v["char_substitutions"], v["char_deletions"]) == (10, 0, 1)
    assert v["char_insertions"] == 0
    assert v["ref_chars"] == 11
    assert v["cer"] == pytest.approx(1 / 11)
    assert one(CharErrorScorer(), "cat", "cut").values["cer"] == pytest.approx(1 / 3)


def test_cer_alignment_is_over_characters():
    s = one(CharErrorScorer(), "cat", "cut")
    assert s.details["alignment"] == [
        {"op": "equal", "ref": ["c"], "hyp": ["c"]},
        {"op": "substitute", "ref": ["a"], "hyp": ["u"]},
        {"op": "equal", "ref": ["t"], "hyp": ["t"]},
    ]


def test_cer_non_latin():
    assert one(CharErrorScorer(), "नमस्ते दुनिया", "नमस्ते दुनिया").values["cer"] == 0
    assert one(CharErrorScorer(), "你好世界", "你好世").values["cer"] == pytest.approx(1 / 4)


def test_cer_empty_rules():
    both = one(CharErrorScorer(), "", " ")
    assert both.values == dict.fromkeys(CharErrorScorer.outputs, 0)
    only_hyp = one(CharErrorScorer(), "", "abc")
    assert only_hyp.error == "reference is empty: CER is undefined"
    assert only_hyp.values == {}
    only_ref = one(CharErrorScorer(), "abc", "")
    assert only_ref.values["cer"] == 1.0
    assert only_ref.values["char_deletions"] == 3


# --- BLEU ----------------------------------------------------------------------------------------

REF = "the quick brown fox jumps over the lazy dog"
HYP = "the quick brown fox jumped over the lazy dog"


def test_bleu_identical_is_100():
    assert one(BleuScorer(), REF, REF).values["bleu"] == pytest.approx(100)
    assert one(BleuScorer(), REF, REF).values["bleu"] <= 100


def test_bleu_partial_matches_hand_computation_and_corpus_bleu():
    value = one(BleuScorer(), REF, HYP).values["bleu"]
    # n-gram precisions 8/9, 6/8, 4/7, 2/6; equal lengths, so no brevity penalty.
    hand = 100 * math.exp(sum(math.log(p) for p in (8 / 9, 6 / 8, 4 / 7, 2 / 6)) / 4)
    assert value == pytest.approx(hand)
    # sacrebleu's corpus BLEU on the one sentence (references as streams: [[ref]]).
    assert value == pytest.approx(corpus_bleu([HYP], [[REF]]).score)


def test_bleu_details():
    d = one(BleuScorer(), REF, HYP).details
    assert d["precisions"] == pytest.approx([100 * 8 / 9, 100 * 6 / 8, 100 * 4 / 7, 100 * 2 / 6])
    assert d["bp"] == 1.0
    assert (d["sys_len"], d["ref_len"]) == (9, 9)


def test_bleu_empty_rules():
    assert one(BleuScorer(), "", "  ").values["bleu"] == 100
    assert one(BleuScorer(), "a b c", "").values["bleu"] == 0
    assert one(BleuScorer(), "", "a b c").values["bleu"] == 0


def test_bleu_does_not_normalise_by_default():
    scorer = BleuScorer()
    assert scorer.normaliser is None
    assert scorer.params["normalise"] is False
    assert one(scorer, "Hello, World!", "hello world").values["bleu"] < 100
    normalised = BleuScorer(normalise=True)
    assert normalised.normaliser == Normaliser()
    assert one(normalised, "Hello, World!", "hello world").values["bleu"] == pytest.approx(100)


def test_bleu_signature():
    sig = BleuScorer().signature()
    assert sig["metric"] == "bleu"
    assert sig["libraries"]["sacrebleu"] == importlib.metadata.version("sacrebleu")
    assert sig["normaliser"] is None
    assert "eff:yes" in sig["sacrebleu_signature"]
    assert "tok:13a" in sig["sacrebleu_signature"]
    assert "tok:char" in BleuScorer(tokenize="char").signature()["sacrebleu_signature"]
    json.dumps(sig)


def test_bleu_rejects_an_unknown_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        BleuScorer(tokenize="nope")


# --- chrF ----------------------------------------------------------------------------------------


def test_chrf_identical_is_100():
    assert one(ChrfScorer(), REF, REF).values["chrf"] == pytest.approx(100)
    assert one(ChrfScorer(word_order=2), REF, REF).values["chrf"] == pytest.approx(100)
    assert one(ChrfScorer(), "नमस्ते दुनिया", "नमस्ते दुनिया").values["chrf"] == pytest.approx(100)


def test_chrf_partial_matches_sacrebleu():
    assert one(ChrfScorer(), REF, HYP).values["chrf"] == pytest.approx(
        CHRF().sentence_score(HYP, [REF]).score
    )
    assert one(ChrfScorer(word_order=2), REF, HYP).values["chrf"] == pytest.approx(
        CHRF(word_order=2).sentence_score(HYP, [REF]).score
    )


def test_chrf_signature_and_params():
    assert "nw:0" in ChrfScorer().signature()["sacrebleu_signature"]
    sig = ChrfScorer(word_order=2).signature()
    assert "nw:2" in sig["sacrebleu_signature"]
    assert sig["params"] == {"word_order": 2, "normalise": False}
    with pytest.raises(ValueError):
        ChrfScorer(word_order=-1)


def test_chrf_empty_rules():
    assert one(ChrfScorer(), "", "").values["chrf"] == 100
    assert one(ChrfScorer(), "abc", "").values["chrf"] == 0


# --- ROUGE ---------------------------------------------------------------------------------------


def test_rouge_hand_computed_overlap():
    v = one(RougeScorer(), "the cat sat", "the cat").values
    # Unigrams: 2 of 2 hypothesis words match (P = 1), 2 of 3 reference words (R = 2/3).
    assert v["rouge1_p"] == pytest.approx(1.0)
    assert v["rouge1_r"] == pytest.approx(2 / 3)  # swapped arguments would give P=2/3, R=1
    assert v["rouge1_f"] == pytest.approx(0.8)
    # Bigrams: "the cat" matches; the reference also has "cat sat".
    assert (v["rouge2_p"], v["rouge2_r"]) == pytest.approx((1.0, 0.5))
    assert v["rouge2_f"] == pytest.approx(2 / 3)
    assert v["rougeL_f"] == pytest.approx(0.8)
    assert list(v) == list(RougeScorer.outputs)


def test_rouge_stemmer():
    assert one(RougeScorer(), "cats running", "cat run").values["rouge1_f"] == pytest.approx(1.0)
    assert one(RougeScorer(use_stemmer=False), "cats running", "cat run").values["rouge1_f"] == 0


def test_rouge_non_ascii_text_is_an_error_not_a_zero():
    s = one(RougeScorer(), "नमस्ते दुनिया", "नमस्ते दुनिया")
    assert s.values == {}
    assert "ASCII" in s.error
    assert "hypothesis" in one(RougeScorer(), "hello", "नमस्ते").error


def test_rouge_flags_ignored_non_ascii_letters():
    assert one(RougeScorer(), "café au lait", "cafe au lait").details["non_ascii_ignored"] is True
    assert one(RougeScorer(), "the cat", "the cat").details["non_ascii_ignored"] is False


def test_rouge_empty_rules():
    assert one(RougeScorer(), "", "...").values == dict.fromkeys(RougeScorer.outputs, 1.0)
    assert one(RougeScorer(), "the cat", "").values == dict.fromkeys(RougeScorer.outputs, 0.0)


def test_rouge_signature():
    sig = RougeScorer().signature()
    assert sig["libraries"]["rouge-score"] == importlib.metadata.version("rouge-score")
    assert "nltk" in sig["libraries"]
    assert "nltk" not in RougeScorer(use_stemmer=False).signature()["libraries"]
    assert sig["params"] == {"use_stemmer": True, "normalise": False}


# --- all text scorers ----------------------------------------------------------------------------

MIXED = [
    Pair(1, "The cat sat on the mat.", "the cat sit on mat"),
    Pair(2, "", ""),
    Pair(3, "hello world", ""),
    Pair(4, "I would be fascinated.", "I will be fascinated."),
]


@pytest.mark.parametrize("cls", TEXT_SCORERS)
def test_contract(cls):
    scorer = cls()
    assert scorer.direction in ("higher", "lower")
    assert scorer.needs_encoder is False
    assert isinstance(scorer.version, str)
    scores = scorer.score(MIXED, encoder=object())
    assert len(scores) == len(MIXED)
    for score in scores:
        assert score.error is None
        assert set(score.values) == set(cls.outputs)
        assert all(isinstance(x, int | float) and math.isfinite(x) for x in score.values.values())
    json.dumps([s.details for s in scores])
    sig = scorer.signature()
    json.dumps(sig)
    assert sig["metric"] == cls.name
    assert sig["version"] == cls.version
    assert all(version != "unknown" for version in sig["libraries"].values())


@pytest.mark.parametrize("cls", [WordErrorScorer, CharErrorScorer])
def test_error_rate_signature_names_jiwer_and_the_normaliser(cls):
    n = Normaliser(strip_punctuation=False)
    sig = cls(normaliser=n).signature()
    assert sig["libraries"] == {"jiwer": importlib.metadata.version("jiwer")}
    assert sig["params"]["normaliser"] == n.to_dict()
    assert sig != cls().signature()


# --- registry ------------------------------------------------------------------------------------


def test_registry_holds_the_text_scorers():
    for cls in TEXT_SCORERS:
        assert registry.scorer_class(cls.name) is cls
    for name, cls in registry.available().items():
        assert cls.name == name


def test_default_metrics_are_all_known():
    assert registry.DEFAULT_METRICS[:5] == ("wer", "cer", "bleu", "chrf", "rouge")
    available, unavailable = registry.available(), registry.unavailable()
    for name in registry.DEFAULT_METRICS:
        assert name in available or name in unavailable


def test_build():
    scorer = registry.build("wer")
    assert isinstance(scorer, WordErrorScorer)
    assert scorer.normaliser == Normaliser()
    custom = registry.build("wer", {"normaliser": {"lowercase": False}})
    assert custom.normaliser == Normaliser(lowercase=False)
    chrf = registry.build("chrf", {"word_order": 2})
    assert isinstance(chrf, ChrfScorer)
    assert chrf.word_order == 2


def test_build_unknown_metric():
    with pytest.raises(ValueError, match=r"^unknown metric 'nope'; known: .*\bwer\b"):
        registry.build("nope")


def test_build_rejects_unknown_parameters_and_bad_values():
    with pytest.raises(ValueError, match=r"does not take parameter.*colour"):
        registry.build("bleu", {"colour": "red"})
    with pytest.raises(ValueError, match="mapping"):
        registry.build("bleu", ["13a"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        registry.build("wer", {"normaliser": {"numbers": "roman"}})


def test_registry_finds_the_model_scorers_that_exist():
    # Whatever state semantic.py / heval.py are in, every model metric is either buildable or
    # has a reason.
    available, unavailable = registry.available(), registry.unavailable()
    for name in ("bertscore", "semantic_distance", "embedding_cosine", "heval"):
        assert (name in available) != (name in unavailable)


MODEL_METRICS = {"bertscore", "semantic_distance", "embedding_cosine", "heval"}


@pytest.fixture
def forgetful_registry():
    """The registry finds its scorers again in the test, and again after it."""
    registry.forget()
    yield registry
    registry.forget()


def test_missing_model_modules_make_their_metrics_unavailable(monkeypatch, forgetful_registry):
    real_import = registry.importlib.import_module

    def fail(name):
        if name in ("metrics.scorers.semantic", "metrics.scorers.heval"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name)

    monkeypatch.setattr(registry.importlib, "import_module", fail)
    assert MODEL_METRICS.isdisjoint(registry.available())
    assert set(registry.unavailable()) & MODEL_METRICS == MODEL_METRICS
    with pytest.raises(ValueError, match="metric 'bertscore' is unavailable"):
        registry.build("bertscore")


def test_partial_model_modules(monkeypatch, forgetful_registry):
    class FakeBertScore(Scorer):
        spec = specs.BERTSCORE
        version = "0"

        def score(self, pairs, *, encoder=None):
            return [Score() for _ in pairs]

    class FakeModule:
        BertScoreScorer = FakeBertScore

    real_import = registry.importlib.import_module

    def import_module(name):
        if name == "metrics.scorers.semantic":
            return FakeModule
        if name == "metrics.scorers.heval":
            raise ImportError("No module named 'torch'")
        return real_import(name)

    monkeypatch.setattr(registry.importlib, "import_module", import_module)
    assert registry.scorer_class("bertscore") is FakeBertScore
    assert MODEL_METRICS & set(registry.available()) == {"bertscore"}
    unavailable = registry.unavailable()
    assert "HevalScorer" in unavailable["heval"]
    assert (
        "metrics.scorers.heval failed to import: No module named 'torch'"
        in (unavailable["heval"])
    )
    assert "bertscore" not in unavailable


def test_duplicate_names_are_refused():
    with pytest.raises(RuntimeError, match="two scorers"):
        registry._index([specs.WER, specs.WER])
