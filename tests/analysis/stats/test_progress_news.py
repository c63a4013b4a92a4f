"""Progress moves inside a step: each section of a criterion and each iteration of the
in-process CLMM are news (advance=False: the step text and heartbeat move, the count of steps
does not), while a plain `progress(step)` callback still hears only the steps."""

from __future__ import annotations

import pytest

from analysis.stats import rbridge
from analysis.stats.models import ordinal
from analysis.stats.pipeline import analyse

pytestmark = pytest.mark.skipif(not rbridge.r_available(),
                                reason=f"R unavailable: {rbridge.r_unavailable_reason()}")


def _likert_study():
    from bench import analysis as bench

    judgments = bench.simulate(20, 40, 5, bench.SEED)
    return judgments[judgments["criterion"] == "fluency"], [bench.CRITERIA[1]]


def test_sections_and_clmm_iterations_are_news_within_the_step(monkeypatch):
    monkeypatch.setattr(ordinal, "LAPLACE_FROM_ROWS", 1)  # the in-process CLMM at any size
    judgments, criteria = _likert_study()
    heard: list[tuple[str, bool]] = []

    def progress(step: str, *, advance: bool = True) -> None:
        heard.append((step, advance))

    result = analyse(judgments, criteria, progress=progress)
    assert "Laplace" in result["criteria"][0]["clmm"]["engine"]
    steps = [step for step, advance in heard if advance]
    news = [step for step, advance in heard if not advance]
    assert steps[0] == "criterion fluency"
    assert "criterion fluency: clmm" in news and "criterion fluency: agreement" in news
    assert "criterion fluency: CLMM, iteration 1" in news
    # The news come inside the criterion's step, before the next step starts.
    assert heard.index(("criterion fluency: clmm", False)) < heard.index((steps[1], True))


def test_a_plain_progress_callback_hears_only_the_steps():
    judgments, criteria = _likert_study()
    heard: list[str] = []
    analyse(judgments, criteria, progress=heard.append)
    assert heard[0] == "criterion fluency"
    assert not any(":" in step and "fluency:" in step for step in heard)
