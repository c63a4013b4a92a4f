"""The manual (mkdocs.yml, docs/): its API reference covers every operation the server's own
schema describes, and every page in docs/ is reachable from the navigation. `make test` builds
the site with --strict (scripts/test.sh), which fails on a broken link or anchor."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[1]


def _openapi_hook():
    """docs/hooks/openapi.py, loaded as MkDocs loads a hook (a file, not a package)."""
    spec = importlib.util.spec_from_file_location("docs_openapi_hook",
                                                  ROOT / "docs" / "hooks" / "openapi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _headings(markdown: str) -> set[str]:
    return {line[4:].strip() for line in markdown.splitlines() if line.startswith("### ")}


@pytest.mark.django_db
def test_the_api_reference_has_a_section_for_every_operation_the_server_serves():
    hook = _openapi_hook()
    served = Client().get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    # What the hook builds the page from: `manage.py spectacular` in its own process.
    reference = hook.reference_markdown(hook.schema_from_server())
    sections = _headings(reference)
    expected = [hook.operation_heading(path, method)
                for path, methods in served["paths"].items() for method in methods
                if method in hook.METHODS]
    assert len(expected) > 50  # the schema itself was read (about 80 operations today)
    assert [heading for heading in expected if heading not in sections] == []
    # Every schema an operation names has its section, so the page's links resolve.
    for name in served["components"]["schemas"]:
        assert f"#### {name} {{#schema-{name.lower()}}}" in reference


def test_the_reference_renders_parameters_bodies_and_answers_of_an_operation():
    hook = _openapi_hook()
    schema = {
        "info": {"title": "t", "version": "1"},
        "paths": {"/api/v1/things/{slug}/": {"post": {
            "tags": ["things"], "description": "Make a thing.",
            "parameters": [{"in": "path", "name": "slug", "required": True,
                            "schema": {"type": "string"}, "description": "the | slug"}],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
            "responses": {
                "201": {"description": "Made", "content": {"application/json": {
                    "schema": {"type": "array", "items": {
                        "$ref": "#/components/schemas/Thing"}}}}},
                "404": {"description": "No such thing", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Error"}}}}}}}},
        "components": {"schemas": {
            "Thing": {"type": "object", "required": ["name"],
                      "properties": {"name": {"type": "string", "description": "its name"}}},
            "Error": {"type": "object", "properties": {"code": {"type": "string"}}}}},
    }
    page = hook.reference_markdown(schema)
    assert "### `POST /api/v1/things/{slug}/`" in page
    assert "| `slug` | path | string | yes | the \\| slug |" in page
    assert "- `application/json`: [Thing](#schema-thing)" in page
    assert "| 201 | Made | `application/json` list of [Thing](#schema-thing) |" in page
    assert "Errors (body [Error](#schema-error)): 404 No such thing." in page
    assert "| `name` | string | yes | its name |" in page


def _nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_of_the_manual_is_in_the_navigation_and_every_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    docs = ROOT / config["docs_dir"]
    on_disk = sorted(str(path.relative_to(docs)) for path in docs.rglob("*.md"))
    assert sorted(nav) == on_disk
    # The site is built outside the tree's sources (var/ is ignored by git).
    assert config["site_dir"].startswith("var/")


def test_each_page_of_the_manual_has_one_title():
    for path in (ROOT / "docs").rglob("*.md"):
        text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
        titles = [line for line in text.splitlines() if line.startswith("# ")]
        assert len(titles) == 1, f"{path.relative_to(ROOT)}: {titles}"


def _lists_hook():
    spec = importlib.util.spec_from_file_location("docs_lists_hook",
                                                  ROOT / "docs" / "hooks" / "lists.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lists_written_for_github_render_as_lists_in_the_site():
    import markdown

    hook = _lists_hook()
    page = "\n".join([
        "**Entry.** Who may come in:",
        "- an account holder,",
        "  who signs in;",
        "- a rater with a link:",
        "  - a personal one",
        "    that works in one study;",
        "  - a crowd one.",
        "",
        "  A later paragraph of the same item.",
        "",
        "  ```",
        "  a code block of the item",
        "  ```",
        "- the last item.",
        "",
        "Text after the list.",
    ])
    rendered = markdown.Markdown(extensions=["pymdownx.superfences"]).convert(
        hook.lists_for_python_markdown(page))
    assert rendered.count("<ul>") == 2  # the list and the list nested in its second item
    assert rendered.count("<li>") == 5
    assert "<p>A later paragraph of the same item.</p>" in rendered
    # The code block is the second item's, after its nested list, not a block after the list.
    nested_end, code = rendered.index("</ul>"), rendered.index("a code block of the item")
    assert nested_end < code < rendered.index("the last item") < rendered.rindex("</ul>")
    assert "- " not in rendered.replace("<li>", "")  # no item run into a paragraph
    assert rendered.rstrip().endswith("<p>Text after the list.</p>")
    # The files keep their GitHub form; code blocks are left as they are.
    fenced = "```\n- not a list\n  - nor this\n```"
    assert hook.lists_for_python_markdown(fenced) == fenced
