"""The phoneme error rate in metric runs: its language defaults to the study's (frozen into the
run), it shows in the export, and without espeak-ng it is refused with the reason."""

import csv
import shutil

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from metrics.models import MetricResult, MetricRun
from metrics.scorers import phoneme, registry
from tests.metrics.test_metric_runs import asr_study  # noqa: F401  (fixture)

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="the espeak-ng program is not installed (apt-get install espeak-ng)",
)


def _per(study, item, system):
    return MetricResult.objects.get(output__item__study=study, output__item__external_id=item,
                                    output__system__name=system, config__metric="per")


@needs_espeak
def test_per_takes_the_studys_language_unless_given(asr_study, tmp_path):  # noqa: F811
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics", "per")
    run = MetricRun.objects.get()
    assert run.status == "done" and run.failed_outputs == 0
    assert run.params == {"per": {"language": "en"}}
    result = _per(asr_study, "item-000", "sys-0")
    assert result.headline == 0.0
    assert result.config.signature["g2p"]["voice"] == "en"
    assert result.config.signature["g2p"]["program"] == "espeak-ng"
    assert _per(asr_study, "item-002", "sys-1").headline == 1.0  # empty output: all deleted
    assert 0 < _per(asr_study, "item-000", "sys-1").headline < 1

    asr_study.language = "fr"
    asr_study.save()
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics", "per")
    assert MetricRun.objects.latest("id").params == {"per": {"language": "fr"}}
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics", "per",
                 "--params", '{"per": {"language": "en-us", "normaliser": "raw"}}')
    run = MetricRun.objects.latest("id")
    assert run.params == {"per": {"language": "en-us", "normaliser": "raw"}}
    assert {c.signature["g2p"]["voice"] for c in run.configs.all()} == {"en-us"}

    path = tmp_path / "m.csv"
    call_command("export_metrics", asr_study.slug, "--csv", str(path))
    metrics = {row["metric"] for row in csv.DictReader(path.open())}
    assert {"per", "phon_substitutions", "ref_phonemes"} <= metrics


@needs_espeak
def test_an_unknown_voice_is_refused_at_the_start(asr_study):  # noqa: F811
    with pytest.raises(CommandError, match="metric 'per': invalid parameters: espeak-ng has no "
                                           "voice 'xx-nope'"):
        call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics", "per",
                     "--params", '{"per": {"language": "xx-nope"}}')
    assert not MetricRun.objects.exists()


def test_without_espeak_per_is_unavailable_with_the_reason(asr_study, monkeypatch):  # noqa: F811
    monkeypatch.setattr(phoneme, "espeak_path", lambda: None)
    registry.forget()  # found again without espeak-ng, and again after the test
    try:
        with pytest.raises(CommandError,
                           match="metric 'per' is unavailable: the espeak-ng program"):
            call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics",
                         "per")
    finally:
        registry.forget()
    assert not MetricRun.objects.exists()
