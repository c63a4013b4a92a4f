"""The configured bounds on specs, uploads and designs (config/settings/base.py, "Limits on
specs, uploads and designs"), read from the settings for the Django-free readers in
evalstudy.spec, the importers and `study_validate`."""

from __future__ import annotations

from ..spec.limits import DEFAULT_LIMITS, LIMIT_SETTINGS, MAX_DEPTH_CEILING, SpecLimits


def spec_limits() -> SpecLimits:
    """The configured bounds (config/settings/base.py, "Limits on specs, uploads and designs"),
    for the Django-free readers in evalstudy.spec and for `study_validate`."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    values = {attribute: int(getattr(settings, name, getattr(DEFAULT_LIMITS, attribute)))
              for attribute, name in LIMIT_SETTINGS.items()}
    if not 1 <= values["max_depth"] <= MAX_DEPTH_CEILING:
        # Deeper documents would meet Python's recursion limit, which the limit prevents.
        raise ImproperlyConfigured(
            f"EVALSTUDY_SPEC_MAX_DEPTH must be between 1 and {MAX_DEPTH_CEILING}")
    return SpecLimits(**values)
