"""The contract every learned proxy follows (no Django here).

A proxy is trained on labelled `Example`s (`fit(train, dev)`), then scores any examples with
P(label = 1) (`predict_proba`). `save(directory)` writes everything needed to score again into
an existing empty directory and `load(directory)` rebuilds an equivalent proxy (same
probabilities, bit for bit, on the same device). `signature()` names what its results depend on.
Versioned artefacts with a manifest around these files are `proxies.learned.artifacts`' job.
"""

from __future__ import annotations

import importlib.metadata
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from proxies.learned.data import Example


def read_model_file(path: Path, kind: str) -> dict[str, Any]:
    """A proxy's JSON model file, refused with its path and the cause when it is missing, not
    JSON, or holds another kind of model."""
    import json

    if not path.is_file():
        raise FileNotFoundError(f"{path}: the {kind} model file is missing")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if data.get("kind") != kind:
        raise ValueError(f"{path}: holds a {data.get('kind')!r} model, not {kind!r}")
    return data


def library_versions(*distributions: str) -> dict[str, str]:
    """Installed versions of these distributions ("unknown" when missing; never raises)."""
    versions = {}
    for name in distributions:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "unknown"
    return versions


@dataclass
class TrainingReport:
    """What `fit` did: sizes, time, the dev AUC of the kept model, kind-specific details.

    `details` holds e.g. the regularisation strength picked on dev (regressions) or the
    per-epoch history and the kept epoch (cross-encoder). JSON-serialisable via `to_dict`.
    """

    kind: str
    n_train: int
    n_dev: int
    seconds: float
    dev_auc: float | None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingReport:
        return cls(**{k: data[k] for k in ("kind", "n_train", "n_dev", "seconds", "dev_auc")},
                   details=dict(data.get("details") or {}))


class Proxy(ABC):
    """A learned proxy judge: binary classifier over (reference, output) pairs."""

    kind: ClassVar[str]
    # Bumped when a proxy of this kind trained on the same data would score differently.
    version: ClassVar[str]
    # Parameter name -> default; `__init__` refuses any other name.
    defaults: ClassVar[dict[str, Any]]
    # True when the proxy reads an encoder OUTSIDE its saved files at scoring time (the
    # regressions); the cross-encoder carries its own fine-tuned weights.
    uses_external_encoder: ClassVar[bool] = True
    # False for a proxy that reads no encoder at all (the pairwise proxy reads stored metric
    # results): its manifest names no encoder and loading checks none.
    uses_encoder: ClassVar[bool] = True

    def __init__(self, **params: Any):
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) for proxy {self.kind!r}: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(self.defaults))}"
            )
        self.params: dict[str, Any] = {**self.defaults, **params}
        self.fitted = False

    # -- encoder -------------------------------------------------------------------------
    def encoder_path(self) -> str:
        """The base encoder's directory, resolved (`model_path`, else the default:
        `metrics.scorers.encoder.encoder_resolve`)."""
        from metrics.scorers.encoder import encoder_resolve

        return str(Path(encoder_resolve(model_path=self.params.get("model_path"))).resolve())

    def require_encoder(self) -> str:
        """The encoder directory, or ValueError when it is missing (before any training)."""
        path = self.encoder_path()
        if not (Path(path) / "config.json").is_file():
            raise ValueError(f"proxy {self.kind!r}: the encoder directory {path} does not exist "
                             "or has no config.json (set model_path to a local model directory)")
        return path

    def encoder_fingerprint(self) -> str:
        from metrics.scorers.encoder import model_fingerprint

        return model_fingerprint(self.encoder_path())

    # -- the contract --------------------------------------------------------------------
    @abstractmethod
    def fit(self, train: Sequence[Example], dev: Sequence[Example]) -> TrainingReport:
        """Train on `train` (labels required); `dev` picks hyper-parameters or the checkpoint."""

    @abstractmethod
    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        """P(label = 1) per example, in order, as float64; labels are ignored."""

    @abstractmethod
    def save(self, directory: str | os.PathLike[str]) -> list[str]:
        """Write the fitted model into `directory` (exists); returns the file names written."""

    @classmethod
    @abstractmethod
    def load(cls, directory: str | os.PathLike[str], **overrides: Any) -> Proxy:
        """Rebuild a fitted proxy from `save`'s files; `overrides` replace saved params
        (e.g. `model_path` when the encoder lives elsewhere on this machine)."""

    def feature_names(self) -> list[str]:
        return []

    def libraries(self) -> dict[str, str]:
        return library_versions("numpy", "scikit-learn", "torch", "transformers")

    def signature(self) -> dict[str, Any]:
        """Everything a score depends on, JSON-serialisable (kind, version, params, encoder)."""
        from metrics.scorers.encoder import model_signature

        return {
            "proxy": self.kind,
            "version": self.version,
            "params": self.public_params(),
            "features": self.feature_names(),
            "encoder": model_signature(self.encoder_path()),
            "libraries": self.libraries(),
        }

    def public_params(self) -> dict[str, Any]:
        """The params as stored in manifests (JSON types)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}

    def _require_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError(f"proxy {self.kind!r} is not trained: call fit() or load()")


@dataclass
class TrainedProxy:
    """A fitted proxy with its decision threshold and the evidence for it.

    `metrics`: "auc" -> {"train"|"dev"|"test": {value, ci_low, ci_high, n, n_pos, n_neg,
    method}} (DeLong 95 % CIs); "dev" and "test" -> {threshold, precision, recall,
    n_predicted_positive, n_positive} at `threshold` (precision None when nothing is
    predicted positive); "threshold_achieved" (bool). `split_sizes`: split -> {examples,
    groups, positive, negative}. `split_keys`: split -> the `Example.key`s it held (output ids
    when the examples come from a study): an analysis may then score the proxy only on
    outputs it never saw in training or threshold choice. `version`, `path` and `created` are
    set once saved or loaded.
    """

    kind: str
    proxy: Proxy
    threshold: float
    threshold_rule: str
    target_precision: float | None  # None: a pairwise proxy (no threshold chosen)
    metrics: dict[str, Any]
    split_sizes: dict[str, dict[str, int]]
    params: dict[str, Any]
    seed: int
    training_seconds: float
    report: TrainingReport
    version: int | None = None
    path: Path | None = None
    created: str | None = None
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    split_keys: dict[str, list[Any]] = field(default_factory=dict)

    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        """P(label = 1) per example (labels ignored)."""
        return self.proxy.predict_proba(examples)

    def predict(self, examples: Sequence[Example]) -> np.ndarray:
        """1 where P(label = 1) >= threshold, else 0."""
        return (self.predict_proba(examples) >= self.threshold).astype(int)

    def feature_names(self) -> list[str]:
        return self.proxy.feature_names()

    def signature(self) -> dict[str, Any]:
        """The proxy's signature plus the threshold and, once saved, the artefact's identity:
        what a stored proxy Judgment should record about who answered."""
        sig = self.proxy.signature()
        sig["threshold"] = self.threshold
        sig["target_precision"] = self.target_precision
        if self.version is not None:
            sig["artifact"] = {"name": self.name, "version": self.version,
                               "created": self.created}
        return sig
