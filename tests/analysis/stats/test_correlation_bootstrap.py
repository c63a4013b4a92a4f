"""The bootstrap replicates of `correlations` are computed for many resamples at once; each
must equal scipy's own coefficient on that resample (ties included), for the vectorised
Kendall sign matrices and for the per-resample route above `_KENDALL_VECTOR_N`."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.stats import validity


@pytest.mark.parametrize("n", [5, 40, validity._KENDALL_VECTOR_N + 30])
def test_each_replicate_equals_scipy_on_its_resample(n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 5, n).astype(float)  # Likert-like: many ties
    y = np.round(x + rng.normal(0, 1.5, n))
    draws = rng.integers(0, n, size=(60, n))
    xr, yr = x[draws], y[draws]
    for name, func in validity._CORRELATIONS.items():
        ours = validity._bootstrap_statistics(name, xr, yr, func)
        for b in range(len(draws)):
            if np.ptp(xr[b]) == 0 or np.ptp(yr[b]) == 0:
                continue
            assert ours[b] == pytest.approx(func(xr[b], yr[b]).statistic, abs=1e-12), name


def test_correlations_ci_is_the_percentile_of_the_scipy_replicates():
    rng = np.random.default_rng(3)
    x = rng.normal(size=25)
    y = x + rng.normal(size=25)
    out = validity.correlations(x, y, n_boot=200, seed=4)
    draws = np.random.default_rng(4).integers(0, 25, size=(200, 25))
    for name, func in validity._CORRELATIONS.items():
        reference = np.array([func(x[d], y[d]).statistic for d in draws])
        low, high = np.quantile(reference, [0.025, 0.975])
        assert out[name].ci_low == pytest.approx(low, abs=1e-12)
        assert out[name].ci_high == pytest.approx(high, abs=1e-12)
        assert out[name].value == pytest.approx(func(x, y).statistic)
