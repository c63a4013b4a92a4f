"""The Django-free integrity cores on hand-made data: the page's counters read and clamped
(annotation.integrity), a slot's flags and a rater's shares, and agreement over time per
window of judgments (annotation.drift)."""

from __future__ import annotations

import json

import pytest

from annotation import drift, integrity
from annotation.integrity import Behaviour, SlotEvidence, SlotFlags

GOOD = {"pastes": 1, "focus_losses": 2, "seconds_away": 40, "keystrokes": 0, "inputs": 7}


def test_counters_are_read_from_an_object_or_its_json_text():
    assert integrity.behaviour_parse(GOOD) == Behaviour(1, 2, 40, 0, 7)
    assert integrity.behaviour_parse(json.dumps(GOOD)) == Behaviour(1, 2, 40, 0, 7)
    # numbers as text (a form) and floats are whole numbers; unknown keys are ignored
    assert integrity.behaviour_parse({**GOOD, "pastes": "3", "inputs": 2.6,
                                      "extra": "x"}) == Behaviour(3, 2, 40, 0, 3)


def test_counters_are_clamped_to_their_bounds():
    parsed = integrity.behaviour_parse({**GOOD, "pastes": -5, "seconds_away": 10**12,
                                        "keystrokes": 1e300})
    assert parsed == Behaviour(0, 2, integrity.BEHAVIOUR_LIMITS["seconds_away"],
                               integrity.BEHAVIOUR_LIMITS["keystrokes"], 7)


@pytest.mark.parametrize("raw", [
    None, "", "not json", "[1, 2]", 42, [GOOD], {"pastes": 1},  # missing counters
    {**GOOD, "pastes": "lots"}, {**GOOD, "pastes": True}, {**GOOD, "pastes": None},
    {**GOOD, "pastes": float("nan")}, {**GOOD, "inputs": {"a": 1}},
    json.dumps(GOOD) + " " * integrity.MAX_BEHAVIOUR_TEXT,
])
def test_unreadable_counters_record_nothing(raw):
    assert integrity.behaviour_parse(raw) is None


def test_a_revision_adds_its_counters_within_the_bounds():
    limit = integrity.BEHAVIOUR_LIMITS["pastes"]
    total = integrity.behaviour_add(Behaviour(pastes=limit - 1, inputs=3),
                                    Behaviour(pastes=5, inputs=4))
    assert (total.pastes, total.inputs) == (limit, 7)


def test_slot_flags():
    honest = SlotEvidence(Behaviour(keystrokes=120, inputs=130, seconds_away=5), seconds=40.0,
                          free_text=True, media=1, media_heard=1)
    assert integrity.slot_flags(honest, speeder_seconds=10.0) == SlotFlags(
        False, False, False, False, False)
    pasted = SlotEvidence(Behaviour(pastes=1, seconds_away=31), seconds=4.0, free_text=True,
                          media=2, media_heard=1)
    assert integrity.slot_flags(pasted, speeder_seconds=10.0).raised() == [
        "paste", "away", "speed", "listening"]
    # text that came from neither the keyboard nor the clipboard
    ghost = SlotEvidence(Behaviour(inputs=2), seconds=30.0, free_text=True)
    assert integrity.slot_flags(ghost, speeder_seconds=10.0).raised() == ["keystroke_free"]
    # no free text: no keystroke-free flag, whatever the keystrokes
    assert integrity.slot_flags(SlotEvidence(Behaviour(), seconds=30.0, free_text=False),
                                speeder_seconds=10.0).keystroke_free is False
    # exactly at the threshold is not faster than it; 30 s away is not "more than 30 s"
    edge = SlotEvidence(Behaviour(seconds_away=30), seconds=10.0)
    assert integrity.slot_flags(edge, speeder_seconds=10.0).raised() == []


def test_unobserved_signals_are_none_not_false():
    flags = integrity.slot_flags(SlotEvidence(None, seconds=None), speeder_seconds=None)
    assert flags == SlotFlags(None, None, None, None, None)


def test_rater_shares_count_only_observed_slots_and_flag_over_the_limit():
    pasted = SlotFlags(paste=True, away=False, keystroke_free=False, speed=False)
    clean = SlotFlags(paste=False, away=False, keystroke_free=False, speed=False)
    unobserved = SlotFlags(speed=False)
    found = integrity.rater_integrity([pasted] + [clean] * 8 + [unobserved] * 5)
    assert found.slots == 14
    assert found.observed["paste"] == 9 and found.observed["speed"] == 14
    assert found.shares["paste"] == pytest.approx(1 / 9)  # above 10%: flagged
    assert found.shares["listening"] is None
    assert found.signals == ["paste"] and found.flagged
    assert found.detail() == "pasted into free text: 1 of 9"
    # one paste in ten is exactly the limit: not above it
    assert not integrity.rater_integrity([pasted] + [clean] * 9).flagged
    # too few observed slots to judge anyone
    assert not integrity.rater_integrity([pasted] * 4).flagged
    assert integrity.rater_integrity([pasted] * 5).signals == ["paste"]


# --- agreement over time ----------------------------------------------------------------------
def _votes(answers: dict[str, list[str]]) -> list[drift.Vote]:
    """answers: rater -> their answers to units 0, 1, 2, ... in that order."""
    return [drift.Vote(rater, unit, value, (unit, rater))
            for rater, values in answers.items() for unit, value in enumerate(values)]


def test_agreement_with_the_others_majority_leaving_the_rater_out():
    votes = _votes({"a": ["y", "y", "n"], "b": ["y", "n", "n"], "c": ["y", "n", "y"]})
    scores = drift.agreement_scores(votes)
    # unit 0: all agree; unit 1: a says y, others n,n; unit 2: a says n, others n,y (a tie:
    # a's answer is one of the two tied answers: 1/2)
    assert [s for _o, s in scores["a"]] == [1.0, 0.0, 0.5]
    assert [s for _o, s in scores["b"]] == [1.0, 0.5, 0.5]
    assert [s for _o, s in scores["c"]] == [1.0, 0.5, 0.0]


def test_units_judged_once_are_not_scored():
    votes = [*_votes({"a": ["y", "y"]}), drift.Vote("b", 0, "y", (0, "b"))]
    assert [s for _o, s in drift.agreement_scores(votes)["a"]] == [1.0]


def test_windows_in_submission_order_and_alerts_only_on_full_windows():
    # rater d agrees on the first 5 units, then disagrees on the next 5, then 2 more disagree
    others = {name: ["y"] * 12 for name in ("a", "b")}
    votes = _votes({**others, "d": ["y"] * 5 + ["n"] * 7})
    windows = drift.agreement_windows(votes, window=5, threshold=0.6)["d"]
    assert [(w.index, w.first, w.last, w.agreement, w.full, w.alert) for w in windows] == [
        (1, 1, 5, 1.0, True, False), (2, 6, 10, 0.0, True, True),
        (3, 11, 12, 0.0, False, False)]
    # the order is the submission order, not the order votes are given in
    shuffled = list(reversed(votes))
    assert drift.agreement_windows(shuffled, window=5, threshold=0.6)["d"] == windows
    # no threshold: no alerts
    assert not any(w.alert for w in drift.agreement_windows(votes, window=5,
                                                            threshold=None)["d"])
