"""Rendering metric details for researchers."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.simple_tag
def alignment(details: dict | None) -> SafeString:
    """The WER alignment as HTML: substitutions marked with the reference word in a tooltip,
    deletions struck through, insertions underlined. Every word is escaped."""
    ops = (details or {}).get("alignment") or []
    parts = []
    for op in ops:
        ref, hyp = " ".join(op.get("ref", [])), " ".join(op.get("hyp", []))
        kind = op.get("op")
        if kind == "equal":
            parts.append(format_html('<span class="eq">{}</span>', hyp))
        elif kind == "substitute":
            parts.append(format_html('<span class="sub" title="said: {}">{}</span>', ref, hyp))
        elif kind == "delete":
            parts.append(format_html('<del title="missing">{}</del>', ref))
        elif kind == "insert":
            parts.append(format_html('<ins title="inserted">{}</ins>', hyp))
    return mark_safe(" ".join(parts))  # noqa: S308 - every part went through format_html




@register.filter
def dictitem(mapping: dict | None, key: str):
    return (mapping or {}).get(key)
