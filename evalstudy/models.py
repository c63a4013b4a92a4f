"""The study model: what is compared, on which items, by which criteria, and who rates what.

Invariants live in the database where a constraint can hold them (one output per item and
system, one seat per rater and study, ordered unique slots). Everything that needs a query
across rows (an output's system belongs to the item's study, a study is complete enough to
open) is checked by the services.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from . import criteria as rules
from .spec.fields import (
    RATER_LABEL_DEFAULTS,
    RATER_LANGUAGES,
    rater_labels_clean,
)


def _new_seed() -> int:
    return secrets.randbits(62)


def _rater_labels_validate(value) -> None:
    from django.core.exceptions import ValidationError

    try:
        rater_labels_clean(value)
    except ValueError as error:
        raise ValidationError(str(error)) from None


def _new_token() -> str:
    return secrets.token_urlsafe(24)


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
        default=dict, blank=True, validators=[_rater_labels_validate],
        help_text="What raters see the panes, buttons and end page called, e.g. "
                  '{"reference": "What was said", "output": "Transcript"}. Keys: '
                  + ", ".join(RATER_LABEL_DEFAULTS) + "; those left out keep their defaults.",
    )
    encoder_path = models.CharField(
        max_length=500, blank=True,
        help_text="Local Hugging Face model directory for the model-backed metrics of this "
                  "study (blank: the installation's default encoder).",
    )
    seed = models.BigIntegerField(default=_new_seed, help_text="Seeds every list's order.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="owned_studies",
    )
    collaborators = models.ManyToManyField(
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


class Criterion(models.Model):
    # Transitional (issue 28): the kinds' names as choices, until every reader asks the kind.
    Kind = models.TextChoices("Kind", [(name.upper(), (name, label))
                                       for name, label in rules.kind_choices()])

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
        if self.show_if_criterion_id is None:
            return True
        answer = answers.get(self.show_if_criterion.key)
        return answer is not None and answer in [str(v) for v in self.show_if_values]


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


class Rater(models.Model):
    """Anyone or anything that gives judgments: people and proxies go through the same code.

    Tenancy: a rater belongs to the study that admitted it (`study`): personal-link invitees,
    crowd participants (one per study and participant id, so the same Prolific id in two
    studies is two pseudonymous raters), imported raters and proxy judges. Only account
    holders (`user`) are installation-wide; they sign in and see the studies that enrolled
    them. An entry link therefore works in its own study only, and never for an account.
    """

    class Kind(models.TextChoices):
        SLP = "slp", "Speech-language pathologist"
        CROWD = "crowd", "Crowd worker"
        EXPERT = "expert", "Expert"
        LLM = "llm", "LLM judge"
        METRIC = "metric", "Automatic metric / learned proxy"

    class Origin(models.TextChoices):
        INVITED = "invited", "Invited (personal link)"
        CROWD = "crowd", "Crowd entry URL"
        IMPORTED = "imported", "Imported judgments"
        PROXY = "proxy", "Proxy judge"
        ACCOUNT = "account", "Account holder"

    HUMAN_KINDS = (Kind.SLP, Kind.CROWD, Kind.EXPERT)
    # Personal data hidden from the study's other collaborators (e.g. an email in the
    # metadata, as the rater admin and API hide it): the audit trail says it changed, never to
    # what (kit.audit).
    AUDIT_REDACTED = ("metadata",)

    kind = models.CharField(max_length=10, choices=Kind.choices)
    # How the rater came in. A crowd entry URL resumes only raters it created: an invited
    # rater's participant id is not a way in for whoever knows it.
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.INVITED)
    study = models.ForeignKey(
        Study, null=True, blank=True, on_delete=models.CASCADE, related_name="own_raters",
        help_text="The study this rater belongs to (empty for account holders).",
    )
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="rater",
    )
    external_id = models.CharField(
        max_length=200, blank=True, help_text="E.g. a Prolific PID or a proxy's name."
    )
    display_name = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    access_token = models.CharField(
        max_length=64, unique=True, default=_new_token, editable=False,
        help_text="Secret of the rater's personal entry link (/enter/<token>/).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Identities are looked up within their study: a participant id says nothing
            # about who the same id is in another owner's study.
            models.UniqueConstraint(
                fields=["study", "kind", "external_id"],
                condition=Q(study__isnull=False) & ~Q(external_id=""),
                name="rater_external_id_unique_in_study",
            ),
            models.UniqueConstraint(
                fields=["kind", "external_id"],
                condition=Q(study__isnull=True) & ~Q(external_id=""),
                name="rater_external_id_unique_unscoped",
            ),
            # An account is installation-wide; tying it to one study would let that study's
            # owner manage a person who also works for other owners.
            models.CheckConstraint(
                condition=Q(user__isnull=True) | Q(study__isnull=True),
                name="rater_account_not_study_scoped",
            ),
        ]

    def __str__(self) -> str:
        return self.display_name or self.external_id or f"rater {self.pk}"

    @property
    def has_entry_link(self) -> bool:
        """Whether the personal entry link may be used: people without an account, of one
        study (a row left behind by a deleted account has no study: its old token, which
        owners could read while it was an account's, opens nothing)."""
        return self.is_human and self.user_id is None and self.study_id is not None

    @property
    def is_human(self) -> bool:
        return self.kind in self.HUMAN_KINDS


class Enrollment(models.Model):
    """A rater's participation in one study, before and beside their seat: consent, crowd
    platform ids, instructions seen, and whether they were stopped (screened out)."""

    class StopReason(models.TextChoices):
        SCREENING = "screening", "Failed the study's screening rules"
        ATTENTION = "attention", "Too many failed attention checks"
        DECLINED = "declined", "Did not give consent"
        CALIBRATION = "calibration", "Below the study's calibration pass mark"
        REOPENED = "reopened", "Seat reopened to someone else by the researcher"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="enrollments")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="enrollments")
    # An account holder enrolled by a researcher sees the invitation and accepts it first:
    # until then the study does not exist for them and they are not among its raters.
    invitation_pending = models.BooleanField(default=False)
    platform_study_id = models.CharField(max_length=100, blank=True)
    platform_session_id = models.CharField(max_length=100, blank=True)
    entered_at = models.DateTimeField(auto_now_add=True)
    consented_at = models.DateTimeField(null=True, blank=True)
    instructions_seen_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=12, choices=StopReason.choices, blank=True)
    # Excluded from the analysis by a researcher (reversible; the judgments stay stored).
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_reason = models.CharField(max_length=500, blank=True)
    excluded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "rater"], name="enrollment_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.rater} in {self.study}"


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


class AuditEvent(models.Model):
    """Who did what, when, to which study configuration or export. Append-only.

    Events outlive what they describe: the study link is SET_NULL and its slug is copied, and
    the target is a label + pk + repr rather than a foreign key, so deleting a study, a
    criterion or a user keeps the record of it.
    """

    class Action(models.TextChoices):
        CREATE = "create", "Create"
        UPDATE = "update", "Update"
        DELETE = "delete", "Delete"
        OPEN = "open", "Open"
        CLOSE = "close", "Close"
        BUILD = "build", "Build rater lists"
        IMPORT = "import", "Import"
        EXPORT = "export", "Export"
        ERASE = "erase", "Erase personal data"
        START = "start", "Start a run"

    class Source(models.TextChoices):
        ADMIN = "admin", "Admin"
        API = "api", "API"
        COMMAND = "command", "Management command"
        WEB = "web", "Web page"
        SYSTEM = "system", "System (beat, workers)"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    # Kept when the user is deleted: an audit trail must still say who it was.
    actor_repr = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=20, choices=Action.choices)
    study = models.ForeignKey(
        Study, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events",
    )
    study_slug = models.CharField(max_length=80, blank=True, db_index=True)
    target_type = models.CharField(max_length=100, blank=True, help_text="e.g. evalstudy.criterion")
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True,
                               help_text="field -> [before, after]; for exports: what was written")
    source = models.CharField(max_length=10, choices=Source.choices, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["study", "-at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_repr or '-'} {self.action} {self.target_repr}"


class ApiToken(models.Model):
    """A script's credential for the API. Only a SHA-256 hash of the secret is stored: a leaked
    database does not leak working tokens. A user may hold several (one per script/machine);
    revoking one is deleting its row."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for.")
    prefix = models.CharField(
        max_length=16, help_text="The secret's first characters, to tell tokens apart."
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Blank: never expires.")

    class Meta:
        ordering = ["user", "-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}... ({self.user}{', ' + self.name if self.name else ''})"


# The adaptive design's pre-registered plan and its checks (kept in their own module).
from .plan_models import StoppingCheck, StudyPlan  # noqa: E402,F401
