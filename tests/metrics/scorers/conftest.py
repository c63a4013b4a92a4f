"""Fixtures shared by the scorer tests."""

import pytest


@pytest.fixture(scope="session")
def cpu_encoder():
    """The embedded encoder on the CPU, loaded once per session (the scorers only read it)."""
    from metrics.scorers.encoder import get_encoder

    return get_encoder(device="cpu")
