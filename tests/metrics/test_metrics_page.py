"""The metrics page reads at a glance: WER first, each metric's direction in its header, and a
per-system row of means with the best system marked, computed over all outputs (not the page)
in a bounded number of queries."""

import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from metrics.scorers import registry
from metrics.selectors import (
    latest_configs,
    metric_direction,
    metrics_in_display_order,
    system_summaries,
)
from tests.factories import UserFactory
from tests.metrics.test_metric_runs import asr_study  # noqa: F401  (fixture)


def test_the_pages_directions_are_the_scorers_own():
    for name, cls in registry.available().items():
        assert metric_direction(name) == cls.direction, name
    # The default metrics show in their own order (optional ones such as per sit among them).
    order = metrics_in_display_order(registry.SPECS)
    shown = [name for name in order if name in registry.DEFAULT_METRICS]
    assert shown == list(registry.DEFAULT_METRICS)
    assert set(registry.available()) | set(registry.unavailable()) <= set(order)
    assert all(metric_direction(name) for name in order)
    assert metric_direction("zzz") == ""  # a name since removed: no arrow, no "best"


def test_wer_comes_first_and_unknown_metrics_last():
    assert metrics_in_display_order(["bleu", "zzz", "heval", "wer", "per", "cer"]) == [
        "wer", "cer", "per", "bleu", "heval", "zzz"]


def test_per_system_means_best_marked_by_direction(asr_study):  # noqa: F811
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics",
                 "bleu", "wer", "cer")
    configs = latest_configs(asr_study)
    shown = metrics_in_display_order(configs)
    assert shown == ["wer", "cer", "bleu"]
    with CaptureQueriesContext(connection) as queries:
        rows = {row.system: row for row in system_summaries(asr_study, configs, shown)}
    assert len(queries) <= 2
    # sys-0 is the better recogniser of the fixture: lower WER, higher BLEU; both are "best".
    assert rows["sys-0"].means["wer"] < rows["sys-1"].means["wer"]
    assert "wer" in rows["sys-0"].best and "wer" not in rows["sys-1"].best
    assert "bleu" in rows["sys-0"].best
    assert rows["sys-0"].counts["wer"] == rows["sys-0"].outputs == 3
    # sys-1's WERs: item-000 2/6, item-001 3/5 (of, light, deleted), item-002 1.0
    from metrics.models import MetricResult
    wers = MetricResult.objects.filter(output__system__name="sys-1", config__metric="wer")
    assert rows["sys-1"].means["wer"] == pytest.approx(
        sum(r.headline for r in wers) / wers.count())


def test_the_page_shows_the_summary_and_wer_first(asr_study):  # noqa: F811
    user = UserFactory(username="metrics-page", is_staff=True)
    asr_study.owner = user
    asr_study.save()
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics",
                 "bleu", "wer")
    client = Client()
    client.force_login(user)
    page = client.get(reverse("metrics:page", args=[asr_study.slug])).content.decode()
    assert "Per system" in page
    headers = re.findall(r'<th scope="col">(\w+)', page.split("<h2>Results per output</h2>")[1])
    assert headers[3:5] == ["wer", "bleu"]
    assert 'aria-label="lower is better"' in page and 'aria-label="higher is better"' in page
    assert page.count('aria-label="best"') == 2  # sys-0 on both metrics
