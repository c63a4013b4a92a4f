"""The monitor's rater table in Chromium at 1366x768: every quality column fits without a
horizontal scrollbar, and a rater action (Include, a CSRF-protected htmx POST)
refreshes the table at once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from annotation.rater_actions import rater_exclude
from evalstudy.models import Enrollment, Study
from tests.annotation.test_quality_control import _rate_all, _truth
from tests.factories import UserFactory, invite, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_rater_table_fits_1366px_and_include_refreshes_it(live_server, new_page, shot,
                                                               client):
    owner = UserFactory(username="monitor-owner", is_staff=True)
    study = make_study(n_items=6, n_systems=2, design="crossed", ratings_per_output=4,
                       status=Study.Status.OPEN, owner=owner, attention_check_every=4)
    start = timezone.now() - dt.timedelta(hours=1)
    for k in range(2):
        _rate_all(study, invite(study, external_id=f"careful-rater-{k}",
                                display_name=f"Careful rater number {k}"),
                  seconds=12, start=start, answer=lambda slot: _truth(slot.output_id))
    speeder = invite(study, external_id="speeder", display_name="Speedy participant")
    _rate_all(study, speeder, seconds=1, start=start,
              answer=lambda slot: {"severity": "2", "usable": "yes"})
    liner = invite(study, external_id="liner", display_name="Straight-lining participant")
    _rate_all(study, liner, seconds=12, start=start,
              answer=lambda slot: {"severity": "1", "usable": "no"})
    rater_exclude(study=study, rater_id=speeder.pk, reason="1 s per item", actor=owner,
                  source="web")
    client.force_login(owner)
    page = new_page(width=1366, height=768)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])
    page.goto(f"{live_server.url}/monitor/{study.slug}/")
    table = page.locator("table.raters")
    expect(table).to_be_visible()
    expect(table.get_by_label("Speeder").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    wrap = page.locator("table.raters").locator("xpath=..")
    assert wrap.evaluate("e => e.scrollWidth <= e.clientWidth"), "the rater table scrolls"
    shot(page, "quality-monitor-1366")
    page.get_by_role("button", name="Include Speedy participant in the analysis again").click()
    expect(page.get_by_role("button", name="Exclude Speedy participant from the analysis")
           ).to_be_visible(timeout=4000)  # before the 5 s poll: the action's own refresh
    expect(page.get_by_role("status")).to_contain_text("included in the analysis again")
    assert Enrollment.objects.get(rater=speeder).excluded_at is None
