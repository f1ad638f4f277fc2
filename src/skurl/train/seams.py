"""What a mode's parts and the loop's steps read of the Trainer that builds them
(train/loop.py), as Protocols: typed seams that need not import the Trainer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from skurl.sync.api import WeightPublisher

if TYPE_CHECKING:
    from skurl.collect.collectors import Collectors
    from skurl.config import Config
    from skurl.learn.learner import Learner
    from skurl.policy.nets import ActorCritic
    from skurl.sim.env import VectorEnv
    from skurl.train.core import RunCore
    from skurl.train.evaluation import Evaluator


class PartsView(Protocol):
    """The hooks of a mode's Parts that steps extend."""

    @property
    def wraps(self) -> list[Callable[[Collectors], Collectors]]: ...

    @property
    def warm_start_env(self) -> Callable[[RunCore], VectorEnv]: ...


class TrainerView(Protocol):
    """The Trainer as its parts see it while it builds them, and as its steps see it."""

    @property
    def cfg(self) -> Config: ...

    @property
    def core(self) -> RunCore: ...

    @property
    def parts(self) -> PartsView: ...

    @property
    def learner(self) -> Learner: ...

    @property
    def run_dir(self) -> Path: ...

    @property
    def resumed(self) -> bool: ...

    @property
    def weights(self) -> WeightPublisher: ...

    @property
    def model(self) -> ActorCritic: ...

    @property
    def evaluator(self) -> Evaluator | None: ...

    @property
    def warm(self) -> bool: ...

    @property
    def before_checkpoint(self) -> list[Callable[[int], object]]: ...

    @property
    def on_checkpoint(self) -> list[Callable[[int], object]]: ...

    @property
    def evaluations_due(self) -> list[Callable[[int], bool]]: ...

    @property
    def meta(self) -> dict[str, Any]: ...
