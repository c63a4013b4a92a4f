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
class Question:
    """One question of a rater's page: its criterion, the choices as the rater sees them
    (None where nothing is picked), the answer so far, and for kinds that judge a tuple the
    letters of the outputs shown. Its kind says which template shows it and what that template
    needs (`widget`)."""

    criterion: Criterion
    choices: list[rules.ChoiceView] | None  # None: nothing to pick (free text, a slider...)
    answer: str
    letters: str = ""  # kinds that judge a tuple: the letters of the outputs shown

    @property
    def kind(self) -> rules.AnswerKind:
        return self.criterion.rule.spec

    @property
    def template(self) -> str:
        """The kind's own question template (templates/annotation/questions/<kind>.html)."""
        return self.kind.template

    @property
    def widget(self) -> dict[str, object] | None:
        """What the kind's template needs beyond the choices (a slider's range, a ranking's
        rows...), in the active language; None where it needs nothing or cannot show it yet
        (a tuple's rows before its letters are known: the template shows a text box)."""
        return self.kind.widget(self.criterion.rule, self.answer, self.letters, gettext)

    @property
    def depends_on(self) -> str:
        parent = self.criterion.show_if_criterion
        return parent.key if parent else ""

    @property
    def depends_values(self) -> str:
        return "|".join(str(v) for v in self.criterion.show_if_values)


def question_choices(criterion: Criterion, sides: tuple[str, str] = ("A", "B")
                     ) -> list[rules.ChoiceView] | None:
    """The choices of `criterion` as the rater sees them (label and keyboard key), in the
    active language; `sides`: what the study calls outputs A and B (its `output_a` and
    `output_b` labels). None where answers are not picked from a list."""
    return criterion.rule.spec.choice_views(criterion.rule, sides, gettext)


def question_of(criterion: Criterion, sides: tuple[str, str], answer: str = "",
                letters: str = "") -> Question:
    """The question of `criterion` on a page showing the outputs `letters` (kinds that judge
    a tuple read them; others ignore them)."""
    shows_tuple = criterion.rule.spec.shows == rules.TUPLE
    return Question(criterion, question_choices(criterion, sides), answer,
                    letters if shows_tuple else "")


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
    rules_ = [c.rule for c in criteria if c.rule.spec.marks_spans]
    if not rules_:
        return ()
    return ("output", "reference") if any(r.span_reference for r in rules_) else ("output",)


def slot_texts(slot: AssignmentSlot) -> tuple[str, str, str, str]:
    """(reference, context, text, text_b) of a slot: its output(s) and item, or the control
    item of a calibration or attention slot. Never the system."""
    if slot.kind == AssignmentSlot.Kind.TARGET:
        assert slot.output is not None, "a target slot shows an output"
        item = slot.output.item
        return (item.reference, item.context, slot.output.text,
                slot.output_b.text if slot.output_b else "")
    control = slot.calibration_item or slot.attention_check
    assert control is not None, "a slot other than a target shows a control item"
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
        questions=[question_of(criterion, study_sides(study), answers.get(criterion.key, ""),
                               letters)
                   for criterion in criteria],
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


def answer_label(criterion: Criterion, value: str, sides: tuple[str, str]) -> str:
    """An answer as a practice item's feedback shows it (its choice's label, as its kind
    words it), or the value itself where it is not a choice."""
    for choice in question_choices(criterion, sides) or []:
        if choice.value == value:
            return criterion.rule.spec.feedback_label(value, choice.label)
    return value or gettext("(no answer)")


def calibration_feedback(slot: AssignmentSlot) -> Feedback:
    """The rater's answers to a practice item beside the expected ones, as labels."""
    control = slot.calibration_item
    assert control is not None, "feedback is asked for a calibration slot"
    given = dict(Judgment.objects.filter(slot=slot).values_list("criterion__key", "value"))
    study = slot.assignment.study
    criteria = {c.key: c for c in study.criteria.all()}
    sides = study_sides(study)
    lines = [
        FeedbackLine(criteria[key].prompt,
                     answer_label(criteria[key], given.get(key, ""), sides),
                     answer_label(criteria[key], str(value), sides),
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
