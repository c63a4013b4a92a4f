"""Every page a rater or a researcher meets, checked by axe-core (the automated WCAG 2.1 A and
AA rules) in Chromium on a 1366 px desktop and a 375 px phone. The rater's: consent,
instructions, a practice item and its feedback, the rating page of every answer kind (an
untouched and a moved slider among them), an item swapped in by htmx, an item with errors, the
end page, the stopped page. The researcher's: the admin's home (the studies dashboard), the
study list and study page, the items grid, the invite page, the monitor, the judgment browser
and an item as its rater saw it, the analysis page and a report, the metrics page (a run done,
one queued) and a metric run, a proxy run, the blindness audit, the adjudication queue and the
preview. axe finds about half of what a person would; the rest (reading order, what a screen
reader announces) no test checks (docs/guide/raters.md, "Accessibility")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from annotation.models import Judgment
from annotation.services import judgment_submit
from evalstudy.models import Criterion, Study
from evalstudy.services import assignment_next
from tests.browser.test_rater_browser import (
    PID,
    _answer_item_with_mouse,
    _submit,
    every_kind_study,
)
from tests.factories import UserFactory, invite, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.14.1" / "axe.min.js"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
WIDTHS = [1366, 375]  # a common laptop, a small phone


def axe_violations(page, within: str | None = None) -> list[dict]:
    """axe-core's WCAG 2.1 A/AA violations on the page as it is now, or only in the elements
    matching the CSS selector `within` (our additions to a page we do not own, e.g. the
    admin's). The script is evaluated through the browser's debugging protocol: the page's
    Content Security Policy stays on."""
    page.wait_for_load_state()  # a page still arriving has no document for axe to read
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


@pytest.mark.parametrize("width", WIDTHS)
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
    # A link that loads a new page: axe reads the page once it has arrived, not the one leaving.
    with page.expect_navigation():
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


def _kind_study(slug: str, design: str, n_systems: int, criteria: list[dict]) -> Study:
    """An open study of two items asking `criteria` (Criterion fields), straight to the items."""
    from evalstudy.models import Item, Output, System
    from evalstudy.services import study_open

    study = Study.objects.create(slug=slug, title=f"Kinds: {slug}", design=design,
                                 ratings_per_output=1, crowd_platform="prolific",
                                 crowd_no_codes=True)
    systems = [System.objects.create(study=study, name=f"secret-{k}") for k in range(n_systems)]
    for index in range(2):
        item = Item.objects.create(study=study, external_id=f"q{index}",
                                   reference=f"the reference {index}")
        for k, system in enumerate(systems):
            Output.objects.create(item=item, system=system, text=f"output {index} of {k}")
    for order, fields in enumerate(criteria):
        Criterion.objects.create(study=study, order=order, **fields)
    return study_open(study=study)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_rating_page_of_every_answer_kind_passes_axe(live_server, new_page, width):
    """The kinds the walk above does not meet (it has severity, yes/no, Likert, categorical and
    free text): error spans, a slider (untouched, then moved) and a count; a pairwise choice; a
    ranking; best and worst."""
    studies = [
        _kind_study("kinds-measures", "latin_square", 2, [
            {"key": "errors", "kind": "span", "prompt": "Mark each error",
             "options": ["Accuracy", "Fluency"]},
            {"key": "quality", "kind": "slider", "prompt": "Overall quality?",
             "labels": {"0": "nonsense", "100": "perfect"}},
            {"key": "slips", "kind": "count", "prompt": "How many words are wrong?"}]),
        _kind_study("kinds-pairwise", "pairwise", 2, [
            {"key": "preference", "kind": "pairwise", "prompt": "Which is better?"}]),
        _kind_study("kinds-ranking", "ranking", 3, [
            {"key": "order", "kind": "ranking", "prompt": "Rank the outputs"}]),
        _kind_study("kinds-best-worst", "best_worst", 4, [
            {"key": "extremes", "kind": "best_worst", "prompt": "Best and worst?"}]),
    ]
    for study in studies:
        page = new_page(width=width, height=900)
        page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
        expect(page.locator("#rate-form")).to_be_visible()
        assert_accessible(page, f"the rating page of {study.slug}")
        slider = page.locator('input[type="range"]')
        if slider.count():
            expect(slider).to_have_attribute("data-untouched", "")
            slider.focus()
            page.keyboard.press("ArrowRight")
            expect(slider).not_to_have_attribute("data-untouched", "")
            assert_accessible(page, "a moved slider")


def _serious(page, where: str) -> list[str]:
    """The serious and critical violations on the page, as lines of a report."""
    page.wait_for_load_state()
    return [f"{where} ({page.url}): {v['id']} ({v['impact']}): {v['help']}\n    "
            + "\n    ".join(v["nodes"])
            for v in axe_violations(page) if v["impact"] in ("serious", "critical")]


def _researcher_study(owner) -> tuple[Study, dict[str, int]]:
    """An open study two raters have finished, with a metric run and an analysis done and
    another of each queued, and a proxy run (its judge never called): every researcher page has
    something to show."""
    from analysis.services import analysis_run_execute, analysis_run_start
    from metrics.services import metric_batch_score, metric_run_dispatch, metric_run_start
    from proxies.runs import proxy_run_start

    study = make_study(n_items=3, n_systems=2, ratings_per_output=2, attention_check_every=2,
                       status=Study.Status.OPEN, owner=owner)
    for name in ("Ann", "Bob"):
        rater = invite(study, external_id=f"R-{name}", display_name=name)
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            severity = "0" if name == "Ann" else "1"
            judgment_submit(rater=rater, slot_id=slot.pk,
                            answers={"severity": severity, "usable": "yes"})
    metric_run = metric_run_start(study=study, metrics=["wer"], enqueue=False)
    batches = []
    metric_run_dispatch(metric_run, send=lambda kind, ids, names: batches.append((ids, names)))
    for output_ids, names in batches:
        metric_batch_score(run_id=metric_run.pk, output_ids=output_ids, metrics=names)
    analysis = analysis_run_execute(analysis_run_start(
        study=study, options={"engine": "statsmodels", "pdf": False}, enqueue=False))
    # Runs still queued, as a Start button leaves them until a worker takes them: their pages
    # show the queued state and a disabled Start.
    metric_run_start(study=study, metrics=["wer"], enqueue=False)
    analysis_run_start(study=study, options={"engine": "statsmodels", "pdf": False},
                       enqueue=False)
    proxy = proxy_run_start(study=study, method="latte", criteria=["usable"],
                            backend={"base_url": "http://127.0.0.1:9/v1", "model": "judge"},
                            enqueue=False)
    judgment = Judgment.objects.filter(slot__assignment__study=study).first()
    return study, {"metric_run": metric_run.pk, "analysis": analysis.pk, "proxy": proxy.pk,
                   "judgment": judgment.pk}


def test_every_researcher_page_passes_axe(live_server, new_page, client, settings):
    """No serious or critical violation on any researcher page, the admin's own among them, at
    both widths (the study is built once: an analysis takes a while)."""
    settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the proxy run's judge URL
    owner = UserFactory(username="axe-owner", is_staff=True, is_superuser=True)
    study, ids = _researcher_study(owner)
    client.force_login(owner)
    page = new_page(width=WIDTHS[0], height=900)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])
    admin = f"/admin/evalstudy/study/{study.pk}"
    pages = [
        ("the admin's home", "/admin/"),
        ("the study list", "/admin/evalstudy/study/"),
        ("the study page", f"{admin}/change/"),
        ("the items grid", f"{admin}/items-grid/"),
        ("the import of judgments", f"{admin}/import-judgments/"),
        ("the invite page", f"{admin}/invite/"),
        ("the monitor", f"/monitor/{study.slug}/"),
        ("the judgment browser", f"/studies/{study.slug}/judgments/"),
        ("an item as its rater saw it", f"/studies/{study.slug}/judgments/{ids['judgment']}/"),
        ("the analysis page", f"/studies/{study.slug}/analysis/"),
        ("a report", f"/analysis/{ids['analysis']}/report/"),
        ("the metrics page", f"/studies/{study.slug}/metrics/"),
        ("a metric run", f"/admin/metrics/metricrun/{ids['metric_run']}/change/"),
        ("the proxy runs", "/admin/proxies/proxyrun/"),
        ("a proxy run", f"/admin/proxies/proxyrun/{ids['proxy']}/change/"),
        ("the blindness audit", f"/studies/{study.slug}/blindness/"),
        ("the adjudication queue", f"/studies/{study.slug}/adjudication/"),
        ("the preview", f"/preview/{study.slug}/"),
    ]
    found = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for where, path in pages:
            response = page.goto(live_server.url + path)
            assert response.status == 200, f"{where}: {path} answered {response.status}"
            found += _serious(page, f"{where} at {width} px")
    assert not found, "\n".join(found)
