"""The two LATTE baselines: logistic regressions on metric features (no Django here).

- `WerBertScoreProxy` ("wer_bertscore"): WER deletion, insertion and substitution rates
  (D/N, I/N, S/N with N = H + S + D, jiwer after the project's `Normaliser`) + BERTScore F1 of
  the configured encoder; `extra=("sd", "heval")` adds semantic distance and H_eval.
  LATTE section 3: "a logistic regression model that combined BERTScore and WER (split into
  Deletion Rate, Insertion Rate, Substitution Rate) as features".
- `EmbeddingProxy` ("embedding_lr"): cosine similarity of the mean-pooled sentence embeddings
  of reference and output plus both lengths in words (LATTE's SentT5 baseline, with the
  configured encoder instead of SentenceT5-11B).

Features come from the project's scorers (`metrics.scorers`), never recomputed here: one encoder
pass per distinct text serves every feature. They are standardised (scikit-learn
`StandardScaler`, fitted on train) and fed to an L2 `LogisticRegression`. The regularisation
strength `C` is picked on dev by AUC from `C_GRID` unless given (LATTE: "we use the dev split
to choose best hyper parameters"); the model is not refitted on dev, so dev stays unbiased for
the threshold choice.

The fitted model is four arrays (feature means and scales, coefficients, intercept), saved as
JSON (no pickle: an artefact must never execute code when loaded) and scored with the same numpy
expression before and after saving, so a loaded proxy gives identical probabilities.
"""

from __future__ import annotations

import json
import os
import time
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from proxies.learned.base import Proxy, TrainingReport, library_versions, read_model_file
from proxies.learned.data import Example, check_labels, check_texts

C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
MODEL_FILE = "model.json"


def _pairs(examples: Sequence[Example]):
    from metrics.scorers.base import Pair

    return [Pair(i, e.reference, e.output) for i, e in enumerate(examples)]


def _values(scores, examples: Sequence[Example], name: str, value: str) -> np.ndarray:
    """One value per example from a scorer's Scores; ValueError naming unscorable examples."""
    bad = [
        f"example {i} (key {examples[i].key!r}): {score.error}"
        for i, score in enumerate(scores)
        if score.error is not None
    ]
    if bad:
        raise ValueError(f"{name} cannot score " + "; ".join(bad[:5])
                         + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))
    return np.array([float(score.values[value]) for score in scores], dtype=np.float64)


def _auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


class _LogisticProxy(Proxy):
    """Standardised features -> L2 logistic regression; subclasses define `features`."""

    version = "1"
    base_defaults: ClassVar[dict[str, Any]] = {
        "C": None,  # None: pick from C_GRID by dev AUC
        "model_path": None,  # encoder directory; None: the embedded all-MiniLM-L6-v2
        "device": None,  # None: cuda when available, else cpu
        "normaliser": None,  # Normaliser settings (to_dict form); None: the default
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        from metrics.scorers.normalise import coerce_normaliser

        self.normaliser = coerce_normaliser(self.params["normaliser"])
        self.params["normaliser"] = self.normaliser.to_dict()
        if self.params["C"] is not None and not float(self.params["C"]) > 0:
            raise ValueError(f"C must be a positive number, not {self.params['C']!r}")
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.coef: np.ndarray | None = None
        self.intercept = 0.0

    # -- features ------------------------------------------------------------------------
    def encoder(self):
        from metrics.scorers.encoder import get_encoder

        return get_encoder(self.encoder_path(), self.params["device"])

    def features(self, examples: Sequence[Example]) -> np.ndarray:
        """[n, len(feature_names())] float64 features (ValueError naming bad examples)."""
        check_texts(examples)
        if not examples:
            return np.zeros((0, len(self.feature_names())))
        return self._features(examples)

    @abstractmethod
    def _features(self, examples: Sequence[Example]) -> np.ndarray:
        """The kind's features for non-empty, checked `examples`."""

    def libraries(self) -> dict[str, str]:
        return library_versions("numpy", "scikit-learn", "torch", "transformers", "jiwer")

    # -- training and scoring ------------------------------------------------------------
    def fit(self, train: Sequence[Example], dev: Sequence[Example]) -> TrainingReport:
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        started = time.perf_counter()
        self.fitted = False  # a failed refit must not leave a half-trained model usable
        self.require_encoder()
        y_train = check_labels(train, "training")
        y_dev = check_labels(dev, "the dev split")
        for name, y in (("train", y_train), ("dev", y_dev)):
            if len(set(y.tolist())) < 2:
                raise ValueError(f"the {name} split needs both labels; it has only {set(y)}")
        x_train, x_dev = self.features(train), self.features(dev)
        scaler = StandardScaler().fit(x_train)
        z_train, z_dev = scaler.transform(x_train), scaler.transform(x_dev)
        grid = [float(self.params["C"])] if self.params["C"] is not None else list(C_GRID)
        tried = []
        best: tuple[float, float, Any] | None = None
        for c in grid:
            model = LogisticRegression(C=c, max_iter=1000).fit(z_train, y_train)
            dev_auc = _auc(y_dev, model.decision_function(z_dev))
            tried.append({"C": c, "dev_auc": dev_auc})
            if best is None or dev_auc > best[1] + 1e-12:  # ties: the stronger regularisation
                best = (c, dev_auc, model)
        assert best is not None
        c, dev_auc, model = best
        self.mean = np.asarray(scaler.mean_, dtype=np.float64)
        self.scale = np.asarray(scaler.scale_, dtype=np.float64)
        self.coef = np.asarray(model.coef_[0], dtype=np.float64)
        self.intercept = float(model.intercept_[0])
        self.fitted = True
        return TrainingReport(
            kind=self.kind, n_train=len(train), n_dev=len(dev),
            seconds=time.perf_counter() - started, dev_auc=dev_auc,
            details={
                "C": c, "C_tried": tried,
                "coefficients": dict(zip(self.feature_names(), self.coef.tolist(), strict=True)),
                "intercept": self.intercept,
            },
        )

    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        self._require_fitted()
        return self._probability(self.features(examples))

    def _probability(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    # -- persistence ---------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> list[str]:
        self._require_fitted()
        data = {
            "kind": self.kind,
            "version": self.version,
            "params": self.public_params(),
            "feature_names": self.feature_names(),
            "mean": self.mean.tolist(),  # type: ignore[union-attr]
            "scale": self.scale.tolist(),  # type: ignore[union-attr]
            "coef": self.coef.tolist(),  # type: ignore[union-attr]
            "intercept": self.intercept,
        }
        (Path(directory) / MODEL_FILE).write_text(json.dumps(data, indent=1))
        return [MODEL_FILE]

    @classmethod
    def load(cls, directory: str | os.PathLike[str], **overrides: Any) -> _LogisticProxy:
        path = Path(directory) / MODEL_FILE
        data = read_model_file(path, cls.kind)
        params = {**data["params"], **overrides}
        if "extra" in params:
            params["extra"] = tuple(params["extra"])
        proxy = cls(**params)
        names = proxy.feature_names()
        if data["feature_names"] != names:
            raise ValueError(f"{path}: features {data['feature_names']} do not match the "
                             f"{cls.kind} features {names}")
        arrays = {}
        for key in ("mean", "scale", "coef"):
            arrays[key] = np.asarray(data[key], dtype=np.float64)
            if arrays[key].shape != (len(names),):
                raise ValueError(f"{path}: {key!r} has {arrays[key].size} values for "
                                 f"{len(names)} features")
        proxy.mean, proxy.scale, proxy.coef = arrays["mean"], arrays["scale"], arrays["coef"]
        proxy.intercept = float(data["intercept"])
        proxy.fitted = True
        return proxy


class WerBertScoreProxy(_LogisticProxy):
    """LATTE's baseline: WER D/I/S rates + BERTScore F1 (optionally + SD and H_eval)."""

    kind = "wer_bertscore"
    EXTRAS = ("sd", "heval")
    defaults: ClassVar[dict[str, Any]] = {**_LogisticProxy.base_defaults, "extra": ()}

    def __init__(self, **params: Any):
        extra = params.get("extra") or ()
        if isinstance(extra, str):
            extra = (extra,)
        unknown = [x for x in extra if x not in self.EXTRAS]
        if unknown:
            raise ValueError(f"unknown extra feature(s) {unknown}; choose from {self.EXTRAS}")
        # Canonical order, no repeats: the feature order is part of the saved model.
        params["extra"] = tuple(x for x in self.EXTRAS if x in extra)
        super().__init__(**params)

    def feature_names(self) -> list[str]:
        return ["del_rate", "ins_rate", "sub_rate", "bertscore_f", *self.params["extra"]]

    def _features(self, examples: Sequence[Example]) -> np.ndarray:
        from metrics.scorers.base import Scorer
        from metrics.scorers.encoder import prepare_shared
        from metrics.scorers.heval import HevalScorer
        from metrics.scorers.semantic import BertScoreScorer, SemanticDistanceScorer
        from metrics.scorers.text import WordErrorScorer

        pairs = _pairs(examples)
        wer = WordErrorScorer(normaliser=self.normaliser).score(pairs)
        model_scorers: dict[str, Scorer] = {
            "bertscore": BertScoreScorer(model_path=self.encoder_path())}
        if "sd" in self.params["extra"]:
            model_scorers["sd"] = SemanticDistanceScorer(model_path=self.encoder_path())
        if "heval" in self.params["extra"]:
            model_scorers["heval"] = HevalScorer(normaliser=self.normaliser,
                                                 model_path=self.encoder_path())
        encoder = self.encoder()
        prepare_shared(encoder, model_scorers.values(), pairs)  # one pass for every feature
        columns = [_values(wer, examples, "wer", name)
                   for name in ("del_rate", "ins_rate", "sub_rate")]
        columns.append(_values(model_scorers["bertscore"].score(pairs, encoder=encoder),
                               examples, "bertscore", "bertscore_f"))
        for extra in self.params["extra"]:
            value = "sd" if extra == "sd" else "heval"
            columns.append(_values(model_scorers[extra].score(pairs, encoder=encoder),
                                   examples, extra, value))
        return np.column_stack(columns)


class EmbeddingProxy(_LogisticProxy):
    """LATTE's sentence-embedding baseline: cosine + both lengths in words."""

    kind = "embedding_lr"
    defaults: ClassVar[dict[str, Any]] = dict(_LogisticProxy.base_defaults)

    def feature_names(self) -> list[str]:
        return ["cosine", "reference_words", "output_words"]

    def _features(self, examples: Sequence[Example]) -> np.ndarray:
        from metrics.scorers.semantic import EmbeddingCosineScorer

        pairs = _pairs(examples)
        scorer = EmbeddingCosineScorer(model_path=self.encoder_path())
        cosine = _values(scorer.score(pairs, encoder=self.encoder()), examples,
                         "embedding_cosine", "cosine")
        # Words as WER counts them (after the normaliser), so "don't," is one word.
        ref_words = [len(self.normaliser(e.reference).split()) for e in examples]
        out_words = [len(self.normaliser(e.output).split()) for e in examples]
        return np.column_stack([cosine, np.array(ref_words, float), np.array(out_words, float)])
