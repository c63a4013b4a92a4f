from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"

    def ready(self):
        from evalstudy.admin.studies import study_admin_action_register

        from .admin import compute_metrics

        study_admin_action_register(compute_metrics)

        from annotation.alignment import alignment_provider_register

        alignment_provider_register(wer_alignment)


def wer_alignment(reference: str, text: str) -> list:
    """The WER scorer's word alignment of `text` with `reference` (normalised words), as a
    metric run stores it: what a study with `alignment_shown` shows its raters."""
    from .scorers.base import Pair
    from .scorers.text import WordErrorScorer

    score = WordErrorScorer().score([Pair(0, reference, text)])[0]
    return [] if score.error else list(score.details.get("alignment") or [])
