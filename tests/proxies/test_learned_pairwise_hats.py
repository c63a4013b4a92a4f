"""The pairwise learned proxy on a slice of HATS (French ASR pairs, 7-8 listeners each),
through the platform's commands: votes imported as counts, WER / CER / PER computed and
stored, the proxy trained on the stored results and cross-validated by reference. Its
out-of-fold accuracy against the listeners' majority beats every metric alone (a learned
combination rarely ties, and the HATS rule counts a metric tie as wrong)."""

from __future__ import annotations

import shutil

import pytest
from django.core.management import call_command

from evalstudy.models import Study
from proxies.models import LearnedProxy
from tests.hats import hats_study as hats_slice

# Trained proxies go to a fresh directory per test (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("proxy_dir_in_tmp")]
ROWS = 300


def hats_study(tmp_path, rows: int) -> Study:
    study, votes = hats_slice(tmp_path, rows)
    call_command("import_vote_counts", str(votes), "--study", study.slug,
                 "--position", "unknown")
    return study


def test_pairwise_proxy_beats_each_metric_alone_on_hats(tmp_path, capsys):
    study = hats_study(tmp_path, ROWS)
    metrics = ["wer", "cer"] + (["per"] if shutil.which("espeak-ng") else [])
    call_command("compute_metrics", "--study", study.slug, "--sync", "--metrics", *metrics)
    call_command("train_proxy", "--study", "hats", "--criterion", "preference", "--kind",
                 "pairwise_logistic", "--sync")
    print(capsys.readouterr().out)  # the figures, shown with -s or on failure
    proxy = LearnedProxy.objects.get(study=study)
    report = proxy.report["metrics"]
    assert report["pairs_predicted"] == ROWS and report["folds"] == 5
    assert "per" in report["features"] or "per" in report["features_left_out"]
    cv = report["cv_accuracy"]["ties_wrong"]
    alone = {name: row["ties_wrong"]["accuracy"] for name, row in
             report["features_alone"].items()}
    assert cv > max(alone[name] for name in ("wer", "cer", "per") if name in alone)
    assert proxy.report["answers_status"] == "done"
