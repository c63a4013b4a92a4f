"""Rubric / G-Eval: the criterion's question, help text and scale points as a prompt, the
probability of each scale value read (proxies.judges.methods.rubric_judge); the expected score
on an ordered scale, P(preserved) read at a threshold on a binary one, the most likely level
on a severity-like scale."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from evalstudy.criteria import ONE, AnswerKind
from proxies.judges.fewshot import rubric_block
from proxies.judges.methods import rubric_judge

from .base import THRESHOLD_PARAM, Answer, Batch, ProxyMethod, decide, threshold_of

ORDINAL = "ordinal"


def answers_level(kind: AnswerKind) -> bool:
    """An ordered scale with a binary reading (severity levels): the judge answers its most
    likely level, and the score is P(a level read as preserved)."""
    return kind.binary_reading and kind.level == ORDINAL


def preserved(kind: AnswerKind, probs: Mapping[str, float]) -> float | None:
    """P(an answer read as preserved) from the scale values' probabilities."""
    if not probs:
        return None
    positive = [p for value, p in probs.items() if kind.binary(value) == 1.0]
    if not positive and not answers_level(kind):
        return None
    return sum(positive, 0.0)


def scale_of(criterion: Any, kind: AnswerKind) -> dict[str, Any]:
    """The criterion as the rubric prompt shows it: its question, help text and scale points
    (canonical values with their labels; the kind's default labels where it gives none)."""
    choices = [choice for choice in criterion.rule.choices() or [] if choice != "tie"]
    labels = list(criterion.labels or []) or list(kind.default_labels)
    return {
        "prompt": criterion.prompt, "description": criterion.description,
        "scale": {choice: (labels[i] if i < len(labels) else "")
                  for i, choice in enumerate(choices)},
    }


def answer(batch: Batch) -> Iterator[Answer]:
    kind, texts = batch.kind, batch.texts
    threshold = threshold_of(batch.run)
    spec = scale_of(batch.criterion, kind)
    results = rubric_judge(
        batch.backend, [texts[pk]["output"] for pk in batch.units], criterion=spec["prompt"],
        scale=spec["scale"], definition=spec["description"],
        references=[texts[pk]["reference"] for pk in batch.units],
        contexts=[texts[pk]["context"] for pk in batch.units],
    )
    for pk, result in zip(batch.units, results, strict=True):
        completion = result.completion
        if result.answer is None:
            yield (pk, None, None, completion.error or f"no answer read ({completion.source})",
                   completion.source)
            continue
        probs = result.probs or {}
        value = str(result.answer)
        if answers_level(kind):
            # The analysis reads a proxy's score as P(meaning preserved).
            score = preserved(kind, probs)
        elif kind.binary_reading:
            score = preserved(kind, probs)
            value = decide(kind, score, threshold) if score is not None else value
        elif kind.score == "numeric":
            score = result.expected
        else:  # categories: the most likely one and its probability
            score = probs.get(value)
        yield pk, value, score, "", completion.source


def fewshot(examples: Sequence[Any], template: str) -> str:
    return rubric_block(examples)


METHOD = ProxyMethod(
    name="rubric",
    order=20,
    label="Rubric / G-Eval scoring over the criterion's scale",
    score="the expected score over the scale, P(yes) or the answer's probability",
    # One output judged on a declared list of answers (a scale, yes/no, severity levels,
    # categories).
    answers=lambda kind: kind.closed and kind.shows == ONE,
    answer=answer,
    params=(THRESHOLD_PARAM,),
    versioned=True,
    fewshot=fewshot,
    thresholded=True,
    answers_level=answers_level,
)
