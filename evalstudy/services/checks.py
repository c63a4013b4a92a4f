"""The checks of a study before it opens (`study_validate`: what stops it; `study_warnings`:
what is allowed but probably not meant) and the design arithmetic they share with the build
(`design_slot_count`, `tuple_size_of`)."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.db.models import Count, Q

from evalstudy import criteria as rules

from ..models import (
    AttentionCheck,
    CalibrationItem,
    Criterion,
    Item,
    ItemMedia,
    Output,
    Study,
)
from ..spec.limits import SETTING_BOUNDS, SpecLimits, study_setting_problems
from ..spec.setting_warnings import StudySettings, setting_warnings
from ..spec.study import show_if_problems
from .limits import spec_limits

TUPLE_DESIGNS = (Study.Design.RANKING, Study.Design.BEST_WORST)
# The kind of criterion each tuple design is for (each kind names its designs), in the kinds'
# order.
TUPLE_KIND_OF = {design: kind.name for kind in rules.all_kinds() if kind.shows == rules.TUPLE
                 for design in kind.designs}
BEST_WORST_DEFAULT_SIZE = 4
MAX_LISTED = 10


# What a criterion of a kind no module defines counts as here (the kind's own check refuses it).
_UNKNOWN = rules.AnswerKind()


def _kind(criterion: Criterion) -> rules.AnswerKind:
    try:
        return rules.kind_of(criterion.kind)
    except ValueError:
        return _UNKNOWN


def listing(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def tuple_size_of(design: str, tuple_size: int | None, n_systems: int) -> int:
    """How many outputs a slot of a ranking or best-worst design shows: the study's
    `tuple_size`, else every system (ranking) or 4 (best-worst scaling)."""
    if tuple_size:
        return tuple_size
    return n_systems if design == Study.Design.RANKING else BEST_WORST_DEFAULT_SIZE


def design_slot_count(
    *, design: str, n_items: int, n_systems: int, ratings_per_output: int,
    items_per_rater: int | None, n_calibration: int, attention_every: int, n_attention: int,
    tuple_size: int | None = None,
) -> int:
    """How many slots `study_build_assignments` would write, counted without building them
    (the builders' arithmetic: see evalstudy.design). Every list holds each item once (crossed:
    with every system), is split into parts of at most `items_per_rater` items, and each part
    gets `ratings_per_output` seats of its targets, the calibration items and an attention
    check per `attention_every` targets."""
    if n_items == 0 or n_systems == 0:
        return 0
    if design == Study.Design.PAIRWISE:
        lists, cells_per_item = n_systems * (n_systems - 1), 1  # ordered pairs
    elif design in TUPLE_DESIGNS:
        size = tuple_size_of(design, tuple_size, n_systems)
        if size > n_systems:
            return 0
        lists, cells_per_item = math.comb(n_systems, size) * size, 1  # oriented tuples
    elif design == Study.Design.CROSSED:
        lists, cells_per_item = 1, n_systems
    else:
        lists, cells_per_item = n_systems, 1
    parts = 1 if not items_per_rater or items_per_rater >= n_items else math.ceil(
        n_items / items_per_rater)
    base, extra = divmod(n_items, parts)  # `extra` parts hold one item more (split_list)
    per_list = 0
    for size, count in ((base + 1, extra), (base, parts - extra)):
        targets = size * cells_per_item
        checks = targets // attention_every if attention_every and n_attention else 0
        per_list += count * (targets + checks + n_calibration)
    return lists * ratings_per_output * per_list


# Where a problem that stops a study from opening is fixed: the admin links each refusal to its
# page (the items grid, the systems or criteria on the study's page, its settings...).
ITEMS, SYSTEMS, CRITERIA, CALIBRATION, ATTENTION, SETTINGS, DESIGN, PLAN = (
    "items", "systems", "criteria", "calibration", "attention", "settings", "design", "plan")


class Problem(str):
    """A sentence of `study_validate` that also says where it is fixed (`where`, one of the
    names above). A str: every reader of the sentences (the API, the command, messages) keeps
    reading text."""

    where: str

    def __new__(cls, text: str, where: str) -> Problem:
        problem = super().__new__(cls, text)
        problem.where = where
        return problem


def at(where: str, text: str) -> Problem:
    return Problem(text, where)


class StudyInvalid(ValidationError):
    """The study cannot open: `problems` are study_validate's, each saying where it is fixed."""

    def __init__(self, problems: list[Problem]):
        super().__init__(list(problems))
        self.problems = problems


def study_validate(*, study: Study, limits: SpecLimits | None = None) -> list[Problem]:
    """Everything that stops `study` from being opened, as sentences a researcher can act on.

    Includes the bounds of `limits` (default: the settings): counts, settings and the number
    of slots the design would have, so an oversized design is refused before anything is built,
    whichever way its rows were written (spec, admin, API, a script).
    """

    limits = limits or spec_limits()
    problems: list[Problem] = []
    systems = list(study.systems.all())
    # In the order raters answer them: a condition may name an earlier criterion only.
    criteria = list(study.criteria.select_related("show_if_criterion").order_by("order", "id"))
    n_items = study.items.count()
    for what, count, limit, setting in (
        ("items", n_items, limits.max_items, "EVALSTUDY_MAX_ITEMS"),
        ("systems", len(systems), limits.max_systems, "EVALSTUDY_MAX_SYSTEMS"),
        ("criteria", len(criteria), limits.max_criteria, "EVALSTUDY_MAX_CRITERIA"),
    ):
        if count > limit:
            problems.append(at(what, f"The study has {count:,} {what}; at most {limit:,} are "
                               f"allowed ({setting})."))
    values = {name: getattr(study, name) for name in SETTING_BOUNDS}
    for name, problem in study_setting_problems(values, limits).items():
        problems.append(at(SETTINGS, f"{name} {problem}."))
    if not criteria:
        problems.append(at(CRITERIA, "The study has no criteria: add at least one question "
                                     "for raters."))
    if not systems:
        problems.append(at(SYSTEMS, "The study has no systems."))
    if n_items == 0:
        problems.append(at(ITEMS, "The study has no items."))
    if study.design in (Study.Design.PAIRWISE, Study.Design.ADAPTIVE):
        if study.design == Study.Design.ADAPTIVE:
            from .adaptive import plan_problems

            problems += [at(PLAN, problem) for problem in plan_problems(study)]
        if len(systems) < 2:
            problems.append(at(SYSTEMS, "A pairwise design needs at least 2 systems."))
        if criteria and not any(study.design in _kind(c).designs for c in criteria):
            problems.append(at(CRITERIA, "A pairwise design needs a pairwise (A/B) criterion."))
        for kind in sorted({c.kind for c in criteria if _kind(c).one_output_only}):
            problems.append(at(CRITERIA, f"{kind.capitalize()} criteria mark errors in one "
                                         "output: they need a design that shows one output "
                                         "at a time, not pairwise."))
    elif any(Study.Design.PAIRWISE in _kind(c).designs for c in criteria):
        problems.append(at(CRITERIA, "Pairwise criteria need the pairwise design; this study "
                                     f"is {study.design}."))
    problems += [at(DESIGN, problem)
                 for problem in _tuple_design_problems(study, criteria, len(systems))]
    if study.crowd_platform != "none" and not study.crowd_no_codes and not (
            study.completion_code and study.screen_out_code):
        missing = " and ".join(name for name in ("completion_code", "screen_out_code")
                               if not getattr(study, name))
        problems.append(at(
            SETTINGS, f"A crowd study ({study.crowd_platform}) needs its {missing}: without them a "
            "participant finishes (or is screened out) with no code to give the platform. "
            "Set them, or crowd_no_codes if the platform pays without codes, or crowd_platform "
            "none for personal links only."))
    for one_kind in rules.all_kinds():
        if one_kind.one_per_study and sum(c.kind == one_kind.name for c in criteria) > 1:
            problems.append(at(CRITERIA, f"A study takes one {one_kind.name} criterion: raters "
                                         "mark each error once, with its category and "
                                         "severity."))
    lacking_outputs = (
        Item.objects.filter(study=study)
        .annotate(n_outputs=Count("outputs", filter=Q(outputs__system__study=study)))
        .filter(n_outputs__lt=len(systems))
    )
    if systems and lacking_outputs.exists():
        have = {
            (item_id, system_id)
            for item_id, system_id in Output.objects.filter(item__in=lacking_outputs).values_list(
                "item_id", "system_id"
            )
        }
        pairs = [
            f"{item.external_id}/{system.name}"
            for item in lacking_outputs.order_by("id")[:MAX_LISTED + 1]
            for system in systems
            if (item.pk, system.pk) not in have
        ]
        n_lacking = lacking_outputs.count()
        problems.append(at(ITEMS, (
            f"1 item lacks an output for some system (item/system): {listing(pairs)}."
            if n_lacking == 1 else
            f"{n_lacking} items lack an output for some system (item/system): "
            f"{listing(pairs)}.")))
    def condition_key(criterion: Criterion) -> str | None:
        """The key of the question `criterion` is shown after, if that is of this study."""
        if criterion.show_if_criterion_id is None or criterion.show_if_criterion is None:
            return None
        condition = criterion.show_if_criterion
        return condition.key if condition.study_id == study.pk else None

    chain = show_if_problems([
        (c.key, condition_key(c))
        for c in criteria
    ])
    for position, criterion in enumerate(criteria):
        for problem in rules.criterion_problems(
                {name: getattr(criterion, name) for name in rules.RULE_FIELDS}):
            problems.append(at(CRITERIA, f"Criterion {criterion.key!r}: {problem}."))
        parent = criterion.show_if_criterion
        if parent is not None:
            if parent.study_id != study.pk or parent.pk == criterion.pk:
                problems.append(at(CRITERIA, f"Criterion {criterion.key!r}: show_if names an "
                                             "invalid criterion."))
            elif position in chain:
                problems.append(at(CRITERIA, f"Criterion {criterion.key!r}: show_if "
                                             f"{chain[position]}."))
            elif not criterion.show_if_values:
                problems.append(at(CRITERIA, f"Criterion {criterion.key!r}: show_if lists no "
                                             "values."))
            else:
                for value in criterion.show_if_values:
                    try:
                        parent.rule.normalise(value)
                    except ValueError as error:
                        problems.append(at(CRITERIA, f"Criterion {criterion.key!r}: show_if value "
                                                     f"for {parent.key!r}: {error}."))
    by_key = {c.key: c for c in criteria}
    controls: list[CalibrationItem | AttentionCheck] = [
        *study.calibration_items.all(), *study.attention_checks.all()
    ]
    for control in controls:
        label = "Calibration item" if isinstance(control, CalibrationItem) else "Attention check"
        where = CALIBRATION if isinstance(control, CalibrationItem) else ATTENTION
        for key, value in (control.expected or {}).items():
            if key not in by_key:
                problems.append(at(where, f"{label} {control.key!r}: expected answer for "
                                          f"unknown criterion {key!r}."))
                continue
            if not _kind(by_key[key]).takes_expected:
                problems.append(at(where, f"{label} {control.key!r}: expected {key}: "
                                          f"{by_key[key].kind} criteria take no expected answer "
                                          "(there is no single right marking)."))
                continue
            try:
                by_key[key].rule.normalise_expected(value)
            except ValueError as error:
                problems.append(at(where, f"{label} {control.key!r}: expected {key}: {error}."))
        if study.design in (Study.Design.PAIRWISE, Study.Design.ADAPTIVE) and \
                not control.text_b:
            problems.append(at(where, f"{label} {control.key!r}: a pairwise study needs output B "
                                      "too."))
    if study.attention_check_every and not study.attention_checks.exists():
        problems.append(at(ATTENTION, "attention_check_every is set but the study has no "
                                      "attention checks."))
    if not problems:  # the count is meaningful (and its inputs bounded) for a valid study only
        slots = design_slot_count(
            design=study.design, n_items=n_items, n_systems=len(systems),
            ratings_per_output=study.ratings_per_output, items_per_rater=study.items_per_rater,
            n_calibration=study.calibration_items.count(),
            attention_every=study.attention_check_every,
            n_attention=study.attention_checks.count(), tuple_size=study.tuple_size,
        )
        if slots > limits.max_design_slots:
            cells = ("ordered pairs of systems" if study.design == Study.Design.PAIRWISE
                     else "systems")
            problems.append(at(SETTINGS,
                f"The design would have {slots:,} rater slots (items x {cells} x "
                "ratings_per_output, with the calibration items and attention checks of every "
                f"seat), over the limit of {limits.max_design_slots:,} "
                "(EVALSTUDY_MAX_DESIGN_SLOTS): lower ratings_per_output or split the study."
            ))
    return problems


def attention_slots_per_seat(*, design: str, n_items: int, n_systems: int,
                             items_per_rater: int | None, attention_every: int) -> int:
    """The most attention-check slots one seat gets: one per `attention_every` targets of its
    part of the list (the arithmetic of `design_slot_count`)."""
    if not attention_every or n_items == 0 or n_systems == 0:
        return 0
    cells = n_systems if design == Study.Design.CROSSED else 1
    parts = 1 if not items_per_rater or items_per_rater >= n_items else math.ceil(
        n_items / items_per_rater)
    return math.ceil(n_items / parts) * cells // attention_every


def study_warnings(*, study: Study) -> list[str]:
    """What is allowed but probably not meant, shown when the study is saved or opened (it
    does not stop the study from opening): an attention check a seat would show twice, every
    setting that cannot take effect (spec.setting_warnings), outputs that may reveal their
    system (the blindness audit)."""
    n_attention = study.attention_checks.count()
    per_seat = attention_slots_per_seat(
        design=study.design, n_items=study.items.count(), n_systems=study.systems.count(),
        items_per_rater=study.items_per_rater, attention_every=study.attention_check_every)
    warning = rules.attention_repeats(checks_per_seat=per_seat, n_attention=n_attention)
    return (([warning] if warning else []) + setting_warnings(study_settings(study))
            + _blindness_warnings(study))


def study_settings(study: Study) -> StudySettings:
    """What `setting_warnings` reads of a study: its settings and the counts of its rows."""
    return StudySettings(
        attention_check_every=study.attention_check_every,
        attention_checks=study.attention_checks.count(),
        attention_fail_limit=study.attention_fail_limit,
        calibration_pass_mark=study.calibration_pass_mark,
        calibration_items=study.calibration_items.count(),
        crowd_platform=study.crowd_platform, completion_url=study.completion_url,
        completion_code=study.completion_code, screen_out_url=study.screen_out_url,
        screen_out_code=study.screen_out_code, crowd_no_codes=study.crowd_no_codes,
        excluded_studies=study.excluded_studies.count() if study.pk else 0,
        items=study.items.count(),
        items_with_media=Item.objects.filter(study=study, media__isnull=False).distinct().count(),
        media_must_finish=study.media_must_finish, media_max_plays=study.media_max_plays,
        media_autoplay=study.media_autoplay,
        agreement_alert_threshold=study.agreement_alert_threshold,
        agreement_window=study.agreement_window,
        agreement_window_default=Study._meta.get_field("agreement_window").get_default(),
    )


def _blindness_warnings(study: Study) -> list[str]:
    """Outputs whose text may tell raters which system wrote them (evalstudy.blindness): a
    warning, not a refusal; the researcher reads the hits on the audit page and decides."""
    from ..selectors import study_blindness_audit

    flagged = len(study_blindness_audit(study).flagged_outputs)
    if not flagged:
        return []
    return [f"{flagged} output{'s' if flagged != 1 else ''} may reveal "
            f"{'their' if flagged != 1 else 'its'} system (see the blindness audit, "
            f"/studies/{study.slug}/blindness/)."]


def _tuple_design_problems(study: Study, criteria: list[Criterion], n_systems: int
                           ) -> list[str]:
    """What a ranking or best-worst design needs, and where their criteria may be used."""
    problems = []
    wanted = TUPLE_KIND_OF.get(study.design)
    for design, kind in TUPLE_KIND_OF.items():
        if kind != wanted and any(c.kind == kind for c in criteria):
            problems.append(f"{kind.replace('_', '-').capitalize()} criteria need the {design} "
                            f"design; this study is {study.design}.")
    if wanted is None:
        if study.tuple_size is not None:
            problems.append("tuple_size applies to the ranking and best_worst designs only.")
        return problems
    if criteria and not any(c.kind == wanted for c in criteria):
        problems.append(f"A {study.design} design needs a {wanted} criterion.")
    # Every other question would be about one output while the rater sees several (and be
    # stored as output A's): only the design's own question, and free-text comments.
    per_output = sorted({c.key for c in criteria
                         if c.kind != wanted and not _kind(c).free_text})
    if per_output:
        problems.append(f"A {study.design} design shows several outputs at once: its questions "
                        f"are a {wanted} one and free-text comments; "
                        f"{', '.join(repr(k) for k in per_output)} would judge one output.")
    if ItemMedia.objects.filter(item__study=study, output__isnull=False).exists():
        problems.append(f"The {study.design} design plays an item's media, not each output's: "
                        "remove the outputs' media (or use another design).")
    size = tuple_size_of(study.design, study.tuple_size, n_systems)
    if n_systems < size or size < 2:
        problems.append(f"The {study.design} design shows {size} outputs at once and needs at "
                        f"least that many systems (it has {n_systems}).")
    if study.calibration_items.exists() or study.attention_checks.exists():
        problems.append(f"Practice items and attention checks show one or two outputs: the "
                        f"{study.design} design does not take them yet.")
    return problems


def study_raise_if_invalid(study: Study) -> None:
    problems = study_validate(study=study)
    if problems:
        raise StudyInvalid(problems)
