"""bench/analysis.py ends with its three target lines, each ratio measured against a
reference in the same run, and reports equal alphas as equal (to 1e-12, not with `==`).
A tiny run: figures are not checked, only what the bench says and in which form."""

from __future__ import annotations

import re

import pytest

from analysis.stats import rbridge

pytestmark = pytest.mark.skipif(not rbridge.r_available(),
                                reason=f"R unavailable: {rbridge.r_unavailable_reason()}")

TARGETS = [
    r"target large_analysis_vs_60s: ratio (\d+\.\d{3}|nan) \(goal <= 1\.0\)",
    r"target glmm_vs_r: ratio (\d+\.\d{3}) \(goal <= 1\.1\)",
    r"target crowd_analysis_vs_60s: ratio (\d+\.\d{3}) \(goal <= 1\.0\)",
    r"target alpha_vs_pivot_package: ratio (\d+\.\d{3}|nan) \(goal <= 0\.5\)",
]


def test_tiny_run_ends_with_the_three_targets(capsys):
    from bench import analysis as bench

    bench.main(["--skip-pipeline", "--glmm-sizes", "400,600", "--glmm-raters", "20",
                "--crowd-raters", "300", "--crowd-items", "40", "--alpha-judgments", "3000",
                "--alpha-raters", "40", "--alpha-units", "100", "--repeat", "1",
                "--glmm-repeat", "1"])
    lines = capsys.readouterr().out.strip().splitlines()
    for line, pattern in zip(lines[-4:], TARGETS, strict=True):
        assert re.fullmatch(pattern, line), line
    text = "\n".join(lines)
    assert "load average" in text  # the machine's load beside the figures
    assert "rater pairs share >= 5 units" in text and "'pairs_sharing_too_few_units': 44850" \
        in text
    assert re.search(r"\n\s+400 .* 0\.0e\+00\n", text)  # the bridge's estimates equal R's
    if "krippendorff (GPL, dev-only) not installed" not in text:
        assert re.search(r"values: .* agree to 1e-12", text)
        assert "DIFFERENT" not in text
