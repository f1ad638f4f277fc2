"""The policy interface shared by baselines and learned policies.

A policy maps today's observation of N SKUs to order quantities in units. Learned
policies pick indices of an `ActionGrid` and map them to units; baselines compute
units directly from the exact state in `obs.raw`. The env only ever sees units.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from skurl.sim.api import Obs


@runtime_checkable
class Policy(Protocol):
    name: str

    def orders(self, obs: Obs) -> np.ndarray:
        """Order quantity in units for each SKU (float64 or int64 [N], >= 0)."""
        ...

    def params(self) -> dict[str, Any]:
        """The policy's (tuned) parameters, for reports and `skurl eval --json`."""
        ...
