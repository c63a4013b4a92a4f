"""HATS (../shared/data/hats: French ASR pairs with listener votes; MIT) for the tests that
run on a slice of it: the file's rows, and a pairwise study holding them with the votes
written as a counts file (the tests import it through the platform's command)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from evalstudy.models import Criterion, Item, Output, Study, System

HATS = Path(__file__).resolve().parents[2] / "shared" / "data" / "hats" / "hats.txt"


def hats_rows(n: int) -> list[dict[str, str]]:
    if not HATS.exists():
        pytest.skip(f"{HATS} is not on this machine (the shared data sets)")
    with HATS.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[:n]


def hats_study(folder: Path, rows: int, slug: str = "hats") -> tuple[Study, Path]:
    """A pairwise study of the first `rows` triplets (systems hypA, hypB; criterion
    `preference`) and the path of their votes as an `import_vote_counts` file."""
    triplets = hats_rows(rows)
    study = Study.objects.create(slug=slug, title="HATS", design="pairwise", language="fr")
    hyp_a, hyp_b = (System.objects.create(study=study, name=name) for name in ("hypA", "hypB"))
    Criterion.objects.create(study=study, key="preference", kind="pairwise",
                             prompt="Which transcript is better?")
    votes = folder / "votes.csv"
    with votes.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["item", "system", "system_b", "criterion", "value", "count"])
        for index, row in enumerate(triplets):
            item = Item.objects.create(study=study, external_id=f"t{index:04d}",
                                       reference=row["reference"])
            Output.objects.create(item=item, system=hyp_a, text=row["hypA"])
            Output.objects.create(item=item, system=hyp_b, text=row["hypB"])
            writer.writerow([item.external_id, "hypA", "hypB", "preference", "A", row["nbrA"]])
            writer.writerow([item.external_id, "hypA", "hypB", "preference", "B", row["nbrB"]])
    return study, votes
