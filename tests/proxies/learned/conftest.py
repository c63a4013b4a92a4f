"""Shared, expensive fixtures: the synthetic studies and proxies trained once per session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from tests.proxies.learned.synthetic import make_synthetic_study  # noqa: E402

# The cross-encoder's test settings: small enough for about 30-60 s on 2 CPU cores (336
# training pairs, 3 epochs), large enough to learn antonyms (test AUC about 0.95-0.98).
CROSS_ENCODER_PARAMS = {"max_length": 64, "epochs": 3, "batch_size": 16, "learning_rate": 2e-4}


@pytest.fixture(scope="session")
def synthetic_study():
    """900 labelled pairs from 300 references (the regressions' study)."""
    return make_synthetic_study(300, 3, seed=0)


@pytest.fixture(scope="session")
def small_study():
    """480 labelled pairs from 160 references (the cross-encoder's study)."""
    return make_synthetic_study(160, 3, seed=0)


@pytest.fixture(scope="session")
def other_study():
    """A second study (other seed, so other references) to use trained proxies on."""
    return make_synthetic_study(100, 3, seed=7)


@pytest.fixture(scope="session")
def trained_regressions(synthetic_study):
    from proxies.learned import train_proxy

    return {
        "wer_bertscore": train_proxy("wer_bertscore", synthetic_study),
        "wer_bertscore+extra": train_proxy("wer_bertscore", synthetic_study,
                                           params={"extra": ("sd", "heval")}),
        "embedding_lr": train_proxy("embedding_lr", synthetic_study),
    }


@pytest.fixture(scope="session")
def trained_cross_encoder(small_study):
    from proxies.learned import train_proxy

    return train_proxy("cross_encoder", small_study, params=CROSS_ENCODER_PARAMS, seed=0)


# The trained proxies are session fixtures, so each xdist worker that runs a test needing one
# trains it again (the cross-encoder: about a minute of both cores). The tests sharing a
# trained proxy run on one worker (`--dist loadgroup`, scripts/test.sh), which trains it once.
_SHARED_TRAINING = (("trained_cross_encoder", "learned_cross_encoder"),
                    ("trained_regressions", "learned_regressions"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        group = next((name for fixture, name in _SHARED_TRAINING if fixture in fixtures), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
