"""Rater-side REST endpoints (under /api/v1/rater/): my slots, my next slot, submit answers;
and, for researchers, a study's progress (the monitor page as JSON).

A rater is identified by `Authorization: Rater <entry token>`, by an account with a rater
profile (token or session), or by the browser session their entry link opened
(`annotation.auth.rater_for_request`). Requests identified by the browser session
(entry link or signed-in account) must carry the CSRF token; token requests need none. Every
slot is looked up among the rater's own slots, so another rater's slot is a 404 whatever its
id. System names and ids never appear.
Throttled per rater (scope "rater").
"""

from __future__ import annotations

from django.db.models import Q
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import APIException
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.api.base import StudyScopedView
from evalstudy.audit import API
from evalstudy.models import Assignment, AssignmentSlot, Study
from evalstudy.permissions import EDITOR
from evalstudy.services import (
    AssignmentExpired,
    NotEnrolled,
    StudyFull,
    StudyNotOpen,
    assignment_next,
    enrollment_of,
)
from kit.openapi import READ_ERRORS, errors
from kit.rest import enforce_csrf

from . import flow, rater_actions, recalibration
from .auth import IsRater, RaterThrottle
from .behaviour import slot_behaviour_record
from .idempotency import (
    MAX_KEY_LENGTH,
    IdempotencyKeyReused,
    idempotent_call,
    request_fingerprint,
)
from .models import Judgment
from .monitor_selectors import study_monitor
from .selectors import slot_texts, tuple_panes
from .services import SubmissionInvalid, SubmissionRefused, judgment_submit


class StateConflict(APIException):
    status_code = 409
    default_code = "conflict"
    default_detail = "Not possible in the study's or seat's current state."


class KeyReused(APIException):
    status_code = 422
    default_code = "idempotency_key_reused"
    default_detail = "This Idempotency-Key was used for a different request."


class RaterView(APIView):
    permission_classes = [IsRater]
    throttle_classes = [RaterThrottle]
    throttle_scope = "rater"

    def check_permissions(self, request):
        super().check_permissions(request)
        # A rater known only from the browser session (entry link) is not a DRF-authenticated
        # user, so SessionAuthentication never ran its CSRF check: a cross-site form could
        # act for them. Token requests (request.auth set) carry no ambient credential.
        if request.auth is None:
            enforce_csrf(request)


class QuestionSerializer(serializers.Serializer):
    key = serializers.CharField()
    prompt = serializers.CharField()
    kind = serializers.CharField()
    # The serializer's metaclass moves declared fields out of the class, so this one does not
    # hide Field.required at run time; the stubs see the class attribute only.
    required = serializers.BooleanField()  # type: ignore[assignment]
    choices = serializers.ListField(child=serializers.CharField(), allow_null=True,
                                    help_text="Allowed values; null for free text.")
    show_if_criterion = serializers.CharField(allow_null=True)
    show_if_values = serializers.ListField(child=serializers.CharField())


class SlotSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    position = serializers.IntegerField()
    kind = serializers.CharField(
        help_text='"item" until the slot is answered; then "target", "calibration" or '
                  '"attention" (a check that announced itself would check nothing).')
    completed = serializers.BooleanField()
    reference = serializers.CharField(help_text="Empty when the study hides references.")
    # Declared fields leave the class (the metaclass): this does not hide Field.context at run
    # time; the stubs see the class attribute only.
    context = serializers.CharField()  # type: ignore[assignment]
    text = serializers.CharField()
    text_b = serializers.CharField(help_text="Pairwise studies: the output shown as B.")
    answers = serializers.DictField(child=serializers.CharField())
    outputs = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        help_text='Ranking and best-worst slots: every output shown, [{"letter", "label", '
                  '"text"}] in display order; answers name them by letter ("B>A>C", '
                  '"best=A;worst=C"). Empty for other slots.')


UNANSWERED_KIND = "item"


def _questions(study: Study) -> list[dict]:
    criteria = study.criteria.select_related("show_if_criterion").order_by("order", "id")
    return [{
        "key": c.key, "prompt": c.prompt, "kind": c.kind, "required": c.required,
        "choices": c.rule.choices(),
        "show_if_criterion": c.show_if_criterion.key if c.show_if_criterion else None,
        "show_if_values": [str(v) for v in c.show_if_values],
    } for c in criteria]


def _slot_rows(slots, study: Study) -> list[dict]:
    """Slots as raters see them: texts and their own answers, never systems."""
    slots = list(slots.select_related("output__item", "output_b", "calibration_item",
                                      "attention_check"))
    answers: dict[int, dict[str, str]] = {}
    for slot_id, key, value in Judgment.objects.filter(slot__in=slots).values_list(
        "slot_id", "criterion__key", "value"
    ):
        answers.setdefault(slot_id, {})[key] = value
    rows = []
    for slot in slots:
        reference, context, text, text_b = slot_texts(slot)
        rows.append({
            "id": slot.pk, "position": slot.position + 1,
            "kind": slot.kind if slot.completed_at is not None else UNANSWERED_KIND,
            "completed": slot.completed_at is not None,
            "reference": reference if study.reference_shown else "", "context": context,
            "text": text, "text_b": text_b, "answers": answers.get(slot.pk, {}),
            # Ranking and best-worst slots: every output shown, in order (A, B, C, ...); their
            # answers name the outputs by these letters.
            "outputs": [{"letter": pane.letter, "label": pane.label, "text": pane.text}
                        for pane in tuple_panes(slot, study)],
        })
    return rows


def _rater_study(rater, slug: str) -> tuple[Study, Assignment | None]:
    """The study and the rater's live seat in it; 404 unless the study admitted the rater
    (invitation or crowd entry) and is not a draft: every other study does not exist for
    them, whoever owns it."""
    study = Study.objects.exclude(status=Study.Status.DRAFT).filter(slug=slug).first()
    if study is None:
        raise Http404("No such study.")
    try:
        enrollment_of(study=study, rater=rater)
    except NotEnrolled:
        raise Http404("No such study.") from None
    seat = (Assignment.objects.filter(study=study, rater=rater)
            .exclude(state=Assignment.State.EXPIRED).first())
    return study, seat


class MySlots(RaterView):
    """My slots in a study so far (answered or served), in order, with my answers, how many
    there are in all, and the questions to answer. Slots not yet served are not listed: their
    texts would announce the attention checks ahead."""

    @extend_schema(responses={200: inline_serializer("MySlots", fields={
        "study": serializers.CharField(), "seat_state": serializers.CharField(allow_null=True),
        "total": serializers.IntegerField(help_text="Slots in my seat, served or not."),
        "questions": QuestionSerializer(many=True), "slots": SlotSerializer(many=True)}),
        **errors(401, 403, 404, 429)})
    def get(self, request, slug):
        study, seat = _rater_study(request.rater, slug)
        if seat is None:
            slots, total = AssignmentSlot.objects.none(), 0
        else:
            total = seat.slots.count()
            slots = seat.slots.filter(Q(served_at__isnull=False) | Q(completed_at__isnull=False)
                                      ).order_by("position")
        return Response({"study": study.slug, "seat_state": seat.state if seat else None,
                         "total": total, "questions": _questions(study),
                         "slots": _slot_rows(slots, study)})


class NextSlot(RaterView):
    """Claim a seat if needed and get my next slot to judge.

    `step` is "rate" (with `slot`), "done" (my list is finished), or what must happen first in
    the browser: "consent", "instructions", or "stopped"."""

    @extend_schema(request=None, responses={200: inline_serializer("NextSlot", fields={
        "step": serializers.ChoiceField(["rate", "done", "consent", "instructions",
                                         "stopped"]),
        "slot": SlotSerializer(allow_null=True)}), **errors(401, 403, 404, 409, 429)})
    def post(self, request, slug):
        study, _ = _rater_study(request.rater, slug)
        step = flow.next_step(study=study, rater=request.rater)
        if step.name != "rate":
            return Response({"step": step.name, "slot": None})
        try:
            slot = assignment_next(study=study, rater=request.rater)
        except (StudyFull, StudyNotOpen, AssignmentExpired) as error:
            raise StateConflict(str(error)) from None
        if slot is None:
            return Response({"step": "done", "slot": None})
        row = _slot_rows(AssignmentSlot.objects.filter(pk=slot.pk), study)[0]
        return Response({"step": "rate", "slot": row})


SUBMIT_RESULT = inline_serializer("SubmitResult", fields={
    "slot": serializers.IntegerField(), "created": serializers.IntegerField(),
    "revised": serializers.IntegerField(), "unchanged": serializers.IntegerField(),
    "removed": serializers.IntegerField(), "stopped": serializers.BooleanField(),
})


class SubmitJudgments(RaterView):
    """Answer one of my slots. Idempotent twice over: the slot+criterion key stores one
    judgment whatever the retries, and an `Idempotency-Key` header replays the first response
    for the same key and body (422 for the same key with another body). 201 when something
    was stored, 200 when the answers were already stored."""

    @extend_schema(
        parameters=[OpenApiParameter("Idempotency-Key", str, location=OpenApiParameter.HEADER,
                                     description="Any unique string per intended request "
                                                 f"(at most {MAX_KEY_LENGTH} characters).")],
        request=inline_serializer("Answers", fields={
            "answers": serializers.DictField(child=serializers.CharField(allow_blank=True),
                                             help_text="criterion key -> value"),
            "behaviour": serializers.DictField(
                child=serializers.IntegerField(min_value=0), required=False,
                help_text="Optional integrity counters of the answer, all five or none: "
                          "pastes, focus_losses, seconds_away, keystrokes, inputs "
                          "(annotation.integrity). Clamped to their bounds; unreadable ones "
                          "are not recorded and never refuse the answers.")}),
        responses={200: SUBMIT_RESULT, 201: SUBMIT_RESULT,
                   **errors(400, 401, 403, 404, 409, 422, 429)},
    )
    def post(self, request, slot_id):
        answers = request.data.get("answers") if isinstance(request.data, dict) else None
        if not isinstance(answers, dict):
            raise ApiValidationError({"answers": ["an object of criterion key -> value"]})
        behaviour = request.data.get("behaviour") if isinstance(request.data, dict) else None
        rater = request.rater
        if not AssignmentSlot.objects.filter(Q(pk=slot_id), assignment__rater=rater).exists():
            raise Http404("This item is not in your list.")

        def submit() -> tuple[int, dict]:
            try:
                counts = judgment_submit(rater=rater, slot_id=slot_id, answers=answers)
            except SubmissionInvalid as error:
                return 400, {"code": "invalid", "message": "Some answers are missing or "
                             "invalid.", "field_errors": {k: [v] for k, v in
                                                          error.errors.items()}}
            except SubmissionRefused as error:
                code = {404: "not_found", 409: "conflict"}.get(error.status, "permission_denied")
                return error.status, {"code": code, "message": str(error), "field_errors": {}}
            if counts.created or counts.revised:
                # Optional integrity counters (annotation.behaviour): kept when readable,
                # dropped otherwise; never a reason to refuse the answers.
                slot_behaviour_record(slot_id=slot_id, raw=behaviour)
            return (201 if counts.created or counts.revised else 200), {
                "slot": slot_id, "created": counts.created, "revised": counts.revised,
                "unchanged": counts.unchanged, "removed": counts.removed,
                "stopped": counts.stopped,
            }

        key = request.headers.get("Idempotency-Key", "").strip()
        if not key:
            status_code, body = submit()
            return Response(body, status=status_code)
        if len(key) > MAX_KEY_LENGTH:
            raise ApiValidationError({"Idempotency-Key": [f"at most {MAX_KEY_LENGTH} "
                                                          "characters"]})
        fingerprint = request_fingerprint("POST", request.path, {"answers": answers})
        try:
            stored = idempotent_call(rater=rater, key=key, fingerprint=fingerprint, call=submit)
        except IdempotencyKeyReused as error:
            raise KeyReused(str(error)) from None
        headers = {"Idempotent-Replayed": "true"} if stored.replayed else {}
        return Response(stored.body, status=stored.status, headers=headers)


# --- researchers ----------------------------------------------------------------------------
class ProgressSerializer(serializers.Serializer):
    status = serializers.CharField()
    seats_filled = serializers.IntegerField()
    seats_total = serializers.IntegerField()
    outputs_total = serializers.IntegerField()
    outputs_complete = serializers.IntegerField()
    ratings_target = serializers.IntegerField()
    coverage = serializers.DictField(child=serializers.IntegerField(),
                                     help_text="completed ratings -> number of outputs")
    median_seconds = serializers.FloatField(allow_null=True)
    raters = serializers.ListField(child=inline_serializer("RaterProgress", fields={
        "rater_id": serializers.IntegerField(), "rater": serializers.CharField(),
        "kind": serializers.CharField(), "state": serializers.CharField(),
        "done": serializers.IntegerField(), "total": serializers.IntegerField(),
        "median_seconds": serializers.FloatField(allow_null=True),
        "attention_failed": serializers.IntegerField(),
        "calibration_accuracy": serializers.FloatField(allow_null=True),
        "stopped": serializers.CharField(),
        "min_seconds": serializers.FloatField(allow_null=True),
        "speeder": serializers.BooleanField(help_text="median seconds per item below the "
                                            "study's speeder threshold"),
        "straightlining": serializers.BooleanField(),
        "straightlining_detail": serializers.CharField(),
        "agreement": serializers.FloatField(
            allow_null=True, help_text="leave-one-out agreement with the other raters, 0..1"),
        "competence": serializers.FloatField(
            allow_null=True, help_text="MACE competence on the categorical criteria, 0..1"),
        "excluded": serializers.BooleanField(help_text="excluded from the analysis"),
        "excluded_reason": serializers.CharField(),
        "integrity_flagged": serializers.BooleanField(
            help_text="a share of flagged answers exceeds its limit (annotation.integrity); "
                      "evidence only, never an exclusion"),
        "integrity_signals": serializers.ListField(child=serializers.CharField()),
        "integrity_shares": serializers.DictField(
            child=serializers.FloatField(allow_null=True),
            help_text="signal -> share of the rater's answers flagged (null: unobserved)"),
        "agreement_windows": serializers.ListField(child=inline_serializer(
            "AgreementWindow", fields={
                "index": serializers.IntegerField(), "first": serializers.IntegerField(),
                "last": serializers.IntegerField(), "judgments": serializers.IntegerField(),
                "agreement": serializers.FloatField(), "full": serializers.BooleanField(),
                "alert": serializers.BooleanField()}),
            help_text="agreement with the others' majority per window of the study's "
                      "agreement_window judgments, in submission order"),
        "agreement_alerts": serializers.IntegerField(),
        "recalibration_rounds": serializers.IntegerField(),
        "recalibration_running": serializers.BooleanField(),
    }))
    speeder_seconds = serializers.FloatField(
        allow_null=True, help_text="the speeder threshold in force (seconds per item)")
    speeder_derived = serializers.BooleanField(
        help_text="the threshold is 0.3 x the study's median (no study setting)")
    competence_criteria = serializers.ListField(child=serializers.CharField())


class StudyProgress(StudyScopedView):
    """Seats, coverage of outputs and each rater's progress (the monitor page as JSON)."""

    @extend_schema(responses={200: ProgressSerializer, **READ_ERRORS})
    def get(self, request, slug):
        study = self.get_study()
        monitor = study_monitor(study)
        return Response({
            "status": study.status, "seats_filled": monitor.seats_filled,
            "seats_total": monitor.seats_total, "outputs_total": monitor.outputs_total,
            "outputs_complete": monitor.outputs_complete, "ratings_target": monitor.target,
            "coverage": {str(k): v for k, v in sorted(monitor.coverage.items())},
            "median_seconds": monitor.median_seconds,
            "speeder_seconds": monitor.speeder_seconds,
            "speeder_derived": monitor.speeder_derived,
            "competence_criteria": monitor.competence_criteria,
            "raters": [{
                "rater_id": row.rater_id, "rater": row.rater, "kind": row.kind,
                "state": row.state, "done": row.done, "total": row.total,
                "median_seconds": row.median_seconds, "attention_failed": row.attention_failed,
                "calibration_accuracy": row.calibration_accuracy, "stopped": row.stopped,
                "min_seconds": row.min_seconds, "speeder": row.speeder,
                "straightlining": row.straightlining,
                "straightlining_detail": row.straightlining_detail,
                "agreement": row.agreement, "competence": row.competence,
                "excluded": row.excluded, "excluded_reason": row.excluded_reason,
                "integrity_flagged": bool(row.integrity and row.integrity.flagged),
                "integrity_signals": row.integrity.signals if row.integrity else [],
                "integrity_shares": row.integrity.shares if row.integrity else {},
                "agreement_windows": [vars(w) for w in row.agreement_windows],
                "agreement_alerts": row.agreement_alerts,
                "recalibration_rounds": row.recalibration_rounds,
                "recalibration_running": row.recalibration_running,
            } for row in monitor.raters],
        })


# --- researchers' actions on a rater (annotation.rater_actions) ------------------------------
class RaterActionSerializer(serializers.Serializer):
    rater_id = serializers.IntegerField()
    excluded = serializers.BooleanField()
    excluded_reason = serializers.CharField()
    stopped = serializers.CharField()
    replacement_seat = serializers.IntegerField(
        allow_null=True, help_text="reopen-seat: the new open seat holding the handed-on slots")


class ExcludeInput(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True,
                                   max_length=rater_actions.REASON_MAX)


class ReopenInput(serializers.Serializer):
    all_items = serializers.BooleanField(
        required=False, default=False,
        help_text="hand on every slot of the seat, answered ones too (the whole list is rated "
                  "again); default: only the unjudged ones")


class _RaterAction(StudyScopedView):
    """POST on one rater of a study (editors and above). A rater who did not enter this study
    (another study's, a proxy, a pending invitation) is a 404. The answer tells the monitor
    (htmx) to refresh."""

    study_roles = {"POST": EDITOR}

    def answer(self, enrollment, replacement=None) -> Response:
        return Response({
            "rater_id": enrollment.rater_id, "excluded": enrollment.excluded_at is not None,
            "excluded_reason": enrollment.excluded_reason,
            "stopped": enrollment.stop_reason if enrollment.stopped_at else "",
            "replacement_seat": replacement.pk if replacement is not None else None,
        }, headers={"HX-Trigger": "monitor-refresh"})


def _reason(request) -> str:
    data = ExcludeInput(data=request.data if hasattr(request.data, "get") else {})
    data.is_valid(raise_exception=True)
    # The monitor's button asks for the reason in a prompt (htmx sends it as HX-Prompt).
    return data.validated_data.get("reason") or request.headers.get("HX-Prompt", "")[
        :rater_actions.REASON_MAX]


class RaterExclude(_RaterAction):
    """Exclude the rater from the analysis (reversible; their judgments stay stored and their
    seat is untouched). Body: optional `reason`. Audited."""

    @extend_schema(request=ExcludeInput, responses={200: RaterActionSerializer,
                                                    **errors(400, 401, 403, 404)})
    def post(self, request, slug, pk):
        study = self.get_study()
        try:
            enrollment = rater_actions.rater_exclude(study=study, rater_id=pk,
                                                     reason=_reason(request),
                                                     actor=request.user, source=API)
        except rater_actions.RaterNotInStudy:
            raise Http404("No such rater in this study.") from None
        return self.answer(enrollment)


class RaterInclude(_RaterAction):
    """Undo an exclusion: the rater's judgments enter the analysis again. Audited."""

    @extend_schema(request=None, responses={200: RaterActionSerializer,
                                            **errors(401, 403, 404)})
    def post(self, request, slug, pk):
        study = self.get_study()
        try:
            enrollment = rater_actions.rater_include(study=study, rater_id=pk,
                                                     actor=request.user, source=API)
        except rater_actions.RaterNotInStudy:
            raise Http404("No such rater in this study.") from None
        return self.answer(enrollment)


class RaterReopenSeat(_RaterAction):
    """Hand the rater's seat on to someone else: the rater is stopped and keeps what they
    judged; a new open seat holds their unjudged slots (or, with `all_items`, every slot).
    409 when there is nothing to hand on. Audited."""

    @extend_schema(request=ReopenInput, responses={200: RaterActionSerializer,
                                                   **errors(400, 401, 403, 404, 409)})
    def post(self, request, slug, pk):
        study = self.get_study()
        data = ReopenInput(data=request.data if hasattr(request.data, "get") else {})
        data.is_valid(raise_exception=True)
        try:
            replacement = rater_actions.seat_reopen(
                study=study, rater_id=pk, all_items=data.validated_data["all_items"],
                actor=request.user, source=API)
            enrollment = rater_actions.rater_enrollment(study=study, rater_id=pk)
        except rater_actions.RaterNotInStudy:
            raise Http404("No such rater in this study.") from None
        except rater_actions.SeatNotReopenable as error:
            raise StateConflict(str(error)) from None
        return self.answer(enrollment, replacement)


class RecalibrateInput(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True,
                                   max_length=rater_actions.REASON_MAX)


class RaterRecalibrate(_RaterAction):
    """Start a recalibration round: the study's calibration items are served to the rater
    next (after the item on their screen), with feedback, then they carry on. 409 when the
    study has no calibration items, the rater has nothing left to rate or a round is still
    running. Body: optional `reason`. Audited."""

    @extend_schema(request=RecalibrateInput, responses={200: RaterActionSerializer,
                                                        **errors(400, 401, 403, 404, 409)})
    def post(self, request, slug, pk):
        study = self.get_study()
        try:
            recalibration.recalibration_start(study=study, rater_id=pk,
                                              reason=_reason(request),
                                              actor=request.user, source=API)
            enrollment = rater_actions.rater_enrollment(study=study, rater_id=pk)
        except rater_actions.RaterNotInStudy:
            raise Http404("No such rater in this study.") from None
        except recalibration.RecalibrationNotPossible as error:
            raise StateConflict(str(error)) from None
        return self.answer(enrollment)
