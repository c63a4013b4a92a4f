"""Shared plumbing for the import/export commands: reading files and reporting spec errors."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from evalstudy.models import Study
from evalstudy.spec import SpecInvalid, decode


def read_text(path: str) -> str:
    """The file's text (UTF-8); CommandError naming the file when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CommandError(f"{path}: cannot read: {error.strerror}") from None
    try:
        return decode(data, path)
    except SpecInvalid as error:
        raise CommandError(str(error)) from None


def spec_errors(error: SpecInvalid) -> CommandError:
    count = len(error.errors)
    return CommandError(
        f"nothing was imported; {count} problem{'s' if count != 1 else ''}:\n{error}"
    )


def get_study(slug: str) -> Study:
    try:
        return Study.objects.get(slug=slug)
    except Study.DoesNotExist:
        raise CommandError(f"no study with slug {slug!r}") from None
