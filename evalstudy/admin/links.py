"""An entry link as the admin shows it: absolute, as text to select, with a Copy button beside
it (static/js/copy_link.js, which a page showing one includes)."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext

COPY_JS = "js/copy_link.js"


def copy_field(url: str, label: str) -> SafeString:
    """`url` as text with a Copy button whose accessible name is `label` (it should start with
    "Copy", the visible word, so that a voice user's "click Copy" finds it)."""
    return format_html(
        '<span class="copy-field"><code class="copy-text">{}</code> <button type="button" '
        'class="button copy-button" data-copy="{}" data-copied="{}" data-refused="{}" '
        'aria-label="{}">{}</button>'
        '<span class="copy-status" role="status" aria-live="polite"></span></span>',
        url, url, gettext("Copied"), gettext("Select the link and copy it (Ctrl+C)."), label,
        gettext("Copy"))
