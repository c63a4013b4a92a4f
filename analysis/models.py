"""Analysis runs: one row per requested analysis, holding its progress and its outputs.

Outputs (the JSON of every statistic, the HTML and PDF reports) live in the database, not in
local files, so any web process can serve what any worker produced.
"""

from __future__ import annotations

from django.conf import settings
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


class Adjudication(models.Model):
    """An expert's label for one unit (an output, or a pair of outputs for a pairwise criterion)
    of one criterion, given from the adjudication queue (analysis.adjudication). It stands
    beside the raters' judgments and never changes them; an analysis run with
    `labels="adjudicated"` reads it instead of them.

    A pair is stored with the lower output id first, and `value` read that way round ("A" is
    `output`). A changed label keeps what it replaced as an `AdjudicationRevision` (and the
    service records it in the audit trail)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="adjudications")
    criterion = models.ForeignKey("evalstudy.Criterion", on_delete=models.CASCADE,
                                  related_name="adjudications")
    output = models.ForeignKey("evalstudy.Output", on_delete=models.CASCADE,
                               related_name="adjudications")
    output_b = models.ForeignKey("evalstudy.Output", null=True, blank=True,
                                 on_delete=models.CASCADE, related_name="adjudications_as_b")
    value = models.TextField(help_text="The adjudicated label, in the criterion's canonical "
                                       "spelling (evalstudy.criteria).")
    numeric_value = models.FloatField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True,
                              help_text="Why the unit was in the queue when it was decided.")
    note = models.TextField(blank=True)
    adjudicated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                       on_delete=models.SET_NULL, related_name="+")
    adjudicated_at = models.DateTimeField()
    revision = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # One current label per unit; a single output (no output_b) is one unit too. Two
            # partial constraints rather than one with nulls_distinct=False, which SQLite (the
            # embedded database of `make run`) does not support: it skipped the constraint
            # there and warned (models.W047) on every command.
            models.UniqueConstraint(fields=["criterion", "output", "output_b"],
                                    condition=models.Q(output_b__isnull=False),
                                    name="adjudication_unit_unique"),
            models.UniqueConstraint(fields=["criterion", "output"],
                                    condition=models.Q(output_b__isnull=True),
                                    name="adjudication_single_unique"),
            models.CheckConstraint(condition=models.Q(output_b__isnull=True)
                                   | models.Q(output__lt=models.F("output_b")),
                                   name="adjudication_pair_ordered"),
        ]

    def __str__(self) -> str:
        return f"{self.criterion.key}={self.value} (adjudicated)"


class AdjudicationRevision(models.Model):
    """What an adjudicated label was before a later decision replaced it."""

    adjudication = models.ForeignKey(Adjudication, on_delete=models.CASCADE,
                                     related_name="history")
    value = models.TextField()
    note = models.TextField(blank=True)
    adjudicated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                       on_delete=models.SET_NULL, related_name="+")
    adjudicated_at = models.DateTimeField()
    replaced_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["adjudication", "replaced_at", "id"]

    def __str__(self) -> str:
        return f"{self.value} (until {self.replaced_at:%Y-%m-%d %H:%M})"
