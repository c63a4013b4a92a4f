"""REST endpoints for studies and what they hold (under /api/v1/): studies, spec import,
open/close, systems, items and outputs (bulk), criteria, design export, raters and their entry
links, rater personal data, collaborators, and API tokens.

Views are thin: they check access through `evalstudy.permissions`, parse the body and call one
service or selector. Errors take the shape of `kit.rest.exception_handler`.

- `base`: what the views share (`StudyScopedView`, upload parsers and limits, `audit`);
- `studies`: studies, spec import, open/close, systems, criteria;
- `content`: items, outputs, the design export;
- `people`: raters, collaborators, API tokens.
"""
