"""A study and who works on it: what is compared (its systems), how it is run (design, crowd
entry, quality control, media, the rater interface's language and labels), its owner and
collaborators."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from evalstudy.spec.fields import (
    RATER_LABEL_DEFAULTS,
    RATER_LANGUAGES,
    rater_labels_clean,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def new_seed() -> int:
    """A study's seed (every list's order is drawn from it)."""
    return secrets.randbits(62)


def rater_labels_validate(value) -> None:
    """The model's check of a study's own rater labels (evalstudy.spec.fields' rule)."""
    from django.core.exceptions import ValidationError

    try:
        rater_labels_clean(value)
    except ValueError as error:
        raise ValidationError(str(error)) from None


class Study(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    class Design(models.TextChoices):
        LATIN_SQUARE = "latin_square", "Latin square (each rater sees each item once)"
        CROSSED = "crossed", "Crossed (every rater rates every output)"
        PAIRWISE = "pairwise", "Pairwise (two outputs side by side)"
        RANKING = "ranking", "Ranking (several outputs of an item, ordered best to worst)"
        BEST_WORST = "best_worst", "Best-worst scaling (tuples of outputs: pick best and worst)"
        ADAPTIVE = "adaptive", ("Adaptive pairwise (pairs served where the pre-registered plan's "
                                "contrasts are least certain)")

    slug = models.SlugField(max_length=80, unique=True)
    title = models.CharField(max_length=200)
    instructions = models.TextField(blank=True, help_text="Markdown, shown before rating.")
    consent_text = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    design = models.CharField(max_length=20, choices=Design.choices, default=Design.LATIN_SQUARE)
    ratings_per_output = models.PositiveIntegerField(
        default=1, help_text="How many raters judge each output (each list gets this many seats)."
    )
    items_per_rater = models.PositiveIntegerField(
        null=True, blank=True, help_text="Split each list into parts of at most this many items."
    )
    tuple_size = models.PositiveSmallIntegerField(
        null=True, blank=True,
        help_text="Ranking and best-worst designs: how many outputs of an item a rater sees "
                  "at once (2 to 6; blank: every system for ranking, 4 for best-worst).",
    )
    randomise_order = models.BooleanField(default=True)
    reference_shown = models.BooleanField(
        default=True, help_text="Show the reference (ground truth): reference-based evaluation."
    )
    completion_url = models.URLField(max_length=500, blank=True)
    completion_code = models.CharField(max_length=64, blank=True)
    screen_out_url = models.URLField(
        max_length=500, blank=True,
        help_text="Where screened-out crowd participants are sent (e.g. Prolific's screen-out).",
    )
    screen_out_code = models.CharField(max_length=64, blank=True)
    crowd_platform = models.CharField(
        max_length=10, default="none", choices=[
            ("none", "None: no crowd entry (personal links and accounts only)"),
            ("prolific", "Prolific (participant ids of 24 hexadecimal characters)"),
            ("mturk", "Amazon Mechanical Turk (worker ids: A and 9 to 20 capitals or digits)"),
            ("other", "Another platform (ids of letters, digits, - and _)"),
        ],
        help_text="Where crowd participants come from: the crowd URL refuses a participant id "
                  "that is not in this platform's format (none: the study has no crowd URL).",
    )
    crowd_no_codes = models.BooleanField(
        default=False,
        help_text="Open a crowd study without completion and screen-out codes, on purpose "
                  "(the platform pays without them).",
    )
    excluded_studies = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="+",
        help_text="Screening: participants who took part in any of these are screened out.",
    )
    lease_minutes = models.PositiveIntegerField(
        default=60, help_text="An assignment idle this long is handed to the next rater."
    )
    attention_check_every = models.PositiveIntegerField(
        default=0, help_text="One attention check per this many target items (0: none)."
    )
    attention_fail_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Stop a rater after this many failed attention checks."
    )
    # Live quality control (annotation.quality, annotation.monitoring).
    speeder_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0)],
        help_text="Flag a rater as a speeder when their median seconds per item is below this "
                  "(blank: 0.3 x the study's own median seconds per item).",
    )
    calibration_pass_mark = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share (0 to 1) of the practice items a rater must answer as expected before "
                  "the real items are served; below it they are stopped (blank: no gate).",
    )
    # Agreement over time (annotation.drift): a rater whose agreement with the others over
    # their last `agreement_window` judgments falls below the threshold raises an alert.
    agreement_alert_threshold = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Alert when a rater's agreement with the other raters (share of answers "
                  "matching the others' majority) over a window of judgments falls below this "
                  "(blank: no alert).",
    )
    agreement_window = models.PositiveIntegerField(
        default=20, validators=[MinValueValidator(5)],
        help_text="How many of a rater's judgments make one window of agreement over time.",
    )
    # Blindness audit (evalstudy.blindness): besides the systems' names and aliases and a
    # built-in list of model and vendor names.
    identity_terms = models.JSONField(
        default=list, blank=True,
        help_text="Blindness audit: further words or phrases that would reveal which system "
                  "wrote an output (e.g. a product name, a signature line).",
    )
    allow_revision = models.BooleanField(default=True)
    alignment_shown = models.BooleanField(
        default=False,
        help_text="Show raters the word alignment of each output with its reference "
                  "(replaced, missing and added words marked). Off by default: it changes "
                  "how raters judge.",
    )
    # Media stimuli (evalstudy.media): how the player behaves. The server holds raters to the
    # first two (annotation.media), whatever a browser does.
    media_must_finish = models.BooleanField(
        default=False,
        help_text="Raters must hear (or watch) each item's media to the end before they can "
                  "answer it.",
    )
    media_max_plays = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="How many times a rater may play each item's media (blank: no limit).",
    )
    media_autoplay = models.BooleanField(
        default=False, help_text="Start playing an item's media as soon as the item is shown.",
    )
    language = models.CharField(
        max_length=10, default="en",
        choices=[(code, code) for code in RATER_LANGUAGES],
        help_text="The language of the rater interface (buttons, messages, default labels); "
                  "the study's own texts are shown as written.",
    )
    rater_labels = models.JSONField(
        default=dict, blank=True, validators=[rater_labels_validate],
        help_text="What raters see the panes, buttons and end page called, e.g. "
                  '{"reference": "What was said", "output": "Transcript"}. Keys: '
                  + ", ".join(RATER_LABEL_DEFAULTS) + "; those left out keep their defaults.",
    )
    encoder_path = models.CharField(
        max_length=500, blank=True,
        help_text="Local Hugging Face model directory for the model-backed metrics of this "
                  "study (blank: the installation's default encoder).",
    )
    seed = models.BigIntegerField(default=new_seed, help_text="Seeds every list's order.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="owned_studies",
    )
    # Annotated: the plugin cannot follow a `through` model named by a string.
    collaborators: models.ManyToManyField[User, StudyCollaborator] = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="StudyCollaborator", blank=True,
        related_name="shared_studies",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ratings_per_output__gte=1), name="study_ratings_per_output_positive"
            ),
            models.CheckConstraint(
                condition=Q(items_per_rater__isnull=True) | Q(items_per_rater__gte=1),
                name="study_items_per_rater_positive",
            ),
            models.CheckConstraint(
                condition=Q(tuple_size__isnull=True) | Q(tuple_size__gte=2, tuple_size__lte=6),
                name="study_tuple_size_range",
            ),
            # The rater pages speak only a language they have translations for.
            models.CheckConstraint(
                condition=Q(language__in=RATER_LANGUAGES), name="study_language_translated",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def labels(self) -> dict[str, str]:
        """Every label raters see in this study: its own words, and for the rest the defaults
        in the active language. What was stored was checked on the way in; anything unusable
        falls back to the defaults rather than break a rater's page."""
        from django.utils.translation import gettext

        try:
            own = rater_labels_clean(self.rater_labels)
        except ValueError:
            own = {}
        return {**{key: gettext(text) for key, text in RATER_LABEL_DEFAULTS.items()}, **own}


class StudyCollaborator(models.Model):
    class Role(models.TextChoices):
        EDITOR = "editor", "Editor"
        VIEWER = "viewer", "Viewer"

    study = models.ForeignKey(Study, on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "user"], name="collaborator_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) on {self.study}"


class System(models.Model):
    """A system under comparison. Never shown to raters: their pages see outputs only."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="systems")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["study", "name"]
        constraints = [
            models.UniqueConstraint(fields=["study", "name"], name="system_name_unique"),
        ]

    def __str__(self) -> str:
        return self.name
