"""The researcher's pages in Chromium: the judgment browser (filter, then download the filtered
set) and the preview of a draft study walked with the keyboard alone, both checked by axe-core
(no serious or critical violation) and photographed at 1366x768."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from annotation.models import Judgment
from annotation.services import judgment_submit
from evalstudy.models import Assignment, AssignmentSlot, Study
from evalstudy.services import assignment_next
from tests.browser.test_accessibility_browser import axe_violations
from tests.factories import UserFactory, invite, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
WIDTH, HEIGHT = 1366, 768


def _signed_in(new_page, client, live_server, user):
    client.force_login(user)
    page = new_page(width=WIDTH, height=HEIGHT)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])
    return page


def _assert_no_serious_violations(page, where: str) -> None:
    serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
    report = "\n".join(f"{v['id']} ({v['impact']}): {v['help']}\n    " + "\n    ".join(v["nodes"])
                       for v in serious)
    assert not serious, f"{where} ({page.url}):\n{report}"


def test_filter_the_judgments_then_download_them(live_server, new_page, shot, client):
    owner = UserFactory(username="browser-owner", is_staff=True)
    study = make_study(n_items=4, n_systems=2, ratings_per_output=2, attention_check_every=2,
                       status=Study.Status.OPEN, owner=owner)
    for name in ("Ann", "Bob"):
        rater = invite(study, external_id=f"R-{name}", display_name=name)
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            judgment_submit(rater=rater, slot_id=slot.pk, answers={"severity": "0",
                                                                   "usable": "yes"})
    page = _signed_in(new_page, client, live_server, owner)
    page.goto(f"{live_server.url}/studies/{study.slug}/judgments/")
    total = Judgment.objects.filter(slot__assignment__study=study).count()
    expect(page.locator("#results-title")).to_contain_text(f"{total} judgments")
    page.get_by_label("Criterion").select_option("usable")
    page.get_by_label("Kind").select_option("target")
    page.get_by_role("button", name="Filter").click()
    wanted = Judgment.objects.filter(slot__assignment__study=study, criterion__key="usable",
                                     slot__kind="target").count()
    expect(page.locator("#results-title")).to_contain_text(f"{wanted} judgments match")
    assert page.locator("table.judgments tbody tr").count() == wanted
    _assert_no_serious_violations(page, "judgment browser")
    shot(page, "30-judgments")
    with page.expect_download() as caught:
        page.locator("#download-csv").click()
    download = caught.value
    assert download.suggested_filename == f"{study.slug}-judgments-filtered.csv"
    text = Path(download.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == wanted and {r["criterion"] for r in rows} == {"usable"}
    # The item as the rater saw it, from the first row.
    page.get_by_role("link", name=re.compile("Item as seen")).first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("saw it")
    _assert_no_serious_violations(page, "item as seen")


def test_a_draft_is_previewed_with_the_keyboard_and_nothing_is_stored(live_server, new_page,
                                                                      shot, client):
    owner = UserFactory(username="preview-owner", is_staff=True)
    study = make_study(n_items=2, n_systems=2, attention_check_every=2, owner=owner,
                       instructions="Judge the meaning.")
    page = _signed_in(new_page, client, live_server, owner)
    page.goto(f"{live_server.url}/preview/{study.slug}/")
    _assert_no_serious_violations(page, "preview start")
    with page.expect_navigation():
        page.keyboard.press("Enter")  # the start button has the focus
    shot_taken = False
    for _ in range(10):
        if "End of the preview" in page.content():
            break
        if page.locator("#continue").count():  # practice feedback
            assert "Practice item: feedback" in page.content()
            _assert_no_serious_violations(page, "preview feedback")
            with page.expect_navigation():
                page.keyboard.press("Enter")
            continue
        expect(page.locator(".preview-banner")).to_contain_text("nothing is stored")
        check = "banana umbrella" in page.content()
        page.keyboard.press("2" if check else "0")
        if check:  # severity 2 shows the conditional note (optional)
            expect(page.locator('textarea[name="note"]')).to_be_visible()
        page.keyboard.press("n" if check else "y")
        if not shot_taken and "Practice item" not in page.content():
            _assert_no_serious_violations(page, "preview item")
            shot(page, "31-preview")
            shot_taken = True
        with page.expect_navigation():
            page.keyboard.press("Enter")
    assert "End of the preview" in page.content() and shot_taken
    _assert_no_serious_violations(page, "preview end")
    assert not Assignment.objects.filter(study=study).exists()
    assert not AssignmentSlot.objects.exists() and not Judgment.objects.exists()


def test_researcher_pages_fit_a_375px_screen(live_server, new_page, shot, client):
    """On a phone the researcher's pages wrap or scroll their tables inside the page: the page
    itself never scrolls sideways (its wide tables sit in scrollable regions)."""
    owner = UserFactory(username="phone-owner", is_staff=True)
    study = make_study(n_items=3, n_systems=2, ratings_per_output=2, attention_check_every=2,
                       status=Study.Status.OPEN, owner=owner)
    rater = invite(study, external_id="R-phone", display_name="Phone")
    while (slot := assignment_next(study=study, rater=rater)) is not None:
        judgment_submit(rater=rater, slot_id=slot.pk, answers={"severity": "1",
                                                               "usable": "yes"})
    page = _signed_in(new_page, client, live_server, owner)
    page.set_viewport_size({"width": 375, "height": 740})
    for name, path in (("monitor", f"/monitor/{study.slug}/"),
                       ("judgments", f"/studies/{study.slug}/judgments/"),
                       ("preview-start", f"/preview/{study.slug}/")):
        page.goto(live_server.url + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, name
        shot(page, f"40-375px-{name}")
    page.get_by_role("button", name=re.compile("Start")).click()
    expect(page.locator("#rate-form")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375, "preview item"
    shot(page, "40-375px-preview-item")
