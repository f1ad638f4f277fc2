"""twin_forward: the policy and value nets with one hand-written backward pass must give
what autograd gives through the nn.Modules (fp32) and through torch.autocast (bf16)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from skurl.policy.nets import ActorCritic
from skurl.policy.twin_mlp import linears_of, twin_forward


def _outputs_and_grads(model: ActorCritic, forward) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(1)
    model.zero_grad(set_to_none=True)
    logits, values = forward()
    weights = torch.randn(logits.shape, generator=gen)
    value_weights = torch.randn(values.shape, generator=gen)
    ((logits * weights).sum() + (values * value_weights).sum()).backward()
    grads = [p.grad.clone() for p in [*model.policy.parameters(), *model.value.parameters()]]  # type: ignore[union-attr]
    return logits.detach(), values.detach(), grads


@pytest.mark.parametrize("hidden", [[32, 16], [8], []])
def test_fp32_matches_autograd_bit_for_bit(hidden: list[int]) -> None:
    torch.manual_seed(0)
    model = ActorCritic(7, 5, hidden)
    x = torch.randn(64, 7)
    ref = _outputs_and_grads(model, lambda: (model.policy(x), model.value(x)))
    got = _outputs_and_grads(model, lambda: twin_forward(model.policy, model.value, x))
    assert got[0].dtype == got[1].dtype == torch.float32 and got[1].shape == (64,)
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
    assert all(torch.equal(a, b) for a, b in zip(ref[2], got[2], strict=True))


# bf16 on a CPU with native bf16 runs oneDNN's fused linear (bias + ReLU in the GEMM) and
# the first layer's weight gradient transposed; elsewhere autocast's own addmm: each must
# keep autocast's bits, also at the default shapes.
@pytest.mark.parametrize(("obs_dim", "n_actions", "hidden", "rows"), [(7, 5, [32, 16], 64), (70, 20, [256, 256], 1024)])
def test_bf16_matches_autocast_bit_for_bit(obs_dim: int, n_actions: int, hidden: list[int], rows: int) -> None:
    torch.manual_seed(0)
    model = ActorCritic(obs_dim, n_actions, hidden)
    x = torch.randn(rows, obs_dim)

    def autocast() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, values = model.policy(x), model.value(x)
        return logits.float(), values.float()

    ref = _outputs_and_grads(model, autocast)
    got = _outputs_and_grads(model, lambda: twin_forward(model.policy, model.value, x, torch.bfloat16))
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
    assert all(g.dtype == torch.float32 for g in got[2])  # fp32 gradients for fp32 master weights
    assert all(torch.equal(a, b) for a, b in zip(ref[2], got[2], strict=True))
    fp32 = _outputs_and_grads(model, lambda: twin_forward(model.policy, model.value, x))
    assert not torch.equal(fp32[0], got[0])  # it did compute in bf16


def test_an_output_left_out_of_the_loss_gets_zero_gradients() -> None:
    torch.manual_seed(0)
    model = ActorCritic(7, 5, [16])
    logits, _ = twin_forward(model.policy, model.value, torch.randn(10, 7))
    logits.sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in model.value.parameters())
    assert any(p.grad is not None and p.grad.any() for p in model.policy.parameters())


def test_refuses_what_it_cannot_differentiate() -> None:
    model = ActorCritic(7, 5, [16])
    with pytest.raises(TypeError, match="Linear-ReLU"):
        linears_of(nn.Sequential(nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 5)))
    with pytest.raises(ValueError, match="equal depth"):
        twin_forward(model.policy, ActorCritic(7, 5, [16, 16]).value, torch.randn(3, 7))
    with pytest.raises(ValueError, match="x is data"):
        twin_forward(model.policy, model.value, torch.randn(3, 7, requires_grad=True))


# Side by side each net runs single-threaded: the same arithmetic as a one-thread learner
# (two threads splitting an op may round differently), whatever torch.get_num_threads();
# statistics and gradient norms included, over two updates (the optimizer's state carries over).
@pytest.mark.parametrize("amp", ["none", "bf16"])
def test_nets_side_by_side_train_as_one_thread_does_and_restore_the_threads(amp: str) -> None:
    from skurl.commands.bench_train import _random_rollout
    from skurl.config import load_config
    from skurl.learn.learner import Learner

    threads = torch.get_num_threads()
    try:
        weights, stats, moments = [], [], []
        for side_by_side, n in (("false", 1), ("true", 2)):
            torch.set_num_threads(n)
            cfg = load_config(None, [f"ppo.side_by_side={side_by_side}", f"ppo.amp={amp}", "ppo.epochs=2",
                                     "ppo.minibatch=256", "policy.hidden=[32,32]"])
            learner = Learner(cfg, 9, 5)
            update_stats = []
            # the later updates' optimizer steps continue the first's state; the last fits the value net only
            for train_policy in (True, True, False):
                rollout = _random_rollout(10, 100, 9, 5)
                rollout.policy_version = learner.version
                update_stats.append(learner.update(rollout, train_policy=train_policy))
            assert torch.get_num_threads() == n and not learner.side_by_side
            steps = {float(state["step"]) for state in learner.optimizer.state.values()}
            assert steps == {3 * 2 * 4} and len(learner.optimizer.state) == len(list(learner.model.parameters()))
            weights.append(learner.model.state_dict())
            stats.append(update_stats)
            moments.append([(s["exp_avg"], s["exp_avg_sq"]) for s in learner.optimizer.state.values()])
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
        assert stats[0] == stats[1]  # every loss statistic and the gradient norm, exactly
        assert all(torch.equal(a, b) for pa, pb in zip(*moments, strict=True) for a, b in zip(pa, pb, strict=True))
    finally:
        torch.set_num_threads(threads)


# Without native bf16 oneDNN refuses its fused bf16 linear: twin_forward must take addmm
# (what ran on an AVX2 EPYC), and a bf16 learner must say that it will be slow there.
def test_bf16_without_native_support_uses_addmm_and_the_learner_warns(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import skurl.learn.learner as learner_module
    import skurl.policy.twin_mlp as twin_mlp
    from skurl.config import load_config

    def refused(*_: object) -> None:
        raise AssertionError("oneDNN's fused bf16 linear called on a CPU without native bf16")

    monkeypatch.setattr(twin_mlp, "_MKLDNN_LINEAR", None)
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", refused, raising=False)
    torch.manual_seed(0)
    model = ActorCritic(70, 20, [64, 64])
    x = torch.randn(256, 70)
    fp32 = _outputs_and_grads(model, lambda: twin_forward(model.policy, model.value, x))
    bf16 = _outputs_and_grads(model, lambda: twin_forward(model.policy, model.value, x, torch.bfloat16))
    assert not torch.equal(fp32[0], bf16[0])
    assert torch.allclose(fp32[0], bf16[0], atol=0.1, rtol=0.05)
    # bf16 rounding (and ReLU gates it flips) leaves weight gradients 0.1-12% off here; a
    # wrong backward is off by ~100%
    assert all(float((a - b).norm() / a.norm()) < 0.25 for a, b in zip(fp32[2], bf16[2], strict=True))

    import skurl.policy.bf16 as bf16

    monkeypatch.setattr(bf16, "cpu_has_bf16", lambda: False)
    with caplog.at_level("WARNING", logger="skurl.learn.learner"):
        learner_module.Learner(load_config(None, ["ppo.amp=bf16"]), 9, 5, "cpu")
        learner_module.Learner(load_config(None, []), 9, 5, "cpu")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["ppo.amp=bf16"]
