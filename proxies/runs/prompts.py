"""What a run of a judge prompt version (proxies.versions) sends: the few-shot block before
every prompt, and what of the version enters the run's signature (so two versions never share
a rater)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from proxies.judges.fewshot import FewShotExample
from proxies.methods import fewshot_prefix
from proxies.models import JudgePromptVersion


def version_prefix(version: JudgePromptVersion) -> str:
    """The few-shot block every prompt of a run of `version` starts with."""
    return fewshot_prefix(version.method,
                          [FewShotExample.from_dict(e) for e in version.examples or []],
                          template=version.template)


def version_signature(version: JudgePromptVersion) -> dict[str, Any]:
    """What of a version enters a run's signature: which version, and a digest of its
    examples (their texts and answers), so two versions never share a rater."""
    digest = hashlib.sha256(json.dumps(
        [[e.get("output"), e.get("output_b"), e.get("text"), e.get("text_b"), e.get("answer")]
         for e in version.examples or []], sort_keys=True, default=str).encode()).hexdigest()
    return {"id": version.pk, "number": version.number, "criterion": version.criterion.key,
            "examples": len(version.examples or []), "examples_digest": digest[:16]}
