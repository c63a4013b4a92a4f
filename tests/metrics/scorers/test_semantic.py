"""Semantic distance (HEVAL eq. 1) and embedding cosine (LATTE baseline) on the shared encoder.

sentence-transformers is a TEST-ONLY dependency: it proves that our mean pooling is the model's
own sentence embedding (up to its final normalisation).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.semantic import (  # noqa: E402
    EmbeddingCosineScorer,
    SemanticDistanceScorer,
)

PAIRS = [
    ("Smoking", "Smoke"),
    ("Smoking", "Something"),
    ("This is your captain speaking", "des s ur captain speaking"),
    ("This is your captain speaking", "This is your kepten speaking"),
    ("Morale is raised", "Moral is raised"),
    ("Morale is raised", "Morale is razed"),
    ("It costs $12.50 (plus 20% tax).", "it costs twelve fifty plus twenty percent tax"),
    ("How large is that file?", "How large is a funnel?"),
    ("मैं घर जा रहा हूँ", "मैं घर जा रही हूँ"),
    ("我们明天去北京", "我们明天去上海"),
    ("identical sentence here", "identical sentence here"),
]


def pairs():
    return [Pair(i, r, h) for i, (r, h) in enumerate(PAIRS)]


def test_mean_pooling_equals_sentence_transformers(cpu_encoder):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(cpu_encoder.model_path, device="cpu")
    texts = [t for pair in PAIRS for t in pair]
    theirs = torch.as_tensor(model.encode(texts, convert_to_numpy=True))
    ours = torch.stack([r.mean for r in cpu_encoder.encode(texts)])
    ours_unit = ours / ours.norm(dim=1, keepdim=True)
    torch.testing.assert_close(ours_unit, theirs / theirs.norm(dim=1, keepdim=True),
                               atol=1e-5, rtol=1e-4)
    st_cos = (theirs[0::2] * theirs[1::2]).sum(dim=1) / (
        theirs[0::2].norm(dim=1) * theirs[1::2].norm(dim=1)
    )
    cosine = EmbeddingCosineScorer().score(pairs(), encoder=cpu_encoder)
    sd = SemanticDistanceScorer().score(pairs(), encoder=cpu_encoder)
    for c, s, expected in zip(cosine, sd, st_cos.tolist(), strict=True):
        assert c.values["cosine"] == pytest.approx(expected, abs=1e-5)
        assert s.values["sd"] == pytest.approx(1 - expected, abs=1e-5)


def test_sd_is_one_minus_cosine_and_orders_the_papers_examples(cpu_encoder):
    sd = [s.values["sd"] for s in SemanticDistanceScorer().score(pairs(), encoder=cpu_encoder)]
    assert sd[0] < sd[1]  # HEVAL: SD(Smoking, Smoke) < SD(Smoking, Something)
    assert sd[10] == pytest.approx(0.0, abs=1e-6)
    assert all(-1e-6 <= x <= 2 for x in sd)


def test_non_latin_text_scores_without_error(cpu_encoder):
    scores = SemanticDistanceScorer().score(pairs()[8:10], encoder=cpu_encoder)
    assert all(s.error is None and 0 <= s.values["sd"] <= 1 for s in scores)


def test_empty_texts_and_truncation(cpu_encoder):
    cases = [Pair(1, "a reference", ""), Pair(2, "a reference", " \t\n"), Pair(3, "", "x"),
             Pair(4, "  ", "  "), Pair(5, "word " * 600, "word " * 600)]
    sd = SemanticDistanceScorer().score(cases, encoder=cpu_encoder)
    cos = EmbeddingCosineScorer().score(cases, encoder=cpu_encoder)
    for i in (0, 1):
        assert sd[i].values == {"sd": 1.0} and cos[i].values == {"cosine": 0.0}
        assert sd[i].details == {"empty_hypothesis": True}
    for i in (2, 3):
        assert sd[i].error.startswith("empty reference") and not sd[i].values
        assert cos[i].error.startswith("empty reference")
    assert sd[4].details == {"truncated": True}
    assert sd[4].values["sd"] == pytest.approx(0.0, abs=1e-6)
    assert SemanticDistanceScorer().score([], encoder=cpu_encoder) == []


def test_contract_attributes_and_signature(cpu_encoder):
    sd, cos = SemanticDistanceScorer(), EmbeddingCosineScorer()
    assert (sd.name, sd.direction, sd.outputs) == ("semantic_distance", "lower", ("sd",))
    assert (cos.name, cos.direction, cos.outputs) == ("embedding_cosine", "higher", ("cosine",))
    assert sd.needs_encoder and cos.needs_encoder
    sig = sd.signature(cpu_encoder)
    assert sig["metric"] == "semantic_distance" and sig["encoder"] == cpu_encoder.signature()
    # without an encoder: the process default (same model; CUDA when present)
    assert sd.signature()["encoder"]["model_sha"] == sig["encoder"]["model_sha"]
