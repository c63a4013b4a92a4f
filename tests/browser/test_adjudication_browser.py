"""The adjudication flow in Chromium: the researcher opens the queue, filters it, opens a unit,
sees the item, the outputs and every answer, records a label (a bad one first: the error is
shown, nothing stored), and finds the unit gone from the open queue and marked done; no serious
axe-core violation on either page. Screenshots at 1366x768."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from analysis.models import Adjudication
from annotation.models import Judgment
from tests.analysis.adjudication_data import disagreement_study, output_of
from tests.browser.test_researcher_browser import _assert_no_serious_violations, _signed_in
from tests.factories import UserFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_open_the_queue_adjudicate_a_unit_and_see_it_done(live_server, new_page, shot, client):
    owner = UserFactory(username="adjudicating-owner", is_staff=True)
    study = disagreement_study(owner=owner)
    judgments = sorted(Judgment.objects.values_list("id", "value", "revision"))
    page = _signed_in(new_page, client, live_server, owner)
    page.goto(f"{live_server.url}/studies/{study.slug}/judgments/")
    page.get_by_role("link", name="Adjudication queue").first.click()
    expect(page.locator("#queue-title")).to_contain_text("4 units to adjudicate")
    _assert_no_serious_violations(page, "the adjudication queue")
    shot(page, "adjudication-queue")

    page.get_by_label("Reason").select_option("proxy")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#queue-title")).to_contain_text("1 unit to adjudicate")
    row = page.locator("table.adjudication-queue tbody tr")
    expect(row).to_contain_text("judge decided otherwise than the raters' majority")
    row.get_by_role("link", name="Adjudicate").click()

    output = output_of(study, "i2", "sys-a")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Adjudicate usable on item i2")
    expect(page.locator(".text.reference")).to_contain_text("reference 2")
    expect(page.locator(".text.output")).to_contain_text(output.text)
    expect(page.locator("table.answers").first.locator("tbody tr")).to_have_count(3)
    expect(page.locator("table.proxies")).to_contain_text("judge")
    expect(page.locator("#why-title + ul")).to_contain_text(
        "judge decided otherwise than the raters' majority (yes, 3 raters)")
    _assert_no_serious_violations(page, "an adjudication unit")
    shot(page, "adjudication-unit")

    # Nothing chosen: refused, the error shown, nothing stored.
    page.get_by_label("Note (why this label)").fill("the judge is right: it is unusable")
    page.get_by_role("button", name="Record the label").click()
    expect(page.locator("#adjudicate-form [role=alert]")).to_contain_text(
        "value: a value is required")
    assert not Adjudication.objects.exists()
    shot(page, "adjudication-refused")

    page.get_by_label("no", exact=True).check()
    page.get_by_role("button", name="Record the label").click()
    expect(page.locator(".messages")).to_contain_text("Label recorded for usable on item i2")
    expect(page.locator("#queue-title")).to_contain_text("3 units to adjudicate")
    expect(page.locator(f"#unit-usable-{output.pk}")).to_have_count(0)
    shot(page, "adjudication-after")

    page.get_by_label("State").select_option("done")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#queue-title")).to_contain_text("1 unit adjudicated")
    expect(page.locator(f"#unit-usable-{output.pk}")).to_contain_text("no")
    shot(page, "adjudication-done")
    label = Adjudication.objects.get()
    assert (label.value, label.note, label.adjudicated_by) == (
        "no", "the judge is right: it is unusable", owner)
    assert sorted(Judgment.objects.values_list("id", "value", "revision")) == judgments
