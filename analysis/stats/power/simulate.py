"""Simulated studies: each simulation draws from its own generator, so a result depends only
on the seed and the simulation's index."""

from __future__ import annotations

from typing import Any

import numpy as np

from .designs import BinaryDesign, LikertDesign

# --------------------------------------------------------------------------------------------
# simulation


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def simulation_generator(seed: int, sim: int) -> np.random.Generator:
    """Simulation ``sim``'s own generator: the ``sim``-th child of ``SeedSequence(seed)``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(sim,)))


def simulate_judgments(d: BinaryDesign, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One study: outcomes (items, systems, k) (0/1, or ratings 1..K for a LikertDesign) and
    rater ids of the same shape."""
    k, s, items = d.ratings_per_output, d.n_systems, d.n_items
    per_item = k * s
    if d.latin_square:
        # distinct raters per item: the first `per_item` of a random permutation
        raters = rng.random((items, d.n_raters)).argsort(axis=-1)[:, :per_item]
    else:
        raters = rng.integers(0, d.n_raters, size=(items, per_item))
    raters = raters.reshape(items, s, k)
    u = rng.normal(0.0, d.rater_sd, size=d.n_raters) if d.rater_sd > 0 else np.zeros(d.n_raters)
    v = rng.normal(0.0, d.item_sd, size=items) if d.item_sd > 0 else np.zeros(items)
    eta = d.effect * np.arange(s)[None, :, None] + u[raters] + v[:, None, None]
    if isinstance(d, LikertDesign):
        latent = eta + rng.logistic(size=eta.shape)
        # rating j + 1 when theta_j < latent <= theta_(j+1): P(rating <= j) = expit(theta_j - eta)
        out = (1 + (latent[..., None] > np.asarray(d.thresholds)).sum(axis=-1)).astype(np.int16)
    else:
        out = (rng.random(eta.shape) < _expit(d.baseline + eta)).astype(np.int8)
    return out, raters


def study_frame(d: BinaryDesign, outcome: np.ndarray, raters: np.ndarray, sim: int | None = None):
    import pandas as pd

    items, s, k = outcome.shape
    item_idx, sys_idx, _ = np.meshgrid(np.arange(items), np.arange(s), np.arange(k),
                                       indexing="ij")
    response = "rating" if isinstance(d, LikertDesign) else "y"
    columns: dict[str, Any] = {} if sim is None else {"sim": np.full(outcome.size, sim)}
    columns.update({
        response: outcome.ravel().astype(int),
        "system": pd.Categorical(np.array(["A", "B"])[sys_idx.ravel()], categories=["A", "B"]),
        "rater": raters.ravel().astype(int),
        "item": item_idx.ravel().astype(int),
    })
    return pd.DataFrame(columns)


def simulate_binary_study(design: BinaryDesign, seed: int | None = None, sim: int = 0):
    """Simulated study ``sim`` of ``seed`` (the one :func:`power_binary` refits) as a tidy
    DataFrame: ``y``, ``system`` (A/B), ``rater`` ("r<id>"), ``item`` ("i<id>")."""
    return _tidy(design, seed, sim)


def simulate_likert_study(design: LikertDesign, seed: int | None = None, sim: int = 0):
    """As :func:`simulate_binary_study` for a :class:`LikertDesign` (``rating`` 1..K)."""
    return _tidy(design, seed, sim)


def _tidy(design: BinaryDesign, seed: int | None, sim: int):
    outcome, raters = simulate_judgments(design, simulation_generator(chosen_seed(seed), sim))
    frame = study_frame(design, outcome, raters)
    frame["system"] = frame["system"].astype(str)
    frame["rater"] = "r" + frame["rater"].astype(str)
    frame["item"] = "i" + frame["item"].astype(str)
    return frame


def chosen_seed(seed: int | None) -> int:
    if seed is None:
        # drawn from the OS, and reported so that the run can be repeated
        return int(np.random.SeedSequence().generate_state(1)[0])
    if int(seed) < 0:
        raise ValueError("seed must be >= 0")
    return int(seed)
