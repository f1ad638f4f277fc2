"""learn/twin_step.py: the deferred clip + Adam step must equal torch's clip_grad_norm_ then
optimizer.step() over both nets bit for bit, whichever half steps first."""

from __future__ import annotations

import pytest
import torch

from skurl.learn.twin_step import DeferredClipStep, plain_fused_adam, sub_optimizer
from skurl.policy.nets import ActorCritic


def pair() -> tuple[ActorCritic, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = ActorCritic(5, 4, (16, 8))
    return model, torch.optim.Adam(model.parameters(), lr=3e-3, eps=1e-5, fused=True)


def set_grads(model: ActorCritic, gen: torch.Generator, scale: float) -> None:
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * scale


@pytest.mark.parametrize("value_first", [False, True])
def test_deferred_step_equals_clip_grad_norm_then_step(value_first: bool) -> None:
    ref, ref_opt = pair()
    got, got_opt = pair()
    step = DeferredClipStep(got_opt, list(got.policy.parameters()), list(got.value.parameters()), 0.5)
    ref_gen, got_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for k in range(6):
        scale = 3.0 if k % 2 else 0.01  # clipped, then not
        set_grads(ref, ref_gen, scale)
        expected = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.5)
        ref_opt.step()
        for half in ((1, 0) if value_first else (0, 1)):
            step.step_pending(half)  # the last minibatch's step, before the nets' next pieces
        set_grads(got, got_gen, scale)
        norms = [list(torch._foreach_norm([p.grad for p in net.parameters()], 2.0))
                 for net in (got.policy, got.value)]
        assert torch.equal(step.total(*norms), expected)
    step.flush()
    for (name, a), b in zip(ref.state_dict().items(), got.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    ref_state, got_state = ref_opt.state_dict(), got_opt.state_dict()
    assert list(ref_state["state"]) == list(got_state["state"])  # same order: checkpoints unchanged
    for i, moments in ref_state["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, got_state["state"][i][key]), (i, key)


def test_sub_optimizer_shares_the_parent_state_and_options() -> None:
    model, opt = pair()
    sub = sub_optimizer(opt, list(model.value.parameters()))
    assert sub.state is opt.state
    assert sub.param_groups[0]["lr"] == opt.param_groups[0]["lr"] and sub.param_groups[0]["fused"]


def test_parameters_out_of_order_are_refused() -> None:
    model, opt = pair()
    with pytest.raises(ValueError, match="first then second"):
        DeferredClipStep(opt, list(model.value.parameters()), list(model.policy.parameters()), 0.5)


def test_plain_fused_adam_is_the_direct_path_only() -> None:
    model, opt = pair()
    assert plain_fused_adam(opt)
    params = list(model.parameters())
    assert not plain_fused_adam(torch.optim.Adam(params, lr=1e-3, fused=True, amsgrad=True))
    assert not plain_fused_adam(torch.optim.Adam(params, lr=1e-3))  # foreach, not fused
    assert not plain_fused_adam(torch.optim.AdamW(params, lr=1e-3, fused=True))


def test_an_optimizer_off_the_direct_path_still_equals_torch() -> None:
    """amsgrad: the sub-optimizer's own step (the fallback), same bits."""
    torch.manual_seed(0)
    ref, got = ActorCritic(5, 4, (16, 8)), ActorCritic(5, 4, (16, 8))
    got.load_state_dict(ref.state_dict())
    ref_opt = torch.optim.Adam(ref.parameters(), lr=3e-3, fused=True, amsgrad=True)
    got_opt = torch.optim.Adam(got.parameters(), lr=3e-3, fused=True, amsgrad=True)
    step = DeferredClipStep(got_opt, list(got.policy.parameters()), list(got.value.parameters()), 0.5)
    gens = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for _ in range(3):
        set_grads(ref, gens[0], 1.0)
        torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.5)
        ref_opt.step()
        set_grads(got, gens[1], 1.0)
        step.total(*[list(torch._foreach_norm([p.grad for p in net.parameters()], 2.0))
                     for net in (got.policy, got.value)])
        step.flush()
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), got.parameters(), strict=True))
