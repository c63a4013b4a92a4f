"""The researcher's side: every model, with inlines, filters, search and study actions.

Non-superusers see only the studies they own or collaborate on (and the rows under them).
Study actions call the services, so the admin enforces the same rules as the command line;
they act only on the selected studies the user may change (evalstudy.permissions), and foreign
keys offer only rows of such studies (`scoping.StudyRowChoices`).

- `scoping`: the per-study limits that every app's ModelAdmins build on;
- `studies`: the study page, its actions and extra pages, and the registries through which the
  other apps add theirs;
- `rows`: systems, items, outputs, criteria, control items, collaborators, seats, the audit trail;
- `media`: an item's media files (on the item's page), through the media service;
- `people`: raters and enrollments.
"""

from . import invite, people, rows, studies  # noqa: F401 - registers the ModelAdmins and pages
