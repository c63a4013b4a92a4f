"""The kinds of learned proxy, declared once: each kind's name (stored in artefact manifests and
on `LearnedProxy.kind`: never rename one), its label, and what the layers around the model ask
of it. Light on purpose (no numpy, no torch): the Django model's choices, the admin, the API,
the training service and the run service read it without loading a model library.

The class that trains a kind lives in `proxies.learned` (Django-free, loading numpy and, for
the cross-encoder, torch) (`PROXY_KINDS`, keyed by the same
names; tests/proxies/learned/test_learned_proxies.py checks that the two agree)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LearnedKind:
    name: str
    label: str
    # Trained on pairs of outputs with a human majority for A or B, on the differences of
    # their stored metric results (`proxies.learned.pairwise`), and answers pairwise criteria;
    # otherwise trained on labelled outputs (`proxies.learned.train_proxy`) and answers the
    # criteria with a binary reading.
    pairwise: bool = False
    # Fine-tunes a transformer: trained and run on the gpu queue, and it carries its own
    # encoder inside its artefact (no separate encoder directory to check).
    fine_tuned: bool = False
    # Reads the study's text encoder (model_path) when trained and used.
    reads_encoder: bool = True


LEARNED_KINDS: dict[str, LearnedKind] = {kind.name: kind for kind in (
    LearnedKind("wer_bertscore", "Logistic regression: WER rates + BERTScore"),
    LearnedKind("embedding_lr", "Logistic regression: embedding cosine + lengths"),
    LearnedKind("cross_encoder", "Fine-tuned cross-encoder classifier", fine_tuned=True),
    LearnedKind("pairwise_logistic",
                "Pairwise logistic regression on stored metric differences",
                pairwise=True, reads_encoder=False),
)}


def learned_kind(name: str) -> LearnedKind:
    """The kind called `name` (ValueError naming the known ones)."""
    try:
        return LEARNED_KINDS[name]
    except KeyError:
        raise ValueError(f"kind: {name!r} is not one of {sorted(LEARNED_KINDS)}") from None


def learned_kind_choices() -> list[tuple[str, str]]:
    return [(kind.name, kind.label) for kind in LEARNED_KINDS.values()]


def pairwise_kind_names() -> frozenset[str]:
    return frozenset(name for name, kind in LEARNED_KINDS.items() if kind.pairwise)
