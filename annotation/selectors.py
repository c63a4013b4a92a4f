"""What rater pages show. Nothing here returns a system name or id: raters are blinded."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import markdown
import nh3
from django.db.models import Count, Q
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from evalstudy import criteria as rules
from evalstudy.models import Assignment, AssignmentSlot, Criterion, Rater, Study

from .alignment import alignment_for
from .media import MediaView, slot_media
from .models import Judgment


def render_markdown(text: str) -> SafeString:
    """Researcher-written Markdown as sanitised HTML (tables allowed, scripts never)."""
    return mark_safe(_sanitised_html(text or ""))  # noqa: S308 - nh3 has removed anything unsafe


@functools.lru_cache(maxsize=256)
def _sanitised_html(text: str) -> str:
    # A pure function of the text, asked for on every rating page: kept per process, by text.
    return nh3.clean(markdown.markdown(text, extensions=["tables", "sane_lists"]))


@dataclass
class StudyCard:
    study: Study
    done: int
    total: int
    state: str

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0


def rater_study_cards(rater: Rater | None) -> list[StudyCard]:
    """The studies that admitted the rater (invitation or crowd entry) and that are open or
    hold their seat, with progress. No other study is listed: raters of one lab never see the
    studies of another."""
    if rater is None:
        return []
    seats = {
        seat.study_id: seat for seat in
        Assignment.objects.filter(rater=rater, source=Assignment.Source.DESIGN)
        .annotate(total=Count("slots"),
                  done=Count("slots", filter=Q(slots__completed_at__isnull=False)))
    }
    enrolled = (Study.objects.filter(enrollments__rater=rater,
                                     enrollments__invitation_pending=False)
                .exclude(status=Study.Status.DRAFT).order_by("-created_at"))
    if rater.study_id is not None:
        enrolled = enrolled.filter(pk=rater.study_id)
    cards: list[StudyCard] = []
    for study in enrolled:
        seat = seats.get(study.pk)
        if seat is not None:
            cards.append(StudyCard(study, seat.done, seat.total, seat.state))
        elif study.status == Study.Status.OPEN:
            cards.append(StudyCard(study, 0, 0, "new"))
    return cards


def rater_invitations(rater: Rater | None) -> list[Study]:
    """Studies that invited this account holder and wait for their answer (not drafts)."""
    if rater is None or rater.user_id is None:
        return []
    return list(Study.objects.filter(enrollments__rater=rater,
                                     enrollments__invitation_pending=True)
                .exclude(status=Study.Status.DRAFT).order_by("-created_at"))


@dataclass
class Choice:
    value: str
    label: str
    key: str  # keyboard shortcut


@dataclass
class Question:
    criterion: Criterion
    choices: list[Choice] | None  # None: free text
    answer: str
    letters: str = ""  # ranking and best-worst questions: the letters of the outputs shown

    @property
    def ranks(self) -> list[dict[str, object]] | None:
        """A ranking question's rows: each output's letter and the rank given (if any), with
        the ranks 1..k to choose from; None for other kinds."""
        if self.criterion.kind != rules.RANKING or not self.letters:
            return None
        given: dict[str, str] = {}
        if "=" in self.answer:  # as posted: "A=2;B=1"
            for piece in self.answer.split(";"):
                letter, _, rank = piece.partition("=")
                given[letter] = rank
        elif self.answer:
            given = {letter: str(rank) for rank, letter in
                     enumerate(rules.ranking_of(self.answer), start=1)}
        choices = [str(rank) for rank in range(1, len(self.letters) + 1)]
        return [{"letter": letter, "rank": given.get(letter, ""), "choices": choices}
                for letter in self.letters]

    @property
    def best_worst(self) -> dict[str, str] | None:
        """A best-worst question's letters and the answer given; None for other kinds."""
        if self.criterion.kind != rules.BEST_WORST or not self.letters:
            return None
        parts = dict(piece.partition("=")[::2] for piece in self.answer.split(";")
                     if "=" in piece)
        return {"letters": self.letters, "best": parts.get("best", ""),
                "worst": parts.get("worst", "")}

    @property
    def depends_on(self) -> str:
        parent = self.criterion.show_if_criterion
        return parent.key if parent else ""

    @property
    def depends_values(self) -> str:
        return "|".join(str(v) for v in self.criterion.show_if_values)

    @property
    def slider(self) -> dict[str, object] | None:
        """A slider's range, its middle (where the handle starts: no answer until moved) and
        its anchor labels in order; None for other kinds."""
        if self.criterion.kind != rules.SLIDER:
            return None
        low, high = self.criterion.rule.slider_range
        labels = self.criterion.labels if isinstance(self.criterion.labels, dict) else {}
        anchors = sorted(((int(point), text) for point, text in labels.items()
                          if str(point).lstrip("-").isdigit()), key=lambda pair: pair[0])
        return {"min": low, "max": high, "middle": (low + high) // 2,
                "anchors": [{"value": v, "label": t} for v, t in anchors]}

    @property
    def span(self) -> dict[str, object] | None:
        """A span criterion's error categories and severities (with their weights); None
        for other kinds."""
        if self.criterion.kind != rules.SPAN:
            return None
        rule = self.criterion.rule
        return {"categories": list(rule.options),
                # MQM's own severity names are translated for the rater; a study's are its own.
                "severities": [{"name": name, "weight": weight,
                                "label": gettext(name) if name in rules.MQM_DEFAULT_WEIGHTS
                                else name}
                               for name, weight in rule.weights.items()],
                "reference": rule.span_reference}


# The keys of the first eleven choices: 1..9, then 0 for the tenth and - for the eleventh (a
# Likert scale has up to 11 points), in the order of the keyboard's number row.
DIGIT_KEYS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "-")


def _digit_key(index: int) -> str:
    return DIGIT_KEYS[index] if index < len(DIGIT_KEYS) else ""


# The keys of a pairwise criterion's answers: a, b, t (tie), g (both good), x (both bad: "b"
# is taken by output B); none of them is a media player's (p, r, j, s) or the span marker's (m).
PAIRWISE_KEYS = {"A": "a", "B": "b", rules.TIE: "t", rules.BOTH_GOOD: "g", rules.BOTH_BAD: "x"}


def _pairwise_choice(value: str, sides: tuple[str, str]) -> tuple[str, str]:
    """(label, key) of a pairwise answer, in the active language."""
    if value == rules.TIE:
        label = gettext("Tie")
    elif value == rules.BOTH_GOOD:
        label = gettext("Both are good")
    elif value == rules.BOTH_BAD:
        label = gettext("Both are bad")
    else:
        label = gettext("%(side)s is better") % {"side": sides[0] if value == "A" else sides[1]}
    return label, PAIRWISE_KEYS[value]


def _choices(criterion: Criterion, sides: tuple[str, str] = ("A", "B")) -> list[Choice] | None:
    """The choices of `criterion` as the rater sees them, in the active language; `sides`:
    what the study calls outputs A and B (its `output_a` and `output_b` labels)."""
    values = criterion.rule.choices()
    if values is None:
        return None
    labels = criterion.labels or {}
    out = []
    for index, value in enumerate(values):
        if criterion.kind == "severity":
            names = labels if isinstance(labels, list) and len(labels) == 3 else (
                [gettext(label) for label in rules.SEVERITY_DEFAULT_LABELS]
            )
            label, key = names[index], value
        elif criterion.kind == "likert":
            anchor = labels.get(value, "") if isinstance(labels, dict) else ""
            label, key = anchor, _digit_key(index)
        elif criterion.kind == "binary":
            label, key = (gettext("Yes") if value == "yes" else gettext("No")), value[0]
        elif criterion.kind == "pairwise":
            label, key = _pairwise_choice(value, sides)
        else:
            label, key = value, _digit_key(index)
        out.append(Choice(value, label, key))
    return out


@dataclass
class SlotView:
    slot: AssignmentSlot
    kind: str
    reference: str
    context: str
    text: str
    text_b: str
    position: int
    total: int
    questions: list[Question]
    # The word alignment under a single output, when the study shows it (annotation.alignment).
    alignment: list[dict[str, str]] | None = None
    # The panes a span criterion marks ("output", and "reference" where it may): the page makes
    # them markable and carries their exact text.
    marked: tuple[str, ...] = ()
    # The slot's audio or video, with signed URLs for its rater (annotation.media).
    media: list[MediaView] = field(default_factory=list)
    # A ranking or best-worst slot's outputs, in display order (empty for other slots).
    panes: list[Pane] = field(default_factory=list)

    @property
    def text_sha256(self) -> str:
        """The digest of the output shown, which span answers carry (evalstudy.criteria)."""
        return rules.text_sha256(self.text)


def marked_sides(criteria: Iterable[Criterion]) -> tuple[str, ...]:
    """The panes raters mark errors in (span criteria): "output", and "reference" where a span
    criterion allows it; the page makes them markable and carries their exact text."""
    rules_ = [c.rule for c in criteria if c.kind == rules.SPAN]
    if not rules_:
        return ()
    return ("output", "reference") if any(r.span_reference for r in rules_) else ("output",)


def slot_texts(slot: AssignmentSlot) -> tuple[str, str, str, str]:
    """(reference, context, text, text_b) of a slot: its output(s) and item, or the control
    item of a calibration or attention slot. Never the system."""
    if slot.kind == AssignmentSlot.Kind.TARGET:
        item = slot.output.item
        return (item.reference, item.context, slot.output.text,
                slot.output_b.text if slot.output_b else "")
    control = slot.calibration_item or slot.attention_check
    return control.reference, control.context, control.text, control.text_b


def slot_view(slot: AssignmentSlot) -> SlotView:
    """The texts and questions of one slot, and any answers already given (for revisions)."""
    reference, context, text, text_b = slot_texts(slot)
    study = slot.assignment.study
    answers = dict(
        Judgment.objects.filter(slot=slot).values_list("criterion__key", "value")
    )
    shown_reference = reference if study.reference_shown else ""
    criteria = list(study.criteria.select_related("show_if_criterion").order_by("order", "id"))
    panes = tuple_panes(slot, study)
    letters = "".join(pane.letter for pane in panes)
    return SlotView(
        panes=panes,
        media=slot_media(slot),
        marked=marked_sides(criteria),
        alignment=None if text_b else alignment_for(study, shown_reference, text),
        slot=slot, kind=slot.kind, reference=shown_reference,
        context=context, text=text, text_b=text_b, position=slot.position + 1,
        total=slot.assignment.slots.count(),
        questions=[
            Question(criterion, _choices(criterion, study_sides(study)),
                     answers.get(criterion.key, ""),
                     letters if criterion.kind in rules.TUPLE_KINDS else "")
            for criterion in criteria
        ],
    )


@dataclass(frozen=True)
class Pane:
    """One output of a ranking or best-worst slot as shown: its letter, what the study calls
    it and its text (never its system)."""

    letter: str
    label: str
    text: str


def tuple_panes(slot: AssignmentSlot, study: Study) -> list[Pane]:
    """The outputs a ranking or best-worst slot shows, in display order; [] for other slots."""
    if not slot.shown_outputs:
        return []
    from evalstudy.models import Output

    texts = dict(Output.objects.filter(pk__in=slot.shown_outputs).values_list("id", "text"))
    labels = study.labels
    return [Pane(letter, labels.get(f"output_{letter.lower()}", letter), texts[pk])
            for letter, pk in zip(rules.LETTERS, slot.shown_outputs, strict=False)]


@dataclass
class FeedbackLine:
    prompt: str
    given: str
    expected: str
    correct: bool


@dataclass
class Feedback:
    lines: list[FeedbackLine]
    explanation: str

    @property
    def all_correct(self) -> bool:
        return all(line.correct for line in self.lines)


def study_sides(study: Study) -> tuple[str, str]:
    """What `study` calls outputs A and B (its labels, else the defaults)."""
    labels = study.labels
    return labels["output_a"], labels["output_b"]


def _label(criterion: Criterion, value: str, sides: tuple[str, str]) -> str:
    for choice in _choices(criterion, sides) or []:
        if choice.value == value:
            if criterion.kind in ("severity", "likert"):
                return f"{value}: {choice.label}" if choice.label else value
            return choice.label
    return value or gettext("(no answer)")


def calibration_feedback(slot: AssignmentSlot) -> Feedback:
    """The rater's answers to a practice item beside the expected ones, as labels."""
    control = slot.calibration_item
    given = dict(Judgment.objects.filter(slot=slot).values_list("criterion__key", "value"))
    study = slot.assignment.study
    criteria = {c.key: c for c in study.criteria.all()}
    sides = study_sides(study)
    lines = [
        FeedbackLine(criteria[key].prompt, _label(criteria[key], given.get(key, ""), sides),
                     _label(criteria[key], str(value), sides),
                     rules.expected_met(given.get(key), value))
        for key, value in control.expected.items() if key in criteria
    ]
    return Feedback(lines, control.feedback)


def previous_revisable_slot(slot: AssignmentSlot) -> AssignmentSlot | None:
    """The completed target slot just before `slot` that the rater may go back to."""
    if not slot.assignment.study.allow_revision:
        return None
    return (
        AssignmentSlot.objects.filter(
            assignment_id=slot.assignment_id, position__lt=slot.position,
            kind=AssignmentSlot.Kind.TARGET, completed_at__isnull=False,
        ).order_by("-position").first()
    )
