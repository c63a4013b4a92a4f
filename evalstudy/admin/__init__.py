"""The researcher's side: every model, with inlines, filters, search and study actions.

Non-superusers see only the studies they own or collaborate on (and the rows under them).
Study actions call the services, so the admin enforces the same rules as the command line;
they act only on the selected studies the user may change (evalstudy.permissions), and foreign
keys offer only rows of such studies (`scoping.StudyRowChoices`).

- `scoping`: the per-study limits that every app's ModelAdmins build on;
- `studies`: the study page, its actions and extra pages, and the registries through which the
  other apps add theirs;
- `study_actions`: the Open and Close buttons of a study's page and monitor, and how study
  messages read (the study named as typed, a refusal's problems linked to their fix);
- `invite`: a study's invite page (its entry links with Copy buttons, more links, their CSV);
- `links`: an entry link as the admin shows it (absolute, with a Copy button);
- `rows`: systems, items, outputs, criteria, control items, collaborators, seats, the audit trail;
- `media`: an item's media files (on the item's page), through the media service;
- `people`: raters and enrollments.
"""

from . import invite, people, rows, studies  # noqa: F401 - registers the ModelAdmins and pages
