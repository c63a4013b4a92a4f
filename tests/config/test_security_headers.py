"""The Content Security Policy and framing headers on real pages, and templates that keep the
policy working (no inline scripts, styles or event handlers)."""

import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from analysis.models import AnalysisRun
from evalstudy.models import Study
from tests.factories import UserFactory, make_study

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# Standalone documents rendered to PDF and served with their own, wider policy.
STANDALONE = {"analysis/report.html"}


def _policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.mark.django_db
def test_pages_send_a_strict_policy():
    staff = Client()
    staff.force_login(UserFactory(username="boss", is_staff=True, is_superuser=True))
    study = make_study(status=Study.Status.OPEN)
    for client, url in [(Client(), reverse("login")),
                        (staff, reverse("admin:index")),
                        (staff, reverse("annotation:monitor", args=[study.slug])),
                        (staff, reverse("metrics:page", args=[study.slug]))]:
        response = client.get(url)
        assert response.status_code == 200, url
        policy = _policy(response)
        assert policy["script-src"] == ["'self'"], url
        assert policy["style-src"] == ["'self'"], url
        assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"]
        assert response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"


@pytest.mark.django_db
def test_the_stored_report_may_use_its_own_styles_but_no_script():
    staff = Client()
    staff.force_login(UserFactory(username="boss", is_staff=True, is_superuser=True))
    run = AnalysisRun.objects.create(study=make_study(), status=AnalysisRun.Status.DONE,
                                     report_html="<style>h1{}</style><h1>r</h1>")
    policy = _policy(staff.get(reverse("analysis:report", args=[run.pk])))
    assert "'unsafe-inline'" in policy["style-src"]
    assert policy["script-src"] == ["'self'"]
    assert "data:" in policy["img-src"]  # the plots are inline PNGs


@pytest.mark.parametrize("path", sorted(
    str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*.html")))
def test_templates_have_no_inline_script_style_or_handlers(path):
    html = (TEMPLATES / path).read_text(encoding="utf-8")
    inline_scripts = [tag for tag in re.findall(r"<script\b[^>]*>", html, re.I)
                      if "src=" not in tag and 'type="application/json"' not in tag]
    assert not inline_scripts, f"{path}: move inline scripts to static/js"
    assert not re.search(r"\son[a-z]+\s*=", html, re.I), f"{path}: event handler attribute"
    assert not re.search(r"\shx-on", html, re.I), f"{path}: hx-on needs eval"
    if path not in STANDALONE:
        assert not re.search(r"<style\b", html, re.I), f"{path}: move styles to static/css"
        assert not re.search(r"\sstyle\s*=", html, re.I), f"{path}: style attribute"
