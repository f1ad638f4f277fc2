"""The learner dies after the collectors wrote an iteration's shards; `--resume` trains on
those stored shards instead of collecting them again, and the run ends with the weights of
a run that never stopped. Full deployment: Redis weights, S3 (moto) rollout store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_decoupled import Delegating, assert_same_training, tiny

from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.modes.decoupled.supervisor import InProcessRoles
from skurl.store import open_store
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training
from skurl.train.loop import recorded_mode

pytestmark = pytest.mark.integration


class LearnerDied(RuntimeError):
    pass


class DiesAfterCollecting(Delegating):
    def collect(self, it: int, *args: Any) -> Any:
        batch = self.inner.collect(it, *args)
        if it == 1:
            raise LearnerDied("the learner stops after iteration 1's shards are in the store")
        return batch


def launched(cfg: Any, run_dir: Path, *, resume: bool = False, wrap: Any = None) -> Any:
    """The run as `skurl train --mode decoupled` launches it: server processes."""
    if resume:
        return training.resume(decoupled.launched, run_dir, baseline=False)
    return training.start(decoupled.launched, cfg, run_dir, baseline=False, wrap=wrap)


def in_process(cfg: Any, run_dir: Path, *, resume: bool = False, wrap: Any = None) -> Any:
    """The same servers inside this process (InProcessRoles): no start-up cost."""
    roles = InProcessRoles(cfg, run_name=run_dir.name)
    try:
        return decoupled.run_with_collectors(roles.cfg, run_dir, roles.collector_addresses, resume=resume,
                                             baseline=False, wrap=wrap)
    finally:
        roles.close()


# With ppo.sample_skus the stored shards hold the obs of the learner's sample only.
@pytest.mark.parametrize(("sample", "run"), [([], launched), (["ppo.sample_skus=100"], in_process)],
                         ids=["all", "sampled"])
def test_resumed_learner_trains_on_the_interrupted_iterations_stored_shards(
        tmp_path: Path, redis_url: str, s3_endpoint: str, s3_credentials: None,
        unique_name: str, sample: list[str], run: Any) -> None:
    reference = tmp_path / "colocated"
    training.start(colocated.mode, tiny(*sample), reference, baseline=False)
    cfg = tiny("sync.backend=redis", f"sync.redis_url={redis_url}", f"sync.key={unique_name}",
               f"store.url=s3://{unique_name}/rollouts", f"store.endpoint_url={s3_endpoint}",
               "store.create_bucket=true", *sample)
    run_dir = tmp_path / "decoupled"
    with pytest.raises(LearnerDied):
        run(cfg, run_dir, wrap=DiesAfterCollecting)
    store = open_store(cfg.store)
    assert [m.collector_id for m in store.list_shards(1)] == ["c0", "c1"]
    assert store.iterations() == [1]  # iteration 0's shards went with its checkpoint

    result = run(cfg, run_dir, resume=True)
    assert result.iterations == 3
    logs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in logs] == [0, 1, 2]
    assert [r["shards_from_store"] for r in logs] == [0, 2, 0]
    assert_same_training(reference, run_dir)


def test_resume_continues_in_the_runs_own_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A decoupled run resumed without --mode resumes decoupled (it resumed colocated and
    ignored its stored shards); an explicit --mode still wins."""
    import yaml

    from skurl.cli import main
    from skurl.config import config_to_dict

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny("sync.backend=grpc", "train.iterations=1"))))
    run_dir = tmp_path / "run"
    assert main(["train", "--mode", "decoupled", "--config", str(config), "--run-dir", str(run_dir),
                 "--no-baseline"]) == 0
    assert recorded_mode(run_dir) == "decoupled"
    assert main(["train", "--resume", str(run_dir), "--iterations", "2", "--no-baseline"]) == 0
    assert "in --mode decoupled, the mode it was started in" in capsys.readouterr().err
    logs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in logs] == [0, 1] and all("shards_from_store" in r for r in logs)
    assert main(["train", "--resume", str(run_dir), "--mode", "colocated", "--iterations", "3",
                 "--no-baseline"]) == 0
    last = read_metrics(run_dir / "metrics.jsonl")[-1]
    assert last["iteration"] == 2 and "shards_from_store" not in last
    assert recorded_mode(run_dir) == "colocated"
