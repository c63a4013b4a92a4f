"""The metric worker's heap: frozen once a model is loaded, collected less often while text
metrics score a batch (`metrics.scorers.heap`)."""

import gc
import weakref

import pytest

from metrics.scorers.base import Pair
from metrics.scorers.encoder import Encoder, get_encoder
from metrics.scorers.heap import BATCH_THRESHOLD, fewer_collections
from metrics.scorers.registry import build


def test_loading_a_model_freezes_the_long_lived_heap_after_collecting_garbage():
    """The half million objects a loaded model leaves are kept out of every later cycle
    collection (each full one walked them all); garbage made before is collected, not kept."""
    path = get_encoder(device="cpu").model_path

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # garbage only the cycle collector frees
    gone = weakref.ref(cycle)
    del cycle
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    gc.disable()  # only heap_settle may collect: the cycle is freed by it or not at all
    try:
        assert Encoder(path, "cpu").model is not None  # loads a second copy of the weights
        assert gc.get_freeze_count() > 100_000
        assert gone() is None
    finally:
        gc.enable()
        gc.unfreeze()  # the rest of the session runs as it did


def test_text_scorers_collect_less_often_while_scoring_and_restore_the_setting():
    seen = []
    before = gc.get_threshold()
    wer = build("wer")
    original = wer._score_pair
    wer._score_pair = lambda r, h: (seen.append(gc.get_threshold()[0]), original(r, h))[1]
    scores = wer.score([Pair(1, "a b c", "a b d")])
    assert scores[0].values["wer"] == pytest.approx(1 / 3)
    assert seen == [max(before[0], BATCH_THRESHOLD)]
    assert gc.get_threshold() == before
    with fewer_collections():  # nested blocks: the outer one restores
        with fewer_collections():
            pass
        assert gc.get_threshold()[0] == max(before[0], BATCH_THRESHOLD)
    assert gc.get_threshold() == before


def test_fewer_collections_leaves_automatic_collection_off_when_it_was():
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
