"""Analysis runs: one row per requested analysis, holding its progress and its outputs.

Outputs (the JSON of every statistic, the HTML and PDF reports) live in the database, not in
local files, so any web process can serve what any worker produced.
"""

from __future__ import annotations

from django.db import models

from evalstudy.models import Study
from kit.runs import BackgroundRun


class AnalysisRun(BackgroundRun):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="analysis_runs")
    options = models.JSONField(default=dict, blank=True,
                               help_text="Formula, filters, thresholds (see the README).")
    step = models.CharField(max_length=200, blank=True, help_text="What it is doing now.")
    result = models.JSONField(default=dict, blank=True)
    report_html = models.TextField(blank=True)
    report_pdf = models.BinaryField(blank=True, null=True)

    class Meta(BackgroundRun.Meta):
        pass

    def __str__(self) -> str:
        return f"analysis {self.pk} of {self.study}"
