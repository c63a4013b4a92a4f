"""Study settings that cannot take effect: the one list of rules (no Django here).

A setting that another setting switches off is allowed (the researcher may be preparing the
study, or keeping a value for later), but a study opened that way does not do what its page
says: attention checks that are never shown, a pass mark with nothing to pass, codes for a
crowd that never comes. Each rule is a warning, not a refusal; the admin shows them after a
save and the open check after opening (evalstudy.services.checks.study_warnings), from the
same `StudySettings`, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_CROWD = "none"  # crowd_platform's value for a study without crowd entry


@dataclass(frozen=True)
class StudySettings:
    """The settings the rules read, with the counts of the study's rows they depend on."""

    attention_check_every: int = 0
    attention_checks: int = 0  # how many attention checks the study defines
    attention_fail_limit: int | None = None
    calibration_pass_mark: float | None = None
    calibration_items: int = 0
    crowd_platform: str = NO_CROWD
    completion_url: str = ""
    completion_code: str = ""
    screen_out_url: str = ""
    screen_out_code: str = ""
    crowd_no_codes: bool = False
    excluded_studies: int = 0
    items: int = 0
    items_with_media: int = 0
    media_must_finish: bool = False
    media_max_plays: int | None = None
    media_autoplay: bool = False
    agreement_alert_threshold: float | None = None
    agreement_window: int = 20
    agreement_window_default: int = 20


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _attention(s: StudySettings) -> list[str]:
    warnings = []
    if s.attention_checks and not s.attention_check_every:
        warnings.append(
            f"The study has {_plural(s.attention_checks, 'attention check', 'attention checks')}"
            " but attention_check_every is 0, so raters never see them: set attention_check_"
            "every (one check per that many items), or delete the checks.")
    if s.attention_fail_limit is not None and not (s.attention_check_every
                                                   and s.attention_checks):
        why = ("attention_check_every is 0" if not s.attention_check_every
               else "the study has no attention checks")
        warnings.append(f"attention_fail_limit ({s.attention_fail_limit}) cannot stop anyone: "
                        f"{why}.")
    return warnings


def _calibration(s: StudySettings) -> list[str]:
    if s.calibration_pass_mark is None or s.calibration_items:
        return []
    return [f"calibration_pass_mark ({s.calibration_pass_mark:g}) has no effect: the study has "
            "no calibration (practice) items to pass. Add some, or leave the mark blank."]


def _crowd(s: StudySettings) -> list[str]:
    if s.crowd_platform != NO_CROWD:
        return []
    unused = [name for name, value in (
        ("completion_url", s.completion_url), ("completion_code", s.completion_code),
        ("screen_out_url", s.screen_out_url), ("screen_out_code", s.screen_out_code),
        ("crowd_no_codes", s.crowd_no_codes), ("excluded_studies", s.excluded_studies),
    ) if value]
    if not unused:
        return []
    return [f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} only used for crowd "
            "participants, and crowd_platform is none (no crowd entry): choose the crowd "
            "platform, or clear them."]


def _media(s: StudySettings) -> list[str]:
    unused = [name for name, value in (
        ("media_must_finish", s.media_must_finish), ("media_max_plays", s.media_max_plays),
        ("media_autoplay", s.media_autoplay)) if value]
    if not unused or s.items_with_media or not s.items:
        return []  # (a study without items yet may still get its media)
    return [f"{', '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect: no item "
            "of the study has audio or video."]


def _agreement(s: StudySettings) -> list[str]:
    if s.agreement_alert_threshold is not None or (
            s.agreement_window == s.agreement_window_default):
        return []
    return [f"agreement_window ({s.agreement_window}) has no effect without "
            "agreement_alert_threshold (blank: no agreement alerts)."]


_RULES = (_attention, _calibration, _crowd, _media, _agreement)


def setting_warnings(settings: StudySettings) -> list[str]:
    """One sentence per setting that cannot take effect, naming it and the fix."""
    return [warning for rule in _RULES for warning in rule(settings)]
