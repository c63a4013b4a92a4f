"""The pre-registered analysis plan of an adaptive study and the stopping checks made under it.

A plan is stated before the study opens and registered when it opens (`registered_at`); from
then on `evalstudy.services.adaptive.study_plan_save` refuses any change, and the admin
shows it read-only: a stopping rule chosen after seeing the data is no rule. Only
`allocation` (the current Bradley-Terry strengths the seats are built from) changes
afterwards; it is state, not plan.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from .criteria import Criterion
from .studies import Study


class StudyPlan(models.Model):
    class Spending(models.TextChoices):
        OBRIEN_FLEMING = "obrien_fleming", ("O'Brien-Fleming type (Lan-DeMets): spends almost "
                                            "nothing early, keeps the final test near nominal")
        POCOCK = "pocock", "Pocock type (Lan-DeMets): spends about evenly over the looks"

    study = models.OneToOneField(Study, on_delete=models.CASCADE, related_name="plan")
    criterion = models.ForeignKey(
        Criterion, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The pairwise criterion the rule reads (blank: the study's first pairwise "
                  "criterion).")
    contrasts = models.JSONField(
        default=list, blank=True,
        help_text='The system contrasts of the plan, as pairs of system names, e.g. '
                  '[["ours", "baseline"]] (blank: every pair of systems).')
    target_ci_width = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0)],
        help_text="Stop when every contrast's repeated CI is at most this wide (log-odds of "
                  "the Bradley-Terry model; blank: no width target).")
    stop_on_decision = models.BooleanField(
        default=False,
        help_text="Stop when every contrast is decided: its repeated CI excludes 0 (the "
                  "group-sequential test rejects no difference).")
    alpha = models.FloatField(
        default=0.05, validators=[MinValueValidator(0.001), MaxValueValidator(0.5)],
        help_text="Two-sided type I error for the family of contrasts (split equally over "
                  "them, Bonferroni), spent over the looks.")
    spending = models.CharField(max_length=20, choices=Spending.choices,
                                default=Spending.OBRIEN_FLEMING)
    check_every = models.PositiveIntegerField(
        default=100, validators=[MinValueValidator(1)],
        help_text="Look at the data every this many new judgments of the criterion.")
    max_looks = models.PositiveIntegerField(
        default=20, validators=[MinValueValidator(1)],
        help_text="The last look: the study closes there whatever the data say.")
    max_judgments = models.PositiveIntegerField(
        default=5000, validators=[MinValueValidator(1)],
        help_text="No more comparisons are handed out past this many; the information "
                  "fraction of a look is its judgments over this number.")
    registered_at = models.DateTimeField(
        null=True, blank=True, editable=False,
        help_text="When the study opened with this plan; the plan cannot change after it.")
    # Written by the stopping checks: {"strengths": {system name: log-odds}, "look": n}.
    allocation = models.JSONField(default=dict, blank=True, editable=False)

    PLAN_FIELDS = ("criterion", "contrasts", "target_ci_width", "stop_on_decision", "alpha",
                   "spending", "check_every", "max_looks", "max_judgments")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(target_ci_width__isnull=False) | Q(stop_on_decision=True),
                name="studyplan_has_a_stopping_target"),
            models.CheckConstraint(condition=Q(alpha__gt=0) & Q(alpha__lt=1),
                                   name="studyplan_alpha_range"),
        ]

    def __str__(self) -> str:
        return f"plan of {self.study.slug}"


class StoppingCheck(models.Model):
    """One look at the data under a plan: what was known, what the rule allowed, whether it
    was met. Append-only, written by the periodic check (`analysis.stopping`)."""

    plan = models.ForeignKey(StudyPlan, on_delete=models.CASCADE, related_name="checks")
    look = models.PositiveIntegerField()
    judgments = models.PositiveIntegerField()
    information_fraction = models.FloatField()
    alpha_spent = models.FloatField(help_text="Cumulative, per contrast.")
    boundary = models.FloatField(null=True, blank=True,
                                 help_text="Nominal |z| boundary (blank: nothing to spend).")
    nominal_alpha = models.FloatField()
    estimates = models.JSONField(default=list, blank=True)
    met = models.BooleanField(default=False)
    reason = models.CharField(max_length=300, blank=True)
    checked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["plan", "look"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "look"], name="stoppingcheck_look_unique"),
        ]

    def __str__(self) -> str:
        return f"look {self.look} of {self.plan}"
