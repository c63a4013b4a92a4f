"""The pairwise learned proxy on a study: its training pairs (the human preferences of one
pairwise criterion, from named raters and counted votes, with the study's STORED metric
results as features) and its answers stored as a proxy rater's judgments.

The Django-free model is `proxies.learned.pairwise`; training and saving go through
`proxies.training.services.learned_proxy_train` like every learned proxy. After training, the
proxy's answers on the study are stored by an ordinary proxy run (`ProxyRun`, method
"learned") under its own proxy rater, one seat of source "proxy", so the analysis' pairwise
validity (`analysis.stats.votes.pairwise_entry`) scores it like any rater. On the study it
was trained on, every answer is its OUT-OF-FOLD prediction (from a model that never saw the
pair's reference); on another study, the model fitted on every labelled pair answers from that
study's stored metric results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef

from annotation.models import Judgment, VoteCount
from evalstudy.models import AssignmentSlot, Criterion, Enrollment, Output, Rater, Study
from proxies.methods import learned_method
from proxies.models import LearnedProxy, ProxyRun
from proxies.runs import (
    proxy_batch_judge,
    proxy_run_dispatch,
    proxy_run_start,
    proxy_units,
    shows_pair,
    stored_values,
)

if TYPE_CHECKING:
    import pandas as pd

# Fewer labelled pairs than this cannot be cross-validated meaningfully.
MIN_LABELLED_PAIRS = 20


def pairwise_criterion(study: Study, criterion_key: str) -> Criterion:
    try:
        criterion = study.criteria.get(key=criterion_key)
    except Criterion.DoesNotExist:
        raise ValidationError(f"criterion: {criterion_key!r} is not a criterion of "
                              f"{study.slug!r}") from None
    if not shows_pair(criterion):
        raise ValidationError(f"criterion: {criterion_key!r} is {criterion.kind}; the "
                              "pairwise_logistic proxy needs a pairwise criterion")
    return criterion


def features_check(study: Study, features: Sequence[str] | None,
                   values: dict[int, dict[str, float]] | None = None) -> list[str]:
    """The features training will read (named ones, else the default ones the study
    stores); ValidationError naming every named feature nothing stores, the metric to
    compute and the command that computes it."""
    from proxies.learned.pairwise import DEFAULT_FEATURES, feature_metric

    values = stored_values(study) if values is None else values
    stored = {name for row in values.values() for name in row}
    wanted = list(features) if features else list(DEFAULT_FEATURES)
    missing = [name for name in wanted if name not in stored]
    if (features and missing) or (not features and len(missing) == len(wanted)):
        metrics = sorted({feature_metric(name) for name in missing})
        named = ", ".join(f"{name} (metric {feature_metric(name)})"
                          for name in missing)
        raise ValidationError(
            f"params: features: the pairwise proxy reads the study's stored metric results "
            f"and computes none; {study.slug!r} has no stored results for {named}. Compute "
            f"them first: python manage.py compute_metrics --study {study.slug} --metrics "
            f"{' '.join(metrics)} --sync")
    return [name for name in wanted if name in stored]


def human_units(study: Study, criterion: Criterion) -> pd.DataFrame:
    """The criterion's pairs with the people's votes (output, output_b, item, a, b, tie):
    named human raters' answers and aggregated counts (`VoteCount`) merged, as the analysis
    merges them (`annotation.preferences`). As the analysis reads them by default: answers to
    items only (no practice item or attention check), and none of a rater the researcher
    excluded from the analysis."""
    # pandas is loaded where the pairs are tabled, not when Django starts.
    import pandas as pd

    from annotation.preferences import merge_units, units_from_choices, units_from_votes

    excluded = Enrollment.objects.filter(study=study, rater=OuterRef("rater"),
                                         excluded_at__isnull=False)
    choices = pd.DataFrame.from_records(
        list(Judgment.objects.filter(
            slot__assignment__study=study, criterion=criterion,
            rater__kind__in=Rater.HUMAN_KINDS, slot__output_b__isnull=False,
            slot__kind=AssignmentSlot.Kind.TARGET).exclude(Exists(excluded))
            .values_list("slot__output_id", "slot__output_b_id", "value",
                         "slot__output__item_id")),
        columns=["output", "output_b", "value", "item"])
    votes = pd.DataFrame.from_records(
        list(VoteCount.objects.filter(study=study, criterion=criterion,
                                      output_b__isnull=False)
             .values_list("output_id", "output_b_id", "output__item_id", "value", "count")),
        columns=["output", "output_b", "item", "value", "count"])
    parts = [frame for frame in (units_from_choices(choices), units_from_votes(votes))
             if not frame.empty]
    if not parts:
        return pd.DataFrame(columns=["output", "output_b", "item", "a", "b", "tie"])
    return merge_units(*parts)


def pairwise_examples(study: Study, criterion_key: str, *,
                      features: Sequence[str] | None = None) -> list:
    """One `PairExample` per pair: every pair people judged (their votes) and every pair the
    proxy will answer on the study (`services.proxy_units`; no votes), each with the stored
    values of both outputs and its group, the item's reference (or context) text."""
    from proxies.learned.pairwise import PairExample

    criterion = pairwise_criterion(study, criterion_key)
    values = stored_values(study)
    features_check(study, features, values)
    units = human_units(study, criterion)
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for unit in units.to_dict("records"):
        rows[(int(unit["output"]), int(unit["output_b"]))] = {
            "a": int(unit["a"]), "b": int(unit["b"]), "tie": int(unit["tie"])}
    for output, output_b in proxy_units(study, [criterion])[True]:
        assert output_b is not None
        if (output, output_b) not in rows and (output_b, output) not in rows:
            rows[(output, output_b)] = {"a": 0, "b": 0, "tie": 0}
    groups = {pk: (reference or context or f"item {item}") for pk, item, reference, context in
              Output.objects.filter(item__study=study).values_list(
                  "id", "item_id", "item__reference", "item__context")}
    return [PairExample(output=output, output_b=output_b, group=groups[output],
                        features_a=values.get(output, {}), features_b=values.get(output_b, {}),
                        **votes)
            for (output, output_b), votes in sorted(rows.items())]


def labelled_pairs(examples: Sequence[Any]) -> int:
    return sum(1 for example in examples if example.majority not in (None, 0))


def pairwise_train(proxy: LearnedProxy, params: dict[str, Any], seed: int):
    """Train `proxy` (kind pairwise_logistic) on its study: the `TrainedProxy` (ValueError
    from the core for a bad parameter or too few references)."""
    from proxies.learned import train_pairwise

    assert proxy.study is not None
    criterion = pairwise_criterion(proxy.study, proxy.criterion_key)
    params = {k: v for k, v in params.items() if k != "model_path"}  # reads no encoder
    examples = pairwise_examples(proxy.study, proxy.criterion_key,
                                 features=params.get("features"))
    return train_pairwise(examples, params=params, seed=seed, allow_tie=criterion.allow_tie)


def pairwise_store_answers(proxy: LearnedProxy) -> ProxyRun:
    """Store the trained proxy's answers on its own study as a proxy run (judged here, at
    once: a few thousand numbers looked up), under its proxy rater."""

    assert proxy.study is not None
    run = proxy_run_start(study=proxy.study, method=learned_method().name,
                          criteria=[proxy.criterion_key], learned_proxy=proxy, enqueue=False)
    batches: list[list[int]] = []
    proxy_run_dispatch(run, send=lambda queue, ids: batches.append(list(ids)))
    for batch in batches:
        proxy_batch_judge(run_id=run.pk, slot_ids=batch)
    run.refresh_from_db()
    return run
