"""The Content Security Policy in a real browser: researcher and rater pages load and run their
scripts (htmx polling, the rating form's keyboard handling, the admin's widgets) without a
single policy violation."""

import pytest

from analysis.models import AnalysisRun
from evalstudy.models import Study
from tests.factories import UserFactory, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _watch(page):
    """Collect the browser's CSP violation reports (Chromium logs each one to the console)."""
    violations = []
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    return violations


def _sign_in(page, base, username, password):
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def test_researcher_pages_run_under_the_policy(live_server, new_page):
    UserFactory(username="boss", password="pw-for-tests-1", is_staff=True, is_superuser=True)
    study = make_study(status=Study.Status.OPEN)
    run = AnalysisRun.objects.create(
        study=study, status="done", report_html="<html><head><style>h1{color:#123}</style>"
        "</head><body><h1>Report</h1><img alt='p' src='data:image/png;base64,iVBORw0KGgo='>"
        "</body></html>")
    page = new_page()
    violations = _watch(page)
    base = live_server.url
    _sign_in(page, base, "boss", "pw-for-tests-1")
    page.goto(f"{base}/admin/evalstudy/study/{study.pk}/change/")
    page.click("text=Add another System")  # the admin's inline JavaScript works
    assert page.locator("#systems-group tr.dynamic-systems").count() >= 1
    with page.expect_request(lambda r: "/live/" in r.url, timeout=15_000):
        page.goto(f"{base}/monitor/{study.slug}/")  # htmx polls the live fragment
    with page.expect_request(lambda r: "/metrics/runs/" in r.url, timeout=15_000):
        page.goto(f"{base}/studies/{study.slug}/metrics/")
    page.goto(f"{base}/analysis/{run.pk}/report/")
    color = page.eval_on_selector("h1", "h => getComputedStyle(h).color")
    assert color == "rgb(17, 34, 51)"  # the report's own <style> applies
    assert violations == []


def test_rater_pages_run_under_the_policy(live_server, new_page):
    study = make_study(status=Study.Status.OPEN, consent_text="I agree.")
    page = new_page()
    violations = _watch(page)
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID=5f1e2d3c4b5a69788796a001&SESSION_ID=s1")
    page.click("button[name=consent][value=yes]")
    page.wait_for_selector("#rate-form")
    page.keyboard.press("0")  # rate.js: number keys pick answers
    assert violations == []


def test_api_docs_render_under_the_policy(live_server, new_page):
    """Swagger UI (from the sidecar package) lists the operations with no violation."""
    page = new_page()
    violations = _watch(page)
    page.goto(f"{live_server.url}/api/v1/docs/")
    page.wait_for_selector(".opblock", timeout=20_000)
    assert page.locator(".opblock").count() > 40
    assert page.locator("text=/api/v1/proxy-runs/{id}/").count() >= 1
    assert violations == []
