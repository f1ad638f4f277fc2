"""The Learner on hand-built rollouts: stats, determinism, SKU sampling, and that PPO
actually learns a contextual bandit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skurl.buffer.rollout import Rollout
from skurl.config import Config, load_config
from skurl.errors import ConfigError, UserError
from skurl.learn.learner import Learner, allreduce_mean_std

OBS, ACTIONS, DAYS = 4, 5, 8


def cfg(*extra: str) -> Config:
    return load_config(None, ["policy.hidden=[32,32]", "ppo.minibatch=64", "ppo.epochs=4", "train.iterations=20",
                              *extra])


def bandit_rollout(learner: Learner, skus: int, seed: int) -> Rollout:
    """obs = (one-hot of the rewarded action among the first 4, noise); reward 1 when the
    action matches, else 0. Actions are drawn from the learner's current policy."""
    rng = np.random.default_rng(seed)
    r = Rollout.allocate(DAYS, np.arange(skus), OBS)
    target = rng.integers(0, OBS, size=(DAYS, skus))
    r.obs[:] = np.eye(OBS, dtype=np.float32)[target]
    with torch.no_grad():
        logits, values = learner.model(torch.from_numpy(r.obs.reshape(-1, OBS)))
        gen = torch.Generator().manual_seed(seed)
        actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
        logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
    r.actions[:] = actions.reshape(DAYS, skus).numpy()
    r.logp[:] = logp.reshape(DAYS, skus).numpy()
    r.values[:] = values.reshape(DAYS, skus).numpy()
    r.rewards[:] = (r.actions == target).astype(np.float32)
    r.dones[-1] = True
    r.last_obs[:] = r.obs[-1]
    r.bootstrap[:] = 0.0
    r.policy_version = learner.version
    return r


def test_update_returns_stats_and_bumps_versions() -> None:
    learner = Learner(cfg(), OBS, ACTIONS, "cpu")
    stats = learner.update(bandit_rollout(learner, 32, 0))
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "grad_norm",
                "explained_variance", "lr", "epochs", "transitions"):
        assert key in stats and np.isfinite(stats[key]), key
    assert stats["transitions"] == DAYS * 32 and stats["epochs"] == 4
    assert (learner.iteration, learner.version) == (1, 1)
    assert float(learner.model.obs_norm.count) == DAYS * 32


def test_same_seed_same_data_same_weights() -> None:
    a, b = Learner(cfg(), OBS, ACTIONS, "cpu"), Learner(cfg(), OBS, ACTIONS, "cpu")
    for it in range(2):
        a.update(bandit_rollout(a, 16, it))
        b.update(bandit_rollout(b, 16, it))
    for (k, va), vb in zip(a.model.state_dict().items(), b.model.state_dict().values(), strict=True):
        assert torch.equal(va, vb), k
    c = Learner(cfg("train.seed=1"), OBS, ACTIONS, "cpu")
    assert not torch.equal(c.model.policy.net[0].weight, a.model.policy.net[0].weight)


def test_sample_skus_trains_on_a_subset() -> None:
    learner = Learner(cfg("ppo.sample_skus=5"), OBS, ACTIONS, "cpu")
    stats = learner.update(bandit_rollout(learner, 40, 0))
    assert stats["transitions"] == DAYS * 5 and stats["sample_skus"] == 5  # the report's note
    assert "sample_skus" not in Learner(cfg(), OBS, ACTIONS, "cpu").update(bandit_rollout(learner, 40, 1))


def test_stale_rollout_uses_the_recorded_behaviour() -> None:
    learner = Learner(cfg(), OBS, ACTIONS, "cpu")
    rollout = bandit_rollout(learner, 16, 0)
    rollout.policy_version = learner.version - 1  # collected with an older policy
    rollout.logp[:] -= 0.5  # the old policy was less likely to take these actions
    stats = learner.update(rollout)
    assert stats["clip_frac"] > 0.5  # ratios start at e^0.5, beyond the clip range


def test_stale_rollout_without_recorded_values_is_refused() -> None:
    # Collectors skip the value net unless collect.values (their rollouts carry NaN):
    # fine at the learner's version (it recomputes), refused when stale.
    learner = Learner(cfg(), OBS, ACTIONS, "cpu")
    rollout = bandit_rollout(learner, 16, 0)
    rollout.values[:] = np.nan
    rollout.bootstrap[:] = np.nan
    assert np.isfinite(learner.update(rollout)["policy_loss"])
    rollout.policy_version = learner.version - 1
    with pytest.raises(UserError, match=r"collect\.values"):
        learner.update(rollout)


def test_target_kl_stops_epochs_early_and_bf16_amp_runs() -> None:
    learner = Learner(cfg("ppo.target_kl=1e-9", "ppo.epochs=5", "ppo.amp=bf16"), OBS, ACTIONS, "cpu")
    stats = learner.update(bandit_rollout(learner, 32, 0))
    assert stats["epochs"] == 1 and np.isfinite(stats["policy_loss"])


def test_linear_learning_rate_schedule() -> None:
    learner = Learner(cfg("ppo.lr=1e-3"), OBS, ACTIONS, "cpu")
    assert learner.lr_at(0) == pytest.approx(1e-3)
    assert learner.lr_at(10) == pytest.approx(5e-4)
    assert learner.lr_at(25) == pytest.approx(1e-3 / 20)  # floored, never zero
    assert Learner(cfg("ppo.lr_schedule=constant"), OBS, ACTIONS, "cpu").lr_at(15) == pytest.approx(3e-4)


def test_ppo_learns_a_contextual_bandit() -> None:
    learner = Learner(cfg("ppo.lr=3e-3", "ppo.lr_schedule=constant", "ppo.ent_coef=0"), OBS, ACTIONS, "cpu")
    first = float(bandit_rollout(learner, 64, 100).rewards.mean())
    for it in range(12):
        learner.update(bandit_rollout(learner, 64, it))
    last = float(bandit_rollout(learner, 64, 200).rewards.mean())
    assert first < 0.35 and last > 0.9


def test_allreduce_mean_std_without_process_group() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    mean, std = allreduce_mean_std(x)
    assert float(mean) == pytest.approx(3.0)
    assert float(std) == pytest.approx(float(x.std(unbiased=False)))


def test_per_sku_reward_scaling_runs_and_round_trips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from skurl.learn.checkpoint import restore_learner, save_checkpoint

    learner = Learner(cfg("ppo.reward_scale=sku"), OBS, ACTIONS, "cpu")
    stats = learner.update(bandit_rollout(learner, 16, 0))
    assert np.isfinite(stats["policy_loss"]) and learner.reward_scaler.ids.numel() == 16
    path = save_checkpoint(tmp_path, learner)
    other = Learner(cfg("ppo.reward_scale=sku"), OBS, ACTIONS, "cpu")
    restore_learner(other, path)
    assert torch.equal(other.reward_scaler.var, learner.reward_scaler.var)


def test_linear_entropy_schedule() -> None:
    learner = Learner(cfg("ppo.ent_coef=0.02", "ppo.ent_schedule=linear"), OBS, ACTIONS, "cpu")
    assert [learner.ent_coef_at(i) for i in (0, 10, 20, 30)] == pytest.approx([0.02, 0.01, 0.0, 0.0])
    assert Learner(cfg("ppo.ent_coef=0.02"), OBS, ACTIONS, "cpu").ent_coef_at(15) == 0.02
    stats = learner.update(bandit_rollout(learner, 16, 0))
    assert stats["ent_coef"] == pytest.approx(0.02)


def _weights_after_update(offset: float, *extra: str) -> tuple[list[torch.Tensor], dict[str, float]]:
    learner = Learner(cfg("ppo.normalize_reward=false", *extra), OBS, ACTIONS, "cpu")
    rollout = bandit_rollout(learner, 16, 3)
    rollout.rewards += np.float32(offset)
    stats = learner.update(rollout)
    return [p.detach().clone() for p in learner.model.parameters()], stats


def test_average_reward_centres_rewards_and_ignores_an_offset() -> None:
    base, stats = _weights_after_update(0.0, "ppo.average_reward=true")
    shifted, shifted_stats = _weights_after_update(-7.0, "ppo.average_reward=true")
    assert shifted_stats["average_reward"] == pytest.approx(stats["average_reward"] - 7.0, abs=1e-5)
    for a, b in zip(base, shifted, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    plain, _ = _weights_after_update(0.0)
    plain_shifted, _ = _weights_after_update(-7.0)  # without centring the offset moves the values
    assert any(not torch.allclose(a, b, atol=1e-4) for a, b in zip(plain, plain_shifted, strict=True))


def _weights_after_sku_offsets(*extra: str) -> list[torch.Tensor]:
    """Weights after one update on the bandit rollout with a different constant added to each
    SKU's rewards (SKU k gets -3 k: SKU types of different costs per day) and without."""
    out = []
    for shift in (False, True):
        learner = Learner(cfg("ppo.normalize_reward=false", "ppo.average_reward=true", *extra), OBS, ACTIONS, "cpu")
        rollout = bandit_rollout(learner, 16, 3)
        if shift:
            rollout.rewards += np.float32(-3.0) * np.arange(rollout.rewards.shape[1], dtype=np.float32)
        learner.update(rollout)
        out.append([p.detach().clone() for p in learner.model.parameters()])
    return out


def test_average_reward_by_sku_ignores_each_skus_own_offset() -> None:
    base, shifted = _weights_after_sku_offsets("ppo.average_reward_by=sku")
    for a, b in zip(base, shifted, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    base, shifted = _weights_after_sku_offsets("ppo.average_reward_by=global")  # one mean leaves them in
    assert any(not torch.allclose(a, b, atol=1e-4) for a, b in zip(base, shifted, strict=True))


def test_vf_lambda_sets_the_value_targets_only() -> None:
    same, same_stats = _weights_after_update(0.0, "ppo.vf_lambda=0.95")  # = gae_lambda: no change
    default, default_stats = _weights_after_update(0.0)
    for a, b in zip(same, default, strict=True):
        assert torch.equal(a, b)
    td0, td0_stats = _weights_after_update(0.0, "ppo.vf_lambda=0")
    # TD(0) targets r + gamma V(s') differ from the GAE(0.95) returns, so the value net moves
    # differently; the advantages (and so the first policy step's loss) are the same
    assert td0_stats["return_mean"] != pytest.approx(default_stats["return_mean"], abs=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(td0, default, strict=True))
    assert same_stats["return_mean"] == default_stats["return_mean"]


def test_adaptive_lr_follows_the_kl_and_survives_a_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from skurl.learn.checkpoint import restore_learner, save_checkpoint

    learner = Learner(cfg("ppo.lr_schedule=adaptive", "ppo.lr=0.001", "ppo.lr_kl=0.01"), OBS, ACTIONS, "cpu")
    assert learner.lr_at(0) == pytest.approx(0.001)
    learner.adapt_lr(0.001)  # far below the target: faster
    assert learner.lr_at(1) == pytest.approx(0.0015)
    learner.adapt_lr(0.05)  # far above: slower
    learner.adapt_lr(0.05)
    assert learner.lr_at(3) == pytest.approx(0.0015 / 1.5**2)
    learner.adapt_lr(0.01)  # on target: kept
    assert learner.lr_at(4) == pytest.approx(0.0015 / 1.5**2)
    for _ in range(40):
        learner.adapt_lr(1.0)
    assert learner.lr_at(5) == pytest.approx(1e-5)  # bounded
    stats = learner.update(bandit_rollout(learner, 16, 0))
    assert stats["lr"] == pytest.approx(1e-5)
    path = save_checkpoint(tmp_path, learner)
    other = Learner(cfg("ppo.lr_schedule=adaptive", "ppo.lr=0.001"), OBS, ACTIONS, "cpu")
    restore_learner(other, path)
    assert other.lr_at(other.iteration) == learner.lr_at(learner.iteration)
    fixed = Learner(cfg("ppo.lr=0.001"), OBS, ACTIONS, "cpu")
    fixed.adapt_lr(0.0)  # other schedules ignore the kl
    assert fixed.lr_at(0) == pytest.approx(0.001)


@pytest.mark.parametrize("amp", ["none", "bf16"])
def test_behaviour_outputs_are_recomputed_as_the_minibatches_compute_them(amp: str) -> None:
    """The recomputed log-probs are the first minibatch's own, bit for bit (ratio 1, KL 0),
    in bf16 too: the ratio then measures how far the update moved the policy, not bf16's
    rounding against an fp32 reference."""
    from skurl.learn.learner import ppo_minibatch_loss

    learner = Learner(cfg(f"ppo.amp={amp}"), OBS, ACTIONS, "cpu")
    rollout = bandit_rollout(learner, 32, 0)
    batch, _ = learner._prepare(learner._to_device(rollout), behaviour=True)
    batch.obs = batch.obs.to(learner.compute_dtype)
    mb = batch.rows(0, 64)
    _, stats = ppo_minibatch_loss(learner._forward, mb, 0.2, 0.5, 0.0)
    assert float(stats["approx_kl"]) == 0.0 and float(stats["clip_frac"]) == 0.0
    logits, values = learner._forward(mb.obs)
    assert torch.equal(torch.log_softmax(logits, -1).gather(1, mb.actions[:, None])[:, 0], mb.old_logp)
    assert torch.equal(values, mb.old_values)


@pytest.mark.parametrize("preserve", [True, False])
def test_preserve_values_keeps_the_critics_money_values_when_the_reward_scale_moves(preserve: bool) -> None:
    flag = "true" if preserve else "false"
    learner = Learner(cfg(f"ppo.preserve_values={flag}", "ppo.normalize_obs=false"), OBS, ACTIONS, "cpu")
    learner.update(bandit_rollout(learner, 16, 0))  # the first update sets the scale
    x = torch.eye(OBS)

    def money_values() -> tuple[torch.Tensor, float]:
        std = float(learner.reward_scaler.stats.std)
        with torch.no_grad():
            return learner.model.value(x).double() * std, std

    before, old_std = money_values()
    rollout = bandit_rollout(learner, 16, 1)
    rollout.rewards *= np.float32(20.0)  # the running reward scale rises several-fold
    batch, _ = learner._prepare(learner._to_device(rollout), behaviour=True)
    after, new_std = money_values()
    assert new_std > 3 * old_std
    if preserve:
        torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-6)
        with torch.no_grad():  # this iteration's old values are in the new scale too
            torch.testing.assert_close(batch.old_values[:4], learner.model.value(torch.from_numpy(rollout.obs[0, :4])))
    else:
        assert not torch.allclose(after, before, rtol=1e-3)


def test_preserve_values_refuses_per_sku_reward_scales() -> None:
    with pytest.raises(ConfigError, match="preserve_values"):
        cfg("ppo.preserve_values=true", "ppo.reward_scale=sku")


@pytest.mark.parametrize("preserve", [True, False])
def test_preserve_obs_norm_keeps_both_nets_functions_of_the_raw_observation(preserve: bool) -> None:
    flag = "true" if preserve else "false"
    learner = Learner(cfg(f"ppo.preserve_obs_norm={flag}", "ppo.stats_decay=0.5"), OBS, ACTIONS, "cpu")
    learner.update(bandit_rollout(learner, 16, 0))  # the first update sets the statistics
    raw = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0], [0.2, 0.2, 3.0, 0.0]])
    with torch.no_grad():
        before = learner.model(raw)
    rollout = bandit_rollout(learner, 16, 1)
    rollout.obs *= np.float32(3.0)  # moves the observation mean and std
    rollout.obs += np.float32(0.5)
    learner._prepare(learner._to_device(rollout), behaviour=True)
    with torch.no_grad():
        after = learner.model(raw)
    for a, b in zip(after, before, strict=True):
        if preserve:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        else:
            assert not torch.allclose(a, b, rtol=1e-3, atol=1e-4)


def test_a_value_only_update_leaves_the_policy_net_alone() -> None:
    learner = Learner(cfg("ppo.normalize_obs=false"), OBS, ACTIONS, "cpu")
    policy = {k: v.clone() for k, v in learner.model.policy.state_dict().items()}
    value = {k: v.clone() for k, v in learner.model.value.state_dict().items()}
    stats = learner.update(bandit_rollout(learner, 32, 0), train_policy=False)
    assert stats["value_loss"] > 0 and (learner.iteration, learner.version) == (1, 1)
    for k, v in learner.model.policy.state_dict().items():
        assert torch.equal(v, policy[k]), k
    assert any(not torch.equal(v, value[k]) for k, v in learner.model.value.state_dict().items())
    learner.update(bandit_rollout(learner, 32, 1))  # and the next update trains both again
    assert any(not torch.equal(v, policy[k]) for k, v in learner.model.policy.state_dict().items())
    assert learner.train_policy


def test_a_cuda_device_torch_cannot_reach_is_one_clear_error() -> None:
    from skurl.errors import UserError
    from skurl.learn.learner import resolve_device

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(UserError, match=rf"train.device = 'cuda:{count}': this torch sees {count} CUDA device"):
        resolve_device(f"cuda:{count}")
    assert resolve_device("cpu").type == "cpu" and resolve_device("auto").type in ("cpu", "cuda")
