"""A learned proxy: a model trained on a study's own human judgments (proxies.learned: the
LATTE regression baselines, a fine-tuned cross-encoder, a pairwise logistic regression on
stored metric differences), answering as a metric rater. Its P(preserved) is read at a
threshold (chosen on its dev split when trained); a pairwise one answers A, B or a tie from
P(A is better) within its tie band."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from evalstudy.criteria import PAIR, AnswerKind

from .base import (
    METRIC_RATER,
    THRESHOLD_PARAM,
    Answer,
    Batch,
    ProxyMethod,
    decide,
    threshold_of,
)
from .learned_kinds import learned_kind


@lru_cache(maxsize=4)
def trained_model(artifact_path: str) -> Any:
    """A trained proxy, loaded once per worker process (artefact versions never change)."""
    from proxies.learned import load_artifact

    return load_artifact(artifact_path)


def answers_pairs(learned: Any) -> bool:
    """Whether the learned proxy (a LearnedProxy row, or a trained one) answers pairs of
    outputs (a pairwise learned kind) rather than one output."""
    return learned is not None and learned_kind(learned.kind).pairwise


def answers_with(learned: Any, kind: AnswerKind) -> bool:
    """The criterion kinds a learned proxy answers: pairwise ones for a pairwise proxy, else
    the kinds with a binary reading."""
    return kind.shows == PAIR if answers_pairs(learned) else kind.binary_reading


def answer(batch: Batch) -> Iterator[Answer]:
    from proxies.learned import Example

    trained = trained_model(batch.run.learned_proxy.artifact_path)
    if answers_pairs(trained):
        yield from pairwise_answers(batch, trained)
        return
    texts = batch.texts
    examples = [Example(reference=texts[pk]["reference"] or texts[pk]["context"],
                        output=texts[pk]["output"], label=None,
                        group=texts[pk]["reference"], key=pk) for pk in batch.units]
    threshold = threshold_of(batch.run)
    for pk, score in zip(batch.units, trained.predict_proba(examples), strict=True):
        yield pk, decide(batch.kind, float(score), threshold), float(score), "", "model"


def pairwise_answers(batch: Batch, trained: Any) -> Iterator[Answer]:
    """(slot, answer, P(A), error, source) per slot of a pairwise learned proxy's run.

    On the study it was trained on, the out-of-fold prediction of the pair (source
    "out_of_fold"); a pair missing from them whose reference was in training gets no answer
    (its prediction would be in-sample), and so does, on another study, a pair whose
    reference the model was trained on (a copy or subset of the training study would be
    scored in-sample). Elsewhere, the model fitted on every labelled pair,
    on the stored metric results of the run's study (source "model"); a pair whose outputs
    lack a feature gets no answer, with the reason."""
    from proxies.learned.pairwise import PairExample, group_digest

    model = trained.proxy
    allow_tie = batch.criterion.allow_tie
    learned = batch.run.learned_proxy
    own_study = learned is not None and learned.study_id == batch.run.study_id
    table = model.out_of_fold_table() if own_study else {}
    seen_groups = model.trained_groups()
    new: list[tuple[int, Any]] = []
    for pk in batch.units:
        texts = batch.texts[pk]
        output, output_b = texts["output_id"], texts["output_b_id"]
        group = texts["reference"] or texts["context"] or f"item {texts['item_id']}"
        p = table.get((output, output_b))
        if p is not None:
            yield pk, model.answer(p, allow_tie=allow_tie), p, "", "out_of_fold"
        elif own_study and group_digest(group) in seen_groups:
            yield (pk, None, None, "no out-of-fold prediction for this pair and its reference "
                   "was in training: retrain the proxy to answer it", "unanswered")
        elif group_digest(group) in seen_groups:
            yield (pk, None, None, "the proxy was trained on this pair's reference (in another "
                   "study): its answer would be in-sample", "unanswered")
        else:
            new.append((pk, PairExample(output=output, output_b=output_b, group=group,
                                        features_a={}, features_b={})))
    if not new:
        return
    values = batch.stored_values([o for _, e in new for o in (e.output, e.output_b)])
    for _, example in new:
        example.features_a = values.get(example.output, {})
        example.features_b = values.get(example.output_b, {})
    for (pk, example), p in zip(new, model.predict_pairs([e for _, e in new]), strict=True):
        if p != p:  # NaN: a feature is missing
            lacking = [name for name in model.feature_names()
                       if name not in example.features_a or name not in example.features_b]
            yield (pk, None, None, f"no stored value of {', '.join(lacking)} for these outputs "
                   "(compute the metrics on this study first)", "unanswered")
        else:
            yield pk, model.answer(float(p), allow_tie=allow_tie), float(p), "", "model"


METHOD = ProxyMethod(
    name="learned",
    order=40,
    label="Learned proxy trained on human judgments",
    score="the proxy's P(preserved)",
    answers=lambda kind: kind.binary_reading or kind.shows == PAIR,
    answers_with=answers_with,
    answer=answer,
    params=(THRESHOLD_PARAM,),
    rater=METRIC_RATER,
    learned=True,
    thresholded=True,
)
