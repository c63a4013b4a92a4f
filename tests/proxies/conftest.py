"""Fixtures shared by the proxy tests."""

from __future__ import annotations

import pytest

# The fake OpenAI servers (tests/proxies/judges/fake_openai.py) listen on 127.0.0.0/8, which the
# judge network policy refuses unless an operator allows it.
LOOPBACK_NETWORKS = ["127.0.0.0/8"]


@pytest.fixture
def allow_loopback_judges(settings):
    """Judges run through the Django side may reach loopback (the fake servers): the explicit
    opt-in a deployment with a judge server on its own host would make.

    Returns the environment a worker process needs for the same opt-in: tests/workers.py starts
    workers with the environment the session started with, not with this process' settings, so
    pass it as `running_worker(..., env=allow_loopback_judges)`."""
    settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = list(LOOPBACK_NETWORKS)
    return {"EVALSTUDY_JUDGE_ALLOWED_NETWORKS": ",".join(LOOPBACK_NETWORKS)}


@pytest.fixture
def allow_tmp_model_dirs(settings, tmp_path_factory):
    """Models saved in pytest's temporary directories (tiny random models, copies of the
    encoder) may be named as model directories: the opt-in an operator makes by listing a
    directory of models in EVALSTUDY_MODEL_DIRS. Returns the environment a worker process needs
    for the same opt-in (`running_worker(..., env=allow_tmp_model_dirs)`)."""
    settings.EVALSTUDY_MODEL_DIRS = [*getattr(settings, "EVALSTUDY_MODEL_DIRS", []),
                                     str(tmp_path_factory.getbasetemp())]
    return {"EVALSTUDY_MODEL_DIRS": ",".join(map(str, settings.EVALSTUDY_MODEL_DIRS))}
