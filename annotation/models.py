"""Judgment storage. A judgment is one answer to one criterion on one slot.

`(slot, criterion)` is unique, so a double-click or a network retry stores one judgment; a
revision overwrites the value and keeps the earlier one in `JudgmentRevision`.
"""

from django.conf import settings
from django.db import models

from evalstudy.models import AssignmentSlot, Criterion, Rater


class Judgment(models.Model):
    # slot and rater have no index of their own: judgment_slot_criterion (slot, criterion) and
    # (rater, criterion) serve every lookup by either, and each index is written on every
    # judgment.
    slot = models.ForeignKey(AssignmentSlot, on_delete=models.CASCADE, related_name="judgments",
                             db_index=False)
    criterion = models.ForeignKey(Criterion, on_delete=models.PROTECT, related_name="judgments")
    # Denormalised from slot.assignment.rater: every analysis groups by rater.
    rater = models.ForeignKey(Rater, on_delete=models.PROTECT, related_name="judgments",
                              db_index=False)
    value = models.TextField(blank=True)
    numeric_value = models.FloatField(null=True, blank=True)
    served_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField()
    revision = models.PositiveIntegerField(default=0)

    class Meta:
        # No default ordering: ["slot", "criterion"] followed both foreign keys into their own
        # orderings, a six-table join on every judgment query.
        constraints = [
            models.UniqueConstraint(fields=["slot", "criterion"], name="judgment_slot_criterion"),
        ]
        indexes = [models.Index(fields=["rater", "criterion"])]

    def __str__(self) -> str:
        return f"{self.criterion.key}={self.value}"


class JudgmentRevision(models.Model):
    """The value a judgment had before a revision replaced it."""

    judgment = models.ForeignKey(Judgment, on_delete=models.CASCADE, related_name="history")
    value = models.TextField(blank=True)
    submitted_at = models.DateTimeField()
    replaced_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["judgment", "replaced_at"]

    def __str__(self) -> str:
        return f"{self.value} (until {self.replaced_at:%Y-%m-%d %H:%M})"


class IdempotencyKey(models.Model):
    """A rater's `Idempotency-Key` and the response it produced, replayed for a retry.

    `fingerprint` hashes the method, path and body: the same key with another request is a
    client bug and is refused rather than silently answered with the first response.
    """

    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rater", "key"], name="idempotency_rater_key"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status_code})"


class ListeningLog(models.Model):
    """How a rater played one media file of one slot (`which`: the item's, or output A's or
    B's), as the player reported it and `annotation.media.listening_record` accepted it.

    `intervals` are the stretches of the file that were played ([start, end] seconds, merged),
    so `seconds_listened` is what was heard, not wall time: a replay of the same stretch adds
    nothing and a seek past a stretch does not count it. `completed`: the intervals cover the
    whole file (seeking to the end does not complete it)."""

    class Which(models.TextChoices):
        ITEM = "item", "The item's media"
        A = "a", "The (first) output's media"
        B = "b", "Output B's media"

    slot = models.ForeignKey(AssignmentSlot, on_delete=models.CASCADE, related_name="listening",
                             db_index=False)
    which = models.CharField(max_length=4, choices=Which.choices)
    duration_s = models.FloatField(help_text="The file's duration when the log started.")
    plays = models.PositiveIntegerField(default=0)
    seeks = models.PositiveIntegerField(default=0)
    seconds_listened = models.FloatField(default=0)
    intervals = models.JSONField(default=list, blank=True)
    completed = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Also the index of every lookup by slot.
            models.UniqueConstraint(fields=["slot", "which"], name="listening_slot_which"),
        ]

    def __str__(self) -> str:
        return f"slot {self.slot_id} {self.which}: {self.seconds_listened:.1f} s"


class VoteCount(models.Model):
    """How many people chose one answer for one output (or pair of outputs), as published
    data sets ship human judgments: counts per option per unit, without named raters.

    Kept apart from `Judgment` in every statistic: counts carry no rater identity, so
    rater-level statistics (Cohen's kappa between raters, rater random effects, leave-one-
    rater-out) are not computed from them; the analysis uses the counts where a statistic
    needs only them (shares, the majority, Fleiss' kappa, the ceiling of one vote against the
    others). `position_known`: for a pairwise criterion, whether `output` is the output
    people saw as A (in the first place); when unknown, A/B is only the data set's order.
    """

    study = models.ForeignKey("evalstudy.Study", on_delete=models.CASCADE,
                              related_name="vote_counts")
    criterion = models.ForeignKey(Criterion, on_delete=models.PROTECT, related_name="+")
    output = models.ForeignKey("evalstudy.Output", on_delete=models.PROTECT, related_name="+")
    output_b = models.ForeignKey("evalstudy.Output", on_delete=models.PROTECT,
                                 related_name="+", null=True, blank=True)
    value = models.TextField()
    count = models.PositiveIntegerField()
    position_known = models.BooleanField(default=True)
    source_file = models.CharField(max_length=300, blank=True)
    imported_at = models.DateTimeField()

    class Meta:
        constraints = [
            # One row per unit and answer; a single output (no output_b) is one unit too. Two
            # partial constraints rather than one with nulls_distinct=False, which SQLite (the
            # embedded database of `make run`) does not support: it skipped the constraint
            # there and warned (models.W047) on every command.
            models.UniqueConstraint(fields=["criterion", "output", "output_b", "value"],
                                    condition=models.Q(output_b__isnull=False),
                                    name="vote_count_unit_value"),
            models.UniqueConstraint(fields=["criterion", "output", "value"],
                                    condition=models.Q(output_b__isnull=True),
                                    name="vote_count_single_value"),
        ]
        indexes = [models.Index(fields=["study", "criterion"])]

    def __str__(self) -> str:
        return f"{self.criterion.key}={self.value} × {self.count}"


class SlotBehaviour(models.Model):
    """How a slot was answered, as the rating page counted it (`annotation.integrity`): pastes
    into free-text and span inputs, times the page was left and the seconds away, keystrokes
    and pointer/keyboard inputs while the slot was shown. One row per slot; a revision adds
    its counters (`submissions` says how many answers they cover). Evidence only: nothing
    reads it to refuse or exclude anyone."""

    slot = models.OneToOneField(AssignmentSlot, on_delete=models.CASCADE,
                                related_name="behaviour")
    pastes = models.PositiveIntegerField(default=0)
    focus_losses = models.PositiveIntegerField(default=0)
    seconds_away = models.PositiveIntegerField(default=0)
    keystrokes = models.PositiveIntegerField(default=0)
    inputs = models.PositiveIntegerField(default=0)
    submissions = models.PositiveIntegerField(default=1)
    recorded_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"slot {self.slot_id}: {self.pastes} pastes, {self.seconds_away} s away"


class AgreementAlert(models.Model):
    """A window of a rater's judgments whose agreement with the other raters fell below the
    study's `agreement_alert_threshold` (`annotation.drift`), recorded by the periodic task
    (or the monitor's check) once per window, with the values it had then."""

    study = models.ForeignKey("evalstudy.Study", on_delete=models.CASCADE,
                              related_name="agreement_alerts")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="+")
    window = models.PositiveIntegerField(help_text="1-based window of the rater's judgments.")
    first = models.PositiveIntegerField()
    last = models.PositiveIntegerField()
    window_size = models.PositiveIntegerField()
    agreement = models.FloatField()
    threshold = models.FloatField()
    raised_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "rater", "window"],
                                    name="agreement_alert_window"),
        ]
        ordering = ["study", "raised_at", "id"]

    def __str__(self) -> str:
        return f"rater {self.rater_id} window {self.window}: {self.agreement:.2f}"


class RecalibrationRound(models.Model):
    """A researcher sent a rater back to the study's calibration items (`annotation.
    recalibration`): `slots` are the practice slots added to their seat for it, served next,
    with feedback. Judgments the rater submits after `started_at` belong to round `number`
    (the analysis's `recalibration_round` column)."""

    study = models.ForeignKey("evalstudy.Study", on_delete=models.CASCADE,
                              related_name="recalibration_rounds")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="+")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=500, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    slots = models.ManyToManyField(AssignmentSlot, related_name="recalibration_rounds",
                                   blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "rater", "number"],
                                    name="recalibration_round_number"),
        ]
        ordering = ["study", "rater", "number"]

    def __str__(self) -> str:
        return f"round {self.number} of rater {self.rater_id}"
