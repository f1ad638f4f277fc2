"""Where the parts of a run live: one module or package per --mode (docs/architecture.md, Modes).

colocated.py: everything in one process; decoupled/: sim servers, collectors and the learner
as processes over gRPC; ray/: simulator and collector actors on a Ray cluster; ddp/: the
learner as torchrun ranks over decoupled collectors."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skurl.train.run import ModeFor


def mode_for(name: str) -> ModeFor:
    """The ModeFor (train/run.py) of --mode `name` (colocated, decoupled or ray; the DDP
    learner runs as its own command). Imported on use: Ray and gRPC only when asked for."""
    if name == "decoupled":
        from skurl.modes.decoupled.wiring import launched

        return launched
    if name == "ray":
        from skurl.modes.ray.wiring import mode as ray_mode

        return ray_mode
    from skurl.modes.colocated import mode as colocated_mode

    return colocated_mode
