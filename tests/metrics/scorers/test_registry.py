"""The metric registry: every value a scorer can store is declared once, with its direction and
headline status, listing them imports no scorer, and a name nobody declares is refused (pure:
no Django)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metrics.scorers import registry, specs
from metrics.scorers.base import MetricValue, Pair, ScorerSpec

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[3]

# Pairs that reach every branch a scorer stores values on: a match, errors, an empty hypothesis
# (a defined worst value), both texts empty (a perfect match), repeated and keyword-ish words.
PAIRS = [
    Pair(1, "The cat sat on the mat.", "the cat sit on mat"),
    Pair(2, "", ""),
    Pair(3, "hello world", ""),
    Pair(4, "I would be fascinated.", "I will be fascinated."),
    Pair(5, "to be or not to be", "to bee or knot to be that"),
    Pair(6, "identical sentence here", "identical sentence here"),
]


def test_listing_the_scorers_and_their_values_imports_no_scorer_module():
    probe = """
import json, sys
from metrics.scorers import registry
for spec in registry.SPECS.values():
    for value in spec.values:
        registry.direction(value.name)
registry.headline_values(); registry.count_values(); registry.DEFAULT_METRICS
[registry.metric_direction(name) for name in registry.SPECS]
heavy = ("torch", "transformers", "sentence_transformers", "scipy", "jiwer", "nltk",
         "sacrebleu", "rouge_score", "metrics.scorers.text", "metrics.scorers.phoneme",
         "metrics.scorers.semantic", "metrics.scorers.heval", "metrics.scorers.encoder")
print(json.dumps([name for name in heavy if name in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize("name", list(registry.SPECS))
def test_every_value_a_scorer_stores_is_declared_with_a_direction(name):
    """Scores real pairs with each scorer available here (the model-backed ones on the embedded
    encoder): every key a metric run would write into a result is a declared value of that
    scorer, and reading its direction never guesses."""
    spec = registry.spec(name)
    reason = registry.unavailable_reason(name)
    if reason is not None:
        pytest.skip(reason)
    cls = registry.scorer_class(name)
    assert cls.spec is spec and cls.outputs == spec.outputs and cls.name == name
    assert cls.direction == spec.direction == spec.values[0].direction
    assert cls.needs_encoder == spec.needs_encoder
    encoder = None
    if spec.needs_encoder:
        from metrics.scorers.encoder import get_encoder

        encoder = get_encoder(device="cpu")
    scorer = registry.build(name)
    stored: set[str] = set()
    for score in scorer.score(PAIRS, encoder=encoder):
        stored |= set(score.values)
    assert stored, "no pair gave a value"
    assert stored <= set(spec.outputs), stored - set(spec.outputs)
    for value_name in stored:
        declared = registry.value(value_name)
        assert declared.direction in ("higher", "lower", None)
        if declared.direction is None:
            assert declared.count, f"{value_name}: only a count of the reference has no direction"


def test_each_metric_has_a_headline_first_and_every_headline_a_direction():
    for spec in registry.SPECS.values():
        assert spec.values[0].headline, spec.name
    headlines = registry.headline_values()
    assert headlines[:3] == ("wer", "cer", "per")
    assert {"bleu", "chrf", "rouge1_f", "rougeL_f", "bertscore_f", "sd", "cosine",
            "heval"} <= set(headlines)
    assert all(registry.direction(name) is not None for name in headlines)


def test_the_values_the_old_lists_disagreed_on_read_as_decided():
    # analysis.stats.pipeline's list said lower-better, proxies.learned.pairwise's did not say.
    for name in ("nker", "substitutions", "deletions", "insertions"):
        assert registry.direction(name) == "lower"
        assert not registry.higher_is_better(name)
    assert not registry.value("nker").count  # a rate in [0, 1], like sub_rate
    assert {"substitutions", "deletions", "insertions", "hits"} <= registry.count_values()
    assert registry.higher_is_better("hits") and registry.higher_is_better("word_acc")
    assert registry.direction("ref_words") is None


def test_a_value_two_scorers_store_is_declared_once_and_named_after_the_first():
    assert registry.metric_storing("sd") == "semantic_distance"
    assert registry.metric_storing("nker") == "heval"
    assert registry.metric_storing("sub_rate") == "wer"
    assert specs.SEMANTIC_DISTANCE.values[0] is specs.HEVAL.values[1]
    other = ScorerSpec(name="other", target="x:Y", values=(MetricValue("sd", "higher"),))
    with pytest.raises(RuntimeError, match="'sd' is declared differently"):
        registry._values([specs.SEMANTIC_DISTANCE, other])


def test_an_unknown_name_is_refused_loudly_not_read_as_higher_is_better():
    with pytest.raises(registry.UnknownValue, match="no metric stores a value named 'nope'"):
        registry.direction("nope")
    with pytest.raises(registry.UnknownValue):
        registry.higher_is_better("nope")
    with pytest.raises(ValueError, match="'ref_words' has no direction"):
        registry.higher_is_better("ref_words")
    with pytest.raises(registry.UnknownMetric, match=r"^unknown metric 'nope'; known: .*wer"):
        registry.spec("nope")
    with pytest.raises(ValueError, match=r"^unknown metric 'nope'"):
        registry.build("nope")


def test_a_declaration_that_cannot_be_read_is_refused():
    with pytest.raises(ValueError, match="headline score needs a direction"):
        MetricValue("x", None, headline=True)
    with pytest.raises(ValueError, match="direction must be"):
        MetricValue("x", "up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="declares a value twice"):
        ScorerSpec(name="x", target="x:Y", values=(MetricValue("a", "lower"),) * 2)
    with pytest.raises(ValueError, match="first value"):
        ScorerSpec(name="x", target="x:Y", values=(MetricValue("a", None, count=True),))
