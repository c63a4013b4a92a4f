"""Analysis runs: one row per requested analysis, holding its progress and its outputs.

Outputs (the JSON of every statistic, the HTML and PDF reports) live in the database, not in
local files, so any web process can serve what any worker produced.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from evalstudy.models import Study


class AnalysisRun(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="analysis_runs")
    options = models.JSONField(default=dict, blank=True,
                               help_text="Formula, filters, thresholds (see the README).")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    step = models.CharField(max_length=200, blank=True, help_text="What it is doing now.")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    report_html = models.TextField(blank=True)
    report_pdf = models.BinaryField(blank=True, null=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"analysis {self.pk} of {self.study}"

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0
