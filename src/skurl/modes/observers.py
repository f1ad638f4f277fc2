"""Observers (train/mode.py) that several modes add to the loop."""

from __future__ import annotations

from skurl.telemetry.metrics import get_metrics
from skurl.train.evaluation import TRAINED
from skurl.train.mode import Observer, Scalars


class BusinessFigures(Observer):
    """Each evaluation's business figures of the trained policy to Prometheus (business_*)."""

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name

    def on_evaluated(self, it: int, scalars: Scalars, trained: Scalars) -> None:
        get_metrics().record_business(self.run_name, TRAINED, trained)
