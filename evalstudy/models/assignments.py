"""Seats and their slots: a rater's copy of a design list, and what is shown at each position
of it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from .items import AttentionCheck, CalibrationItem, Output
from .raters import Rater
from .studies import Study


class Assignment(models.Model):
    """One seat: a rater's copy of a design list (or a part of it), with its own order.

    Seats are built unclaimed (rater empty, state open) when a study's design is built; a rater
    claims one through `assignment_claim`. An abandoned seat whose lease ran out is handed on.
    """

    class State(models.TextChoices):
        OPEN = "open", "Open (no rater yet)"
        ACTIVE = "active", "Active"
        DONE = "done", "Done"
        EXPIRED = "expired", "Expired (lease ran out; unjudged slots handed on)"

    class Source(models.TextChoices):
        DESIGN = "design", "Built from the design"
        IMPORTED = "imported", "Imported judgments"
        PROXY = "proxy", "Proxy judge (LLM or metric) over every output"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="assignments")
    rater = models.ForeignKey(
        Rater, null=True, blank=True, on_delete=models.PROTECT, related_name="assignments"
    )
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.DESIGN)
    seat_index = models.PositiveIntegerField(null=True, blank=True)
    list_index = models.PositiveIntegerField(null=True, blank=True)
    part_index = models.PositiveIntegerField(default=0)
    replica = models.PositiveIntegerField(default=0)
    seed = models.BigIntegerField(default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    replaces = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replacements"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # By column, not by relation: "study" would follow Study's own ordering, a join to the
        # study table on every seat query that names no order.
        ordering = ["study_id", "list_index", "part_index", "replica", "id"]
        indexes = [models.Index(fields=["study", "state", "list_index", "part_index", "replica"])]
        constraints = [
            # One seat per rater per study: a rater never gets a second list, so never sees an
            # item twice.
            models.UniqueConstraint(
                fields=["study", "rater"], condition=Q(rater__isnull=False),
                name="assignment_one_per_rater",
            ),
            models.UniqueConstraint(
                fields=["study", "seat_index"],
                condition=Q(seat_index__isnull=False) & ~Q(state="expired"),
                name="assignment_seat_unique",
            ),
            models.CheckConstraint(
                condition=Q(state="open", rater__isnull=True) | ~Q(state="open"),
                name="assignment_open_has_no_rater",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.study.slug} seat {self.seat_index}"


class AssignmentSlot(models.Model):
    class Kind(models.TextChoices):
        CALIBRATION = "calibration", "Calibration"
        TARGET = "target", "Target"
        ATTENTION = "attention", "Attention check"

    # No index of its own: slot_position_unique (assignment, position) serves every lookup by
    # seat, and one index fewer is one less to write.
    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="slots",
                                   db_index=False)
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    output = models.ForeignKey(
        Output, null=True, blank=True, on_delete=models.PROTECT, related_name="slots",
        help_text="The output judged (the left one, 'A', for pairwise slots).",
    )
    output_b = models.ForeignKey(
        Output, null=True, blank=True, on_delete=models.PROTECT, related_name="slots_as_b",
        help_text="Pairwise slots: the right output, 'B'.",
    )
    # Ranking and best-worst slots: every output shown, in display order (A, B, C, ...); the
    # first two are also `output` and `output_b`. Empty for other slots.
    shown_outputs = models.JSONField(default=list, blank=True)
    calibration_item = models.ForeignKey(
        CalibrationItem, null=True, blank=True, on_delete=models.PROTECT
    )
    attention_check = models.ForeignKey(
        AttentionCheck, null=True, blank=True, on_delete=models.PROTECT
    )
    served_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["assignment_id", "position"]  # (no join: see Assignment.Meta)
        constraints = [
            models.UniqueConstraint(fields=["assignment", "position"], name="slot_position_unique"),
            models.CheckConstraint(
                condition=(
                    Q(kind="target", output__isnull=False, calibration_item__isnull=True,
                      attention_check__isnull=True)
                    | Q(kind="calibration", calibration_item__isnull=False, output__isnull=True,
                        output_b__isnull=True, attention_check__isnull=True)
                    | Q(kind="attention", attention_check__isnull=False, output__isnull=True,
                        output_b__isnull=True, calibration_item__isnull=True)
                ),
                name="slot_kind_matches_content",
            ),
        ]

    def __str__(self) -> str:
        return f"slot {self.position} of assignment {self.assignment_id}"
