"""Examples and leakage-free train/dev/test splits for the learned proxies (no Django here).

An `Example` is one (reference or context, output) pair with an optional binary human label.
Splits never share a group (by default the reference text): a proxy that has seen a reference's
other outputs in training would look better on test than it is on a new study (LATTE section 3
splits "such that there is no overlap in ground truth sentence between the splits").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Example:
    """One (reference, output) pair.

    `reference` is the reference text (ASR) or the context (pertinence); `output` the system's
    text; `label` 1 = meaning preserved / pertinent / yes, 0 = no, None = unlabelled (scoring
    only). `group` is what must not be shared across splits; empty means the reference text.
    `key` is the caller's id (e.g. an output id), carried through untouched. `human_score`
    (optional) grades outputs beyond the label, e.g. the share of people who said yes: the
    per-history top-1 accuracy (`training.top1_per_group`) ranks a group's outputs by it,
    else by the label.
    """

    reference: str
    output: str
    label: int | None = None
    group: str = ""
    key: Any = None
    human_score: float | None = None

    def __post_init__(self) -> None:
        if not self.group:
            self.group = self.reference if isinstance(self.reference, str) else ""


@dataclass
class Splits:
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    seed: int = 0
    groups: dict[str, int] = field(default_factory=dict)  # split name -> number of groups

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "dev": len(self.dev), "test": len(self.test)}

    def class_counts(self) -> dict[str, dict[str, int]]:
        return {name: _class_counts(part) for name, part in self.items()}

    def items(self) -> list[tuple[str, list[Example]]]:
        return [("train", self.train), ("dev", self.dev), ("test", self.test)]


def _describe(example: Example, index: int) -> str:
    return f"example {index} (key {example.key!r})"


def check_texts(examples: Sequence[Example]) -> None:
    """Raise ValueError naming the first examples whose texts cannot be scored.

    Precondition for every proxy: `reference` is a non-blank str (there is nothing to compare
    against otherwise) and `output` is a str (it may be empty: an ASR system that recognised
    nothing is a legitimate, worst-case output).
    """
    problems = []
    for index, example in enumerate(examples):
        if not isinstance(example, Example):
            problems.append(f"item {index} is a {type(example).__name__}, not an Example")
        elif not isinstance(example.reference, str):
            problems.append(f"{_describe(example, index)}: reference is "
                            f"{type(example.reference).__name__}, not text")
        elif not example.reference.strip():
            problems.append(f"{_describe(example, index)}: reference is empty")
        elif not isinstance(example.output, str):
            problems.append(f"{_describe(example, index)}: output is "
                            f"{type(example.output).__name__}, not text")
        if len(problems) >= 5:
            break
    if problems:
        raise ValueError("cannot score these examples: " + "; ".join(problems))


def check_labels(examples: Sequence[Example], what: str = "training") -> np.ndarray:
    """The labels as an int array; ValueError when one is missing or not 0/1 (bools pass)."""
    check_texts(examples)
    bad = [
        f"{_describe(e, i)}: label {e.label!r}"
        for i, e in enumerate(examples)
        if e.label is None or e.label not in (0, 1)
    ]
    if bad:
        raise ValueError(f"{what} needs every label to be 0 or 1; " + "; ".join(bad[:5])
                         + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))
    return np.array([int(e.label) for e in examples], dtype=int)  # type: ignore[arg-type]


def _class_counts(examples: Sequence[Example]) -> dict[str, int]:
    positives = sum(1 for e in examples if e.label == 1)
    return {"positive": positives, "negative": len(examples) - positives}


def split_examples(
    examples: Sequence[Example], *, dev: float = 0.15, test: float = 0.15, seed: int = 0
) -> Splits:
    """Train/dev/test splits with no group shared between them, deterministic per `seed`.

    The distinct groups are shuffled with `numpy.random.default_rng(seed)` and dealt out in
    that order: to test until it holds at least `test` of the examples, then to dev until it
    holds at least `dev`, the rest to train. Fractions count examples, whole groups at a time;
    every split gets at least one group, so small studies may get larger dev/test shares. The
    order of `examples` does not matter beyond the order within each split.

    Raises ValueError when a label is missing, when there are fewer than 3 groups, when train
    would be empty, or when a split holds one class only (AUC and threshold selection need both
    classes everywhere); the message gives the counts and what to change.
    """
    labels = check_labels(examples)
    if not (0 < dev < 1 and 0 < test < 1 and dev + test < 1):
        raise ValueError(f"dev ({dev}) and test ({test}) must lie in (0, 1) and sum below 1")
    by_group: dict[str, list[int]] = {}
    for index, example in enumerate(examples):
        by_group.setdefault(example.group, []).append(index)
    if len(by_group) < 3:
        raise ValueError(
            f"splitting needs at least 3 groups (distinct references); have {len(by_group)} "
            f"for {len(examples)} examples"
        )
    # Sorted first so that the shuffle does not depend on the order of the examples.
    names = sorted(by_group)
    order = np.random.default_rng(seed).permutation(len(names))
    total = len(examples)
    parts: dict[str, list[str]] = {"test": [], "dev": [], "train": []}
    counts = {"test": 0, "dev": 0}
    targets = {"test": test * total, "dev": dev * total}
    for step, position in enumerate(order):
        name = names[position]
        left_after = len(order) - step - 1
        for split in ("test", "dev"):
            if counts[split] >= targets[split]:
                continue
            # Keep one of the remaining groups for every other split that is still empty.
            still_empty = sum(1 for other in parts if other != split and not parts[other])
            if left_after >= still_empty:
                parts[split].append(name)
                counts[split] += len(by_group[name])
                break
        else:
            parts["train"].append(name)
    if not parts["train"]:
        raise ValueError(
            f"no group left for train: {len(by_group)} groups are too few for dev={dev} and "
            f"test={test}; add references or lower the fractions"
        )

    def collect(split: str) -> list[Example]:
        indices = sorted(i for name in parts[split] for i in by_group[name])
        return [examples[i] for i in indices]

    splits = Splits(
        train=collect("train"), dev=collect("dev"), test=collect("test"), seed=seed,
        groups={split: len(groups) for split, groups in parts.items()},
    )
    one_class = []
    for split, part in splits.items():
        counted = _class_counts(part)
        if 0 in counted.values():
            one_class.append(
                f"{split} has {counted['positive']} positive and {counted['negative']} negative "
                f"examples ({splits.groups[split]} group"
                f"{'' if splits.groups[split] == 1 else 's'})"
            )
    if one_class:
        overall = {"positive": int(labels.sum()), "negative": int(len(labels) - labels.sum())}
        raise ValueError(
            "every split needs both labels: " + "; ".join(one_class)
            + f". Overall {overall['positive']} positive / {overall['negative']} negative in "
            f"{len(by_group)} groups: collect more judged references, or try another seed"
        )
    return splits
