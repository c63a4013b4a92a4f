"""Phoneme error rate through the espeak-ng program (pure: no Django).

Tests that run espeak-ng skip only when it is not installed; the tests of that situation (the
metric unavailable, with the reason) run everywhere."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from metrics.scorers import phoneme, registry
from metrics.scorers.base import Pair, ScorerUnavailable
from metrics.scorers.memo import memos_clear
from metrics.scorers.normalise import Normaliser
from metrics.scorers.phoneme import (
    PER_DEFAULT_NORMALISER,
    EspeakError,
    PhonemeErrorScorer,
    Phonemiser,
    corpus_per,
    g2p_input,
    phoneme_tokens,
)

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="the espeak-ng program is not installed (apt-get install espeak-ng)",
)


@pytest.fixture(scope="module")
def fr():
    if shutil.which("espeak-ng") is None:
        pytest.skip("the espeak-ng program is not installed (apt-get install espeak-ng)")
    return PhonemeErrorScorer(language="fr")


@pytest.fixture(scope="module")
def en():
    if shutil.which("espeak-ng") is None:
        pytest.skip("the espeak-ng program is not installed (apt-get install espeak-ng)")
    return PhonemeErrorScorer(language="en")


def one(scorer, reference, hypothesis):
    return scorer.score([Pair(0, reference, hypothesis)])[0]


# --- text handling without espeak-ng --------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("c' est", "c'est"),  # a detached elision is joined: espeak-ng reads "c' est" as "sé è"
        ("aujourd’  hui", "aujourd'hui"),
        ("peut-être, 3.5 et 3,5.", "peut-être 3.5 et 3,5"),
        ("oui! non? bon… (sic) « fin »", "oui non bon sic fin"),
        ("a\nb\r\nc\u2028d\x00e", "a b c d e"),  # one line, whatever the text holds
        ("[[a]]", "a"),  # espeak-ng's phoneme-input brackets cannot reach it
        ("'oui'", "oui"),
        ("x - y", "x y"),
        ("50 $ + 2", "50 $ + 2"),  # symbols espeak-ng reads aloud stay
        ("   ", ""),
    ],
)
def test_g2p_input(text, expected):
    assert g2p_input(text) == expected


def test_phoneme_tokens_drop_stress_clitic_hyphens_boundaries_and_language_switches():
    line = "l_ə- (en)_b_ˈɪ_z_n_ə_s_(fr) ʁ_ɑ̃_t_ˈa_b_l__ ˌɔ_ʁ"
    assert phoneme_tokens(line) == (
        "l", "ə", "b", "ɪ", "z", "n", "ə", "s", "ʁ", "ɑ̃", "t", "a", "b", "l", "ɔ", "ʁ",
    )  # fmt: skip
    # Multi-symbol phonemes stay whole: long vowels, diphthongs, affricates, tones.
    assert phoneme_tokens("dʒ_ˈɪ1_n t_ʃ_ˈaɪ_n_iː_z") == (
        "dʒ", "ɪ1", "n", "t", "ʃ", "aɪ", "n", "iː", "z",
    )  # fmt: skip
    assert phoneme_tokens("") == ()


def test_missing_espeak_makes_the_metric_unavailable(monkeypatch):
    monkeypatch.setattr(phoneme, "espeak_path", lambda: None)
    with pytest.raises(ScorerUnavailable, match="espeak-ng program is not installed"):
        PhonemeErrorScorer(language="fr")
    assert "apt-get install espeak-ng" in phoneme.espeak_unavailable_reason()
    registry.forget()  # found again without espeak-ng, and again after the test
    try:
        assert "per" not in registry.available()
        assert "espeak-ng" in registry.unavailable()["per"]
        with pytest.raises(ValueError,
                           match="metric 'per' is unavailable: the espeak-ng program"):
            registry.build("per", {"language": "fr"})
    finally:
        registry.forget()


def test_a_program_that_is_not_espeak_is_unavailable(monkeypatch, tmp_path):
    fake = tmp_path / "espeak-ng"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(phoneme, "espeak_path", lambda: str(fake))
    assert "did not name a version" in phoneme.espeak_unavailable_reason()


# --- with espeak-ng -------------------------------------------------------------------------------


@needs_espeak
def test_registered_like_wer_and_cer():
    assert registry.scorer_class("per") is PhonemeErrorScorer
    scorer = registry.build("per", {"language": "fr", "normaliser": "raw"})
    assert scorer.direction == "lower" and scorer.outputs[0] == "per"
    assert scorer.normaliser == Normaliser.preset("raw")
    assert registry.build("per").language == "en"  # no study to take it from


@needs_espeak
def test_signature_names_espeak_version_voice_and_normaliser(fr):
    sig = json.loads(json.dumps(fr.signature()))
    version = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout
    assert sig["g2p"]["program"] == "espeak-ng"
    assert sig["g2p"]["version"] in version
    assert sig["g2p"]["voice"] == "fr" and sig["params"]["language"] == "fr"
    assert sig["params"]["normaliser"] == PER_DEFAULT_NORMALISER.to_dict()
    assert sig["params"]["normaliser"]["elision"] == "join"
    assert sig != PhonemeErrorScorer(language="fr", normaliser="raw").signature()
    assert sig["g2p"] != PhonemeErrorScorer(language="en").signature()["g2p"]


@needs_espeak
@pytest.mark.parametrize("voice", ["xx-nope", "zz"])
def test_unknown_voice_is_a_clear_error(voice):
    with pytest.raises(ValueError, match=f"espeak-ng has no voice '{voice}'.*--voices"):
        PhonemeErrorScorer(language=voice)
    with pytest.raises(ValueError, match="no voice"):
        registry.build("per", {"language": voice})


@needs_espeak
@pytest.mark.parametrize("voice", ["../fr", "-v", "fr fr", "", 3, None])
def test_voice_names_are_checked_before_espeak_sees_them(voice):
    with pytest.raises(ValueError, match="language must be an espeak-ng voice name"):
        PhonemeErrorScorer(language=voice)


@needs_espeak
def test_french_examples(fr):
    # Homophones: WER 1, PER 0.
    assert one(fr, "vert", "verre").values["per"] == 0.0
    assert one(fr, "il est vert", "il est vers").values["per"] == 0.0
    # Word boundaries and elision spelling do not change the sounds.
    assert one(fr, "aujourd' hui c' est", "aujourd'hui c'est").values["per"] == 0.0
    assert one(fr, "peut-être", "peut être").values["per"] == 0.0
    # Numbers are read in the voice's language.
    assert one(fr, "cent vingt-trois", "123").values["per"] == 0.0
    s = one(fr, "le chat", "le chien")  # l ə ʃ a -> l ə ʃ j ɛ̃
    assert s.error is None
    assert s.details["reference_phonemes"] == "l ə ʃ a"
    assert s.details["hypothesis_phonemes"] == "l ə ʃ j ɛ̃"
    assert s.values["per"] == pytest.approx(2 / 4)
    assert (s.values["phon_substitutions"], s.values["phon_insertions"]) == (1, 1)
    assert s.values["ref_phonemes"] == 4
    assert [op["op"] for op in s.details["alignment"]] == ["equal", "insert", "substitute"]
    # A nasal vowel is one phoneme: "bon" vs "beau" is one substitution, not two edits.
    s = one(fr, "bon", "beau")
    assert s.details["reference_phonemes"] == "b ɔ̃" and s.values["per"] == 0.5


@needs_espeak
def test_english_examples(en):
    assert one(en, "knight", "night").values["per"] == 0.0
    assert one(en, "their car", "there car").values["per"] == 0.0
    s = one(en, "the cat", "the cap")  # ð ə k a t -> ð ə k a p
    assert s.values["per"] == pytest.approx(1 / 5)
    assert s.values["phon_substitutions"] == 1
    assert one(en, "the cat", "cat the").values["per"] > 0  # order matters


@needs_espeak
def test_empty_texts(fr):
    both = one(fr, "", "  ")
    assert both.error is None and both.values["per"] == 0.0 and both.values["ref_phonemes"] == 0
    assert one(fr, "...", "").values["per"] == 0.0  # punctuation has no phonemes
    ref_empty = one(fr, "", "bonjour")
    assert ref_empty.error == "reference has no phonemes: PER is undefined"
    assert ref_empty.values == {}
    hyp_empty = one(fr, "bonjour", "")
    assert hyp_empty.values["per"] == 1.0
    assert hyp_empty.values["phon_deletions"] == hyp_empty.values["ref_phonemes"] == 5


@needs_espeak
def test_bad_pairs_do_not_spoil_the_batch(fr):
    scores = fr.score([Pair(0, None, "x"), Pair(1, "le chat", "le chat"), Pair(2, "a", 3)])
    assert scores[0].error == "reference is not text (got NoneType)"
    assert scores[1].values["per"] == 0.0
    assert scores[2].error == "hypothesis is not text (got int)"


PAIRS = [
    ("le début de centres nucléaires militaires", "le le le début deux centres nucléaires"),
    ("c' est un business rentable", "c'est un businesse fontable"),
    ("est-ce que c' est la grèce", "est ce que c'est la graisse"),
    ("dix-huit heures", "18 heures"),
    ("", ""),
    ("bonjour", ""),
    ("oui. non! peut-être? " * 3, "oui non peut être"),
]


@needs_espeak
def test_a_batch_equals_each_pair_alone(fr, monkeypatch):
    pairs = [Pair(i, r, h) for i, (r, h) in enumerate(PAIRS)]
    memos_clear()
    together = fr.score(pairs)
    alone = []
    for pair in pairs:
        memos_clear()
        alone.extend(fr.score([pair]))
    assert [(s.values, s.error) for s in together] == [(s.values, s.error) for s in alone]
    # Split over several espeak-ng processes: the same.
    monkeypatch.setattr(phoneme, "_MIN_CHUNK", 2)
    monkeypatch.setattr(phoneme, "_MAX_PROCESSES", 3)
    memos_clear()
    assert [s.values for s in fr.score(pairs)] == [s.values for s in together]


@needs_espeak
def test_a_text_espeak_splits_is_realigned(monkeypatch):
    # espeak-ng ends a clause (an output line) after about 725 bytes: such a line breaks the
    # one-line-per-text correspondence, and the batch is halved until it holds again.
    long = " ".join(["le chat mange la souris"] * 60)  # 1,439 bytes
    texts = ["bonjour", long, "au revoir", "merci"]
    phonemiser = Phonemiser("fr")
    memos_clear()
    expected = {text: phonemiser.phonemes([text])[text] for text in texts}  # long: sent alone
    # Every clause of it is there (about 13 phonemes a repetition).
    assert 60 * 13 <= len(expected[long]) <= 60 * 13 + 5
    monkeypatch.setattr(phoneme, "_MAX_LINE_BYTES", 10_000)  # now it goes in the batch
    calls = []
    run = phoneme._run_espeak
    monkeypatch.setattr(phoneme, "_run_espeak", lambda *a: calls.append(len(a[2])) or run(*a))
    memos_clear()
    assert phonemiser.phonemes(texts) == expected
    assert calls[0] == 4 and len(calls) > 1  # the whole batch, then its halves


@needs_espeak
def test_phonemes_are_remembered_per_voice_and_input(fr):
    calls = []
    memos_clear()
    run = phoneme._run_espeak
    try:
        phoneme._run_espeak = lambda *a: calls.append(a[2]) or run(*a)
        fr.score([Pair(0, "la maison", "la maison bleue"), Pair(1, "la maison", "maison")])
        assert calls == [["la maison", "la maison bleue", "maison"]]
        fr.score([Pair(0, "La maison.", "maison")])  # same espeak-ng input once normalised
        assert len(calls) == 1
    finally:
        phoneme._run_espeak = run


@needs_espeak
def test_an_espeak_failure_fails_the_batchs_pairs_not_the_call(fr, monkeypatch):
    def broken(*args):
        raise EspeakError("espeak-ng failed: TimeoutExpired")

    monkeypatch.setattr(phoneme, "_run_espeak", broken)
    memos_clear()
    scores = fr.score([Pair(0, "un texte jamais vu", "un autre"), Pair(1, None, "x")])
    assert scores[0].error == (
        "espeak-ng could not convert this batch: espeak-ng failed: TimeoutExpired")
    assert scores[1].error == "reference is not text (got NoneType)"


@needs_espeak
def test_corpus_per(fr):
    scores = fr.score([Pair(0, "le chat", "le chien"), Pair(1, "bonjour", "bonjour"),
                       Pair(2, "", "oui")])
    errors = 2 + 0
    length = 4 + 5
    assert corpus_per(scores) == pytest.approx(errors / length)
    with pytest.raises(ValueError, match="at least one"):
        corpus_per(scores[2:])
