"""Fixed staleness (train.staleness = N, collect/staleness.py) in every mode: iteration k is
collected with exactly version max(0, k - N), so decoupled (gRPC collector processes, the
behaviour version published to the wire from the weight history) and ray (the behaviour
version put into the Ray weight slot) train bit for bit as colocated does. Bounded
staleness (collect/bounded.py) runs in both: no update trains a rollout more than N behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_decoupled import assert_same_training, tiny

from skurl.deploy import colocated, decoupled
from skurl.telemetry.logger import read_metrics


def behaviour_versions(run_dir: Path) -> list[float]:
    return [r["behaviour_version"] for r in read_metrics(run_dir / "metrics.jsonl")]


def assert_bounded(run_dir: Path, n: int, iterations: int) -> None:
    """Every update trained a rollout at most `n` versions behind it, and the run finished."""
    records = read_metrics(run_dir / "metrics.jsonl")
    lags = [r["policy_lag_versions"] for r in records]
    assert len(lags) == iterations and all(0 <= lag <= n for lag in lags), lags
    assert max(lags) >= 1  # collected while the learner trained
    assert all(r["behaviour_version"] == r["policy_version"] - 1 - r["policy_lag_versions"] for r in records)
    assert (run_dir / "report.md").is_file()


@pytest.mark.slow
def test_decoupled_fixed_staleness_equals_colocated(tmp_path: Path) -> None:
    cfg = tiny("sync.backend=grpc", "train.staleness=1")
    colocated.train(cfg, tmp_path / "colocated", baseline=False)
    decoupled.train(cfg, tmp_path / "decoupled", baseline=False)
    assert behaviour_versions(tmp_path / "decoupled") == [0, 0, 1]  # max(0, k - 1), no warm start
    assert_same_training(tmp_path / "colocated", tmp_path / "decoupled")


@pytest.mark.slow
def test_ray_fixed_staleness_equals_colocated_and_bounded_runs(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray
    from test_ray_mode import config, final_weights

    from skurl.config import RayConfig
    from skurl.deploy import ray_mode
    from skurl.raycluster.cluster import start_ray

    started = start_ray(RayConfig(num_cpus=2))
    try:
        cfg = config("train.staleness=1")
        colocated.train(cfg, tmp_path / "colocated", baseline=False)
        ray_mode.train(cfg, tmp_path / "ray", baseline=False)
        ray_mode.train(config("train.staleness=1", "train.staleness_mode=bounded"), tmp_path / "bounded",
                       baseline=False)
    finally:
        if started:
            ray.shutdown()
    assert behaviour_versions(tmp_path / "ray") == [0, 0, 1]  # max(0, k - 1)
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "ray")
    for k in want:
        assert torch.equal(want[k], got[k]), k
    assert_bounded(tmp_path / "bounded", 1, len(behaviour_versions(tmp_path / "ray")))


class CrashIn:
    """Around the run's collectors: the learner dies in iteration `at`, after its rollout
    came back (updates before it are done, the last checkpoint may be older)."""

    def __init__(self, inner: Any, at: int) -> None:
        self.inner, self.at = inner, at

    def collect(self, iteration: int, seed: int, version: int, sample: Any) -> Any:
        batch = self.inner.collect(iteration, seed, version, sample)
        if iteration == self.at:
            raise RuntimeError("learner killed")
        return batch

    def close(self) -> None:
        self.inner.close()


def stream_episodes(redis_url: str, run: str) -> tuple[list[int], set[int]]:
    """Episodes of every entry on the run's stream, and of those not acked (pending, or
    never read by the learner)."""
    import redis

    from skurl.store.api import ShardManifest
    from skurl.store.shard_queue import parse_id

    client = redis.Redis.from_url(redis_url)
    key = f"rl:shards:{run}"
    entries = {i.decode(): ShardManifest.from_json(f[b"manifest"], "test").iteration
               for i, f in client.xrange(key, "-", "+")}
    pending = {entries[p["message_id"].decode()] for p in client.xpending_range(key, "learner", "-", "+", 1000)}
    group, = client.xinfo_groups(key)
    delivered = parse_id(group["last-delivered-id"].decode())
    unread = {e for i, e in entries.items() if parse_id(i) > delivered}
    client.close()
    return sorted(entries.values()), pending | unread


@pytest.mark.slow
def test_decoupled_bounded_learner_killed_mid_stream_loses_no_shard_and_trains_none_twice(
        tmp_path: Path, redis_url: str) -> None:
    """Shards go through the run's Redis Stream; the learner dies with some trained but not
    checkpointed and some announced but not trained; resumed, it trains every announced
    episode once (or refuses it by the staleness rule) and the stream keeps only the
    episodes collected ahead at the end."""
    cfg = tiny("sync.backend=redis", f"sync.redis_url={redis_url}", "train.staleness=2",
               "train.staleness_mode=bounded", "train.iterations=6", "train.checkpoint_every=2")
    run = tmp_path / "stream-run"
    with pytest.raises(RuntimeError, match="learner killed"):
        decoupled.train(cfg, run, baseline=False, wrap=lambda inner, trainer: CrashIn(inner, 3))
    announced, pending = stream_episodes(redis_url, run.name)
    assert len(announced) == len(set(announced)) * 2  # two collectors, one shard each per episode
    assert not {0, 1} & pending and {2, 3} <= pending  # checkpoint 2 holds updates 0 and 1: acked
    decoupled.resume(run, baseline=False)
    records = read_metrics(run / "metrics.jsonl")
    trained = [int(r["behaviour_episode"]) for r in records]
    assert len(records) == 6 and len(trained) == len(set(trained)), trained  # none twice
    after, left = stream_episodes(redis_url, run.name)
    refused = int(records[-1]["stale_rollouts_refused"])  # by the resumed learner
    assert not pending & left, (pending, left)  # each unacked at the crash was trained or refused since
    assert len(pending - set(trained)) <= refused
    assert len(set(after)) == len(trained) + len(left) + refused, (after, trained, left, refused)  # none lost
    assert_bounded(run, 2, 6)
