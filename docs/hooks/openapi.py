"""MkDocs hook: the API reference page (docs/reference/api.md) gets, at build time, one section
per path and method of the OpenAPI schema the server itself serves at /api/v1/schema/, so the
reference cannot drift from the code. The schema comes from `manage.py spectacular` (the same
generator as the schema view) run in a process of its own, so that Django never starts inside
MkDocs; no network, nothing written into the tree.

tests/test_docs.py renders the reference from the schema generated in the test process and
checks that every path and method has its section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_PAGE = "reference/api.md"
METHODS = ("get", "post", "put", "patch", "delete")
# How the schema's security schemes read to a person.
SCHEME_NAMES = {"tokenAuth": "API token", "raterAuth": "rater entry token",
                "cookieAuth": "browser session"}


def schema_from_server() -> dict[str, Any]:
    """The OpenAPI schema as `manage.py spectacular` writes it (JSON)."""
    done = subprocess.run(  # noqa: S603 (our own interpreter and manage.py, fixed arguments)
        [sys.executable, "manage.py", "spectacular", "--format", "openapi-json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        from mkdocs.exceptions import PluginError

        raise PluginError("the API reference needs the OpenAPI schema, and "
                          f"`manage.py spectacular` failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    if page.file.src_uri != REFERENCE_PAGE:
        return markdown
    return markdown.rstrip() + "\n\n" + reference_markdown(schema_from_server())


def operations(schema: dict[str, Any]):
    """(path, method, operation) for every operation of the schema, in the schema's order."""
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def operation_heading(path: str, method: str) -> str:
    return f"`{method.upper()} {path}`"


def reference_markdown(schema: dict[str, Any]) -> str:
    """The reference as Markdown: the operations grouped by their first tag, then the schemas
    their bodies and answers refer to."""
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, method, operation in operations(schema):
        tag = (operation.get("tags") or ["other"])[0]
        by_tag.setdefault(tag, []).append((path, method, operation))
    out = [_overview(schema)]
    for tag, entries in by_tag.items():
        out.append(f"## {tag}\n")
        for path, method, operation in entries:
            out.append(_operation(path, method, operation))
    out.append(_schemas(schema.get("components", {}).get("schemas", {})))
    return "\n".join(out)


def _overview(schema: dict[str, Any]) -> str:
    info = schema.get("info", {})
    lines = [f"**{info.get('title', 'API')}**, version {info.get('version', '?')}.", ""]
    if info.get("description"):
        lines += [info["description"], ""]
    lines += ["Every path below is relative to the server (`https://HOST`). Types link to the",
              "[schemas](#schemas) at the end of the page.", ""]
    return "\n".join(lines)


def _operation(path: str, method: str, operation: dict[str, Any]) -> str:
    lines = [f"### {operation_heading(path, method)}", ""]
    summary = operation.get("summary") or operation.get("description") or ""
    if summary:
        lines += [summary.strip(), ""]
    if operation.get("summary") and operation.get("description"):
        lines += [operation["description"].strip(), ""]
    security = [SCHEME_NAMES.get(name, name) for entry in operation.get("security", [])
                for name in entry]
    if security:
        lines += [f"Authentication: {', '.join(security)}.", ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for parameter in parameters:
            lines.append("| " + " | ".join([
                f"`{parameter.get('name', '')}`", parameter.get("in", ""),
                _type(parameter.get("schema", {})),
                "yes" if parameter.get("required") else "no",
                _cell(parameter.get("description", ""))]) + " |")
        lines.append("")
    body = operation.get("requestBody")
    if body:
        required = " (required)" if body.get("required") else ""
        lines += [f"Request body{required}:", ""]
        for media_type, content in body.get("content", {}).items():
            lines.append(f"- `{media_type}`: {_type(content.get('schema', {}))}")
        lines.append("")
    responses = operation.get("responses", {})
    # The error answers every operation shares (the one Error shape) go on one line, so that
    # the table keeps what is particular to the operation.
    errors = {status: response for status, response in responses.items()
              if _is_error(response)}
    answers = {status: response for status, response in responses.items()
               if status not in errors}
    if answers:
        lines += ["| status | meaning | body |", "|---|---|---|"]
        for status, response in sorted(answers.items()):
            content = response.get("content", {})
            shapes = "; ".join(f"`{media_type}` {_type(c.get('schema', {}))}"
                               for media_type, c in content.items()) or "none"
            lines.append(f"| {status} | {_cell(response.get('description', ''))} | {shapes} |")
        lines.append("")
    if errors:
        lines += ["Errors (body [Error](#" + _anchor("Error") + ")): " + "; ".join(
            f"{status} {' '.join(response.get('description', '').split())}".rstrip(" .")
            for status, response in sorted(errors.items())) + ".", ""]
    return "\n".join(lines)


def _is_error(response: dict[str, Any]) -> bool:
    schemas = [c.get("schema", {}) for c in response.get("content", {}).values()]
    return bool(schemas) and all(schema.get("$ref", "").endswith("/Error") for schema in schemas)


def _schemas(schemas: dict[str, Any]) -> str:
    # Fourth-level headings: the table of contents (toc_depth 3) lists the operations only.
    lines = ["## Schemas", "", "The bodies and answers the operations above link to.", ""]
    for name, schema in schemas.items():
        lines += [f"#### {name} {{#{_anchor(name)}}}", ""]
        if schema.get("description"):
            lines += [schema["description"].strip(), ""]
        if "enum" in schema:
            lines += ["One of " + ", ".join(f"`{value}`" for value in schema["enum"]
                                            if value not in ("", None)) + ".", ""]
            continue
        properties = schema.get("properties", {})
        if not properties:
            lines += [f"Type: {_type(schema)}.", ""]
            continue
        required = set(schema.get("required", []))
        lines += ["| field | type | required | description |", "|---|---|---|---|"]
        for field, spec in properties.items():
            notes = [spec.get("description", "")]
            if spec.get("readOnly"):
                notes.append("read-only")
            if spec.get("writeOnly"):
                notes.append("write-only")
            lines.append(f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} "
                         f"| {_cell('; '.join(n for n in notes if n))} |")
        lines.append("")
    return "\n".join(lines)


def _anchor(name: str) -> str:
    return "schema-" + name.lower()


def _type(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, a referenced schema as a link to its section."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for combination in ("allOf", "oneOf", "anyOf"):
        if combination in schema:
            parts = [_type(part) for part in schema[combination]]
            text = " or ".join(dict.fromkeys(parts))
            return text + (" or null" if schema.get("nullable") else "")
    kind = schema.get("type", "any")
    if kind == "array":
        text = f"list of {_type(schema.get('items', {}))}"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict) \
            and schema["additionalProperties"]:
        text = f"object of {_type(schema['additionalProperties'])}"
    else:
        text = kind + (f" ({schema['format']})" if schema.get("format") else "")
    if "enum" in schema:
        text += ": " + ", ".join(f"`{value}`" for value in schema["enum"] if value is not None)
    if schema.get("nullable"):
        text += " or null"
    return text


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")
