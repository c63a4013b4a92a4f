"""What this app copies of a rater's personal data, for their erasure (`evalstudy.privacy`):
stored analysis runs name raters by `str(rater)` in their results and reports. Registered by
AnalysisConfig.ready."""

from __future__ import annotations

from typing import Any

from evalstudy.privacy import PrivacyContribution, Scrub, scrub_json

from .models import AnalysisRun

# Shown on an analysis run whose PDF was dropped by an erasure (a PDF cannot be edited safely).
PDF_DROPPED_STEP = "done; PDF removed by a personal-data erasure: start a new run for a PDF"


def analysis_runs_scrub(study_ids: set[int], scrub: Scrub | None) -> dict[str, Any]:
    """Replace the erased names in the stored analysis runs of these studies; returns how many
    runs changed, for the erasure's audit event. Result JSON, report HTML, options, step and
    error text are edited in place (the numbers stay as they are: the analysis of the
    pseudonymised data gives the same ones). A changed run's PDF is dropped, since a PDF's text
    cannot be edited reliably, and its step says so; a new run renders one again."""
    if scrub is None or not study_ids:
        return {"analysis_runs_scrubbed": 0}
    changed = 0
    runs = (AnalysisRun.objects.select_for_update().filter(study_id__in=study_ids)
            .defer("report_pdf").order_by("pk"))
    for run in runs:
        before = (run.result, run.report_html, run.options, run.step, run.error)
        after = (scrub_json(run.result, scrub), scrub(run.report_html),
                 scrub_json(run.options, scrub), scrub(run.step), scrub(run.error))
        if after == before:
            continue
        run.result, run.report_html, run.options, run.step, run.error = after
        run.report_pdf = None
        if run.status == AnalysisRun.Status.DONE:
            run.step = PDF_DROPPED_STEP
        run.save(update_fields=["result", "report_html", "options", "step", "error",
                                "report_pdf"])
        changed += 1
    return {"analysis_runs_scrubbed": changed}


CONTRIBUTION = PrivacyContribution(scrub=analysis_runs_scrub)
