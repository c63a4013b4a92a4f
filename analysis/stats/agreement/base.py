"""Shared by every agreement coefficient: the result type, input validation and coding
of the tidy ratings table, category sets and analytic intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats as sps

from kit.estimate import Estimate

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[str, ...] = ("nominal", "ordinal", "interval", "ratio")
KappaWeights = Literal["linear", "quadratic"] | None
# Gwet's weight families (irrCAC weights.gen.r): identity = unweighted.
AgreementWeights = Literal["identity", "linear", "quadratic", "ordinal"]
TieBreak = Literal["split", "lowest", "drop"]
Cluster = Literal["unit", "item"]

#: Bootstrap replicates by default: enough for stable 2.5 % / 97.5 % percentiles.
N_BOOT = 2000
#: Replicates of the parametric bootstrap behind REML ICC intervals (each one is a REML fit).
N_BOOT_ICC = 500
CONFLEV = 0.95
# Floats held at once by a block of bootstrap replicates (sums per feature, tables per pair):
# bounds memory whatever the number of replicates, features or clusters.
BLOCK_FLOATS = 4_000_000
# Above this many distinct values the coincidence matrix is not materialised per replicate.
MAX_BOOT_VALUES = 64


@dataclass
class Agreement(Estimate):
    """An agreement coefficient with what a reader needs beside the number.

    `n` keeps its `Estimate` meaning (what the coefficient is based on: pairable units, units
    with >= 2 ratings, pairs; each function says which); `n_units`, `n_raters`, `n_ratings`
    count what entered the computation. `excluded` maps a reason to a count (ratings, units or
    pairs, the key says which). `warnings` are sentences a report shows next to the number.
    `se` is the analytic standard error where one is published (else None); `ci_method` says
    how the CI was obtained; `n_boot`, `seed` and `cluster` describe a bootstrap CI. `level` is
    the level of measurement (Krippendorff's alpha), `weights` the weighting, `categories` the
    category set in order and `categories_from` where it came from.
    """

    se: float | None = None
    ci_method: str | None = None
    n_units: int = 0
    n_raters: int = 0
    n_ratings: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    level: str | None = None
    weights: str | None = None
    categories: list | None = None
    categories_from: str | None = None
    n_boot: int | None = None
    seed: int | None = None
    cluster: str | None = None


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def ratings_frame(df: pd.DataFrame, *, numeric: bool = False) -> pd.DataFrame:
    """Validate a tidy ratings table; return its rated rows (missing values dropped).

    Raises `ValueError` when `unit`, `rater` or `value` is absent, when a rater rated a unit
    twice, or (with `numeric=True`) when a value is not a number.
    """
    return validated_ratings(df, numeric=numeric)[0]


def validated_ratings(df: pd.DataFrame, *, numeric: bool = False
               ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`ratings_frame` plus the integer codes it computes anyway: (rated, unit codes, unit
    labels, rater codes, rater labels), codes in order of first appearance. Factorising a
    million keys costs 10 ms (integers) to 40 ms (text) each time, so it is done once; the
    table is not copied when no value is missing (nothing here writes into it)."""
    missing = [c for c in ("unit", "rater", "value") if c not in df.columns]
    if missing:
        raise ValueError(f"ratings table lacks column(s) {missing}; expected unit, rater, value")
    present = df["value"].notna().to_numpy()
    rated = df if present.all() else df[present]
    unit_codes, units = factorize_keys(rated["unit"])
    rater_codes, raters = factorize_keys(rated["rater"])
    duplicated = _duplicated_cells(unit_codes, len(units), rater_codes, len(raters))
    if duplicated is not None:
        first = rated.loc[duplicated, ["unit", "rater"]].iloc[0]
        raise ValueError(
            f"rater {first['rater']!r} rated unit {first['unit']!r} more than once; "
            "aggregate repeated judgments first"
        )
    if numeric:
        rated = rated.assign(value=pd.to_numeric(rated["value"], errors="raise").astype(float))
    return rated, unit_codes, np.asarray(units), rater_codes, np.asarray(raters)


def factorize_keys(keys: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """`pd.factorize(keys)`: (codes in order of first appearance, the distinct keys), with a
    path for integer keys in a compact range (database ids, codes) that needs no hash table:
    the first row of each key found with one scatter-min over the range, about 3x faster
    than hashing a million integers. The result is the same either way (the order of first
    appearance decides which cluster a bootstrap draws, so it must not change)."""
    values = keys.to_numpy()
    if values.dtype.kind not in "iu" or not values.size:
        return pd.factorize(keys)
    low = int(values.min())
    span = int(values.max()) - low + 1
    if span > 4 * values.size + 65_536:
        return pd.factorize(keys)
    offset = (values - low).astype(np.int64, copy=False)
    first = np.full(span, values.size, dtype=np.int64)
    np.minimum.at(first, offset, np.arange(values.size, dtype=np.int64))
    present = np.flatnonzero(first < values.size)
    by_appearance = present[np.argsort(first[present], kind="stable")]
    code_of = np.empty(span, dtype=np.int64)
    code_of[by_appearance] = np.arange(by_appearance.size)
    return code_of[offset], pd.Index((by_appearance + low).astype(values.dtype))


def _duplicated_cells(unit: np.ndarray, n_units: int, rater: np.ndarray, n_raters: int
                      ) -> np.ndarray | None:
    """Rows whose (unit, rater) cell occurs more than once (None when there are none).

    A bincount over the units x raters cells is the fastest check when the table is fairly
    full; a crowd design (7,150 raters x 1,000 units, one rating each) would allocate 7
    million cells for 7,150 ratings, and its units x raters grows like raters squared, so
    sparse tables hash the cell keys instead: time and memory follow the ratings."""
    keys = unit.astype(np.int64) * max(n_raters, 1) + rater
    cells = n_units * max(n_raters, 1)
    if cells <= 8 * keys.size + 65_536:
        repeated = np.bincount(keys, minlength=cells) > 1
        if not repeated.any():
            return None
        return repeated[keys]
    duplicated = pd.Series(keys).duplicated(keep=False).to_numpy()
    return duplicated if duplicated.any() else None


@dataclass
class CodedRatings:
    """A validated ratings table on integer codes: unit, rater and category per rating."""

    rated: pd.DataFrame
    unit: np.ndarray
    units: np.ndarray
    rater: np.ndarray
    raters: np.ndarray
    code: np.ndarray
    categories: list
    source: str
    excluded: dict[str, int]

    def counts(self) -> np.ndarray:
        """Units x categories rating counts (irrCAC's agree.mat), one bincount."""
        q = len(self.categories)
        flat = np.bincount(self.unit.astype(np.int64) * q + self.code,
                           minlength=len(self.units) * q)
        return flat.reshape(len(self.units), q).astype(float)


def coded_ratings(df: pd.DataFrame, labels: Sequence | None) -> CodedRatings:
    rated, unit, units, rater, raters = validated_ratings(df)
    code, categories, source = category_codes(rated["value"], labels)
    return CodedRatings(rated, unit, units, rater, raters, code, categories, source,
                        missing_counts(df))


def category_codes(values: pd.Series, labels: Sequence | None) -> tuple[np.ndarray, list, str]:
    """Category codes of `values` in the order of `category_order`, from one factorisation
    (the category set is decided on the distinct values, not on every rating)."""
    raw, uniques = factorize_keys(values)
    categories = category_order(list(uniques), labels)
    position = (pd.Index(categories).get_indexer(np.asarray(uniques, dtype=object))
                if len(uniques) else np.empty(0, dtype=np.intp))
    if (position < 0).any():
        raise ValueError("some values are not among the categories")
    return position[raw].astype(np.int64), categories, (
        "labels" if labels is not None else "observed values")


def category_order(values: Sequence | pd.Series, labels: Sequence | None = None) -> list:
    """The ordered list of categories: `labels` when given (validated), else sorted observed.

    `labels` must be unique and contain every observed value; categories listed but never
    observed are kept (they matter for Gwet's AC1, whose chance term depends on their number).
    """
    observed = list(pd.unique(pd.Series(values).dropna()))
    if labels is not None:
        order = list(labels)
        if len(set(order)) != len(order):
            raise ValueError(f"labels contain duplicates: {order}")
        unknown = [v for v in observed if v not in set(order)]
        if unknown:
            raise ValueError(f"values {unknown} are not among labels {order}")
        return order
    try:
        return sorted(observed)
    except TypeError:  # mixed types: any fixed order will do for nominal use
        return sorted(observed, key=repr)


def category_set(values: pd.Series, labels: Sequence | None) -> tuple[list, str]:
    """The category set and where it came from (the result must say)."""
    order = category_order(values, labels)
    return order, ("labels" if labels is not None else "observed values")


def is_numeric_values(values: pd.Series | Sequence) -> bool:
    """True for numbers (not booleans), also when held in an object column."""
    inferred = pd.Series(list(values))  # re-infer: Django values often arrive as objects
    return pd.api.types.is_numeric_dtype(inferred) and not pd.api.types.is_bool_dtype(inferred)


def codes_in(values: pd.Series | Sequence, categories: list) -> np.ndarray:
    """Integer positions of `values` in `categories` (all values must be present)."""
    codes = pd.Index(categories).get_indexer(pd.Series(values).to_numpy())
    if (codes < 0).any():
        raise ValueError("some values are not among the categories")
    return codes


def missing_counts(df: pd.DataFrame) -> dict[str, int]:
    dropped = int(df["value"].isna().sum()) if "value" in df.columns else 0
    return {"missing_values": dropped} if dropped else {}


def plain_scalar(value: object) -> object:
    """numpy scalars (from pandas) as plain Python values, for rendering and JSON."""
    return value.item() if isinstance(value, np.generic) else value


def mean_of_finite(values: Sequence[float | None]) -> float:
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def t_interval(
    value: float, se: float, n: int, conflev: float, bounds: tuple[float, float]
) -> tuple[float | None, float | None]:
    """value +- t(n-1) se, clipped to the coefficient's range (irrCAC's interval: Student t on
    n - 1 degrees of freedom; irrCAC caps the upper bound at 1, we clip both ends)."""
    if not (np.isfinite(value) and np.isfinite(se)) or n < 2:
        return None, None
    half = float(sps.t.ppf(1 - (1 - conflev) / 2, n - 1)) * se
    return max(bounds[0], value - half), min(bounds[1], value + half)
