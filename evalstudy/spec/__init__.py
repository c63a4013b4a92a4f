"""Study specifications and item files: parsing and validation, without Django.

A spec (YAML or JSON) describes a whole study; items and outputs may also come from CSV or
JSONL. Every problem is collected, not just the first, and each names the file, the line, the
field path and the reason, e.g. `demo.yaml:42: items[3].outputs: no output for system 'b'`.
Nothing here touches the database: `evalstudy.importers` writes a valid spec atomically.

Files come from people and scripts we do not control, so reading one is bounded (`SpecLimits`):
its size is checked before parsing, its nesting and node count while composing (before Python's
recursion limit or the memory is reached), its section lengths and study settings after; and
no character the database or a browser cannot take (control characters, NUL above all) gets
through. Each refusal is an ordinary located error, never a traceback.

The parts, each importing only those before it:
- `errors`: `SpecError` (a problem and its place) and `SpecInvalid` (all of them);
- `limits`: `SpecLimits` and the checks of single values against them;
- `load`: bytes to text, and YAML/JSON with line numbers, bounded while composed;
- `fields`: the checks of each field and the reader that records located problems;
- `study`: the parsed shapes and `parse_study_spec`;
- `files`: items from CSV/JSONL, judgments from CSV, JSON values a JSON field can store.
"""
