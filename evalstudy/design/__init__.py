"""Django-free study design: rater lists, seats and per-seat running orders.

See :mod:`evalstudy.design.builders` for the vocabulary (item, system, cell, list, seat, replica,
slot). Everything here is pure Python so it can be unit-tested and reused without Django.
"""

from evalstudy.design.builders import (
    DesignError,
    TargetCell,
    crossed,
    latin_square,
    pairwise,
    split_list,
    tuples,
)
from evalstudy.design.ordering import SeatSlot, SlotKind, order_seat, seat_seed

__all__ = [
    "DesignError",
    "SeatSlot",
    "SlotKind",
    "TargetCell",
    "crossed",
    "latin_square",
    "order_seat",
    "pairwise",
    "seat_seed",
    "split_list",
    "tuples",
]
