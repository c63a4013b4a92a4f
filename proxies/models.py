"""Proxy judges' rows: runs of a proxy over a study, trained learned proxies, and the judge
answer cache.

These models lived in the `metrics` app until the proxies got their own app; their tables kept
their names (`metrics_proxyrun`, `metrics_learnedproxy`, `metrics_judgeresponse`), so moving
them copied no row (migrations `metrics.0004_move_proxies_out`, `proxies.0001_initial`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from evalstudy.models import Study
from kit.runs import BackgroundRun

from .methods import METHOD_CHOICES, VERSIONED_METHOD_CHOICES, learned_kind_choices


class ProxyRun(BackgroundRun):
    """A proxy judge (an LLM or a learned model) answering a study's criteria on its units.

    Its answers are Judgments of `rater` (kind llm or metric) on the slots of one proxy seat,
    so every analysis compares humans and proxies through the same code. `signature` is
    everything the answers depend on (method, model, prompt, version); the proxy rater is
    identified by it, so a changed prompt or model is a different rater, never a silent mix.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="proxy_runs")
    rater = models.ForeignKey("evalstudy.Rater", on_delete=models.PROTECT,
                              related_name="proxy_runs")
    # One of proxies.methods' specs (method_of(run.method) says what it is).
    method = models.CharField(max_length=10, choices=METHOD_CHOICES)
    criteria = models.JSONField(default=list, help_text="Criterion keys, in request order.")
    backend = models.JSONField(default=dict, blank=True,
                               help_text="Judge backend settings (never the API key itself).")
    template = models.TextField(blank=True, help_text="Prompt template (blank: the default).")
    params = models.JSONField(default=dict, blank=True)
    learned_proxy = models.ForeignKey("LearnedProxy", null=True, blank=True,
                                      on_delete=models.PROTECT, related_name="runs")
    signature = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=10, default="llm")
    failed = models.PositiveIntegerField(default=0, help_text="Answers that could not be read.")
    unreadable = models.JSONField(default=dict, blank=True,
                                  help_text="slot:criterion -> why no answer could be read.")
    usage = models.JSONField(default=dict, blank=True,
                             help_text="Requests, cache hits, retries, tokens, seconds.")
    # The versioned judge prompt the run asked with (its template and few-shot examples):
    # its signature names the version, so each version answers as its own rater.
    prompt_version = models.ForeignKey("JudgePromptVersion", null=True, blank=True,
                                       on_delete=models.PROTECT, related_name="runs")

    class Meta(BackgroundRun.Meta):
        db_table = "metrics_proxyrun"

    def __str__(self) -> str:
        return f"proxy run {self.pk} ({self.method}) on {self.study}"


class LearnedProxy(BackgroundRun):
    """One trained version of a learned proxy: trained on a study's human judgments of one
    criterion, saved as a versioned artefact directory, usable as a proxy on other studies."""

    name = models.SlugField(max_length=100)
    # The kinds come from proxies.methods.learned_kinds (declared once): a callable, so that a
    # new kind needs no migration.
    kind = models.CharField(max_length=20, choices=learned_kind_choices)
    study = models.ForeignKey(Study, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="learned_proxies", help_text="Trained on.")
    criterion_key = models.CharField(max_length=50)
    params = models.JSONField(default=dict, blank=True)
    artifact_path = models.CharField(max_length=500, blank=True)
    version = models.PositiveIntegerField(null=True, blank=True)
    report = models.JSONField(default=dict, blank=True,
                              help_text="Split sizes, threshold, train/dev/test AUC.")
    # The process training it (while running): a run whose process ended without finishing
    # is failed at once by `proxies.training.learned_proxies_fail_dead` on the same host,
    # instead of waiting for the stale-run sweep.
    pid = models.PositiveIntegerField(null=True, blank=True,
                                      help_text="Process id of the training process.")
    host = models.CharField(max_length=255, blank=True,
                            help_text="Host name of the training process.")
    pid_started = models.BigIntegerField(
        null=True, blank=True, help_text="The training process' start time (clock ticks "
        "since boot, /proc), so that a reused process id is not mistaken for it.")

    class Meta(BackgroundRun.Meta):
        db_table = "metrics_learnedproxy"
        verbose_name_plural = "learned proxies"

    def __str__(self) -> str:
        version = f" v{self.version}" if self.version else ""
        return f"{self.name}{version} ({self.kind})"


class JudgeResponse(models.Model):
    """A cached judge answer of one study, keyed by `proxies.judges.backends.base.cache_key`
    (endpoint, model, mode, prompt, parameters): re-running a judge on the study costs nothing,
    and every worker host shares the cache through the database.

    Per study, not per installation: another study's run must neither finish from these answers
    (a run against a dead URL would complete from a stranger's judgments) nor learn what was
    asked (the prompts hold this study's items)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="judge_responses")
    key = models.CharField(max_length=64)
    value = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "metrics_judgeresponse"
        constraints = [
            models.UniqueConstraint(fields=["study", "key"], name="judge_response_unique"),
        ]

    def __str__(self) -> str:
        return self.key[:12]


class JudgePromptVersion(models.Model):
    """One version of an LLM judge's prompt for one criterion of a study: the template and the
    few-shot examples built from human corrections (`proxies.versions`).

    Version 1 is the zero-shot prompt; each later version adds examples from the units of the
    development split where the previous version's judge disagreed with the human majority.
    `split` (set on version 1, inherited) reserves items for example-building: they are never
    evaluated, and no example may come from the held-out items."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE,
                              related_name="judge_prompt_versions")
    criterion = models.ForeignKey("evalstudy.Criterion", on_delete=models.CASCADE,
                                  related_name="judge_prompt_versions")
    method = models.CharField(max_length=10, choices=VERSIONED_METHOD_CHOICES)
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="children")
    template = models.TextField(blank=True, help_text="Prompt template (blank: the method's "
                                "default).")
    examples = models.JSONField(default=list, blank=True, help_text=(
        "Few-shot examples, in prompt order: {output, output_b, item, text, text_b, reference, "
        "context, human, judge, why}."))
    example_outputs = models.JSONField(default=list, blank=True,
                                       help_text="Output ids the examples came from.")
    split = models.JSONField(default=dict, blank=True, help_text=(
        "{seed, dev_fraction, dev_items}: the items reserved for example-building."))
    source_run = models.ForeignKey(ProxyRun, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="corrected_into",
                                   help_text="The run whose disagreements became examples.")
    corrections = models.JSONField(default=dict, blank=True, help_text=(
        "How the examples were found: dev units compared, disagreements, examples picked."))
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ("study", "criterion", "method", "number")
        constraints = [
            models.UniqueConstraint(fields=["study", "criterion", "method", "number"],
                                    name="judge_prompt_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.method} prompt v{self.number} for {self.criterion.key}"
