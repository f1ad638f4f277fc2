"""The Mode protocol: how a mode's parts are built, in two phases, with no Trainer in sight.

Phase 1, `learner(core)`: the learner (restored from the run's checkpoint on a resume).
Phase 2, `build(core, learner)`: a `Wiring` of collectors, the weight publisher, what to
close, and the Observers that follow the loop. Like Sample Factory's runner: the parts are
built first, then connected; none keeps a reference back to the loop (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from skurl.learn.checkpoint import no_checkpoint_error, restore_latest
from skurl.learn.learner import Learner
from skurl.policy.nets import ActorCritic
from skurl.sync.inproc import InProcWeights
from skurl.train.core import TRAINED, RunCore

if TYPE_CHECKING:
    from skurl.collect.collectors import Collectors
    from skurl.collect.evaluate import EvalResult
    from skurl.learn.labelling import Labellers
    from skurl.sim.env import VectorEnv
    from skurl.sync.api import WeightBackend

Scalars = dict[str, Any]  # an iteration's figures for its record (metrics.jsonl, TensorBoard)
WarmStep = Callable[[], Scalars]  # the warm start itself: its scalars


class Observer(Protocol):
    """What follows the loop's events (catalog change, business metrics, the shard stream's
    ledger, the rollout store's clean-up). Subclass it to inherit the no-op defaults and
    override only the events you follow."""

    def evaluation_due(self, it: int) -> bool:
        """True for an extra evaluation after iteration `it`."""
        return False

    def on_scored(self, name: str, result: EvalResult) -> None:
        """Policy `name` scored on the held-out seeds."""
        return None

    def on_evaluated(self, it: int, scalars: Scalars, trained: Scalars) -> None:
        """An evaluation after iteration `it`: its scalars to log (may add some) and the
        trained policy's result."""
        return None

    def before_checkpoint(self, iteration: int) -> None:
        """A checkpoint of the learner at `iteration` is about to be saved."""
        return None

    def on_checkpoint(self, it: int) -> None:
        """A checkpoint after iteration `it` was saved."""
        return None


class Observers(Observer):
    """Every Observer of a run, told in the order they were added."""

    def __init__(self, observers: list[Observer] | None = None) -> None:
        self.observers: list[Observer] = list(observers or [])

    def add(self, observer: Observer) -> None:
        self.observers.append(observer)

    def evaluation_due(self, it: int) -> bool:
        return any([o.evaluation_due(it) for o in self.observers])

    def on_scored(self, name: str, result: EvalResult) -> None:
        for o in self.observers:
            o.on_scored(name, result)

    def on_evaluated(self, it: int, scalars: Scalars, trained: Scalars) -> None:
        for o in self.observers:
            o.on_evaluated(it, scalars, trained)

    def before_checkpoint(self, iteration: int) -> None:
        for o in self.observers:
            o.before_checkpoint(iteration)

    def on_checkpoint(self, it: int) -> None:
        for o in self.observers:
            o.on_checkpoint(it)


def _nothing() -> None:
    return None


def _run_it(step: WarmStep) -> Scalars:
    return step()


@dataclass
class Wiring:
    """A mode's built parts. `around`: the mode's own wrappers, put around the collectors
    outside any the run adds (Trainer.wrap); `warm_start_env`: the env the warm start
    records the baseline on (None: the first training shard's in-process env);
    `around_warm_start`: how the warm start runs (DDP: on rank 0, then broadcast);
    `metrics_url`: this process's /metrics where the mode serves one; `labellers`: where DCL's
    labelling runs (the mode's collectors; None: in the learner's process)."""

    collectors: Collectors
    weights: WeightBackend
    close: Callable[[], None] = _nothing
    observers: list[Observer] = field(default_factory=list)
    around: list[Callable[[Collectors], Collectors]] = field(default_factory=list)
    warm_start_env: VectorEnv | None = None
    around_warm_start: Callable[[WarmStep], Scalars] = _run_it
    metrics_url: str | None = None
    labellers: Labellers | None = None  # train.algo=dcl's (None: the learner labels in process)


class Mode(Protocol):
    """A mode: where the collectors run, how weights reach them, which learner."""

    @property
    def name(self) -> str:
        """Recorded in the run dir (mode.json): --resume continues in it."""
        ...

    @property
    def lead(self) -> bool:
        """False for a follower (a DDP rank > 0): it runs the same iterations, writes nothing."""
        ...

    def learner(self, core: RunCore) -> Learner:
        """Phase 1: the learner, restored from the latest checkpoint when `core.resumed`."""
        ...

    def build(self, core: RunCore, learner: Learner) -> Wiring:
        """Phase 2: the parts around `learner` (the mode closes what it started if this raises)."""
        ...


def plain_learner(core: RunCore) -> Learner:
    """A single-process learner, restored when the run resumes."""
    learner = Learner(core.cfg, core.schema.dim, core.grid.n)
    if core.resumed:
        restore_checkpoint(core, learner)
    return learner


def restore_checkpoint(core: RunCore, learner: Learner) -> None:
    """Load the run's latest checkpoint into `learner` (one line when there is none)."""
    if restore_latest(learner, core.run_dir) is None:
        raise no_checkpoint_error(core.run_dir, f"--resume {core.run_dir}")


def in_process_weights(learner: Learner) -> InProcWeights:
    """Weights in memory, holding the learner's current version."""
    weights = InProcWeights(TRAINED)
    weights.publish(learner.version, learner.weights())
    return weights


def collector_model(learner: Learner) -> ActorCritic:
    """The collectors' own copy of the learner's network (weights reach it by the sync)."""
    return ActorCritic.from_state(learner.weights())
