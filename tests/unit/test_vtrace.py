"""V-trace targets (learn/vtrace.py) on a hand-computed case, against the defining sum, and
equal to GAE bit for bit on-policy; the Learner's near-on-policy path (collect.staleness > 0)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from test_ppo_learner import (
    bandit_rollout,  # tests/unit is on sys.path (pytest's rootdir-less import)
)

from skurl.buffer.gae import gae
from skurl.buffer.rollout import Rollout
from skurl.config import Config, load_config
from skurl.errors import ConfigError, UserError
from skurl.learn.learner import Learner
from skurl.learn.vtrace import vtrace

OBS, ACTIONS = 4, 5


def test_hand_computed_case() -> None:
    # gamma = 0.5, lambda = 1, rho_bar = c_bar = 1; two SKUs, 3 days, V = [1, 2, 3], r = 1
    # each day, bootstrap 4 after the last day (a truncation).
    # SKU 0: pi/mu = [2, 0.5, 1] -> rho = c = [1, 0.5, 1].
    #   delta_2 = 1 + 0.5*4 - 3 = 0;  delta_1 = 1 + 0.5*3 - 2 = 0.5;  delta_0 = 1 + 0.5*2 - 1 = 1
    #   v_2 - V_2 = rho_2 delta_2 = 0
    #   v_1 - V_1 = rho_1 delta_1 + gamma c_1 (v_2 - V_2) = 0.5*0.5 + 0 = 0.25
    #   v_0 - V_0 = 1*1 + 0.5*1*0.25 = 1.125             -> v = [2.125, 2.25, 3]
    #   advantage_s = r_s + gamma v_{s+1} - V_s: [1 + 0.5*2.25 - 1, 1 + 0.5*3 - 2, 1 + 0.5*4 - 3]
    #                                          = [1.125, 0.5, 0]
    # SKU 1: pi/mu = [0.5, 2, 1], the episode ends in a terminal state after day 1.
    #   delta_2 = 0 (as SKU 0);  delta_1 = 1 + 0 - 2 = -1 (V after a terminal is 0);
    #   delta_0 = 1 + 0.5*2 - 1 = 1
    #   v_2 - V_2 = 0;  v_1 - V_1 = 1*(-1) (the trace stops at the terminal) = -1
    #   v_0 - V_0 = 0.5*1 + 0.5*0.5*(-1) = 0.25            -> v = [1.25, 1, 3]
    #   advantage: [1 + 0.5*1 - 1, 1 + 0 - 2, 0] = [0.5, -1, 0]
    values = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    rewards = torch.ones(3, 2)
    ratio = torch.tensor([[2.0, 0.5], [0.5, 2.0], [1.0, 1.0]])
    dones = torch.tensor([[0, 0], [0, 1], [1, 1]], dtype=torch.bool)
    terminals = torch.tensor([[0, 0], [0, 1], [0, 0]], dtype=torch.bool)
    adv, targets = vtrace(rewards, values, torch.tensor([4.0, 4.0]), dones, terminals, 0.5, 1.0,
                          log_ratio=ratio.log())
    torch.testing.assert_close(targets, torch.tensor([[2.125, 1.25], [2.25, 1.0], [3.0, 3.0]]))
    torch.testing.assert_close(adv, torch.tensor([[1.125, 0.5], [0.5, -1.0], [0.0, 0.0]]))


def _defining_sum(r, v, boot, ratio, gamma, lam, rho_bar, c_bar):
    """v_s = V_s + sum_t gamma^(t-s) (prod_{i<t} c_i) rho_t delta_t, term by term."""
    steps = len(r)
    nxt = [*v[1:], boot]
    delta = [r[t] + gamma * nxt[t] - v[t] for t in range(steps)]
    out = []
    for s in range(steps):
        total, trace = 0.0, 1.0
        for t in range(s, steps):
            total += gamma ** (t - s) * trace * min(rho_bar, ratio[t]) * delta[t]
            trace *= lam * min(c_bar, ratio[t])
        out.append(v[s] + total)
    return out


def test_against_the_defining_sum_with_lambda_and_truncation() -> None:
    rng = np.random.default_rng(3)
    r, v, ratio = rng.normal(size=6), rng.normal(size=6), rng.uniform(0.3, 2.5, size=6)
    gamma, lam, rho_bar, c_bar = 0.9, 0.8, 1.5, 0.9
    expected = _defining_sum(list(r), list(v), 0.7, list(ratio), gamma, lam, rho_bar, c_bar)
    as_t = lambda x: torch.tensor(np.asarray(x), dtype=torch.float64).reshape(-1, 1)  # noqa: E731
    dones = torch.zeros(6, 1, dtype=torch.bool)
    dones[-1] = True
    adv, targets = vtrace(as_t(r), as_t(v), torch.tensor([0.7], dtype=torch.float64), dones, torch.zeros_like(dones),
                          gamma, lam, log_ratio=as_t(np.log(ratio)), rho_bar=rho_bar, c_bar=c_bar)
    torch.testing.assert_close(targets[:, 0], torch.tensor(expected, dtype=torch.float64))
    # advantage_s = r_s + gamma ((1 - lam) V_{s+1} + lam v_{s+1}) - V_s
    nxt_v, nxt_target = [*v[1:], 0.7], [*expected[1:], 0.7]
    want = [r[s] + gamma * ((1 - lam) * nxt_v[s] + lam * nxt_target[s]) - v[s] for s in range(6)]
    torch.testing.assert_close(adv[:, 0], torch.tensor(want, dtype=torch.float64))


def test_on_policy_equals_gae_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(12, 7, generator=gen), torch.randn(12, 7, generator=gen)
    bootstrap = torch.randn(7, generator=gen)
    dones = torch.zeros(12, 7, dtype=torch.bool)
    dones[-1] = True
    dones[5, :3] = True  # terminal ends inside the rollout
    terminals = dones.clone()
    terminals[-1] = False
    for gamma, lam in ((0.99, 0.95), (0.9, 1.0), (0.999, 0.0)):
        want = gae(rewards, values, bootstrap, dones, terminals, gamma, lam)
        got = vtrace(rewards, values, bootstrap, dones, terminals, gamma, lam, log_ratio=torch.zeros(12, 7))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_truncation_inside_the_rollout_is_refused() -> None:
    dones = torch.zeros(3, 1, dtype=torch.bool)
    dones[1] = dones[2] = True
    with pytest.raises(ValueError, match="truncated inside"):
        vtrace(torch.ones(3, 1), torch.ones(3, 1), torch.ones(1), dones, torch.zeros_like(dones),
               0.9, 0.9, log_ratio=torch.zeros(3, 1))


def cfg(*extra: str) -> Config:
    return load_config(None, ["policy.hidden=[32,32]", "ppo.minibatch=64", "ppo.epochs=3", *extra])


def rollout_of(learner: Learner, seed: int = 0) -> Rollout:
    return bandit_rollout(learner, 16, seed)


def _same_weights(a: Learner, b: Learner) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values(),
                                                  strict=True))


def test_staleness_zero_update_is_todays() -> None:
    # The on-policy path is taken whatever collect.staleness says: same update bit for bit.
    today, near = Learner(cfg(), OBS, ACTIONS, "cpu"), Learner(cfg("collect.staleness=2"), OBS, ACTIONS, "cpu")
    today.update(rollout_of(today))
    near.update(rollout_of(near))
    assert _same_weights(today, near)


def test_stale_rollout_with_pi_equal_mu_gives_the_on_policy_update() -> None:
    # A stale rollout whose recorded log-probs are exactly the learner's (pi = mu) takes the
    # V-trace path with all ratios 1: the same weights as the on-policy update, bit for bit.
    on = Learner(cfg("collect.staleness=1"), OBS, ACTIONS, "cpu")
    stale = copy.deepcopy(on)
    rollout = rollout_of(on)
    probe = copy.deepcopy(on)
    batch, _ = probe._prepare(probe._to_device(rollout), behaviour=True)
    rollout.logp[:] = batch.old_logp.reshape(rollout.logp.shape).numpy()
    on.update(rollout)
    rollout.policy_version = stale.version - 1
    stats = stale.update(rollout)
    assert stats["is_ratio_mean"] == 1.0 and stats["is_ratio_truncated"] == 0.0
    assert _same_weights(on, stale)


@pytest.mark.parametrize("clip", ["behaviour", "proximal"])
def test_stale_rollout_ratio_is_against_mu_and_needs_no_recorded_values(clip: str) -> None:
    learner = Learner(cfg("collect.staleness=1", f"collect.staleness_clip={clip}"), OBS, ACTIONS, "cpu")
    rollout = rollout_of(learner)
    rollout.policy_version = learner.version - 1
    rollout.values[:] = np.nan  # collect.values=false: V-trace uses the learner's critic
    rollout.bootstrap[:] = np.nan
    rollout.logp[:] -= 0.5  # mu: less likely to take these actions (pi is near the recorded logp)
    stats = learner.update(rollout)
    # Clipped around mu, pi/mu = e^0.5 starts outside the trust region: most rows give no
    # gradient. Clipped around the policy at the update's start, most start inside it.
    assert (stats["clip_frac"] > 0.5) == (clip == "behaviour") and math.isfinite(stats["value_loss"])
    assert stats["is_ratio_mean"] == pytest.approx(math.exp(0.5), rel=1e-2) and stats["is_ratio_truncated"] == 1.0
    rollout.logp[0, 0] = np.nan
    rollout.policy_version = learner.version - 1
    with pytest.raises(UserError, match="column logp"):
        learner.update(rollout)


def test_correction_none_differs_from_vtrace() -> None:
    def trained(*extra: str) -> Learner:
        learner = Learner(cfg("collect.staleness=1", *extra), OBS, ACTIONS, "cpu")
        rollout = rollout_of(learner)
        rollout.policy_version = learner.version - 1
        rollout.logp[:] += np.random.default_rng(1).normal(0, 0.3, rollout.logp.shape).astype(np.float32)
        learner.update(rollout)
        return learner

    assert not _same_weights(trained(), trained("collect.staleness_correction=none"))
    assert not _same_weights(trained(), trained("collect.staleness_clip=behaviour"))


def test_proximal_clip_weights_rows_by_truncated_pi_over_mu() -> None:
    # Decoupled PPO: old_logp is the learner's own (the first minibatch's ratio is 1) and the
    # weight is min(rho-bar, pi/mu) per row, by hand for mu = pi - 0.5 on half the rows and
    # pi + 0.5 on the other half.
    learner = Learner(cfg("collect.staleness=1", "collect.vtrace_rho_bar=1.2"), OBS, ACTIONS, "cpu")
    rollout = rollout_of(learner)
    probe = copy.deepcopy(learner)
    own, _ = probe._prepare(probe._to_device(rollout), behaviour=True)
    shift = np.where(np.arange(rollout.logp.size) % 2 == 0, 0.5, -0.5).reshape(rollout.logp.shape)
    rollout.logp[:] = own.old_logp.reshape(rollout.logp.shape).numpy() - shift
    rollout.policy_version = learner.version - 1
    batch, _ = learner._prepare(learner._to_device(rollout), behaviour=False)
    assert torch.equal(batch.old_logp, own.old_logp)
    expected = np.minimum(np.exp(shift.reshape(-1)), 1.2)
    np.testing.assert_allclose(batch.weight.numpy(), expected, rtol=1e-5)
    none = Learner(cfg("collect.staleness=1", "collect.staleness_correction=none"), OBS, ACTIONS, "cpu")
    plain, _ = none._prepare(none._to_device(rollout), behaviour=False)
    assert plain.weight is None and torch.equal(plain.old_logp, own.old_logp)


@pytest.mark.parametrize(("key", "match"), [("collect.staleness=-1", "collect.staleness"),
                                             ("collect.vtrace_c_bar=2", "collect.vtrace_c_bar"),
                                             ("collect.vtrace_rho_bar=0", "collect.vtrace_rho_bar"),
                                             ("collect.staleness_mode=later", "collect.staleness_mode")])
def test_bad_keys_are_named(key: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cfg(key)
    with pytest.raises(ConfigError, match=r"collect\.max_lag': got 1, expected 0 or an integer >= collect.staleness"):
        cfg("collect.staleness=2", "collect.max_lag=1")
