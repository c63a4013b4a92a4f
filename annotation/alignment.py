"""The word alignment a study may show its raters under an output (`Study.alignment_shown`).

Off by default: seeing the errors marked changes how raters judge them (they count marks
instead of reading for meaning), so a study turns it on only when that is what it measures.

The alignment comes from whichever app registers a provider from its AppConfig.ready (metrics:
the WER scorer's alignment, on normalised words, the one its results store), so the rater
pages show the alignment the metrics computed without annotation importing metrics. It is
computed from the two texts on each page (no database query; the scorer remembers recent
pairs), and nothing is shown when no provider is registered or it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

# (reference, output) -> ops {"op": "equal"|"substitute"|"delete"|"insert", "ref": [words],
# "hyp": [words]}
AlignmentProvider = Callable[[str, str], Sequence[dict[str, Any]]]
_provider: AlignmentProvider | None = None


def alignment_provider_register(provider: AlignmentProvider) -> None:
    """Name what aligns a reference with an output; call it once, from AppConfig.ready."""
    global _provider
    _provider = provider


def alignment_for(study: Any, reference: str, text: str) -> list[dict[str, str]] | None:
    """The ops to show under the output (words joined), or None: the study does not show the
    alignment, there is no reference on the page, or no provider."""
    if not study.alignment_shown or not reference or _provider is None:
        return None
    try:
        ops = _provider(reference, text)
    except Exception:  # noqa: BLE001 - an aid to the rater; the page works without it
        logger.exception("aligning an output with its reference failed")
        return None
    return [{"op": str(op.get("op", "")), "ref": " ".join(op.get("ref", [])),
             "hyp": " ".join(op.get("hyp", []))} for op in ops] or None
