"""The fixed choices of the analysis options, in a module that loads no statistics library:
the web request that starts an analysis checks a run's options against them (answering at
once), and the models and the pipeline that use the options read them from here."""

from __future__ import annotations

#: Values of the analysis option ``separation``: ``"auto"`` (default) fits the penalised model
#: too when the maximum-likelihood fit shows separation; ``"penalised"`` always fits it;
#: ``"off"`` only diagnoses (the warnings and flags stay).
SEPARATION_OPTIONS = ("auto", "penalised", "off")
