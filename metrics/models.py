"""Automatic metric results and the runs that compute them.

A `MetricConfig` is one exact way of computing one metric (scorer name, version, parameters,
model, library versions): results are unique per output and config, so re-running anything
computes nothing new, and a changed library or parameter gives a new config instead of
silently mixing numbers. A `MetricRun` is the request to fill the results of some configs for
a study's outputs, with its progress.
"""

from __future__ import annotations

from django.db import models

from evalstudy.models import Output, Study
from kit.runs import BackgroundRun


class MetricConfig(models.Model):
    metric = models.CharField(max_length=50)
    version = models.CharField(max_length=20)
    config_hash = models.CharField(max_length=64, unique=True)
    params = models.JSONField(default=dict, blank=True)
    signature = models.JSONField(default=dict, help_text="Everything the results depend on.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["metric", "id"]

    def __str__(self) -> str:
        return f"{self.metric} v{self.version} [{self.config_hash[:8]}]"


class MetricRun(BackgroundRun):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="metric_runs")
    configs = models.ManyToManyField(MetricConfig, related_name="runs")
    metrics = models.JSONField(default=list, help_text="Metric names, in request order.")
    params = models.JSONField(default=dict, blank=True, help_text="{metric: {param: value}}")
    model_path = models.CharField(max_length=500, blank=True,
                                  help_text="Encoder model directory (blank: the default).")
    failed_outputs = models.PositiveIntegerField(default=0,
                                                 help_text="Results that carry an error.")
    batches_total = models.PositiveIntegerField(default=0)
    timings = models.JSONField(default=dict, blank=True, help_text="Seconds spent per metric.")

    class Meta(BackgroundRun.Meta):
        pass

    def __str__(self) -> str:
        return f"metric run {self.pk} on {self.study}"


class MetricResult(models.Model):
    output = models.ForeignKey(Output, on_delete=models.CASCADE, related_name="metric_results")
    config = models.ForeignKey(MetricConfig, on_delete=models.PROTECT, related_name="results")
    values = models.JSONField(default=dict, blank=True)
    headline = models.FloatField(null=True, blank=True, help_text="The metric's main value.")
    details = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    computed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["output", "config"], name="metric_result_unique"),
        ]
        indexes = [models.Index(fields=["config", "output"])]

    def __str__(self) -> str:
        return f"{self.config.metric}={self.headline}"
