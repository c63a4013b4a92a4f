from django.apps import AppConfig


class ProxiesConfig(AppConfig):
    """LLM judges and learned proxies judging a study's outputs as non-human raters."""

    name = "proxies"
    label = "proxies"
