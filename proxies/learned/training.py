"""Train a learned proxy end to end: split, fit, pick the threshold on dev, report on test.

`train_proxy(kind, examples)` follows LATTE's protocol: train/dev/test with no reference shared
between splits, hyper-parameters and the checkpoint chosen on dev, the decision threshold chosen
on dev for a target precision ("we chose a threshold of 0.85 which yields a very high precision
of 90% ... on the dev set"), AUC-ROC reported on test. No Django here: the caller turns a
study's human judgments into `Example`s and stores what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from proxies.learned.base import Proxy, TrainedProxy
from proxies.learned.cross_encoder import CrossEncoderProxy
from proxies.learned.data import Example, Splits, check_labels, split_examples
from proxies.learned.pairwise import PairwiseLogisticProxy
from proxies.learned.regression import EmbeddingProxy, WerBertScoreProxy

# Proxy kind -> class. The names are stored in artefact manifests: never rename one.
PROXY_KINDS: dict[str, type[Proxy]] = {
    cls.kind: cls for cls in (WerBertScoreProxy, EmbeddingProxy, CrossEncoderProxy,
                              PairwiseLogisticProxy)
}
# Kinds trained on pairs of outputs (`proxies.learned.pairwise.train_pairwise`), not on
# labelled outputs (`train_proxy`).
PAIRWISE_KINDS = frozenset({PairwiseLogisticProxy.kind})

# Used when no dev threshold reaches the target precision (recorded in `threshold_rule`).
FALLBACK_THRESHOLD = 0.5


def proxy_class(kind: str) -> type[Proxy]:
    try:
        return PROXY_KINDS[kind]
    except KeyError:
        raise ValueError(
            f"unknown proxy kind {kind!r}; known: {', '.join(sorted(PROXY_KINDS))}"
        ) from None


def build_proxy(kind: str, params: Mapping[str, Any] | None = None) -> Proxy:
    """An untrained proxy of `kind` (ValueError for an unknown kind or parameter)."""
    return proxy_class(kind)(**dict(params or {}))


def _auc(scores: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    from proxies.quality import auc_with_ci

    result = auc_with_ci(scores.tolist(), labels.tolist())
    est = result.auc
    return {"value": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high, "n": est.n,
            "n_pos": result.n_pos, "n_neg": result.n_neg, "method": est.method}


def _at_threshold(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    predicted = scores >= threshold
    true_pos = int((predicted & (labels == 1)).sum())
    n_pred, n_pos = int(predicted.sum()), int((labels == 1).sum())
    return {
        "threshold": threshold,
        "precision": true_pos / n_pred if n_pred else None,
        "recall": true_pos / n_pos if n_pos else None,
        "n_predicted_positive": n_pred,
        "n_positive": n_pos,
    }


def top1_per_group(scores: Sequence[float] | np.ndarray, examples: Sequence[Example]
                   ) -> dict[str, Any]:
    """The pertinence paper's figure where a group (a history, a reference) has several
    outputs (completions): the share of groups whose top-scored output is a human-best one.

    A group's outputs are ranked by `human_score` (else the label); a group of one output,
    or whose outputs people graded all alike, says nothing and is left out (counted). Outputs
    tied at the proxy's top score share the credit (the share of them that are human-best,
    what picking one at random would get). `chance`: the same figure for a random pick (the
    mean share of human-best outputs per group)."""
    by_group: dict[str, list[tuple[float, float]]] = {}
    for score, example in zip(np.asarray(scores, dtype=float), examples, strict=True):
        human = example.human_score if example.human_score is not None else example.label
        if human is None:
            continue
        by_group.setdefault(example.group, []).append((float(score), float(human)))
    hits, chance = [], []
    single = alike = 0
    for rows in by_group.values():
        if len(rows) < 2:
            single += 1
            continue
        graded = np.array([h for _, h in rows])
        if np.all(graded == graded[0]):
            alike += 1
            continue
        proxy = np.array([s for s, _ in rows])
        best = graded == graded.max()
        top = proxy == proxy.max()
        hits.append(float(best[top].mean()))
        chance.append(float(best.mean()))
    return {
        "accuracy": float(np.mean(hits)) if hits else None,
        "chance": float(np.mean(chance)) if chance else None,
        "n_groups": len(hits), "groups_single_output": single, "groups_all_alike": alike,
        "method": ("per group with several outputs people graded differently: 1 when the "
                   "proxy's top-scored output is a human-best one (ties at the top share "
                   "the credit)"),
    }


def _split_sizes(splits: Splits) -> dict[str, dict[str, int]]:
    counts = splits.class_counts()
    return {
        name: {"examples": len(part), "groups": splits.groups.get(name, 0), **counts[name]}
        for name, part in splits.items()
    }


def train_proxy(
    kind: str,
    examples: Sequence[Example],
    *,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    target_precision: float = 0.9,
    dev: float = 0.15,
    test: float = 0.15,
) -> TrainedProxy:
    """Split `examples` (all labelled), fit a `kind` proxy, choose its threshold, evaluate.

    - Splits: `split_examples(examples, dev=dev, test=test, seed=seed)` (no group shared).
    - `seed` also seeds training where the kind has a `seed` parameter (the cross-encoder),
      unless `params` gives one.
    - Threshold: `proxies.quality.threshold_for_precision` on the dev probabilities
      (the most permissive threshold whose dev precision reaches `target_precision`). When
      none does, the threshold is FALLBACK_THRESHOLD (0.5) and `threshold_rule` says so.
    - Reported: train/dev/test AUC with DeLong CIs, precision and recall at the threshold on
      dev and test, the top-1 accuracy per group (history) on each split (`top1_per_group`:
      where a history has several completions), split sizes, each split's example keys
      (`split_keys`), the fit's seconds (`training_seconds`: fitting only, feature
      extraction of train/dev included; scoring the three splits afterwards is not).

    Raises ValueError for an unknown kind or parameter, an unlabelled example, too few groups
    or a split with a single class (see `split_examples`).
    """
    from proxies.quality import threshold_for_precision

    if not 0 < target_precision <= 1:
        raise ValueError(f"target_precision must lie in (0, 1], not {target_precision!r}")
    if kind in PAIRWISE_KINDS:
        raise ValueError(f"{kind!r} learns from pairs of outputs: use "
                         "proxies.learned.pairwise.train_pairwise")
    cls = proxy_class(kind)
    params = dict(params or {})
    if "seed" in cls.defaults:
        params.setdefault("seed", seed)
    proxy = cls(**params)  # bad params fail before any splitting or encoding
    splits = split_examples(examples, dev=dev, test=test, seed=seed)
    report = proxy.fit(splits.train, splits.dev)

    scores = {name: proxy.predict_proba(part) for name, part in splits.items()}
    labels = {name: check_labels(part) for name, part in splits.items()}
    choice = threshold_for_precision(scores["dev"].tolist(), labels["dev"].tolist(),
                                     target_precision)
    if choice.achieved and choice.threshold is not None:
        threshold = float(choice.threshold)
        rule = (f"lowest dev threshold with precision >= {target_precision:g} "
                f"(dev precision {choice.precision:.3f}, recall {choice.recall:.3f})")
    else:
        threshold = FALLBACK_THRESHOLD
        rule = (f"{FALLBACK_THRESHOLD:g}: no dev threshold reaches precision "
                f"{target_precision:g}")
    metrics: dict[str, Any] = {
        "auc": {name: _auc(scores[name], labels[name]) for name in scores},
        "dev": _at_threshold(scores["dev"], labels["dev"], threshold),
        "test": _at_threshold(scores["test"], labels["test"], threshold),
        "threshold_achieved": bool(choice.achieved),
        # Where groups (histories) have several outputs (completions): the pertinence
        # paper's top-1 accuracy per history, on each split.
        "top1_per_group": {name: top1_per_group(scores[name], part)
                           for name, part in splits.items()},
    }
    return TrainedProxy(
        kind=kind, proxy=proxy, threshold=threshold, threshold_rule=rule,
        target_precision=target_precision, metrics=metrics, split_sizes=_split_sizes(splits),
        params=proxy.public_params(), seed=seed, training_seconds=report.seconds,
        report=report,
        split_keys={name: [example.key for example in part] for name, part in splits.items()},
    )
