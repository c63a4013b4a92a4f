"""Learned proxy judges trained on a study's own human judgments (no Django here).

- `data`: `Example`, `split_examples` (train/dev/test without a reference shared between them).
- `regression`: the LATTE baselines, logistic regressions on WER rates + BERTScore
  ("wer_bertscore") and on sentence-embedding cosine + lengths ("embedding_lr").
- `cross_encoder`: a (reference, output) pair classifier fine-tuned from the configured encoder
  ("cross_encoder"), the pertinence paper's learned metric.
- `pairwise`: `PairExample`, `train_pairwise`: a pairwise preference proxy ("pairwise_logistic")
  on differences of stored metric results, cross-validated by reference (out-of-fold
  predictions for every pair).
- `training`: `train_proxy` (split, fit, threshold on dev for a target precision, test AUC) and
  the `PROXY_KINDS` registry.
- `artifacts`: `save_artifact` / `load_artifact`, versioned directories with a manifest.
"""

from proxies.learned.artifacts import ArtifactError, load_artifact, save_artifact
from proxies.learned.base import Proxy, TrainingReport
from proxies.learned.data import Example, Splits, split_examples
from proxies.learned.pairwise import PairExample, PairwiseLogisticProxy, train_pairwise
from proxies.learned.training import (
    PAIRWISE_KINDS,
    PROXY_KINDS,
    TrainedProxy,
    build_proxy,
    train_proxy,
)

__all__ = [
    "PAIRWISE_KINDS",
    "PROXY_KINDS",
    "ArtifactError",
    "Example",
    "PairExample",
    "PairwiseLogisticProxy",
    "Proxy",
    "Splits",
    "TrainedProxy",
    "TrainingReport",
    "build_proxy",
    "load_artifact",
    "save_artifact",
    "split_examples",
    "train_pairwise",
    "train_proxy",
]
