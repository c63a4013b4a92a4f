"""A pairwise learned proxy: which of two outputs people prefer, from the differences of their
STORED metric results (no Django here).

- Units: pairs of outputs with the people's votes counted (`a`, `b`, `tie`), read as the
  analysis reads them (`annotation.preferences`: named raters' answers and aggregated counts
  merged). The target of a pair is its human majority (+1 A, -1 B); pairs whose majority is a
  tie, and pairs nobody judged, are left out of training (they are still predicted).
- Features: x = f(A) - f(B) for each feature f, a value the metrics stored for each output
  (`wer` and its edit-rate parts `sub_rate`/`del_rate`/`ins_rate`, `cer`, `per`,
  `bertscore_f`, `sd`, `heval`, ...). Nothing is computed here: the caller passes the values
  it has stored, and a feature with no value at all is refused by name.
- Model: an L2 logistic regression WITHOUT intercept on the differences divided by their root
  mean square, fitted on every labelled pair in both orientations ((x, A) and (-x, B)). So
  P(A over B) = 1 - P(B over A) exactly and the order a data set happens to list a pair in
  (HATS' hypA/hypB) teaches nothing. (Centring, as a StandardScaler would, breaks that
  symmetry; on the two-orientation data the mean is 0 anyway.)
- Cross-validation BY GROUP (`cross_validate_pairs`): the groups (the reference text, or the
  item) of every pair are dealt to `folds` folds (scikit-learn `GroupKFold`, shuffled with the
  seed); each fold's pairs are predicted by a model trained on the labelled pairs of the
  other folds. Every pair's stored prediction is therefore OUT OF FOLD: made by a model that
  never saw its reference, so an analysis may score the proxy on every pair. The model kept
  for new data (another study) is then fitted on every labelled pair.
- Answers (`answer`): "A" when P(A) > 0.5 + tie_band, "B" when P(A) < 0.5 - tie_band, else
  "tie" where the criterion offers a tie (otherwise "A" when P(A) >= 0.5, else "B"). The
  default band 0 gives a tie only at exactly 0.5, i.e. when every difference is 0.
- CV accuracy (`preference_accuracy`) against the human majority, under the two rules of
  `analysis.stats.pairwise_validity` (restated here: a core imports no analysis):
  `ties_wrong` (the HATS paper's: a proxy or human tie is wrong, every unit counts) and
  `ties_excluded` (human ties left out, a proxy tie counts half); by agreement stratum
  (unanimous, >= 70 %, all), with a 95 % percentile bootstrap over groups, per fold, and the
  same figures for each feature alone (a lower error rate, a higher BERTScore preferred).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from annotation.preferences import majority as human_majority
from metrics.scorers import registry
from proxies.learned.base import (
    Proxy,
    TrainedProxy,
    TrainingReport,
    library_versions,
    read_model_file,
)
from proxies.learned.data import Example

MODEL_FILE = "pairwise.json"
OUT_OF_FOLD_FILE = "out_of_fold.json"

# The features used when none are named: those of these the study has computed.
DEFAULT_FEATURES = ("wer", "sub_rate", "del_rate", "ins_rate", "cer", "per", "bertscore_f",
                    "sd", "heval")
STRATA = (("unanimous", 1.0), ("agreement >= 70%", 0.7), ("all", 0.0))
RULES = ("ties_wrong", "ties_excluded")
N_BOOT = 2000
BOOT_SEED = 20240917


def group_digest(group: str) -> str:
    """A short stable name for a group (a reference text) that reveals nothing of it."""
    return hashlib.sha256(group.encode("utf-8")).hexdigest()[:16]


@dataclass
class PairExample:
    """One pair of outputs: its features per output, its group and the people's votes.

    `features_a` / `features_b`: feature name -> the value stored for output A / B (None or
    NaN: not stored). `group` is what must not be shared between folds (the reference text,
    or the item). `a`, `b`, `tie`: how many people chose A, B or a tie (all 0: unjudged).
    """

    output: Any
    output_b: Any
    group: str
    features_a: Mapping[str, float | None]
    features_b: Mapping[str, float | None]
    a: int = 0
    b: int = 0
    tie: int = 0

    @property
    def key(self) -> tuple[Any, Any]:
        return (self.output, self.output_b)

    @property
    def votes(self) -> int:
        return self.a + self.b + self.tie

    @property
    def majority(self) -> int | None:
        """+1 (A), -1 (B), 0 (a human tie) or None (nobody judged it)."""
        if not self.votes:
            return None
        return int(human_majority(np.array([self.a]), np.array([self.b]),
                                  np.array([self.tie]))[0])


def _value(features: Mapping[str, float | None], name: str) -> float:
    value = features.get(name)
    try:
        return float(value) if value is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def differences(pairs: Sequence[PairExample], names: Sequence[str]) -> np.ndarray:
    """[n, len(names)] of f(A) - f(B); NaN where either value is missing."""
    x = np.full((len(pairs), len(names)), np.nan)
    for i, pair in enumerate(pairs):
        for j, name in enumerate(names):
            x[i, j] = _value(pair.features_a, name) - _value(pair.features_b, name)
    return x


def missing_features(pairs: Sequence[PairExample], names: Iterable[str]) -> list[str]:
    """The features no output of `pairs` has a value for."""
    missing = []
    for name in names:
        if not any(np.isfinite(_value(p.features_a, name)) or np.isfinite(
                _value(p.features_b, name)) for p in pairs):
            missing.append(name)
    return missing


def feature_metric(name: str) -> str:
    """The metric that stores feature `name` (what to compute when it is missing), as its
    scorer declares it; a name no metric stores is named as given (the message then says that
    metric is unknown when it is computed)."""
    try:
        return registry.metric_storing(name)
    except registry.UnknownValue:
        return name


def missing_message(missing: Sequence[str]) -> str:
    metrics = sorted({feature_metric(name) for name in missing})
    named = ", ".join(f"{name} (metric {feature_metric(name)})" for name in missing)
    return (f"no stored metric results for feature(s) {named}: compute "
            f"{', '.join(metrics)} on the study first (compute_metrics --metrics "
            f"{' '.join(metrics)}); the pairwise proxy reads stored results and computes "
            "none")


def answer(p_a: float, *, tie_band: float = 0.0, allow_tie: bool = True) -> str:
    """The pairwise answer for P(A over B) (see the module docstring)."""
    if allow_tie and abs(p_a - 0.5) <= tie_band:
        return "tie"
    return "A" if p_a >= 0.5 else "B"


def _pick(p_a: np.ndarray, tie_band: float, allow_tie: bool) -> np.ndarray:
    """+1 / -1 / 0 per probability (NaN: no prediction)."""
    picks = np.full(len(p_a), np.nan)
    for i, p in enumerate(p_a):
        if np.isfinite(p):
            picks[i] = {"A": 1, "B": -1, "tie": 0}[answer(float(p), tie_band=tie_band,
                                                          allow_tie=allow_tie)]
    return picks


# --- accuracy against the human majority ---------------------------------------------------

def _bootstrap(credit: np.ndarray, groups: np.ndarray, seed: int, n_boot: int
               ) -> list[float] | None:
    keep = ~np.isnan(credit)
    credit, groups = credit[keep], groups[keep]
    if len(credit) < 2 or n_boot < 1:
        return None
    uniques, codes = np.unique(groups, return_inverse=True)
    sums = np.bincount(codes, weights=credit, minlength=len(uniques))
    sizes = np.bincount(codes, minlength=len(uniques)).astype(float)
    draws = np.random.default_rng(seed).integers(0, len(uniques), size=(n_boot, len(uniques)))
    means = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return [float(low), float(high)]


def preference_accuracy(picks: np.ndarray, a: np.ndarray, b: np.ndarray, tie: np.ndarray,
                        groups: np.ndarray, *, n_boot: int = N_BOOT) -> dict[str, Any]:
    """Share of units where `picks` (+1 A, -1 B, 0 tie, NaN none) is the human majority:
    rule -> stratum -> {accuracy, n, ci, proxy_ties}; units without votes are left out, units
    without a pick counted in `n_missing`."""
    a, b, tie = (np.asarray(v, dtype=float) for v in (a, b, tie))
    picks = np.asarray(picks, dtype=float)
    groups = np.asarray(groups).astype(str)
    voted = (a + b + tie) > 0
    a, b, tie, picks, groups = a[voted], b[voted], tie[voted], picks[voted], groups[voted]
    majority = human_majority(a, b, tie)
    agreement = np.maximum(np.maximum(a, b), tie) / np.maximum(a + b + tie, 1)
    known = ~np.isnan(picks)
    pick = np.where(known, picks, 0)
    right = ((pick == majority) & (majority != 0)).astype(float)
    credits = {
        "ties_wrong": np.where(known, right, np.nan),
        "ties_excluded": np.where(known & (majority != 0),
                                  np.where(pick == 0, 0.5, right), np.nan),
    }
    out: dict[str, Any] = {"n_units": int(len(a)), "n_missing": int((~known).sum()),
                           "n_human_ties": int((majority == 0).sum())}
    for rule, credit in credits.items():
        out[rule] = {}
        for index, (stratum, floor) in enumerate(STRATA):
            inside = agreement >= floor - 1e-12
            values = credit[inside]
            counted = values[~np.isnan(values)]
            out[rule][stratum] = {
                "accuracy": float(counted.mean()) if len(counted) else None,
                "n": int(len(counted)),
                "ci": _bootstrap(values, groups[inside], BOOT_SEED + index, n_boot),
                "proxy_ties": int(((pick[inside] == 0) & ~np.isnan(values)).sum()),
            }
    return out


# --- the model --------------------------------------------------------------------------------

def _fit(x: np.ndarray, y: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    """(scale, coef) of the symmetric logistic regression on differences `x`, targets `y`
    (1: A preferred, 0: B)."""
    from sklearn.linear_model import LogisticRegression

    both_x = np.vstack([x, -x])
    both_y = np.concatenate([y, 1 - y])
    scale = np.sqrt(np.mean(both_x ** 2, axis=0))
    scale = np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(C=c, fit_intercept=False, max_iter=1000)
    model.fit(both_x / scale, both_y)
    return scale.astype(np.float64), np.asarray(model.coef_[0], dtype=np.float64)


def _probability(x: np.ndarray, scale: np.ndarray, coef: np.ndarray) -> np.ndarray:
    z = (x / scale) @ coef
    return 1.0 / (1.0 + np.exp(-z))


class PairwiseLogisticProxy(Proxy):
    """P(A preferred over B) from stored metric differences (see the module docstring).

    Not a per-output scorer: `fit_pairs` / `predict_pairs` take `PairExample`s; the
    per-output `fit` / `predict_proba` of the `Proxy` contract refuse."""

    kind = "pairwise_logistic"
    version = "1"
    uses_external_encoder = False
    uses_encoder = False
    defaults: ClassVar[dict[str, Any]] = {
        "features": None,  # None: every DEFAULT_FEATURES value the study stores
        "C": 1.0,  # inverse L2 strength (on standardised differences)
        "folds": 5,  # GroupKFold folds (fewer when there are fewer groups)
        "tie_band": 0.0,  # |P(A) - 0.5| <= tie_band answers "tie" (where ties are offered)
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        features = self.params["features"]
        if isinstance(features, str):
            features = [features]
        if features is not None:
            if (not isinstance(features, list | tuple) or not features
                    or not all(isinstance(f, str) and f for f in features)):
                raise ValueError("features must be a non-empty list of stored value names, "
                                 f"not {features!r}")
            if len(set(features)) != len(features):
                raise ValueError(f"features: a feature is named twice in {list(features)}")
            self.params["features"] = list(features)
        if isinstance(self.params["C"], bool) or not float(self.params["C"]) > 0:
            raise ValueError(f"C must be a positive number, not {self.params['C']!r}")
        folds = self.params["folds"]
        if not isinstance(folds, int) or isinstance(folds, bool) or folds < 2:
            raise ValueError(f"folds must be an integer of at least 2, not {folds!r}")
        band = self.params["tie_band"]
        if isinstance(band, bool) or not 0 <= float(band) < 0.5:
            raise ValueError(f"tie_band must lie in [0, 0.5), not {band!r}")
        self.names: list[str] = list(self.params["features"] or [])
        self.scale: np.ndarray | None = None
        self.coef: np.ndarray | None = None
        # Filled by `cross_validate_pairs`, saved beside the model: one record per pair.
        self.out_of_fold: list[dict[str, Any]] = []

    # -- what this proxy reads -----------------------------------------------------------
    def feature_names(self) -> list[str]:
        return list(self.names)

    def resolve_features(self, pairs: Sequence[PairExample]) -> tuple[list[str], list[str]]:
        """(features used, default features left out because nothing stores them).

        Named features must all have values (ValueError naming the missing ones and their
        metrics); by default, the DEFAULT_FEATURES that have values (at least one)."""
        named = self.params["features"]
        if named is not None:
            missing = missing_features(pairs, named)
            if missing:
                raise ValueError(missing_message(missing))
            return list(named), []
        missing = missing_features(pairs, DEFAULT_FEATURES)
        used = [name for name in DEFAULT_FEATURES if name not in missing]
        if not used:
            raise ValueError(missing_message(list(DEFAULT_FEATURES)))
        return used, missing

    def encoder_path(self) -> str:
        return ""

    def encoder_fingerprint(self) -> str:
        return ""

    def signature(self) -> dict[str, Any]:
        return {"proxy": self.kind, "version": self.version, "params": self.public_params(),
                "features": self.feature_names(), "encoder": {"model": None},
                "libraries": self.libraries()}

    def libraries(self) -> dict[str, str]:
        return library_versions("numpy", "scikit-learn")

    # -- the per-output contract does not apply -------------------------------------------
    def fit(self, train: Sequence[Example], dev: Sequence[Example]) -> TrainingReport:
        raise TypeError("the pairwise proxy learns from pairs: use train_pairwise() or "
                        "fit_pairs()")

    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        raise TypeError("the pairwise proxy scores pairs, not outputs: use predict_pairs()")

    # -- training and scoring --------------------------------------------------------------
    def fit_pairs(self, pairs: Sequence[PairExample]) -> TrainingReport:
        """Fit on the labelled pairs (majority A or B) with every feature known."""
        started = time.perf_counter()
        self.fitted = False
        if not self.names:
            self.names, _ = self.resolve_features(pairs)
        x, y, _ = self._labelled(pairs)
        if len(y) == 0:
            raise ValueError("no pair has a human majority for A or B and every feature known")
        self.scale, self.coef = _fit(x, y, float(self.params["C"]))
        self.fitted = True
        return TrainingReport(
            kind=self.kind, n_train=int(len(y)), n_dev=0,
            seconds=time.perf_counter() - started, dev_auc=None,
            details={"coefficients": self.coefficients(),
                     "scale": dict(zip(self.names, self.scale.tolist(), strict=True))})

    def _labelled(self, pairs: Sequence[PairExample]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, y, indices) of the pairs with a majority A or B and every feature known."""
        x = differences(pairs, self.names)
        majority = np.array([p.majority if p.majority is not None else 0 for p in pairs])
        keep = (majority != 0) & np.isfinite(x).all(axis=1)
        index = np.flatnonzero(keep)
        return x[keep], (majority[keep] == 1).astype(int), index

    def coefficients(self) -> dict[str, float]:
        """Per feature, the weight of its standardised difference (positive: a larger value
        of A makes A more likely preferred)."""
        self._require_fitted()
        return dict(zip(self.names, self.coef.tolist(), strict=True))  # type: ignore[union-attr]

    def predict_pairs(self, pairs: Sequence[PairExample]) -> np.ndarray:
        """P(A preferred over B) per pair; NaN where a feature is missing."""
        self._require_fitted()
        if not pairs:
            return np.zeros(0)
        x = differences(pairs, self.names)
        known = np.isfinite(x).all(axis=1)
        p = np.full(len(pairs), np.nan)
        if known.any():
            p[known] = _probability(x[known], self.scale, self.coef)  # type: ignore[arg-type]
        return p

    def answer(self, p_a: float, *, allow_tie: bool = True) -> str:
        return answer(p_a, tie_band=float(self.params["tie_band"]), allow_tie=allow_tie)

    # -- persistence -------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> list[str]:
        self._require_fitted()
        data = {"kind": self.kind, "version": self.version, "params": self.public_params(),
                "feature_names": self.names, "scale": self.scale.tolist(),  # type: ignore
                "coef": self.coef.tolist()}  # type: ignore[union-attr]
        root = Path(directory)
        (root / MODEL_FILE).write_text(json.dumps(data, indent=1))
        (root / OUT_OF_FOLD_FILE).write_text(json.dumps(self.out_of_fold))
        return [MODEL_FILE, OUT_OF_FOLD_FILE]

    @classmethod
    def load(cls, directory: str | os.PathLike[str], **overrides: Any) -> PairwiseLogisticProxy:
        path = Path(directory) / MODEL_FILE
        data = read_model_file(path, cls.kind)
        overrides.pop("device", None)  # nothing runs on a device
        overrides.pop("model_path", None)
        proxy = cls(**{**data["params"], **overrides})
        proxy.names = list(data["feature_names"])
        proxy.scale = np.asarray(data["scale"], dtype=np.float64)
        proxy.coef = np.asarray(data["coef"], dtype=np.float64)
        for name, array in (("scale", proxy.scale), ("coef", proxy.coef)):
            if array.shape != (len(proxy.names),):
                raise ValueError(f"{path}: {name!r} has {array.size} values for "
                                 f"{len(proxy.names)} features")
        oof = Path(directory) / OUT_OF_FOLD_FILE
        proxy.out_of_fold = json.loads(oof.read_text()) if oof.is_file() else []
        proxy.fitted = True
        return proxy

    def out_of_fold_table(self) -> dict[tuple[Any, Any], float]:
        """(output, output_b) -> out-of-fold P(A), both orientations."""
        table: dict[tuple[Any, Any], float] = {}
        for record in self.out_of_fold:
            if record.get("p_a") is None:
                continue
            key = (record["output"], record["output_b"])
            table[key] = float(record["p_a"])
            table.setdefault((key[1], key[0]), 1.0 - float(record["p_a"]))
        return table

    def trained_groups(self) -> set[str]:
        """The digests of the groups the pairs of its training came from."""
        return {str(record["group"]) for record in self.out_of_fold}


# --- cross-validated training ------------------------------------------------------------------

def _folds(groups: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """Fold number (0..n_folds-1) per pair, whole groups at a time (GroupKFold, shuffled)."""
    from sklearn.model_selection import GroupKFold

    fold = np.full(len(groups), -1)
    splitter = GroupKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    for number, (_, test) in enumerate(splitter.split(np.zeros(len(groups)), groups=groups)):
        fold[test] = number
    return fold


def _feature_baselines(pairs: Sequence[PairExample], names: Sequence[str], a: np.ndarray,
                       b: np.ndarray, tie: np.ndarray, groups: np.ndarray,
                       n_boot: int) -> dict[str, Any]:
    """Each feature alone on the same units (the better value preferred, by the direction its
    scorer declares; equal: a tie). A value without a direction (a count of the reference,
    equal within a pair) has no baseline; a name no scorer declares raises
    `registry.UnknownValue`."""
    out = {}
    x = differences(pairs, names)
    for j, name in enumerate(names):
        direction = registry.direction(name)
        if direction is None:
            continue
        sign = -1.0 if direction == "lower" else 1.0
        picks = np.where(np.isfinite(x[:, j]), np.sign(x[:, j]) * sign, np.nan)
        found = preference_accuracy(picks, a, b, tie, groups, n_boot=n_boot)
        out[name] = {rule: found[rule]["all"] for rule in RULES}
    return out


def cross_validate_pairs(proxy: PairwiseLogisticProxy, pairs: Sequence[PairExample], *,
                         seed: int = 0, allow_tie: bool = True, n_boot: int = N_BOOT
                         ) -> dict[str, Any]:
    """Out-of-fold P(A) for every pair with its features known (`proxy.out_of_fold`), and the
    CV report: folds, accuracy against the majority, per fold, per feature alone, and each
    fold's coefficients. Raises ValueError when fewer than 2 groups hold labelled pairs."""
    names = proxy.names
    x = differences(pairs, names)
    usable = np.isfinite(x).all(axis=1)
    groups = np.array([p.group for p in pairs], dtype=object).astype(str)
    majority = np.array([p.majority if p.majority is not None else 0 for p in pairs])
    labelled = usable & (majority != 0)
    labelled_groups = set(groups[labelled].tolist())
    if len(labelled_groups) < 2:
        raise ValueError(
            f"cross-validation by reference needs labelled pairs (a human majority for A or "
            f"B) from at least 2 references; have {int(labelled.sum())} pair(s) from "
            f"{len(labelled_groups)}")
    usable_groups = np.unique(groups[usable])
    n_folds = min(int(proxy.params["folds"]), len(usable_groups))
    fold = np.full(len(pairs), -1)
    fold[usable] = _folds(groups[usable], n_folds, seed)
    p_a = np.full(len(pairs), np.nan)
    fold_reports: list[dict[str, Any]] = []
    c = float(proxy.params["C"])
    for number in range(n_folds):
        train = labelled & (fold != number)
        inside = usable & (fold == number)
        y = (majority[train] == 1).astype(int)
        if len(y) == 0:
            raise ValueError(f"fold {number + 1} of {n_folds}: no labelled pair outside it "
                             "to train on; use fewer folds")
        scale, coef = _fit(x[train], y, c)
        p_a[inside] = _probability(x[inside], scale, coef)
        fold_reports.append({
            "fold": number + 1, "pairs": int(inside.sum()),
            "labelled": int((inside & labelled).sum()),
            "groups": int(len(np.unique(groups[inside]))), "train_pairs": int(len(y)),
            "coefficients": dict(zip(names, coef.tolist(), strict=True)),
        })
    band = float(proxy.params["tie_band"])
    picks = _pick(p_a, band, allow_tie)
    a, b, tie = (np.array([getattr(p, f) for p in pairs], dtype=float)
                 for f in ("a", "b", "tie"))
    accuracy = preference_accuracy(picks, a, b, tie, groups, n_boot=n_boot)
    for report in fold_reports:
        inside = fold == report["fold"] - 1
        found = preference_accuracy(picks[inside], a[inside], b[inside], tie[inside],
                                    groups[inside], n_boot=0)
        report["accuracy"] = {rule: found[rule]["all"]["accuracy"] for rule in RULES}
    proxy.out_of_fold = [
        {"output": _plain(p.output), "output_b": _plain(p.output_b),
         "group": group_digest(p.group), "fold": int(fold[i]) + 1 if fold[i] >= 0 else None,
         "p_a": None if not np.isfinite(p_a[i]) else float(p_a[i]),
         "votes": [p.a, p.b, p.tie]}
        for i, p in enumerate(pairs)]
    return {
        "folds": n_folds, "seed": seed, "grouped_by": "reference (the pair's group)",
        "pairs": int(len(pairs)), "pairs_predicted": int(usable.sum()),
        "pairs_missing_features": int((~usable).sum()),
        "labelled_pairs": int(labelled.sum()),
        "human_ties_left_out": int((usable & (majority == 0) & (a + b + tie > 0)).sum()),
        "unjudged_pairs": int((usable & (a + b + tie == 0)).sum()),
        "accuracy": accuracy,
        "cv_accuracy": {rule: accuracy[rule]["all"]["accuracy"] for rule in RULES},
        "per_fold": fold_reports,
        "features_alone": _feature_baselines(
            [p for i, p in enumerate(pairs) if usable[i]], names, a[usable], b[usable],
            tie[usable], groups[usable], n_boot),
        "answers": {"tie_band": band, "allow_tie": allow_tie,
                    "rule": (f"A when P(A) > {0.5 + band:g}, B when P(A) < {0.5 - band:g}, "
                             + ("else tie" if allow_tie else "else A at P(A) >= 0.5"))},
        "method": ("logistic regression without intercept on metric differences (A minus B) "
                   "divided by their root mean square, each labelled pair in both "
                   f"orientations; GroupKFold by reference ({n_folds} folds, shuffled with "
                   f"seed {seed}); every prediction out of fold. Accuracy as "
                   "analysis.stats.pairwise_validity counts it: ties_wrong (a proxy or human "
                   "tie is wrong), ties_excluded (human ties left out, a proxy tie counts "
                   f"half); 95% CI: percentile bootstrap over references, B={n_boot}."),
    }


def _plain(key: Any) -> Any:
    item = getattr(key, "item", None)
    return item() if callable(item) else key


def train_pairwise(pairs: Sequence[PairExample], *, params: Mapping[str, Any] | None = None,
                   seed: int = 0, allow_tie: bool = True, n_boot: int = N_BOOT):
    """Cross-validate by reference (out-of-fold P(A) for every pair), then fit the kept model
    on every labelled pair. Returns a `TrainedProxy` (kind "pairwise_logistic") whose
    `metrics` hold the CV report (`cross_validate_pairs`) and whose proxy carries the
    out-of-fold predictions (saved with it).

    Raises ValueError for a bad parameter, a named feature nothing stores (naming its
    metric), or fewer than 2 references with labelled pairs."""

    started = time.perf_counter()
    proxy = PairwiseLogisticProxy(**dict(params or {}))
    proxy.names, left_out = proxy.resolve_features(pairs)
    report_cv = cross_validate_pairs(proxy, pairs, seed=seed, allow_tie=allow_tie,
                                     n_boot=n_boot)
    report = proxy.fit_pairs(pairs)
    report.seconds = time.perf_counter() - started
    report.details.update({"folds": report_cv["folds"],
                           "fold_coefficients": [f["coefficients"]
                                                 for f in report_cv["per_fold"]]})
    if left_out:
        report_cv["features_left_out"] = {
            name: f"no stored value (metric {feature_metric(name)} not computed)"
            for name in left_out}
    report_cv["features"] = list(proxy.names)
    report_cv["coefficients"] = proxy.coefficients()
    sizes: dict[str, dict[str, Any]] = {}
    for record in proxy.out_of_fold:
        if record["fold"] is None:
            continue
        entry = sizes.setdefault(f"fold {record['fold']}", {
            "examples": 0, "groups": set(), "positive": 0, "negative": 0})
        entry["examples"] += 1
        entry["groups"].add(record["group"])
        a, b, tie = record["votes"]
        top = max(a, b, tie)
        entry["positive"] += int(a == top and b < top and tie < top)
        entry["negative"] += int(b == top and a < top and tie < top)
    split_sizes = {name: {**entry, "groups": len(entry["groups"])}
                   for name, entry in sorted(sizes.items())}
    band = float(proxy.params["tie_band"])
    return TrainedProxy(
        kind=proxy.kind, proxy=proxy, threshold=0.5,
        threshold_rule=report_cv["answers"]["rule"] + f" (tie band {band:g})",
        target_precision=None, metrics=report_cv, split_sizes=split_sizes,
        params=proxy.public_params(), seed=seed, training_seconds=report.seconds,
        report=report,
        split_keys={"out_of_fold": [[r["output"], r["output_b"]] for r in proxy.out_of_fold
                                    if r["p_a"] is not None]},
    )
