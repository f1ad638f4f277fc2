"""The fused minibatch step (learn/fused_step.py) must update the nets bit for bit as the
autograd graph of the PPO loss does: same weights, optimizer state and stats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skurl.buffer.rollout import Rollout
from skurl.config import load_config
from skurl.errors import ConfigError
from skurl.learn.fused_step import loss_grads
from skurl.learn.learner import Learner, PreparedBatch, ppo_minibatch_loss

OBS, ACTIONS, DAYS, SKUS = 6, 7, 8, 40


def rollout(seed: int, version: int) -> Rollout:
    rng = np.random.default_rng(seed)
    r = Rollout.allocate(DAYS, np.arange(SKUS), OBS)
    r.obs[:] = rng.standard_normal(r.obs.shape, dtype=np.float32)
    r.actions[:] = rng.integers(0, ACTIONS, size=r.actions.shape)
    r.rewards[:] = rng.standard_normal(r.rewards.shape, dtype=np.float32)
    r.logp[:] = np.log(rng.dirichlet(np.ones(ACTIONS), size=r.actions.shape)[..., 0]).astype(np.float32)
    r.values[:] = rng.standard_normal(r.values.shape, dtype=np.float32)
    r.dones[-1] = True
    r.last_obs[:] = r.obs[-1]
    r.bootstrap[:] = 0.0
    r.policy_version = version
    return r


def trained(fused: bool, extra: list[str], stale: bool = False, value_only: bool = False,
            threads: int = 1) -> tuple[dict[str, torch.Tensor], list[dict[str, float]], dict]:
    cfg = load_config(None, ["policy.hidden=[32,16]", "ppo.minibatch=48", "ppo.epochs=3", "ppo.ent_coef=0.01",
                             "train.iterations=4", *extra])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        learner = Learner(cfg, OBS, ACTIONS, "cpu")
        learner.fused = fused
        stats = []
        for it in range(3):
            version = learner.version - 1 if stale and it > 0 else learner.version
            stats.append(learner.update(rollout(it, version), train_policy=not (value_only and it == 1)))
    finally:
        torch.set_num_threads(before)
    return learner.model.state_dict(), stats, learner.optimizer.state_dict()


@pytest.mark.parametrize("case", [
    dict(extra=[]),
    dict(extra=["ppo.side_by_side=true"], threads=2),
    dict(extra=["ppo.amp=bf16"]),
    dict(extra=["collect.staleness=1"], stale=True),
    dict(extra=["collect.staleness=1", "collect.staleness_clip=behaviour"], stale=True),
    dict(extra=[], value_only=True),
], ids=["fp32", "side-by-side", "bf16", "stale-weighted", "stale-behaviour", "value-only"])
def test_fused_update_is_bit_identical_to_autograd(case: dict) -> None:
    ref_w, ref_stats, ref_opt = trained(False, **case)
    got_w, got_stats, got_opt = trained(True, **case)
    assert ref_w.keys() == got_w.keys()
    for key in ref_w:
        assert torch.equal(ref_w[key], got_w[key]), key
    for k, (a, b) in enumerate(zip(ref_opt["state"].values(), got_opt["state"].values(), strict=True)):
        for name in a:
            assert torch.equal(a[name], b[name]), (k, name)
    for a, b in zip(ref_stats, got_stats, strict=True):
        assert a.keys() == b.keys()
        assert all(a[k] == b[k] or (np.isnan(a[k]) and np.isnan(b[k])) for k in a), (a, b)
    # the update moved the weights (an update that did nothing would compare equal too)
    fresh = Learner(load_config(None, ["policy.hidden=[32,16]"]), OBS, ACTIONS, "cpu").model.state_dict()
    assert not torch.equal(fresh["policy.net.0.weight"], got_w["policy.net.0.weight"])


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("train_policy", [True, False])
def test_loss_grads_equal_autograd_with_ties(weighted: bool, train_policy: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    n, a = 300, 9
    logits = (3 * torch.randn(n, a, generator=gen)).requires_grad_()
    values = torch.randn(n, generator=gen).requires_grad_()
    actions = torch.randint(0, a, (n,), generator=gen)
    old = torch.log_softmax(logits.detach(), -1).gather(-1, actions[:, None])[:, 0]
    old[: n // 2] += 0.3 * torch.randn(n // 2, generator=gen)  # half the ratios 1 (min's ties), half clipped
    adv, ret = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    weight = torch.rand(n, generator=gen) if weighted else None
    # the learner's own loss (the order of its ops fixes the order autograd sums gradients in)
    mb = PreparedBatch(torch.zeros(n, 1), actions, old, adv, ret, torch.zeros(n), weight)
    loss, stats = ppo_minibatch_loss(lambda _: (logits, values), mb, 0.2, 0.5, 0.01, train_policy)
    g_logits, g_values = torch.autograd.grad(loss, [logits, values], allow_unused=True, materialize_grads=True)
    got_stats, got_logits, got_values = loss_grads(logits.detach(), values.detach(), actions, old, adv, ret,
                                                   weight, 0.2, 0.5, 0.01, train_policy)
    assert torch.equal(g_logits, got_logits) and torch.equal(g_values, got_values)
    assert all(torch.equal(stats[k], got_stats[k]) for k in stats)


def test_train_compile_is_a_typed_key_off_by_default() -> None:
    assert load_config(None, []).train.compile is False
    assert load_config(None, ["train.compile=true"]).train.compile is True
    with pytest.raises(ConfigError, match=r"train\.compile"):
        load_config(None, ["train.compile=sometimes"])


@pytest.mark.slow
def test_train_compile_updates_close_to_the_exact_update() -> None:
    """torch.compile reorders float work: close to, not equal to, the default update."""
    ref_w, ref_stats, _ = trained(True, [])
    got_w, got_stats, _ = trained(True, ["train.compile=true"])
    for key in ref_w:
        assert torch.allclose(ref_w[key].float(), got_w[key].float(), rtol=1e-3, atol=1e-4), key
    assert got_stats[-1]["value_loss"] == pytest.approx(ref_stats[-1]["value_loss"], rel=1e-3)
