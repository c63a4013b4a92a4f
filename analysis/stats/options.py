"""The fixed choices of the analysis options, in a module that loads no statistics library:
the web request that starts an analysis checks a run's options against them (answering at
once), and the models and the pipeline that use the options read them from here."""

from __future__ import annotations

from collections.abc import Iterable

#: Values of the analysis option ``separation``: ``"auto"`` (default) fits the penalised model
#: too when the maximum-likelihood fit shows separation; ``"penalised"`` always fits it;
#: ``"off"`` only diagnoses (the warnings and flags stay).
SEPARATION_OPTIONS = ("auto", "penalised", "off")


# The deployment table (LATTE Table 5) groups outputs by this column within each system.
DEPLOYMENT_DEFAULT_GROUPS = ("item.speaker",)


def deployment_group_column(wanted: str | None, columns: Iterable[str]) -> str:
    """The column to group by: `deployment_group` as given, or as an item or system field
    (`speaker` -> `item.speaker`); by default the speaker where items have one, else the
    system."""
    columns = list(columns)
    if wanted:
        for column in (wanted, f"item.{wanted}", f"system.{wanted}"):
            if column in columns:
                return column
        fields = [c for c in columns if c.startswith(("item.", "system."))] + ["system"]
        raise ValueError(f"deployment_group {wanted!r} is not a field of the items or systems "
                         f"(known: {', '.join(fields)})")
    return next((c for c in DEPLOYMENT_DEFAULT_GROUPS if c in columns), "system")
