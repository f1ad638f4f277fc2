"""Policy and value networks, the model that carries them, and fast action sampling.

`ActorCritic` holds the observation normalizer (float64 running stats, clip ±10) next
to two separate MLPs, so one `state_dict` is the whole deployable policy. Collectors
run `InferenceNets`, a frozen copy in float32 or bfloat16. Actions are sampled by
inverse CDF with counter-based uniforms u(seed, episode, sku_id, day, STREAM_ACTION),
so a SKU's action never depends on chunking, worker count or mode (the noise itself:
policy/action_noise.py).
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from skurl.policy.normalize import RunningMeanStd

HIDDEN_GAIN = math.sqrt(2.0)  # orthogonal init gain for ReLU layers
POLICY_HEAD_GAIN = 0.01  # near-uniform initial policy (Andrychowicz et al. 2021, "What matters in on-policy RL")
VALUE_HEAD_GAIN = 1.0


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, head_gain: float) -> nn.Sequential:
    """Linear-ReLU stack with orthogonal weights and zero biases."""
    layers: list[nn.Module] = []
    prev = in_dim
    for width in hidden:
        layers += [_orthogonal(nn.Linear(prev, width), HIDDEN_GAIN), nn.ReLU()]
        prev = width
    layers.append(_orthogonal(nn.Linear(prev, out_dim), head_gain))
    return nn.Sequential(*layers)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    # On one thread: the QR decomposition behind orthogonal_ (LAPACK) sums in an order that
    # depends on the thread count from ~256 wide on, so train.torch_threads (and the
    # machine's core count, with the default 0) changed a 2x256 network's initial weights
    # in the last bits, and every run diverged from there. The QR is a few ms.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        nn.init.orthogonal_(layer.weight, gain=gain)
    finally:
        torch.set_num_threads(threads)
    nn.init.zeros_(layer.bias)
    return layer


class PolicyNet(nn.Module):
    """Normalized observation [B, D] -> action logits [B, A]."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, n_actions, POLICY_HEAD_GAIN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ValueNet(nn.Module):
    """Normalized observation [B, D] -> state value [B]."""

    def __init__(self, obs_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, 1, VALUE_HEAD_GAIN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class ActorCritic(nn.Module):
    """Observation normalizer + PolicyNet + ValueNet: the unit that is trained,
    checkpointed, published and exported."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.hidden = tuple(int(h) for h in hidden)
        self.obs_norm = RunningMeanStd((obs_dim,))
        self.policy = PolicyNet(obs_dim, n_actions, self.hidden)
        self.value = ValueNet(obs_dim, self.hidden)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return self.obs_norm.normalize(obs.to(torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw observation [B, D] -> (logits [B, A], value [B])."""
        x = self.normalize(obs)
        return self.policy(x), self.value(x)

    @staticmethod
    def shapes_from_state(state: dict[str, torch.Tensor]) -> tuple[int, int, tuple[int, ...]]:
        """(obs_dim, n_actions, hidden) of the model whose state_dict is `state`."""
        weights = sorted(
            (k for k in state if k.startswith("policy.net.") and k.endswith(".weight")),
            key=lambda k: int(k.split(".")[2]),
        )
        obs_dim = int(state["obs_norm.mean"].shape[0])
        hidden = tuple(int(state[k].shape[0]) for k in weights[:-1])
        n_actions = int(state[weights[-1]].shape[0])
        return obs_dim, n_actions, hidden

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> ActorCritic:
        obs_dim, n_actions, hidden = cls.shapes_from_state(state)
        model = cls(obs_dim, n_actions, hidden)
        model.load_state_dict(state)
        return model


class InferenceNets:
    """A frozen copy of an ActorCritic for collectors: normalization constants in fp32,
    networks in `dtype` (bfloat16 halves the cost on CPUs with native bf16 support).
    Outputs are float32."""

    def __init__(self, model: ActorCritic, dtype: torch.dtype = torch.float32) -> None:
        self.dtype = dtype
        with torch.no_grad():
            self.mean = model.obs_norm.mean.to(torch.float32).clone()
            self.inv_std = torch.rsqrt(model.obs_norm.var + model.obs_norm.eps).to(torch.float32)
            self.clip = model.obs_norm.clip
            self.policy = _frozen_copy(model.policy, dtype)
            self.value = _frozen_copy(model.value, dtype)
        self._fast = FastMlp.of(self.policy) if dtype == torch.float32 else None

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) * self.inv_std).clamp_(-self.clip, self.clip).to(self.dtype)

    def __call__(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw observation [B, D] float32 -> (logits [B, A], value [B]), both float32."""
        x = self.normalize(obs)
        return self.policy(x).to(torch.float32), self.value(x).to(torch.float32)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        if self._fast is not None:
            if obs.dtype != torch.float32:
                return self._fast(self.normalize(obs))
            return self._fast(self._fast.normalized(obs, self.mean, self.inv_std, self.clip))
        return self.policy(self.normalize(obs)).to(torch.float32)

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value(self.normalize(obs)).to(torch.float32)


class FastMlp:
    """A float32 Linear-ReLU stack's forward pass as addmm into reused hidden buffers with
    in-place ReLU: what nn.Linear computes (the same addmm, so the same bits), without a
    fresh [B, width] tensor per layer and activation, whose page faults cost as much as
    the matrix products on rollout batches (docs/dcl.md). Buffers are per thread."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.layers = layers  # (weight [out, in], bias [out]); ReLU after all but the last
        self._local = threading.local()

    @staticmethod
    def of(net: nn.Module) -> FastMlp | None:
        """The fast form of `net` when it is a PolicyNet/ValueNet's Linear-ReLU stack, else None."""
        seq = net.net if isinstance(net, (PolicyNet, ValueNet)) else net
        mods = list(seq.children()) if isinstance(seq, nn.Sequential) else []
        linears = [m for m in mods[0::2] if isinstance(m, nn.Linear)]
        if not mods or len(mods) % 2 == 0 or len(linears) != len(mods[0::2]) \
                or not all(isinstance(m, nn.ReLU) for m in mods[1::2]):
            return None
        return FastMlp([(m.weight.detach(), m.bias.detach()) for m in linears])

    def normalized(self, obs: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor, clip: float) -> torch.Tensor:
        """InferenceNets.normalize's arithmetic (float32) into a reused buffer."""
        buf = getattr(self._local, "obs", None)
        if buf is None or buf.shape != obs.shape:
            buf = torch.empty(obs.shape)
            self._local.obs = buf
        return torch.sub(obs, mean, out=buf).mul_(inv_std).clamp_(-clip, clip)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        buffers = getattr(self._local, "buffers", None)
        if buffers is None or buffers[0].shape[0] != x.shape[0]:
            buffers = [torch.empty(x.shape[0], w.shape[0]) for w, _ in self.layers[:-1]]
            self._local.buffers = buffers
        for (w, b), out in zip(self.layers[:-1], buffers, strict=False):
            x = torch.addmm(b, x, w.t(), out=out).relu_()
        w, b = self.layers[-1]
        return torch.addmm(b, x, w.t())


def _frozen_copy(net: nn.Module, dtype: torch.dtype) -> nn.Module:
    import copy

    out = copy.deepcopy(net).to(dtype)
    out.requires_grad_(False)
    out.eval()
    return out


def sample_inverse_cdf(logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one action per row of logits [B, A] with uniforms u [B] in [0, 1).

    Action k is chosen when cdf[k-1] <= u * cdf[A-1] < cdf[k] (inverse transform
    sampling); scaling u by the last cdf entry absorbs float rounding of the softmax.
    Returns (index int64 [B], log-probability float32 [B]).
    """
    logp_all = torch.log_softmax(logits, dim=-1)
    cdf = torch.cumsum(logp_all.exp(), dim=-1)
    target = (u.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    idx = (cdf <= target).sum(dim=-1).clamp_(max=logits.shape[-1] - 1)
    return idx, logp_all.gather(-1, idx.unsqueeze(-1)).squeeze(-1)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


def most_likely_quantity(probs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose order quantity (units [B, A]) has the most probability
    (probs [B, A]) summed over every index ordering it (int64 [B]). Why the quantity and
    not the index: several multipliers round to the same units for slow movers, several
    safety factors all order 0 when stock is high (cover grid), and the most probable
    single index would favour a quantity split over fewer indices.

    O(B A log A): each row's units sorted (stable), runs of equal units summed by
    scatter_add, the run's sum handed back to its members. The all-pairs [B, A, A]
    comparison it replaces cost half of a cover-grid rollout's time (docs/dcl.md); the
    ONNX decision (serve/decision.py) keeps that form, as it exports everywhere. Sums
    can differ from it in the last bit, so only near-exact ties may resolve otherwise.
    """
    sorted_units, order = torch.sort(units, dim=-1, stable=True)
    starts = torch.ones_like(sorted_units, dtype=torch.bool)
    starts[:, 1:] = sorted_units[:, 1:] != sorted_units[:, :-1]
    run = starts.cumsum(dim=-1) - 1  # run number of each sorted position
    run_mass = torch.zeros_like(probs).scatter_add_(-1, run, probs.gather(-1, order))
    mass = torch.empty_like(probs).scatter_(-1, order, run_mass.gather(-1, run))
    return mass.argmax(dim=-1)


def input_tensor(features: np.ndarray) -> torch.Tensor:
    """A tensor sharing `features`' memory, for inference that only reads it. Envs may hand
    out read-only views (a lean remote env's decoded features), which torch.from_numpy
    accepts with a warning about writes that inference never makes."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(features)
