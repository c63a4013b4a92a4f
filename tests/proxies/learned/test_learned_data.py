"""Examples and group-disjoint splits (proxies.learned.data)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxies.learned import Example, split_examples
from proxies.learned.data import check_texts
from tests.proxies.learned.synthetic import CHANGED, PRESERVED, make_synthetic_study


def _examples(group_sizes, labels):
    examples, k = [], 0
    for g, size in enumerate(group_sizes):
        for j in range(size):
            examples.append(Example(reference=f"reference number {g}", output=f"output {j}",
                                    label=labels[k % len(labels)], key=(g, j)))
            k += 1
    return examples


def test_group_defaults_to_the_reference_and_can_be_set():
    assert Example("a cat sat", "a cat sat", 1).group == "a cat sat"
    assert Example("a cat sat", "a cat", 0, group="speaker 3").group == "speaker 3"


def test_synthetic_study_is_balanced_and_deterministic():
    study = make_synthetic_study(60, 3, seed=1)
    again = make_synthetic_study(60, 3, seed=1)
    assert [(e.reference, e.output, e.label) for e in study] == [
        (e.reference, e.output, e.label) for e in again]
    assert len({e.reference for e in study}) == 60
    assert 0.4 < sum(e.label for e in study) / len(study) < 0.6
    kinds = {e.key[2] for e in study}
    assert kinds == set(PRESERVED) | set(CHANGED)
    for e in study:
        assert e.label == (e.key[2] in PRESERVED)
        if e.key[2] == "exact":
            assert e.output == e.reference
        else:
            assert e.output != e.reference


def test_split_has_no_shared_reference_and_rough_fractions():
    study = make_synthetic_study(100, 3, seed=0)
    splits = split_examples(study, dev=0.15, test=0.15, seed=3)
    refs = {name: {e.reference for e in part} for name, part in splits.items()}
    assert not refs["train"] & refs["dev"]
    assert not refs["train"] & refs["test"]
    assert not refs["dev"] & refs["test"]
    assert sum(splits.sizes().values()) == len(study)
    assert 0.15 * len(study) <= len(splits.test) <= 0.15 * len(study) + 3
    assert 0.15 * len(study) <= len(splits.dev) <= 0.15 * len(study) + 3
    assert splits.groups == {"test": len(refs["test"]), "dev": len(refs["dev"]),
                             "train": len(refs["train"])}


def test_split_respects_a_custom_group():
    # Two references per speaker: the speaker, not the reference, must stay in one split.
    examples = []
    for speaker in range(20):
        for ref in range(2):
            for label in (0, 1):
                examples.append(Example(f"sentence {speaker}-{ref}", f"out {label}", label,
                                        group=f"speaker {speaker}"))
    splits = split_examples(examples, seed=5)
    speakers = {name: {e.group for e in part} for name, part in splits.items()}
    assert not speakers["train"] & speakers["dev"]
    assert not speakers["train"] & speakers["test"]
    assert not speakers["dev"] & speakers["test"]


@settings(max_examples=150, deadline=None)
@given(
    group_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=40),
    labels=st.lists(st.integers(0, 1), min_size=1, max_size=7),
    seed=st.integers(0, 2**32 - 1),
    dev=st.sampled_from([0.1, 0.15, 0.2, 0.3]),
    test=st.sampled_from([0.1, 0.15, 0.2, 0.3]),
)
def test_split_property(group_sizes, labels, seed, dev, test):
    examples = _examples(group_sizes, labels)
    try:
        splits = split_examples(examples, dev=dev, test=test, seed=seed)
    except ValueError as exc:
        # The only refusals: too few groups, or a split with one class.
        message = str(exc)
        assert "at least 3 groups" in message or "both labels" in message, message
        return
    parts = [splits.train, splits.dev, splits.test]
    assert all(parts)
    groups = [{e.group for e in part} for part in parts]
    assert not groups[0] & groups[1] and not groups[0] & groups[2] and not groups[1] & groups[2]
    # Every example exactly once.
    keys = sorted(e.key for part in parts for e in part)
    assert keys == sorted(e.key for e in examples)
    # Both classes everywhere.
    for part in parts:
        assert {e.label for e in part} == {0, 1}
    # Deterministic per seed, and independent of the input order.
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    again = split_examples(shuffled, dev=dev, test=test, seed=seed)
    for one, two in zip(parts, [again.train, again.dev, again.test], strict=True):
        assert {e.key for e in one} == {e.key for e in two}


def test_split_refuses_too_few_groups():
    examples = _examples([5, 5], [0, 1])
    with pytest.raises(ValueError, match=r"at least 3 groups .* have 2 for 10 examples"):
        split_examples(examples)


def test_split_refuses_a_single_class_split():
    # 3 groups, each one class only: some split gets a single class.
    examples = [
        *_examples([2], [1]),
        Example("another reference", "x", 0, key="n1"),
        Example("another reference", "y", 0, key="n2"),
        Example("third reference", "z", 1, key="p3"),
    ]
    pattern = r"every split needs both labels: .*and 0 negative examples \(1 group\)"
    with pytest.raises(ValueError, match=pattern):
        split_examples(examples, seed=0)


def test_split_refuses_unlabelled_examples_naming_them():
    examples = _examples([2, 2, 2, 2], [0, 1])
    examples[3].label = None
    examples[5].label = 2
    with pytest.raises(ValueError) as info:
        split_examples(examples)
    message = str(info.value)
    assert "example 3 (key (1, 1)): label None" in message
    assert "example 5 (key (2, 1)): label 2" in message


def test_split_refuses_bad_fractions():
    examples = _examples([2] * 10, [0, 1])
    with pytest.raises(ValueError, match="must lie in"):
        split_examples(examples, dev=0.5, test=0.5)
    with pytest.raises(ValueError, match="must lie in"):
        split_examples(examples, dev=0.0)


def test_check_texts_names_the_bad_examples():
    with pytest.raises(ValueError, match=r"example 1 \(key 'b'\): reference is empty"):
        check_texts([Example("fine", "", 1, key="a"), Example("  ", "x", 1, key="b")])
    with pytest.raises(ValueError, match=r"example 0 \(key 'c'\): output is NoneType"):
        check_texts([Example("fine", None, 1, key="c")])
    with pytest.raises(ValueError, match="item 0 is a tuple, not an Example"):
        check_texts([("ref", "out")])
