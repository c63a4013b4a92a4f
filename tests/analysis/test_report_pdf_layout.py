"""The PDF a reader prints fits its page (issue 30): with many metrics the last column of
"Association with the human score" ran off the A4 page, and the ROC legend sat on the
curves. The report of a study with every headline metric and an LLM judge is rendered to PDF
by WeasyPrint, its text read back with poppler's `pdftotext -layout` (what is cut off the
page is not in it), and the ROC figure's legend is checked against its axes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.report import render_html, render_pdf
from analysis.stats.pipeline import analyse
from evalstudy.models import Study
from metrics.scorers import registry

N_OUTPUTS, N_RATERS = 40, 4
JUDGE = "meaning-judge-with-a-long-name"


def many_metrics_result() -> dict:
    """A Likert and a yes/no criterion rated by 4 people on 40 outputs, every headline
    metric of the registry and an LLM judge: the widest tables a report has."""
    rng = np.random.default_rng(30)
    quality = rng.normal(size=N_OUTPUTS)
    rows = []
    for output in range(N_OUTPUTS):
        base = {"output": output, "item": f"i{output // 2}", "system": f"s{output % 2}",
                "system_b": None, "seconds": 4.0}
        for rater in range(N_RATERS):
            rating = int(np.clip(np.round(3 + quality[output] + rng.normal(0, 0.6)), 1, 5))
            usable = "yes" if quality[output] + rng.normal(0, 0.7) > 0 else "no"
            human = {"rater": f"r{rater}", "rater_kind": "expert", "is_human": True}
            rows.append({**base, **human, "criterion": "fluency", "value": str(rating),
                         "numeric": float(rating)})
            rows.append({**base, **human, "criterion": "usable", "value": usable,
                         "numeric": None})
        p_yes = float(1 / (1 + np.exp(-2 * quality[output] + rng.normal(0, 0.5))))
        rows.append({**base, "rater": JUDGE, "rater_kind": "llm", "is_human": False,
                     "criterion": "usable", "value": "yes" if p_yes >= 0.5 else "no",
                     "numeric": p_yes})
    metrics = pd.DataFrame({"output": range(N_OUTPUTS),
                            "item": [f"i{o // 2}" for o in range(N_OUTPUTS)],
                            "system": [f"s{o % 2}" for o in range(N_OUTPUTS)]})
    for index, name in enumerate(registry.headline_values()):
        sign = 1 if registry.higher_is_better(name) else -1
        noisy = sign * quality * (0.2 + 0.05 * index) + rng.normal(0, 0.3, N_OUTPUTS)
        metrics[name] = np.clip(0.5 + noisy, 0, None)  # rates and scores are never negative
    criteria = [{"key": "fluency", "kind": "likert", "scale_points": 5},
                {"key": "usable", "kind": "binary"}]
    return analyse(pd.DataFrame(rows), criteria, metrics, {"engine": "statsmodels"})


def render_pages(result: dict, out: Path) -> Path:
    """The report's PDF, written with one PNG per page (60 dpi) beside it for a reader."""
    out.mkdir(parents=True, exist_ok=True)
    study = Study(slug="many-metrics", title="Many metrics")
    pdf = out / "many-metrics.pdf"
    pdf.write_bytes(render_pdf(render_html(study=study, result=result, options={},
                                           filters=[])))
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(out / "many-metrics")],
                   check=True)
    return pdf


def pdf_text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def result() -> dict:
    return many_metrics_result()


@pytest.mark.skipif(not shutil.which("pdftotext"), reason="poppler-utils is not installed")
def test_the_association_table_keeps_its_last_column_on_the_pdf_page(result, tmp_path):
    # pdftotext leaves out what lies off the page: before, the header read "Ordinal model: pe"
    # and every upper bound of that column was missing.
    text = pdf_text(render_pages(result, tmp_path)).replace("\u00a0", " ").replace("\u2060", "")
    graded = next(v for v in result["validity"] if v["criterion"] == "fluency")
    ordinal = [p["ordinal"] for p in graded["proxies"]
               if isinstance(p.get("ordinal"), dict) and p["ordinal"].get("estimate")]
    assert len(ordinal) == len(registry.headline_values())
    # The header may wrap inside its cell, so its two lines are looked for apart.
    assert "Ordinal model: per" in text and "SD (95% CI)" in text
    for fit in ordinal:  # every row's last cell: the estimate and its whole CI
        low, high = fit["ci"]
        assert f"{fit['estimate']:.3f}" in text, fit
        assert f"({low:.3f} – {high:.3f})" in text, fit


def test_the_roc_legend_is_outside_the_curves(result):
    from analysis.report import plots

    usable = next(v for v in result["validity"] if v["criterion"] == "usable")
    figure = plots.roc_figure(usable)
    try:
        axes = figure.axes[0]
        legend = axes.get_legend()
        assert legend is not None and len(legend.get_texts()) >= len(
            registry.headline_values())
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        box, area = legend.get_window_extent(renderer), axes.get_window_extent(renderer)
        assert not box.overlaps(area), (box, area)
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)
