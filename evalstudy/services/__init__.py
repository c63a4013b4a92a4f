"""Services that change studies and their designs. Keyword-only arguments, one transaction each.

One module per concept: `studies` (a draft study's configuration, collaborators, status),
`checks` (what stops a study from opening, what only warns, the design arithmetic),
`building` (seats and slots built from the design, opening, the design's export),
`assignments` (claiming a seat, serving its slots), `seats` (handing seats on),
`enrolments` (who may take part: the enrolment gate, admission, invitations), `invites` (the
entry links of a study, for its invite page and their download), `limits` (the
configured bounds), `runs` (background runs whose worker is gone) and `adaptive` (a study's
adaptive plan: seats built as raters arrive, the stopping looks that may close it).
Import the services from here: `from evalstudy.services import study_open`.

Concurrency: `assignment_claim` is the only place seats change hands. It locks the rater row
(so one rater's parallel requests get one seat) and picks a seat with
`SELECT ... FOR UPDATE SKIP LOCKED` (so two raters never get the same seat and never wait on
each other). On SQLite, which has no row locks, the database-wide write lock serialises claims.
"""

from __future__ import annotations

from .adaptive import (
    PlanRegistered,
    adaptive_seat_create,
    plan_contrasts,
    plan_criterion,
    plan_problems,
    plan_register,
    stopping_check_record,
    study_plan_replace,
    study_plan_save,
)
from .assignments import (
    LEASE_SLACK,
    AssignmentExpired,
    StudyFull,
    StudyNotOpen,
    assignment_claim,
    assignment_next,
    lease_renew,
)
from .building import (
    BUILDERS,
    SLOT_BATCH_SIZE,
    design_export,
    study_build_assignments,
    study_open,
)
from .checks import (
    BEST_WORST_DEFAULT_SIZE,
    TUPLE_DESIGNS,
    TUPLE_KIND_OF,
    Problem,
    StudyInvalid,
    attention_slots_per_seat,
    design_slot_count,
    study_validate,
    study_warnings,
    tuple_size_of,
)
from .enrolments import (
    NotEnrolled,
    enrollment_admit,
    enrollment_of,
    enrollment_stop,
    invitation_answer,
    rater_invite,
)
from .invites import EntryLink, crowd_entry_url, entry_links, entry_links_export
from .limits import spec_limits
from .runs import runs_fail_stale
from .seats import assignment_withdraw, assignments_expire_leases, hand_on_seat
from .studies import (
    StudyNotDraft,
    collaborator_remove,
    collaborator_set,
    criterion_create,
    study_close,
    study_create,
    study_update,
    system_create,
)

__all__ = [
    "BEST_WORST_DEFAULT_SIZE",
    "BUILDERS",
    "LEASE_SLACK",
    "SLOT_BATCH_SIZE",
    "TUPLE_DESIGNS",
    "TUPLE_KIND_OF",
    "AssignmentExpired",
    "EntryLink",
    "NotEnrolled",
    "PlanRegistered",
    "Problem",
    "StudyFull",
    "StudyInvalid",
    "StudyNotDraft",
    "StudyNotOpen",
    "adaptive_seat_create",
    "assignment_claim",
    "assignment_next",
    "assignment_withdraw",
    "assignments_expire_leases",
    "attention_slots_per_seat",
    "collaborator_remove",
    "collaborator_set",
    "criterion_create",
    "crowd_entry_url",
    "design_export",
    "design_slot_count",
    "enrollment_admit",
    "enrollment_of",
    "enrollment_stop",
    "entry_links",
    "entry_links_export",
    "hand_on_seat",
    "invitation_answer",
    "lease_renew",
    "plan_contrasts",
    "plan_criterion",
    "plan_problems",
    "plan_register",
    "rater_invite",
    "runs_fail_stale",
    "spec_limits",
    "stopping_check_record",
    "study_build_assignments",
    "study_close",
    "study_create",
    "study_open",
    "study_plan_replace",
    "study_plan_save",
    "study_update",
    "study_validate",
    "study_warnings",
    "system_create",
    "tuple_size_of",
]
