"""A study's criteria: the questions raters answer. What each kind of question accepts and
means is `evalstudy.criteria`'s (one module per kind); the model stores a criterion's settings
and asks the kind."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from evalstudy import criteria as rules

from .studies import Study


class Criterion(models.Model):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="criteria")
    key = models.SlugField(max_length=60)
    prompt = models.TextField()
    description = models.TextField(blank=True)
    # The kinds come from evalstudy.criteria.kinds (one module each): a callable, so that a
    # new kind needs no migration.
    kind = models.CharField(max_length=20, choices=rules.kind_choices)
    scale_points = models.PositiveSmallIntegerField(null=True, blank=True)
    labels = models.JSONField(
        default=list, blank=True,
        help_text='Likert anchors {"1": "poor", "5": "excellent"}; severity: 3 descriptions.',
    )
    options = models.JSONField(
        default=list, blank=True,
        help_text="Categorical options; span criteria: the error categories (taxonomy).")
    allow_tie = models.BooleanField(default=False, help_text="Pairwise: offer 'tie'.")
    allow_both = models.BooleanField(
        default=False,
        help_text="Pairwise: offer 'both good' and 'both bad' as answers of their own, apart "
                  "from 'tie'.")
    scale_min = models.IntegerField(
        null=True, blank=True, help_text="Slider: the lowest value (blank: 0 to 100).")
    scale_max = models.IntegerField(
        null=True, blank=True, help_text="Slider: the highest value (blank: 0 to 100).")
    severity_weights = models.JSONField(
        default=dict, blank=True,
        help_text='Span: severities and their MQM weights (blank: {"minor": 1, "major": 5, '
                  '"critical": 25}).')
    span_reference = models.BooleanField(
        default=False, help_text="Span: raters may also mark the reference (e.g. words the "
                                 "output left out).")
    required = models.BooleanField(default=True)
    show_if_criterion = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="dependents",
        help_text="Show this question only when that criterion's answer is in show_if_values.",
    )
    show_if_values = models.JSONField(default=list, blank=True)
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["study", "order", "id"]
        verbose_name_plural = "criteria"
        constraints = [
            models.UniqueConstraint(fields=["study", "key"], name="criterion_key_unique"),
            # Which settings a kind takes, and their values, are the kind's to check
            # (evalstudy.criteria.check_rule, at every save and at opening); the database
            # keeps only what holds for every kind.
            models.CheckConstraint(
                condition=Q(scale_points__isnull=True)
                | Q(scale_points__gte=rules.LIKERT_MIN_POINTS,
                    scale_points__lte=rules.LIKERT_MAX_POINTS),
                name="criterion_scale_points_range",
            ),
            models.CheckConstraint(
                condition=Q(scale_min__isnull=True, scale_max__isnull=True)
                | Q(scale_min__lt=F("scale_max")),
                name="criterion_scale_range_ordered",
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def rule(self) -> rules.CriterionRule:
        return rules.CriterionRule(
            kind=self.kind, scale_points=self.scale_points, options=tuple(self.options or ()),
            allow_tie=self.allow_tie, scale_min=self.scale_min, scale_max=self.scale_max,
            severity_weights=self.severity_weights or None, span_reference=self.span_reference,
            allow_both=self.allow_both, labels=self.labels or (),
        )

    def problems(self) -> list[str]:
        """What is wrong with this criterion's configuration (evalstudy.criteria.check_rule)."""
        return rules.check_rule(
            self.kind, scale_points=self.scale_points, labels=self.labels,
            options=list(self.options or []), scale_min=self.scale_min,
            scale_max=self.scale_max, severity_weights=self.severity_weights or None,
            span_reference=self.span_reference, allow_both=self.allow_both)

    def shown_for(self, answers: dict[str, str]) -> bool:
        """Whether the question is shown, given the answers so far keyed by criterion key."""
        if self.show_if_criterion_id is None or self.show_if_criterion is None:
            return True
        answer = answers.get(self.show_if_criterion.key)
        return answer is not None and answer in [str(v) for v in self.show_if_values]
