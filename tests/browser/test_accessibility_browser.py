"""Every page a rater meets, checked by axe-core (the automated WCAG 2.1 A and AA rules) in
Chromium: consent, instructions, a practice item and its feedback, items with every answer
kind, an item swapped in by htmx, an item with errors, the end page, the stopped page, on a
desktop and a 375 px screen. axe finds about half of what a person would; the rest (reading
order, what a screen reader announces) no test checks (README, "Accessibility")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.test_rater_browser import (
    PID,
    _answer_item_with_mouse,
    _submit,
    every_kind_study,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.14.1" / "axe.min.js"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def axe_violations(page, within: str | None = None) -> list[dict]:
    """axe-core's WCAG 2.1 A/AA violations on the page as it is now, or only in the elements
    matching the CSS selector `within` (our additions to a page we do not own, e.g. the
    admin's). The script is evaluated through the browser's debugging protocol: the page's
    Content Security Policy stays on."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    return page.evaluate("""async ([tags, within]) => {
        const context = within ? {include: [within]} : document;
        const result = await axe.run(context, {runOnly: {type: "tag", values: tags}});
        return result.violations.map((v) => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map((n) => n.target.join(" ") + ": " + n.failureSummary),
        }));
    }""", [WCAG, within])


def assert_accessible(page, where: str, within: str | None = None) -> None:
    violations = axe_violations(page, within)
    report = "\n".join(f"{v['id']} ({v['impact']}): {v['help']}\n    " + "\n    ".join(v["nodes"])
                       for v in violations)
    assert not violations, f"{where} ({page.url}):\n{report}"


def test_the_checker_finds_what_it_should(live_server, new_page):
    """The check can fail: an unlabelled input and an empty button are reported."""
    page = new_page()
    page.goto(f"{live_server.url}/healthz")
    page.set_content('<html lang="en"><title>t</title><main><input type="text">'
                     '<button></button></main></html>')
    found = {v["id"] for v in axe_violations(page)}
    assert {"label", "button-name"} <= found


@pytest.mark.parametrize("width", [1100, 375])
def test_every_rater_page_passes_axe(live_server, new_page, width):
    study = every_kind_study()
    page = new_page(width=width, height=900)
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    assert_accessible(page, "consent")
    page.get_by_role("button", name="I agree and want to take part").click()
    assert_accessible(page, "instructions")
    page.get_by_role("button", name=re.compile("Start")).click()
    assert_accessible(page, "practice item")
    _answer_item_with_mouse(page, attention=False)
    assert_accessible(page, "practice feedback")
    page.get_by_role("link", name=re.compile("Continue")).click()
    assert_accessible(page, "first item, loaded as a page")
    # An item with errors: the conditional note is required and left empty.
    page.locator('input[name="severity"][value="2"]').check()
    expect(page.locator('textarea[name="note"]')).to_be_visible()
    page.get_by_role("button", name=re.compile("Submit")).click()
    expect(page.locator(".error").first).to_be_visible()
    assert_accessible(page, "item with errors")
    page.locator('textarea[name="note"]').fill("meaning changed")
    for _ in range(12):
        if page.locator("#rate-form").count() == 0:
            break
        attention = "purple elephant" in page.content()
        _answer_item_with_mouse(page, attention=attention)
        if page.locator("#rate-form").count():
            assert_accessible(page, "an item swapped in by htmx")
    expect(page.locator("#completion-code")).to_have_text("BRW0K42")
    assert_accessible(page, "end page")


def test_the_stopped_page_a_closed_study_and_the_sign_in_pass_axe(live_server, new_page):
    study = every_kind_study(consent_text="", instructions="", attention_fail_limit=1,
                             attention_check_every=1)
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    for _ in range(6):
        if page.locator("#rate-form").count() == 0:
            if "/feedback/" in page.url:
                page.get_by_role("link", name=re.compile("Continue")).click()
                continue
            break
        if "purple elephant" in page.content():
            # The wrong answer to an attention check: the rater is stopped.
            page.locator('input[name="severity"][value="0"]').check()
            page.locator('input[name="usable"][value="yes"]').check()
            page.locator('input[name="fluency"][value="4"]').check()
            page.locator('input[name="error_type"][value="word"]').check()
            _submit(page, page.get_by_role("button", name=re.compile("Submit")).click)
            continue
        _answer_item_with_mouse(page, attention=False)
    expect(page.get_by_text(study.screen_out_code)).to_be_visible()
    assert_accessible(page, "stopped page")

    other = new_page()
    other.goto(f"{live_server.url}/c/{study.slug}/")  # no participant id: the app's message
    expect(other.get_by_role("alert")).to_contain_text("valid participant id")
    assert_accessible(other, "a refusal (the message page)")
    other.goto(f"{live_server.url}/c/no-such-study/?PROLIFIC_PID={PID}")
    expect(other.get_by_role("heading", name="Page not found")).to_be_visible()
    assert_accessible(other, "a study that does not exist (the 404 page)")
    other.goto(f"{live_server.url}/accounts/login/")
    assert_accessible(other, "sign-in page")


def test_a_translated_rater_page_passes_axe(live_server, new_page):
    study = every_kind_study(language="es", consent_text="", instructions="",
                             alignment_shown=True)
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    expect(page.locator("html")).to_have_attribute("lang", "es")
    expect(page.get_by_role("button", name=re.compile("Enviar"))).to_be_visible()
    assert_accessible(page, "a practice item in Spanish")
