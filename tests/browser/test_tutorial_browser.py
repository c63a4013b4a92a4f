"""The tutorial (docs/tutorial.md) is a test: Chromium follows its twelve steps literally, as the
demo researcher, against the live server and a real Celery worker (the metric run and the
analysis are the worker's), and fails when the page and the product drift apart: a bold label
the page names that is not on the screen at its step, a label the steps use that the page does
not name, a step renamed on one side only (tests/browser/tutorial_steps.py says how).

Screenshots: `TUTORIAL_SCREENSHOTS=1` writes each step's image to docs/img/tutorial/ (the
tracked files the page shows); without it nothing tracked is written."""

from __future__ import annotations

import os
import uuid

import pytest

from analysis.models import AnalysisRun
from annotation.models import Judgment
from evalstudy.management.commands.demo_setup import RESEARCHER, demo_researcher
from evalstudy.models import Assignment, AttentionCheck, CalibrationItem, Criterion, Study
from metrics.models import MetricResult
from tests.browser import tutorial_steps
from tests.browser.conftest import ARTIFACTS
from tests.browser.tutorial_steps import (
    HEIGHT,
    IMAGES,
    SLUG,
    WIDTH,
    Drift,
    Tutor,
    follow,
    steps_in_order,
)
from tests.browser.tutorial_steps import tutorial_steps as read_steps
from tests.workers import running_worker


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_tutorial_runs_as_written(live_server, new_page):
    assert tutorial_steps.RESEARCHER == RESEARCHER, "the page's login is make run's"
    demo_researcher()
    screenshots = IMAGES if os.environ.get("TUTORIAL_SCREENSHOTS") == "1" else None
    # The worker starts while the first steps run (its start takes seconds).
    with running_worker(["default", "cpu", "gpu"], name=f"tutorial-{uuid.uuid4().hex[:6]}"):
        tutor = Tutor(page=new_page(width=WIDTH, height=HEIGHT), base_url=live_server.url,
                      open_window=lambda: new_page(width=WIDTH, height=HEIGHT),
                      screenshots=screenshots)
        done = []
        try:
            for step, seconds in follow(tutor):
                done.append(step.number)
                print(f"step {step.heading}: {seconds:.1f} s")  # shown when the test fails
        finally:
            if len(done) < 12:  # the page where it stopped, to see why
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                tutor.page.screenshot(path=str(ARTIFACTS / "tutorial-stopped.png"),
                                      full_page=True)
    assert done == list(range(1, 13))
    # What the steps did, as the database has it.
    study = Study.objects.get(slug=SLUG)
    assert study.status == Study.Status.OPEN and study.design == "latin_square"
    assert list(study.systems.order_by("name").values_list("name", flat=True)) == [
        "asr-a", "asr-b"]
    assert study.items.count() == 4
    assert dict(Criterion.objects.filter(study=study).values_list("key", "kind")) == {
        "meaning": "likert", "usable": "binary"}
    assert CalibrationItem.objects.get(study=study).expected == {"meaning": 5, "usable": "yes"}
    assert AttentionCheck.objects.get(study=study).expected == {"usable": "no"}
    seats = Assignment.objects.filter(study=study)
    # Two personal-link raters added on the invite page, one seat each.
    assert seats.count() == 2 and len({seat.rater_id for seat in seats}) == 2
    assert {seat.rater.origin for seat in seats} == {"invited"}
    # Two raters x (4 items + 1 practice item + 1 attention check) x 2 criteria.
    assert Judgment.objects.filter(slot__assignment__study=study).count() == 24
    assert MetricResult.objects.filter(output__item__study=study).count() == 16  # wer, cer
    assert AnalysisRun.objects.get(study=study).status == "done"
    for step, _ in steps_in_order():
        assert (IMAGES / os.path.basename(step.image)).exists(), (
            f"{step.image} is not committed: run with TUTORIAL_SCREENSHOTS=1")


PAGE = """# T

## 1. Sign in

Type `researcher` as **Username**, click **Log in**.

![x](img/tutorial/01-sign-in.png)

## Next steps

**Not a step**
"""


def test_the_page_is_read_as_steps_with_their_labels_and_values():
    (step,) = read_steps(PAGE)
    assert (step.number, step.title, step.image) == (1, "Sign in", "img/tutorial/01-sign-in.png")
    assert step.labels == ["Username", "Log in"] and step.typed == {"researcher"}


def test_a_label_or_value_the_page_does_not_give_is_drift(new_page):
    (step,) = read_steps(PAGE)
    tutor = Tutor(page=new_page(), base_url="", open_window=new_page, step=step)
    assert tutor.name("Log in") == "Log in" and tutor.given("researcher") == "researcher"
    with pytest.raises(Drift, match="does not name in bold"):
        tutor.name("Sign in")
    with pytest.raises(Drift, match="does not give there as `code`"):
        tutor.given("secret")
    tutor = Tutor(page=tutor.page, base_url="", open_window=new_page, step=step)
    tutor.page.set_content("<main><label>Username <input></label></main>")
    with pytest.raises(Drift, match=r"names \['Log in'\] in bold, but the step never met"):
        tutor.finish()  # "Username" is on the page (met); "Log in" is not


def test_steps_renamed_on_one_side_only_are_drift():
    page = tutorial_steps.TUTORIAL.read_text(encoding="utf-8")
    assert len(steps_in_order(read_steps(page))) == 12
    renamed = page.replace("## 5. Choose a Latin square", "## 5. Choose a design")
    with pytest.raises(Drift, match="are not the steps the code follows"):
        steps_in_order(read_steps(renamed))
    no_image = page.replace("(img/tutorial/05-design.png)", "(img/design.png)")
    with pytest.raises(Drift, match="must show its screenshot img/tutorial/05-"):
        steps_in_order(read_steps(no_image))
