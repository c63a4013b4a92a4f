"""What raters judge: a study's items, the systems' outputs of them, their media, and the
control items (practice items and attention checks) that are not part of the comparison."""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q

from .studies import Study, System


class Item(models.Model):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="items")
    external_id = models.CharField(max_length=200)
    reference = models.TextField(blank=True, help_text="Ground truth (what the speaker said).")
    context = models.TextField(blank=True, help_text="E.g. the article or conversation.")
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["study", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "external_id"], name="item_external_id_unique"
            ),
        ]

    def __str__(self) -> str:
        return self.external_id


class Output(models.Model):
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="outputs")
    system = models.ForeignKey(System, on_delete=models.CASCADE, related_name="outputs")
    text = models.TextField(blank=True)

    class Meta:
        ordering = ["item", "system"]
        constraints = [
            models.UniqueConstraint(fields=["item", "system"], name="output_item_system_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.system_id}"


def media_file_name(instance: ItemMedia, filename: str) -> str:
    """Where a media file is stored: a random name, without extension, that says nothing of
    the original file, the item or the system (storage keys end up in logs, backups and, with
    a redirecting storage, in raters' browsers)."""
    return f"evalstudy-media/{secrets.token_urlsafe(24)}"


class ItemMedia(models.Model):
    """An audio or video file that raters hear or watch with an item, or, where a study needs
    it, with one output (e.g. synthesised speech). Written only by `evalstudy.media`, after
    `evalstudy.media_probe` accepted the file; the probed fields say what it is."""

    class Kind(models.TextChoices):
        AUDIO = "audio", "Audio"
        VIDEO = "video", "Video"

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="media")
    output = models.ForeignKey(
        Output, null=True, blank=True, on_delete=models.CASCADE, related_name="media",
        help_text="Empty: the item's media (shown with every output of it).",
    )
    kind = models.CharField(max_length=5, choices=Kind.choices)
    file = models.FileField(upload_to=media_file_name, max_length=200)
    mime = models.CharField(max_length=40, help_text="Served as this Content-Type.")
    container = models.CharField(max_length=20)
    codec = models.CharField(max_length=40)
    duration_s = models.FloatField()
    channels = models.PositiveSmallIntegerField(null=True, blank=True)
    sample_rate = models.PositiveIntegerField(null=True, blank=True)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    size_bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    # For researchers only (admin, API, spec export); never on a rater's page.
    source = models.CharField(
        max_length=1000, blank=True,
        help_text="Where it came from: the path or URL in the imported file, or the uploaded "
                  "file's name.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "item media"
        ordering = ["item_id", "output_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["item"], condition=Q(output__isnull=True),
                                    name="item_media_one_per_item"),
            models.UniqueConstraint(fields=["output"], condition=Q(output__isnull=False),
                                    name="item_media_one_per_output"),
            models.CheckConstraint(condition=Q(kind__in=["audio", "video"]),
                                   name="item_media_kind_valid"),
            models.CheckConstraint(condition=Q(duration_s__gt=0),
                                   name="item_media_duration_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.item_id}" + (f"/{self.output_id}" if self.output_id else "")



class ControlItem(models.Model):
    """An item with expected answers that is not part of the comparison."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=100)
    reference = models.TextField(blank=True)
    context = models.TextField(blank=True)
    text = models.TextField(blank=True, help_text="The output shown (left output if pairwise).")
    text_b = models.TextField(blank=True, help_text="Pairwise studies: the right output.")
    expected = models.JSONField(default=dict, blank=True, help_text="{criterion key: value}")
    order = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True
        ordering = ["study", "order", "id"]

    def __str__(self) -> str:
        return self.key


class CalibrationItem(ControlItem):
    """Burn-in: shown first, in order, with feedback; stored but excluded from analysis."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="calibration_items")
    feedback = models.TextField(blank=True)

    class Meta(ControlItem.Meta):
        constraints = [
            models.UniqueConstraint(fields=["study", "key"], name="calibration_key_unique"),
        ]


class AttentionCheck(ControlItem):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="attention_checks")

    class Meta(ControlItem.Meta):
        constraints = [
            models.UniqueConstraint(fields=["study", "key"], name="attention_key_unique"),
        ]
