"""The study model: what is compared, on which items, by which criteria, and who rates what.

One module per concept: `studies` (a study, its collaborators and systems), `items` (items,
outputs, media, practice items and attention checks), `criteria` (the questions), `raters`
(raters and their enrolment in a study), `assignments` (seats and slots), `plans` (the
adaptive design's pre-registered plan and its stopping checks), `audit` (the audit trail) and
`api_tokens` (scripts' credentials). Import the models from here: `from evalstudy.models
import Study`.

Invariants live in the database where a constraint can hold them (one output per item and
system, one seat per rater and study, ordered unique slots). Everything that needs a query
across rows (an output's system belongs to the item's study, a study is complete enough to
open) is checked by the services.
"""

from __future__ import annotations

from .api_tokens import ApiToken
from .assignments import Assignment, AssignmentSlot
from .audit import AuditEvent
from .criteria import Criterion
from .items import (
    AttentionCheck,
    CalibrationItem,
    ControlItem,
    Item,
    ItemMedia,
    Output,
    media_file_name,
)
from .plans import StoppingCheck, StudyPlan
from .raters import Enrollment, Rater, new_token
from .studies import Study, StudyCollaborator, System, new_seed, rater_labels_validate

# The names the migrations written before the package (0001, 0009, 0012) call the field
# defaults and validators by; a migration is history and is not rewritten.
_new_seed = new_seed
_new_token = new_token
_rater_labels_validate = rater_labels_validate

__all__ = [
    "ApiToken", "Assignment", "AssignmentSlot", "AttentionCheck", "AuditEvent",
    "CalibrationItem", "ControlItem", "Criterion", "Enrollment", "Item", "ItemMedia",
    "Output", "Rater", "StoppingCheck", "Study", "StudyCollaborator", "StudyPlan", "System",
    "media_file_name", "new_seed", "new_token", "rater_labels_validate",
]
