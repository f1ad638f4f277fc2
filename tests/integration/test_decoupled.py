"""`--mode decoupled` end to end: sim servers and collectors as real processes on loopback,
the learner here. Same config and seed as `--mode colocated` -> bit-identical weights;
every process serves /metrics; bad settings are one line and exit code 2."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from skurl.cli import main
from skurl.config import Config, load_config
from skurl.errors import ConfigError, UserError
from skurl.learn.checkpoint import latest_checkpoint, load_checkpoint
from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.modes.decoupled.shard_envs import CatalogSchemaEnv, assign_shards
from skurl.policy.grid_center import load_center
from skurl.sim.api import ObsSchema
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

# A synthetic catalog (groups, perishables, mixed lead times: shards differ in schema width).
TINY = [
    "catalog.skus=240", "sim.days=8", "policy.hidden=[16,16]", "ppo.epochs=2", "ppo.minibatch=256",
    "train.iterations=3", "train.checkpoint_every=1", "train.eval_every=0", "eval.days=4",
    "eval.warmup=2", "train.torch_threads=1", "sim.threads=1", "collect.infer_dtype=float32",
    "deploy.sim_servers=2", "deploy.collectors=2", "sync.timeout_s=20",
]


class Delegating:
    """A wrapper around a run's part (its collectors, their store) that passes on whatever
    it does not override: faults and counters are injected around the seam."""

    def __init__(self, inner: Any, run: Any) -> None:
        self.inner, self.run = inner, run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def tiny(*extra: str) -> Config:
    return load_config(None, TINY + list(extra))


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None, f"no checkpoint in {run_dir}"
    tensors, _ = load_checkpoint(path)
    return {k: v for k, v in tensors.items() if not k.startswith("rng/")}


def assert_same_training(a: Path, b: Path) -> None:
    """Bit-identical weights, optimizer and normalizers; equal per-iteration rewards."""
    wa, wb = final_weights(a), final_weights(b)
    assert set(wa) == set(wb) and any(k.startswith("optim/") for k in wa)
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    ra = [r["reward_mean"] for r in read_metrics(a / "metrics.jsonl")]
    rb = [r["reward_mean"] for r in read_metrics(b / "metrics.jsonl")]
    assert ra == rb and len(ra) == 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    training.start(colocated.mode, tiny(), run_dir, baseline=False)
    return run_dir


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


def sample(text: str, name: str) -> float:
    """Value of the first sample line starting with `name` (labels included in name)."""
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


def test_decoupled_training_equals_colocated_and_every_process_serves_metrics(
        tmp_path: Path, reference: Path) -> None:
    scraped: dict[str, Any] = {}

    class Scraping(Delegating):
        def collect(self, it: int, *args: Any) -> Any:
            if it == 1:  # this process's registry may hold other runs' updates: count from here
                scraped["learner_before"] = scrape(self.run.metrics_url)
            if it == 2:  # processes are up and have worked two iterations
                cluster = json.loads((self.run.run_dir / "decoupled" / "cluster.json").read_text())
                assert self.run.metrics_url
                scraped["learner"] = scrape(self.run.metrics_url)
                scraped["sims"] = [scrape(s["metrics"]) for s in cluster["sims"]]
                scraped["collectors"] = [scrape(c["metrics"]) for c in cluster["collectors"]]
            return self.inner.collect(it, *args)

    run_dir = tmp_path / "decoupled"
    result = training.start(decoupled.launched, tiny("sync.backend=grpc"), run_dir, baseline=False, wrap=Scraping)
    assert result.iterations == 3 and result.eval is not None
    assert_same_training(reference, run_dir)

    logs = read_metrics(run_dir / "metrics.jsonl")
    for rec in logs:
        assert 0 <= rec["barrier_wait_s"] < rec["iteration_seconds"]
        assert 0 <= rec["barrier_share"] < 1 and rec["weights_lag_s"] >= 0
        assert rec["corrupt_shards"] == 0 and rec["transitions"] == 240 * 8
        assert {"time_collect", "time_gather", "time_learn", "time_sync"} <= rec.keys()

    learner = scraped["learner"]
    before = sample(scraped["learner_before"], "learner_training_step_duration_seconds_count")
    assert sample(learner, "learner_training_step_duration_seconds_count") - before == 1
    assert sample(learner, "learner_weight_version") == 2
    assert "learner_gradient_norm" in learner and "learner_gpu_memory_allocated_bytes" in learner
    assert sample(learner, 'business_fill_rate{policy="collect"') > 0
    for text in scraped["sims"]:
        assert sample(text, "sim_step_duration_seconds_count") >= 2 * 8
    for text in scraped["collectors"]:
        assert sample(text, "collector_episodes_total") == 2
        assert sample(text, "barrier_wait_seconds_count") == 2
        assert sample(text, "collector_steps_per_second") > 0
        assert 0 < sample(text, 'business_fill_rate{policy="collect"') <= 1
        assert sample(text, 'business_mean_on_hand{policy="collect"') > 0


def test_a_learner_on_a_sample_of_skus_decodes_only_those_and_still_equals_colocated(
        tmp_path: Path) -> None:
    sampled = ("ppo.sample_skus=100", "train.iterations=3")
    training.start(colocated.mode, tiny(*sampled), tmp_path / "colocated", baseline=False)
    decoded: list[int] = []
    stored: list[int] = []

    class CountingStore(Delegating):
        def get_shard(self, manifest: Any) -> Any:
            # Collectors keep the obs of the learner's sample only (the rest is never read).
            stored.append({a.name: a.shape for a in manifest.arrays}["obs_sku_ids"][0])
            return self.inner.get_shard(manifest)

    class Counting(Delegating):
        def __init__(self, inner: Any, run: Any) -> None:
            super().__init__(inner, run)
            inner.store = CountingStore(inner.store, run)

        def collect(self, *args: Any) -> Any:
            batch = self.inner.collect(*args)
            decoded.append(batch.rollout.obs.shape[1])
            return batch

    training.start(decoupled.launched, tiny("sync.backend=grpc", *sampled), tmp_path / "decoupled", baseline=False,
                    wrap=Counting)
    assert decoded == [100, 100, 100]  # of 240 SKUs collected
    assert len(stored) == 6 and sum(stored) == 300  # 2 collectors x 3 iterations
    assert_same_training(tmp_path / "colocated", tmp_path / "decoupled")
    for rec in read_metrics(tmp_path / "decoupled" / "metrics.jsonl"):
        assert rec["transitions"] == 240 * 8 and rec["trained_transitions"] == 100 * 8


def test_a_warm_started_decoupled_training_equals_colocated(tmp_path: Path) -> None:
    """The learner records and clones the baseline on a local env of its own; the first
    iteration fits the critic only, in both modes. train.keep_best keeps the same policy."""
    warm = ("train.warm_start=forecast-base-stock", "train.warm_start_episodes=1", "train.warm_start_steps=20",
            "train.warm_start_critic=1", "train.eval_every=1", "train.keep_best=true")
    training.start(colocated.mode, tiny(*warm), tmp_path / "colocated", baseline=False)
    training.start(decoupled.launched, tiny("sync.backend=grpc", *warm), tmp_path / "decoupled", baseline=False)
    assert_same_training(tmp_path / "colocated", tmp_path / "decoupled")
    first = read_metrics(tmp_path / "decoupled" / "metrics.jsonl")[0]
    assert first["warm_start_rows"] == 240 * 8 and first["approx_kl"] == 0.0
    evals = [json.loads((tmp_path / mode / "eval.json").read_text()) for mode in ("colocated", "decoupled")]
    assert evals[0]["policies"] == evals[1]["policies"]
    kept = [sorted((tmp_path / mode / "best" / "checkpoints").iterdir()) for mode in ("colocated", "decoupled")]
    assert [p.name for p in kept[0]] == [p.name for p in kept[1]] and len(kept[0]) == 1


def test_a_cover_grid_decoupled_training_equals_colocated(tmp_path: Path) -> None:
    """The embedded defaults' grid (order-up-to, centred on the tuned baseline) in remote
    collectors: their catalog rows, lean replies with the raw state and the centre read
    from the store give the co-located orders, so the training is bit-identical."""
    cover = ("policy.actions.kind=cover", "policy.actions.z_center=tuned", "policy.actions.n=5",
             "policy.actions.z_min=-1", "policy.actions.z_max=1", "policy.actions.center_policy=forecast-s-S",
             "train.warm_start=forecast-s-S",
             "train.warm_start_episodes=1", "train.warm_start_steps=20", "train.warm_start_critic=1")
    training.start(colocated.mode, tiny(*cover), tmp_path / "colocated", baseline=False)
    training.start(decoupled.launched, tiny("sync.backend=grpc", *cover), tmp_path / "decoupled", baseline=False)
    assert_same_training(tmp_path / "colocated", tmp_path / "decoupled")
    center = (tmp_path / "decoupled" / "grid_center.safetensors").read_bytes()
    lots = load_center(tmp_path / "decoupled")
    assert lots is not None and lots.lot is not None and lots.lot.max() > 0  # the remote grids order lots
    blobs = list((tmp_path / "decoupled" / "rollouts").rglob("*.safetensors"))
    assert [b.read_bytes() for b in blobs] == [center]  # the collectors' copy, named by its hash


@pytest.mark.parametrize(("setting", "match"), [
    ("sync.backend=inproc", "sync.backend = 'inproc'"),
    ("collect.skus=50", "collect.skus = 50"),
    ("deploy.collectors=3", "deploy.collectors = 3"),
])
def test_settings_decoupled_mode_cannot_use_are_one_line(tmp_path: Path, setting: str,
                                                         match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        training.start(decoupled.launched, tiny("sync.backend=grpc", setting), tmp_path / "run", baseline=False)
    assert not (tmp_path / "run" / "decoupled").exists()  # refused before starting anything


def test_unreachable_redis_is_one_line_and_exit_2(tmp_path: Path, closed_port: int,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--mode", "decoupled", "--run-dir", str(tmp_path / "run"),
                 "--set", "sync.backend=redis", "--set", f"sync.redis_url=redis://127.0.0.1:{closed_port}/0",
                 "--set", "sync.timeout_s=1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: sync.redis_url") and str(closed_port) in err


def test_collectors_take_whole_shards_in_contiguous_blocks() -> None:
    assert assign_shards(4, 2) == [[0, 1], [2, 3]]
    assert assign_shards(5, 3) == [[0, 1], [2, 3], [4]]
    assert assign_shards(2, 2) == [[0], [1]]
    with pytest.raises(UserError, match=r"deploy\.collectors = 3"):
        assign_shards(2, 3)


class _FakeEnv:
    """Two SKUs whose shard schema is narrower than the catalog's."""

    schema = ObsSchema(fields=(("on_hand", 1), ("pipeline", 2), ("dow", 1)))
    num_skus = 2

    def reset(self, seed: int, episode: int = 0) -> Any:
        from skurl.sim.api import Obs, RawState

        feats = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32)
        raw = RawState(np.zeros(2, np.int64), np.zeros((2, 2), np.int64), np.zeros(2, np.int64),
                       np.ones((2, 3), np.float32), 0)
        return Obs(feats, raw, self.schema)


def test_a_shard_must_show_the_catalog_schema() -> None:
    """Sim servers build every shard at the catalog's widths; no part widens features, so a
    shard of another schema (a server on another catalog config) is one line."""
    assert CatalogSchemaEnv(_FakeEnv(), _FakeEnv.schema).reset(0).features.shape == (2, 4)
    wide = ObsSchema(fields=(("on_hand", 1), ("pipeline", 4), ("dow", 1)))
    with pytest.raises(UserError, match=r"shows 4 features .* expected the catalog's 6"):
        CatalogSchemaEnv(_FakeEnv(), wide)


@pytest.mark.parametrize(("argv", "match"), [
    (["learner", "--set", "sync.backend=redis"], "deploy.collector_addresses is empty"),
    (["learner", "--set", "sync.backend=grpc", "--set", "deploy.collector_addresses=[127.0.0.1:1]"],
     "deploy.weights_port = 0"),
    (["collector", "--set", "sync.backend=grpc"], "deploy.sim_addresses is empty"),
    (["collector", "--index", "2/2"], "--index '2/2': expected 0 <= J < K"),
    (["collector", "--port", "70000"], "--port 70000"),
])
def test_role_commands_refuse_bad_settings_in_one_line(
        argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err
